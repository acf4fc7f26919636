#!/usr/bin/env python3
"""Keeps BENCHMARKS.md's tables equal to the benchmarks' own output.

Every benchmark writes its results as JSON and, from the same data in the same run, a
`results.md` (or `table.md`) of Markdown tables. The runs BENCHMARKS.md reports are
committed under `bench/results/`. A table in BENCHMARKS.md is written between two
markers that name where it comes from:

    <!-- table: bench/results/datapath/results.md | Memory after the run: | 1 -->
    ...the table, copied here by this script...
    <!-- /table -->

that is the file, the line after which to look (empty: the file's start) and which
table after it (1: the first). So the text cannot say other than the data.

    scripts/bench-tables.py          # rewrite every marked table from its source
    scripts/bench-tables.py --check  # exit 1, naming each table that differs (make test-fast)
"""

import os
import re
import sys

BLOCK = re.compile(r"^(<!-- table: ([^\n]*) -->\n)(.*?)^(<!-- /table -->)$", re.S | re.M)


def tables_after(lines, anchor):
    """The Markdown tables of `lines` after the first line equal to `anchor`."""
    start = 0
    if anchor:
        try:
            start = [l.strip() for l in lines].index(anchor) + 1
        except ValueError:
            raise LookupError(f"no line {anchor!r}")
    tables, current = [], []
    for line in lines[start:]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def render(spec, root):
    """The table a marker's spec names, as text ending in a newline."""
    parts = [p.strip() for p in spec.split("|")]
    if len(parts) != 3:
        raise LookupError(f"a marker is `file | line after which | n`, not {spec!r}")
    path, anchor, n = parts
    with open(os.path.join(root, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = tables_after(lines, anchor)
    index = int(n) - 1
    if not 0 <= index < len(found):
        raise LookupError(f"{path} has {len(found)} tables after {anchor!r}, not {n}")
    return "\n".join(found[index]) + "\n"


def update(text, root):
    """`text` with every marked table replaced from its source, and the specs that changed."""
    changed = []

    def replace(m):
        head, spec, body, tail = m.groups()
        try:
            fresh = render(spec, root)
        except (LookupError, OSError, ValueError) as e:
            raise SystemExit(f"BENCHMARKS.md: table {spec!r}: {e}")
        if fresh != body:
            changed.append(spec)
        return head + fresh + tail

    return BLOCK.sub(replace, text), changed


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.path.join(root, "BENCHMARKS.md")
    with open(target, encoding="utf-8") as f:
        text = f.read()
    fresh, changed = update(text, root)
    count = len(BLOCK.findall(text))
    if argv[1:] == ["--check"]:
        for spec in changed:
            print(f"BENCHMARKS.md: the table from {spec} differs from its source; run scripts/bench-tables.py", file=sys.stderr)
        print(f"bench-tables: {count} tables, {len(changed)} out of date")
        return 1 if changed else 0
    if changed:
        with open(target, "w", encoding="utf-8") as f:
            f.write(fresh)
    print(f"bench-tables: {count} tables, {len(changed)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
