# Shared by the demo scripts (sourced): Envoy from the project's venv, a fresh control
# token, the first answer through a gateway, and stopping every started process on
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
      echo "gateway answering after $(($(date +%s) - demo_start)) s"
      return 0
    fi
    sleep 0.1
  done
  echo "the gateway at $gateway did not answer a request in 30 s (last status $status); see $RUN/*.log" >&2
  exit 1
}

# Starts Envoy from $RUN/envoy.yaml (admin on 127.0.0.1:9901) and the metrics agent on
# $CONFIG, then waits until the gateway on 127.0.0.1:8080 answers a request for model $1.
start_gateway() {
  INFERGATE_CONTROL_TOKEN=$(cat "$RUN/token") "$ENVOY" -c "$RUN/envoy.yaml" --concurrency 2 --log-level warn \
    > "$RUN/envoy-access.log" 2> "$RUN/envoy.log" &
  pids+=($!)
  wait_ready 127.0.0.1:9901 "$RUN/envoy.log"
  ./target/debug/metrics-agent run -c "$CONFIG" --token-file "$RUN/token" > /dev/null 2> "$RUN/agent.log" &
  pids+=($!)
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
