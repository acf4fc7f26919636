#!/usr/bin/env bash
# Start one real llama.cpp pod (llama-server, CPU) serving SmolLM2-135M-Instruct
# (Q4_1 GGUF) as `smollm2`, for tests and demos.
#
#   engines/llamacpp/serve.sh PORT [extra llama-server args...]
#
# Runs in the foreground and execs llama-server, so the caller's PID is the
# server's. It is one process (no children), but start it in its own process
# group anyway (`setsid`, or Command::process_group(0)) and kill the group,
# as for vLLM. Ready when GET /health answers 200 (about a second).
#
# Sized so that two pods share a 2-core machine and their gauges move under a
# little load: 2 slots (`-np 2`, so a third request is deferred), a context of
# 2048 tokens split between them (1024 per slot: with an explicit -np the KV
# cache is not unified), one thread each, metrics on.
#
# 32 HTTP threads instead of llama-server's default, max(slots + 4, cores - 1)
# = 6 here: every open connection holds one (an idle keep-alive one for up to
# 5 s), and when a burst of connections outnumbers them, later requests -
# GET /metrics and /health included - can wait in cpp-httplib's queue until a
# running request finishes: the pod then looks stale to the metrics agent
# exactly while it is busy. engines/llamacpp/README.md has the measurements.
#
# Environment (all optional):
#   LLAMACPP_DIR       what setup.sh built   (default: <repo>/.cache/llamacpp)
#   LLAMACPP_SERVER    the binary            (default: $LLAMACPP_DIR/bin/llama-server)
#   LLAMACPP_MODEL     the GGUF              (default: $LLAMACPP_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   LLAMACPP_CTX       context, all slots    (default: 2048)
#   LLAMACPP_PARALLEL  slots                 (default: 2)
#   LLAMACPP_THREADS   threads               (default: 1)
#   LLAMACPP_THREADS_HTTP  HTTP threads      (default: 32)
# llama-server's own LLAMA_ARG_* variables are read by it as usual.
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 PORT [extra llama-server args...]" >&2
    exit 2
fi
port=$1
shift

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${LLAMACPP_DIR:-$repo/.cache/llamacpp}
server=${LLAMACPP_SERVER:-$dir/bin/llama-server}
model=${LLAMACPP_MODEL:-$dir/models/SmolLM2-135M-Instruct.Q4_1.gguf}
ctx=${LLAMACPP_CTX:-2048}
parallel=${LLAMACPP_PARALLEL:-2}
threads=${LLAMACPP_THREADS:-1}
threads_http=${LLAMACPP_THREADS_HTTP:-32}

if [[ ! -x $server ]]; then
    echo "serve.sh: no llama-server at $server; run engines/llamacpp/setup.sh" >&2
    exit 1
fi
if [[ ! -f $model ]]; then
    echo "serve.sh: no model at $model; run engines/llamacpp/setup.sh" >&2
    exit 1
fi

exec "$server" \
    --host 127.0.0.1 --port "$port" \
    --model "$model" \
    --alias smollm2 \
    --metrics \
    --ctx-size "$ctx" \
    --parallel "$parallel" \
    --threads "$threads" \
    --threads-http "$threads_http" \
    --no-webui \
    "$@"
