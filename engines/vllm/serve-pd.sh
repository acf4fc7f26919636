#!/usr/bin/env bash
# Start one real vLLM pod (CPU) for prefill/decode disaggregation: serve.sh's
# pod plus vLLM's NixlConnector, which hands the KV cache of a prefilled
# prompt from a prefill pod to a decode pod (NIXL over UCX, host memory).
#
#   engines/vllm/serve-pd.sh prefill|decode PORT [extra vllm args...]
#
# Same process rules as serve.sh (it execs serve.sh): start the pod in its own
# process group and kill the group. Ready when GET /health answers 200.
#
# A handover, as vLLM's own toy proxy does it (PD.md has the details):
#   1. POST the request to the prefill pod with max_tokens 1, stream false and
#      "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false,
#      "remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
#      "remote_port": null};
#   2. POST the original request to the decode pod with the
#      "kv_transfer_params" of that response added.
# The decode pod pulls the prompt's KV blocks from the prefill pod and computes
# only the prompt's last token again. Either pod also serves plain requests.
#
# NIXL is not part of the venv (requirements.lock): the first start installs
# the pinned wheels below into VLLM_NIXL_DIR (pip --target, --no-deps, ~230 MB;
# needs the package index once), and the pod finds them via PYTHONPATH.
#
# Environment (all optional; serve.sh's own variables apply too):
#   VLLM_NIXL_DIR      NIXL install         (default: <repo>/.cache/nixl)
#   VLLM_NIXL_SIDE_CHANNEL_PORT  vLLM's own: the port on which the pod serves
#                      its NIXL handshake. Every pod listens on one, so two pods
#                      on one host need two. Default here: PORT + 10000.
#   VLLM_NIXL_SIDE_CHANNEL_HOST  vLLM's own: the address the prefill pod binds
#                      and hands to the decode pod (default: localhost).
#   VLLM_PD_LEASE_S    prefill pod: seconds it keeps a handed-over prompt's KV
#                      blocks for a decode pod that has not read them yet
#                      (default: vLLM's 30). The decode pod extends the lease while
#                      it waits; a first handover on this loaded machine took 36 s.
#   VLLM_PD_ON_LOAD_FAILURE  decode pod: `fail` (vLLM's default: the request
#                      fails with a 500) or `recompute` (it computes the prompt
#                      itself) when the KV cannot be read, e.g. the prefill pod is gone.
#
# Costs on CPU (PD.md has the figures): NIXL's UCX progress thread busy-polls,
# about one core per idle pod; and the connector pins the model's thread to the
# last core, the same one for every pod.
set -euo pipefail

# The venv's torch is a CUDA 13 build: the `nixl` package loads nixl_cu13.
readonly NIXL_PINS=(nixl==1.5.1 nixl-cu13==1.5.1)

if [[ $# -lt 2 || ! $1 =~ ^(prefill|decode)$ || ! $2 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 prefill|decode PORT [extra vllm args...]" >&2
    exit 2
fi
role=$1
port=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VLLM_VENV:-$repo/.venv-vllm}
nixl_dir=${VLLM_NIXL_DIR:-$repo/.cache/nixl}
unset VLLM_NIXL_DIR

if [[ ! -x $venv/bin/python ]]; then
    echo "serve-pd.sh: no venv at $venv; run engines/vllm/setup.sh" >&2
    exit 1
fi

# Install once; pods started together wait on the lock instead of racing.
want="${NIXL_PINS[*]}"
mkdir -p "$(dirname "$nixl_dir")"
(
    flock 9
    if [[ $(cat "$nixl_dir/.done" 2>/dev/null) != "$want" ]]; then
        echo "serve-pd.sh: installing $want into $nixl_dir" >&2
        rm -rf "$nixl_dir"
        "$venv/bin/pip" install --quiet --no-deps --target "$nixl_dir" "${NIXL_PINS[@]}" >&2
        echo "$want" >"$nixl_dir/.done"
    fi
) 9>"$nixl_dir.lock"

case $role in
prefill) kv_role=kv_producer ;;
decode) kv_role=kv_consumer ;;
esac

lease=${VLLM_PD_LEASE_S:-30}
on_failure=${VLLM_PD_ON_LOAD_FAILURE:-fail}
unset VLLM_PD_LEASE_S VLLM_PD_ON_LOAD_FAILURE
if [[ ! $lease =~ ^[0-9]+$ || ! $on_failure =~ ^(fail|recompute)$ ]]; then
    echo "serve-pd.sh: VLLM_PD_LEASE_S must be seconds, VLLM_PD_ON_LOAD_FAILURE fail or recompute" >&2
    exit 2
fi

export PYTHONPATH="$nixl_dir${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_NIXL_SIDE_CHANNEL_PORT=${VLLM_NIXL_SIDE_CHANNEL_PORT:-$((port + 10000))}

# kv_buffer_device "cpu" is already vLLM's default on CPU (the platform's
# device); NIXL then registers the KV cache itself as host memory (DRAM).
config='{"kv_connector":"NixlConnector","kv_buffer_device":"cpu"'
config+=",\"kv_role\":\"$kv_role\",\"kv_load_failure_policy\":\"$on_failure\""
config+=",\"kv_connector_extra_config\":{\"kv_lease_duration\":$lease}}"
exec "$here/serve.sh" "$port" --kv-transfer-config "$config" "$@"
