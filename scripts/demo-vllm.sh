#!/usr/bin/env bash
# Runs the gateway in front of two real vLLM pods (CPU) serving SmolLM2, from
# examples/infergate-vllm.yaml: the pods (engines/vllm/serve.sh, each also serving the
# LoRA adapter ad1), Envoy with the infergate filter, and the metrics agent. Stops
# everything on Ctrl-C, each pod's whole process group included.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=examples/infergate-vllm.yaml
RUN=.run
# The pods' ports, as CONFIG lists them.
PODS=(8001 8002)
# A pod is ready in 30-70 s on two idle cores; allow for busy ones.
POD_START_TIMEOUT_S=300
mkdir -p "$RUN"
# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh

# A vLLM pod is an API server with EngineCore and Worker children that outlive it
# (~2.5 GB idle): each runs as the leader of its own process group (setsid; a
# background job of a script is no group leader, so setsid does not fork and $! is
# the server), and the whole group is killed. demo-lib's stop() then ends the rest.
pods=()
# shellcheck disable=SC2317 # run by the traps; shellcheck 0.9 takes the last exit to make it unreachable
stop_all() {
  local status=$1 pod
  if ((${#pods[@]})); then
    echo
    echo "stopping the vLLM pods' process groups: ${pods[*]}"
    for pod in "${pods[@]}"; do
      kill -9 -- "-$pod" 2> /dev/null || true
    done
  fi
  stop "$status"
}
trap 'stop_all 0' INT TERM
trap 'stop_all $?' EXIT

# Something already listening on 127.0.0.1:$1 would take a pod's or Envoy's traffic.
port_busy() {
  (: < "/dev/tcp/127.0.0.1/$1") 2> /dev/null
}
busy=()
for port in "${PODS[@]}" 8080 9901 9902 9903; do
  port_busy "$port" && busy+=("$port")
done
if ((${#busy[@]})); then
  echo "127.0.0.1 port(s) ${busy[*]} already in use (another demo?); $CONFIG needs them free" >&2
  exit 1
fi

find_envoy
new_token "$RUN/token"
./target/debug/infergate-envoy-config -c "$CONFIG" --wasm target/wasm32-wasip1/wasm/infergate_filter.wasm \
  --explain -o "$RUN/envoy.yaml"

pods_started=$(date +%s)
for port in "${PODS[@]}"; do
  # Every pod of the pool can serve ad1, as the router assumes (see CONFIG).
  VLLM_LORA=1 setsid engines/vllm/serve.sh "$port" > "$RUN/vllm-$port.log" 2>&1 &
  pods+=($!)
  pids+=($!)
done
echo "  vLLM pods starting on 127.0.0.1:${PODS[*]} (logs: $RUN/vllm-PORT.log)"

# Waits for every pod's GET /health, with a line every 10 s and one per ready pod;
# exits with the end of a pod's log if it dies or is not ready in time.
ready=()
next_banner=10
while ((${#ready[@]} < ${#PODS[@]})); do
  elapsed=$(($(date +%s) - pods_started))
  for i in "${!PODS[@]}"; do
    port=${PODS[$i]}
    [[ " ${ready[*]} " == *" $port "* ]] && continue
    if curl -fs -o /dev/null "http://127.0.0.1:$port/health"; then
      ready+=("$port")
      echo "  pod $port ready after $elapsed s"
    elif ! kill -0 "${pods[$i]}" 2> /dev/null; then
      echo "the vLLM pod on $port exited; the end of $RUN/vllm-$port.log:" >&2
      tail -20 "$RUN/vllm-$port.log" >&2
      exit 1
    fi
  done
  ((${#ready[@]} < ${#PODS[@]})) || break
  if ((elapsed >= POD_START_TIMEOUT_S)); then
    echo "the vLLM pods were not all ready in $POD_START_TIMEOUT_S s (ready: ${ready[*]:-none}); see $RUN/vllm-*.log" >&2
    exit 1
  fi
  if ((elapsed >= next_banner)); then
    echo "  … $elapsed s: loading the model and profiling (ready: ${ready[*]:-none}; 30-70 s on idle cores)"
    next_banner=$((next_banner + 10))
  fi
  sleep 1
done

start_gateway smollm2

cat <<MSG

infergate demo with real vLLM is running (config: $CONFIG)
  gateway      http://127.0.0.1:8080   (OpenAI API: /v1/chat/completions, /v1/completions, /v1/models)
  envoy admin  http://127.0.0.1:9901   (stats: /stats?filter=wasmcustom)
  control      http://127.0.0.1:9902   (the agent pushes snapshots here, loopback only)
  agent        http://127.0.0.1:9903   (/metrics, /healthz, /readyz)
  vLLM pods    127.0.0.1:8001, :8002   (SmolLM2-135M-Instruct as smollm2, LoRA adapter ad1)
  logs         $RUN/

Try:
  curl -si http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":32}'

  Streamed, with the token counts in a last chunk:
  curl -sN http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"smollm2","messages":[{"role":"user","content":"Name three colours."}],"max_tokens":32,"stream":true,"stream_options":{"include_usage":true}}'

  A tool call, as agents send it (OpenAI tools; "required" or a named tool_choice gives
  a call; with "auto" this 135M model answers in text; engines/vllm/README.md says why):
  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the weather in Paris?"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'

  The LoRA adapter ad1 (random weights: its text is not meant to read well); while it
  runs on a pod, the next ad1 request is ranked there (adapter=Running, no load cost):
  curl -si http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"ad1","messages":[{"role":"user","content":"Hello"}],"max_tokens":16}'

  The x-infergate-decision header names the chosen pod and why, with the runner-up.
  What the router reads from a pod (queue, KV cache, LoRA adapters):
  ./target/debug/metrics-agent parse http://127.0.0.1:8001/metrics

Press Ctrl-C to stop.
MSG

wait -n "${pids[@]}" || true
echo "a component exited; see $RUN/*.log" >&2
exit 1
