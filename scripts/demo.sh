#!/usr/bin/env bash
# Runs the demo stack from examples/infergate.yaml: a 4-pod simulated fleet, Envoy with
# the infergate filter, and the metrics agent. Stops everything on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=${INFERGATE_CONFIG:-examples/infergate.yaml}
RUN=.run
mkdir -p "$RUN"
# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh
find_envoy
new_token "$RUN/token"

render_bootstrap "$CONFIG" "$RUN/envoy.yaml"
start_demo_fleet
start_gateway meta-llama/Llama-3.1-8B-Instruct

cat <<MSG

infergate demo is running (config: $CONFIG)
  gateway         http://127.0.0.1:8080   (OpenAI API: /v1/chat/completions, /v1/completions, /v1/models)
  envoy admin     http://127.0.0.1:9901   (stats: /stats?filter=wasmcustom)
  control         http://127.0.0.1:9902   (the agent pushes snapshots here, loopback only)
  agent           http://127.0.0.1:9903   (/metrics, /healthz, /readyz)
  model-sim pods  127.0.0.1:8001-8004     (pool llama: 8001-8003, pool qwen: 8004)
  logs            $RUN/

Try:
  curl -si http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}'

  The x-infergate-served-by header names the pod; x-infergate-decision explains the choice.
  Make pod 8002 look busy and watch traffic move away from it:
  curl -s -XPOST http://127.0.0.1:8002/admin/metrics -H 'content-type: application/json' \\
    -d '{"waiting":30,"running":16,"kv_cache_usage":0.95}'

Press Ctrl-C to stop.
MSG

wait -n "${pids[@]}" || true
echo "a component exited; see $RUN/*.log" >&2
exit 1
