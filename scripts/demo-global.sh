#!/usr/bin/env bash
# Tier 2 on one machine: two clusters ("east", local, and "west", cheaper), each with
# two simulated pods, its own Envoy gateway and agent; a global Envoy in front of both
# with Redis-backed rate limits. A cluster's gateway, pods or agent may be killed by hand
# to watch the global router fail over; the demo stops on Ctrl-C, or when the global
# router, the rate limit service or Redis exits.
set -euo pipefail
cd "$(dirname "$0")/.."

GLOBAL=examples/infergate-global.yaml
RUN=.run/global
mkdir -p "$RUN"
# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh
find_envoy
new_token "$RUN/token"
TOKEN=$(cat "$RUN/token")
WASM=target/wasm32-wasip1/wasm/infergate_filter.wasm

# The processes whose exit ends the demo; a cluster's may die (that is the point).
core=()
redis-server --port 6390 --bind 127.0.0.1 --save '' --appendonly no > "$RUN/redis.log" 2>&1 &
pids+=($!)
core+=($!)
./target/debug/model-sim --pods 2 --base-port 8001 > "$RUN/sim-east.log" 2>&1 &
pids+=($!)
sim_east=$!
./target/debug/model-sim --pods 2 --base-port 8011 > "$RUN/sim-west.log" 2>&1 &
pids+=($!)

for cluster in east west; do
  ./target/debug/infergate-envoy-config -c "examples/global/$cluster.yaml" --wasm "$WASM" --explain -o "$RUN/$cluster.yaml"
  INFERGATE_CONTROL_TOKEN="$TOKEN" "$ENVOY" -c "$RUN/$cluster.yaml" --concurrency 1 --log-level warn \
    --base-id "$([[ $cluster == east ]] && echo 11 || echo 12)" > "$RUN/$cluster-access.log" 2> "$RUN/$cluster-envoy.log" &
  pids+=($!)
  [[ $cluster == east ]] && gateway_east=$!
done
./target/debug/infergate-envoy-config --target global -c "$GLOBAL" --wasm "$WASM" --explain -o "$RUN/global.yaml"
INFERGATE_CONTROL_TOKEN="$TOKEN" "$ENVOY" -c "$RUN/global.yaml" --concurrency 2 --log-level warn --base-id 13 \
  > "$RUN/global-access.log" 2> "$RUN/global-envoy.log" &
pids+=($!)
core+=($!)
./target/debug/infergate-ratelimit -c "$GLOBAL" --token-file "$RUN/token" > "$RUN/ratelimit.log" 2>&1 &
pids+=($!)
core+=($!)
wait_ready 127.0.0.1:9901
wait_ready 127.0.0.1:9921
wait_ready 127.0.0.1:9911

./target/debug/metrics-agent run -c examples/global/east.yaml --token-file "$RUN/token" --listen 127.0.0.1:9903 \
  --cluster east --summary-to http://127.0.0.1:9912 > /dev/null 2> "$RUN/agent-east.log" &
pids+=($!)
agent_east=$!
./target/debug/metrics-agent run -c examples/global/west.yaml --token-file "$RUN/token" --listen 127.0.0.1:9923 \
  --cluster west --summary-to http://127.0.0.1:9912 > /dev/null 2> "$RUN/agent-west.log" &
pids+=($!)
# A key of its own, so that this request is not charged to the one the examples use.
await_first_answer 127.0.0.1:8090 meta-llama/Llama-3.1-8B-Instruct -H 'authorization: Bearer demo-first-answer'

cat <<MSG

infergate tier-2 demo is running
  global router   http://127.0.0.1:8090   (admin 9911; summaries arrive on 9912)
  east cluster    gateway 8080, pods 8001-8002, region us-east (local), 0.60 per 1M tokens
  west cluster    gateway 8081, pods 8011-8012, region us-west, 0.40 per 1M tokens
  rate limits     600 requests and 100,000 tokens per minute per tenant (Redis on 6390)
  logs            $RUN/

Try (x-infergate-decision shows the ranking, x-infergate-served-by the pod):
  curl -si http://127.0.0.1:8090/v1/chat/completions -H 'content-type: application/json' \\
    -H 'authorization: Bearer my-key' \\
    -d '{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}'
  Add -H 'x-infergate-class: batch' to go to the cheapest cluster.
  Make east busy and watch latency traffic move west:
  for p in 8001 8002; do curl -s -XPOST http://127.0.0.1:\$p/admin/metrics -H 'content-type: application/json' \\
    -d '{"waiting":40,"running":64,"kv_cache_usage":0.95}'; done

Fail over by hand: kill a part of east and keep sending the request above. The global
router keeps answering from west (x-infergate-served-by: 127.0.0.1:8011 or :8012):
  kill $gateway_east    # east's gateway: a refused connection moves the request west at once
  kill $sim_east    # east's pods: east's gateway answers 503, and the request moves west
  kill $agent_east    # east's agent: east is ranked last once its summary is two intervals old
The demo keeps running; the global router's decision header shows east's state.

Press Ctrl-C to stop.
MSG

# A cluster's parts may die; the demo ends only with the global router, the rate limit
# service or Redis.
wait -n "${core[@]}" || true
echo "the global router, the rate limit service or Redis exited; see $RUN/*.log" >&2
exit 1
