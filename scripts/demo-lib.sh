# Shared by the demo scripts (sourced): Envoy from the project's venv, a fresh control
# token, and stopping every started process on Ctrl-C or exit.
# shellcheck shell=bash

# Sets ENVOY to the venv's Envoy binary, or exits with what to run.
find_envoy() {
  shopt -s nullglob
  local envoys=(.venv/lib/python*/site-packages/envoy/_bin/envoy)
  shopt -u nullglob
  ENVOY=${envoys[0]:-}
  if [[ -z "$ENVOY" ]]; then
    echo "Envoy is not installed in .venv; run 'make setup'." >&2
    exit 1
  fi
}

# Writes a fresh control token to $1, readable only by this user.
new_token() {
  umask 077
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1"
  umask 022
}

# Processes to stop; add each with `pids+=($!)`.
pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping: ${pids[*]}"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "stopped."
  exit 0
}
trap stop INT TERM EXIT
