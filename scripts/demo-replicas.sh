#!/usr/bin/env bash
# Three replicas of make demo's gateway in front of make demo's 4-pod simulated fleet:
# three Envoys with the infergate filter (clients on 127.0.0.1:8080, :8081 and :8082,
# each with its own admin and control port) and one metrics agent pushing to all three.
# Stops everything on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=examples/infergate.yaml
RUN=.run/replicas
MODEL=meta-llama/Llama-3.1-8B-Instruct
mkdir -p "$RUN"
# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh
find_envoy
new_token "$RUN/token"

start_demo_fleet
# Replica i: clients on 808(i-1), admin on 99(i-1)1, control on 99(i-1)2. The first is
# rendered from CONFIG itself, the others from copies with those three addresses changed.
controls=()
for i in 1 2 3; do
  listen=$((8079 + i)) admin=$((9891 + 10 * i)) control=$((9892 + 10 * i))
  config=$CONFIG
  if ((i > 1)); then
    config=$RUN/infergate-$i.yaml
    gateway_copy "$CONFIG" "$config" "127.0.0.1:$listen" "127.0.0.1:$control" "127.0.0.1:$admin"
  fi
  render_bootstrap "$config" "$RUN/envoy-$i.yaml"
  # A base id of its own, so that the three Envoys' hot-restart shared memory is apart.
  start_envoy "$RUN/envoy-$i.yaml" "$RUN/envoy-$i" --base-id $((20 + i))
  controls+=(--control "http://127.0.0.1:$control")
done
for i in 1 2 3; do
  wait_ready "127.0.0.1:$((9891 + 10 * i))" "$RUN/envoy-$i.log"
done
start_agent "${controls[@]}"
for port in 8080 8081 8082; do
  await_first_answer "127.0.0.1:$port" "$MODEL"
done

cat <<MSG

infergate demo with three gateway replicas is running (config: $CONFIG; replicas 2 and 3: $RUN/infergate-{2,3}.yaml)
  replica 1       http://127.0.0.1:8080   admin http://127.0.0.1:9901, control http://127.0.0.1:9902
  replica 2       http://127.0.0.1:8081   admin http://127.0.0.1:9911, control http://127.0.0.1:9912
  replica 3       http://127.0.0.1:8082   admin http://127.0.0.1:9921, control http://127.0.0.1:9922
  agent           http://127.0.0.1:9903   (/metrics, /healthz, /readyz; pushes each snapshot to all three control listeners)
  model-sim pods  127.0.0.1:8001-8004     (pool llama: 8001-8003, pool qwen: 8004)
  logs            $RUN/

Try, one request to each replica (x-infergate-served-by names the pod, x-infergate-decision explains the choice):
  for port in 8080 8081 8082; do
    curl -si http://127.0.0.1:\$port/v1/chat/completions -H 'content-type: application/json' \\
      -d '{"model":"$MODEL","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}' | grep -i '^x-infergate'
  done

  Each replica's stats: http://127.0.0.1:9901/stats?filter=wasmcustom (9911, 9921 for the others).
  The agent passes each replica's prefix records and in-flight counts on to the others
  with its pushes: send a conversation's turns to different replicas and they still
  reach the pod that holds it (docs/replicas.md).

Press Ctrl-C to stop.
MSG

wait -n "${pids[@]}" || true
echo "a component exited; see $RUN/*.log" >&2
exit 1
