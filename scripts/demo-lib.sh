# Shared by the demo scripts (sourced): Envoy from the project's venv, a fresh control
# token, the rendered bootstrap, make demo's simulated fleet, starting Envoy and the
# agent, the first answer through a gateway, and stopping every started process on
# Ctrl-C or exit.
# shellcheck shell=bash

# When the run started, for "answering after N s": when `make` started
# (INFERGATE_DEMO_START, set by the Makefile), or now.
demo_start=${INFERGATE_DEMO_START:-$(date +%s)}

# Sets ENVOY to the venv's Envoy binary, or exits with what to run.
find_envoy() {
  shopt -s nullglob
  local envoys=(.venv/lib/python*/site-packages/envoy/_bin/envoy)
  shopt -u nullglob
  ENVOY=${envoys[0]:-}
  if [[ -z "$ENVOY" ]]; then
    echo "Envoy is not installed in .venv; run 'make envoy' (make demo does)." >&2
    exit 1
  fi
}

# Writes a fresh control token to $1, readable only by this user.
new_token() {
  umask 077
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1"
  umask 022
}

# Waits up to 30 s for the Envoy admin at $1 (host:port) to be ready, or exits with
# the end of its log $2 if given.
wait_ready() {
  for _ in $(seq 1 300); do
    curl -fs "http://$1/ready" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "Envoy at $1 did not start in 30 s; see $RUN/*.log" >&2
  [[ -z "${2:-}" ]] || tail -20 "$2" >&2
  exit 1
}

# Sends a one-token chat completion for model $2 to the gateway at $1 (host:port), with
# any further arguments given to curl, until one is answered with 200 (up to 30 s), then
# says how long that took from the start; exits if none is.
await_first_answer() {
  local gateway=$1 model=$2 status=000
  shift 2
  for _ in $(seq 1 300); do
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://$gateway/v1/chat/completions" "$@" \
      -H 'content-type: application/json' \
      -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":1}") || true
    if [[ "$status" == 200 ]]; then
      echo "gateway $gateway answering after $(($(date +%s) - demo_start)) s"
      return 0
    fi
    sleep 0.1
  done
  echo "the gateway at $gateway did not answer a request in 30 s (last status $status); see $RUN/*.log" >&2
  exit 1
}

# Renders the Envoy bootstrap $2 from the infergate.yaml $1, with the built filter.
render_bootstrap() {
  ./target/debug/infergate-envoy-config -c "$1" --wasm target/wasm32-wasip1/wasm/infergate_filter.wasm \
    --explain -o "$2"
}

# Writes to $2 a copy of the infergate.yaml $1 with gateway.listen, gateway.control and
# gateway.admin set to $3, $4 and $5 (host:port each); exits unless exactly those three
# lines changed.
gateway_copy() {
  local changed
  sed -E -e '/^gateway:/,/^[^[:space:]#]/{' \
    -e "s/^([[:space:]]+listen:[[:space:]]*)[^[:space:]#]+/\\1$3/" \
    -e "s/^([[:space:]]+control:[[:space:]]*)[^[:space:]#]+/\\1$4/" \
    -e "s/^([[:space:]]+admin:[[:space:]]*)[^[:space:]#]+/\\1$5/" \
    -e '}' "$1" > "$2"
  changed=$(diff "$1" "$2" | grep -c '^>' || true)
  if [[ "$changed" != 3 ]]; then
    echo "$1: expected gateway.listen, gateway.control and gateway.admin each on a line of its own" >&2
    exit 1
  fi
}

# Starts make demo's simulated fleet (examples/infergate.yaml's pods): 4 pods on
# 127.0.0.1:8001-8004 that also serve the sql-lora adapter; its log in $RUN/model-sim.log.
start_demo_fleet() {
  ./target/debug/model-sim --pods 4 --base-port 8001 --lora-adapters sql-lora --time-scale "${SIM_TIME_SCALE:-1}" \
    > "$RUN/model-sim.log" 2>&1 &
  pids+=($!)
}

# Starts Envoy (2 workers) from the bootstrap $1 with the token in $RUN/token, its access
# log in $2-access.log and its own log in $2.log; further arguments go to Envoy.
start_envoy() {
  local bootstrap=$1 log=$2
  shift 2
  INFERGATE_CONTROL_TOKEN=$(cat "$RUN/token") "$ENVOY" -c "$bootstrap" --concurrency 2 --log-level warn "$@" \
    > "$log-access.log" 2> "$log.log" &
  pids+=($!)
}

# Starts the metrics agent on $CONFIG with the token in $RUN/token, its log in
# $RUN/agent.log; further arguments go to the agent.
# shellcheck disable=SC2120 # demo-replicas.sh passes --control, start_gateway nothing
start_agent() {
  ./target/debug/metrics-agent run -c "$CONFIG" --token-file "$RUN/token" "$@" > /dev/null 2> "$RUN/agent.log" &
  pids+=($!)
}

# Starts Envoy from $RUN/envoy.yaml (admin on 127.0.0.1:9901) and the metrics agent on
# $CONFIG, then waits until the gateway on 127.0.0.1:8080 answers a request for model $1.
start_gateway() {
  start_envoy "$RUN/envoy.yaml" "$RUN/envoy"
  wait_ready 127.0.0.1:9901 "$RUN/envoy.log"
  start_agent
  await_first_answer 127.0.0.1:8080 "$1"
}

# Processes to stop; add each with `pids+=($!)`. Ctrl-C is a normal end; otherwise the
# script's own exit status is kept, so that make reports a demo that failed to start.
pids=()
stop() {
  local status=$1
  trap - INT TERM EXIT
  echo
  echo "stopping: ${pids[*]}"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "stopped."
  exit "$status"
}
trap 'stop 0' INT TERM
trap 'stop $?' EXIT
