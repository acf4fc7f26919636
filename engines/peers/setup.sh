#!/usr/bin/env bash
# Install the peers' own routers, as a user would run them: the Shepherd Model
# Gateway (`smg`) and vLLM's router (`vllm-router`), pinned and idempotent.
#
#   engines/peers/setup.sh
#
# Creates <repo>/.venv-peers holding exactly requirements.lock, installed with
# --no-deps and wheels only, then checks that both routers start (`--help`).
# Skipped (in well under a second) while the venv's stamp matches the lock and
# the interpreter. A fresh install takes about 40 s and 260 MB. Nothing is
# fetched when a router runs: neither loads a tokenizer unless told to.
#
# Environment (all optional):
#   PEERS_VENV    venv directory (default: <repo>/.venv-peers)
#   PEERS_PYTHON  interpreter, CPython >= 3.8 (default: python3)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${PEERS_VENV:-$repo/.venv-peers}
lock=$here/requirements.lock
stamp=$venv/.infergate-lock.sha256
python=${PEERS_PYTHON:-python3}

# shellcheck source=SCRIPTDIR/../lib.sh
source "$here/../lib.sh"

check_venv() {
    "$venv/bin/pip" check >/dev/null || {
        "$venv/bin/pip" check >&2 || true
        echo "setup.sh: pip check failed: requirements.lock is incomplete or inconsistent" >&2
        exit 1
    }
    local router
    for router in smg vllm-router; do
        "$venv/bin/$router" --help >/dev/null || {
            echo "setup.sh: $venv/bin/$router --help failed: the wheel does not start here" >&2
            exit 1
        }
    done
}

install_venv() {
    local want=$1
    fresh_venv "$venv" "$python" "lock or interpreter changed, or install unfinished"
    banner "venv: installing $(grep -c '^[A-Za-z0-9]' "$lock") packages of requirements.lock"
    # --no-deps: the lock is complete, so nothing unpinned can come in.
    # --only-binary: the routers are prebuilt Rust; nothing is compiled here.
    "$venv/bin/pip" install --quiet --no-deps --only-binary=:all: -r "$lock"
    check_venv
    echo "$want" >"$stamp"
    done_in "venv ($(du -sh "$venv" | cut -f1))"
}

python_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
want=$({
    cat "$lock"
    echo "python $python_version"
} | sha256sum | cut -d' ' -f1)

if stamp_ok "$stamp" "$want" && [[ -x $venv/bin/smg && -x $venv/bin/vllm-router ]]; then
    banner "venv: $venv matches requirements.lock (python $python_version); skipped"
else
    install_venv "$want"
fi

banner "ready: $venv/bin/smg $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("smg"))')," \
    "$venv/bin/vllm-router $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-router"))')"
