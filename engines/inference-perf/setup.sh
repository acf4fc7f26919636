#!/usr/bin/env bash
# Install kubernetes-sigs inference-perf (the load generator of the Gateway
# API Inference Extension's benchmarks), pinned and idempotent.
#
#   engines/inference-perf/setup.sh
#
# Creates <repo>/.venv-inference-perf with CPython >= 3.12 (inference-perf
# requires it) holding exactly requirements.lock, installed with --no-deps and
# wheels only. No torch: inference-perf needs only transformers' tokenizers.
# Skipped (in well under a second) while the venv's stamp matches the lock and
# the interpreter. A fresh install takes about 70 s and 790 MB.
#
# Running a benchmark needs no network: point the config's
# tokenizer.pretrained_model_name_or_path at a local tokenizer directory
# (engines/vllm/setup.sh makes <repo>/.cache/models/smollm2-135m-instruct)
# and export HF_HUB_OFFLINE=1. See README.md beside this file.
#
# Environment (all optional):
#   INFERENCE_PERF_VENV    venv directory (default: <repo>/.venv-inference-perf)
#   INFERENCE_PERF_PYTHON  interpreter, CPython >= 3.12 (default: the first
#                          that runs of python3.12, python3.13 on PATH, then
#                          $PYENV_ROOT/versions/3.12*, 3.13*)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${INFERENCE_PERF_VENV:-$repo/.venv-inference-perf}
lock=$here/requirements.lock
stamp=$venv/.infergate-lock.sha256
tokenizer_dir=$repo/.cache/models/smollm2-135m-instruct
python_wanted=${INFERENCE_PERF_PYTHON:-}
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}

# shellcheck source=SCRIPTDIR/../lib.sh
source "$here/../lib.sh"

# True when $1 runs and is CPython >= 3.12. A pyenv shim for a version that
# is installed but not selected exists on PATH yet fails when run, so each
# candidate is run, not just looked up.
is_usable_python() {
    [[ -n $1 ]] && command -v "$1" >/dev/null 2>&1 &&
        "$1" -c 'import sys, platform
sys.exit(not (sys.version_info >= (3, 12) and platform.python_implementation() == "CPython"))' \
            >/dev/null 2>&1
}

pick_python() {
    local candidate tried=()
    if [[ -n $python_wanted ]]; then
        if is_usable_python "$python_wanted"; then
            echo "$python_wanted"
            return
        fi
        echo "setup.sh: INFERENCE_PERF_PYTHON=$python_wanted is not a runnable CPython >= 3.12" >&2
        exit 1
    fi
    # The lock was made with 3.12, so 3.12 comes first.
    for candidate in python3.12 python3.13 \
        "$pyenv_root"/versions/3.12*/bin/python3.12 \
        "$pyenv_root"/versions/3.13*/bin/python3.13; do
        [[ -e $candidate ]] || command -v "$candidate" >/dev/null 2>&1 || continue
        tried+=("$candidate")
        if is_usable_python "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    {
        echo "setup.sh: inference-perf needs CPython >= 3.12 and none was found."
        echo "  tried: ${tried[*]:-(no python3.12/python3.13 on PATH, nothing under $pyenv_root/versions/3.1[23]*)}"
        echo "  fix: install one (e.g. 'pyenv install 3.12') or set INFERENCE_PERF_PYTHON=/path/to/python3.12"
    } >&2
    exit 1
}

check_venv() {
    "$venv/bin/pip" check >/dev/null || {
        "$venv/bin/pip" check >&2 || true
        echo "setup.sh: pip check failed: requirements.lock is incomplete or inconsistent" >&2
        exit 1
    }
    if "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'; then
        echo "setup.sh: torch got into $venv; requirements.lock must not pull it in" >&2
        exit 1
    fi
    TRANSFORMERS_VERBOSITY=error "$venv/bin/inference-perf" --help >/dev/null
}

# Loads the local SmolLM2 tokenizer the way inference-perf does, with the hub
# switched off: proof that a benchmark will not try to download anything.
check_tokenizer() {
    if [[ ! -f $tokenizer_dir/tokenizer.json ]]; then
        echo "==> note: no tokenizer at $tokenizer_dir yet (engines/vllm/setup.sh makes it);" \
            "any local HF tokenizer directory will do"
        return
    fi
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
        "$venv/bin/python" - "$tokenizer_dir" <<'PY'
import sys
from inference_perf.config import CustomTokenizerConfig
from inference_perf.utils.custom_tokenizer import CustomTokenizer

tok = CustomTokenizer(CustomTokenizerConfig(pretrained_model_name_or_path=sys.argv[1]))
n = tok.count_tokens("The quick brown fox jumps over the lazy dog.", add_special_tokens=False)
assert n > 0, n
print(f"==> tokenizer: {sys.argv[1]} loads offline ({n} tokens in the test sentence)")
PY
}

install_venv() {
    local want=$1 python=$2
    fresh_venv "$venv" "$python" "lock or interpreter changed, or install unfinished"
    banner "venv: installing $(grep -c '^[A-Za-z0-9]' "$lock") packages of requirements.lock"
    # --no-deps: the lock is complete, so nothing unpinned can come in.
    # --only-binary: no sdist builds (they would need compilers and time).
    "$venv/bin/pip" install --quiet --no-deps --only-binary=:all: -r "$lock"
    check_venv
    check_tokenizer
    echo "$want" >"$stamp"
    done_in "venv ($(du -sh "$venv" | cut -f1))"
}

python=$(pick_python)
python_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
want=$({
    cat "$lock"
    echo "python $python_version"
} | sha256sum | cut -d' ' -f1)

if stamp_ok "$stamp" "$want" && [[ -x $venv/bin/inference-perf ]]; then
    banner "venv: $venv matches requirements.lock (python $python_version); skipped"
else
    install_venv "$want" "$python"
fi

banner "ready: $venv/bin/inference-perf --config_file CONFIG (see engines/inference-perf/README.md)"
