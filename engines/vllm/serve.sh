#!/usr/bin/env bash
# Start one real vLLM pod (CPU) serving SmolLM2-135M-Instruct as `smollm2`
# (alias HuggingFaceTB/SmolLM2-135M-Instruct), for tests, demos and benchmarks.
#
#   engines/vllm/serve.sh PORT [extra vllm args...]
#
# Runs in the foreground and execs the API server, so the caller's PID is the
# server's. The server has children (EngineCore, its Worker) that outlive a
# SIGKILLed server, idle but holding ~2.5 GB: start the pod in its own process
# group (`setsid`, or Command::process_group(0)) and kill the group
# (`kill -9 -- -PID`). Ready when GET /health answers 200 (30-65 s).
#
# Sized so that two pods share a 2-core, 24 GiB machine and their gauges move
# under a little load: 4 sequences at most, a KV cache of 50 blocks of 128
# tokens (about three full-length requests), eager mode (no torch.compile,
# quicker start), prefix caching on, cached-token counts in `usage`.
#
# Tool calls (OpenAI `tools`, as agents send them): the model's own chat template
# renders no tools, so the pod uses smollm2-tools.jinja beside this script (the same
# prompt without tools; with tools, SmolLM2's <tool_call>[...]</tool_call> format)
# and vLLM's `xlam` parser, which reads that format. README.md says why.
#
# Environment (all optional):
#   VLLM_VENV          venv made by setup.sh  (default: <repo>/.venv-vllm)
#   VLLM_MODEL_DIR     converted model        (default: <repo>/.cache/models/smollm2-135m-instruct)
#   VLLM_LORA=1        also serve the LoRA adapter as model `ad1` (decoding
#                      with it is ~3x slower on CPU)
#   VLLM_LORA_DIR      that adapter           (default: <repo>/.cache/models/smollm2-lora-ad1)
#   VLLM_KV_BYTES      KV cache in bytes      (default: 150000000 = 6,400 tokens)
#   VLLM_MAX_MODEL_LEN context length         (default: 2048)
#   VLLM_MAX_NUM_SEQS  concurrent sequences   (default: 4)
#   VLLM_CPU_OMP_THREADS_BIND  vLLM's own: cores for the model's OpenMP
#                      threads, e.g. 0 for one pod and 1 for the other.
#                      Default here: nobind, with OMP_NUM_THREADS=1 per pod.
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 PORT [extra vllm args...]" >&2
    exit 2
fi
port=$1
shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VLLM_VENV:-$repo/.venv-vllm}
model=${VLLM_MODEL_DIR:-$repo/.cache/models/smollm2-135m-instruct}
lora_dir=${VLLM_LORA_DIR:-$repo/.cache/models/smollm2-lora-ad1}
kv_bytes=${VLLM_KV_BYTES:-150000000}
max_model_len=${VLLM_MAX_MODEL_LEN:-2048}
max_num_seqs=${VLLM_MAX_NUM_SEQS:-4}
lora=${VLLM_LORA:-0}

built=("$model")
if [[ $lora == 1 ]]; then
    built+=("$lora_dir")
fi
for dir in "${built[@]}"; do
    if [[ ! -f $dir/.done ]]; then
        echo "serve.sh: nothing built in $dir; run engines/vllm/setup.sh" >&2
        exit 1
    fi
done
if [[ ! -x $venv/bin/python ]]; then
    echo "serve.sh: no venv at $venv; run engines/vllm/setup.sh" >&2
    exit 1
fi

lora_args=()
if [[ $lora == 1 ]]; then
    lora_args=(--enable-lora --max-loras 1 --max-lora-rank 8 --lora-modules "ad1=$lora_dir")
fi

# vLLM warns about every VLLM_* variable it does not know; these are ours.
unset VLLM_VENV VLLM_MODEL_DIR VLLM_LORA VLLM_LORA_DIR VLLM_KV_BYTES VLLM_MAX_MODEL_LEN VLLM_MAX_NUM_SEQS
# Nothing may reach the network: the model and tokenizer are local files.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# Two pods on two cores: one OpenMP thread each. vLLM's default, "auto",
# reserves a core for the scheduler and pins every pod to the same last core.
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The console script `vllm` does not run (the distribution is named vllm-cpu).
exec "$venv/bin/python" -W ignore::DeprecationWarning -m vllm.entrypoints.openai.api_server \
    --host 127.0.0.1 --port "$port" \
    --model "$model" \
    --served-model-name smollm2 HuggingFaceTB/SmolLM2-135M-Instruct \
    --dtype bfloat16 \
    --enforce-eager \
    --max-model-len "$max_model_len" \
    --max-num-seqs "$max_num_seqs" \
    --kv-cache-memory-bytes "$kv_bytes" \
    --enable-prefix-caching \
    --enable-prompt-tokens-details \
    --disable-uvicorn-access-log \
    --chat-template "$here/smollm2-tools.jinja" \
    --enable-auto-tool-choice --tool-call-parser xlam \
    --exclude-tools-when-tool-choice-none \
    "${lora_args[@]}" \
    "$@"
