#!/usr/bin/env python3
"""Checks every relative link and anchor in the repository's Markdown.

A link `[text](path)`, `[text](path#anchor)` or `[text](#anchor)` outside code must
name a file or folder that exists, and an anchor must name a heading of the Markdown
file it points into, slugged as GitHub slugs it (lower case, punctuation dropped,
spaces to hyphens, `-1`, `-2`… on repeats) or an explicit `<a id>`/`<a name>`. Web
links are not fetched: the build machine reaches package registries only.

    scripts/check-links.py             # every Markdown file git tracks; exit 1 on a broken link
    scripts/check-links.py FILE...     # these files only
    scripts/check-links.py --self-test # shows that a broken link and a broken anchor are found
"""

import os
import re
import subprocess
import sys
import tempfile

LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def slug(heading):
    """The anchor GitHub gives a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code, inline code removed."""
    fenced = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fence = FENCE.match(line)
            if fence:
                if fenced is None:
                    fenced = fence.group(1)
                elif fence.group(1) == fenced:
                    fenced = None
                continue
            if fenced is None:
                yield number, INLINE_CODE.sub("", line)


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            found.update(EXPLICIT_ANCHOR.findall(line))
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def broken_links(path):
    """Yields 'file:line: message' for each broken link of one Markdown file."""
    here = os.path.dirname(path)
    for number, line in prose_lines(path):
        for match in LINK.finditer(line):
            target = match.group(2)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, mailto:, …
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            if not os.path.exists(resolved):
                yield f"{path}:{number}: {target}: no such file or folder ({resolved})"
                continue
            if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
                if anchor not in anchors(resolved):
                    yield f"{path}:{number}: {target}: {resolved} has no heading with the anchor #{anchor}"


def tracked_markdown():
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.md"], capture_output=True, check=True, text=True)
    return [p for p in listed.stdout.split("\0") if p and os.path.exists(p)]


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good.md")
        with open(good, "w", encoding="utf-8") as f:
            f.write("# Title\n\n## The data path (2026-12-04, commit 56d2f4b)\n\n## Title\n")
        bad = os.path.join(tmp, "bad.md")
        with open(bad, "w", encoding="utf-8") as f:
            f.write(
                "[ok](good.md#the-data-path-2026-12-04-commit-56d2f4b) [ok](good.md#title-1) [ok](#x)\n"
                '<a id="x"></a> `[code](missing.md)`\n'
                "```\n[fenced](missing.md)\n```\n"
                "[gone](missing.md) [no anchor](good.md#nothing) [web](https://example.com/missing)\n"
            )
        problems = list(broken_links(bad))
        assert len(problems) == 2, problems
        assert "missing.md: no such file" in problems[0], problems
        assert "#nothing" in problems[1], problems
        assert not list(broken_links(good))
    print("check-links self-test: a missing file and a missing anchor are found; code is ignored")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    files = argv[1:] or tracked_markdown()
    problems = [p for path in files for p in broken_links(path)]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"check-links: {len(files)} Markdown files, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
