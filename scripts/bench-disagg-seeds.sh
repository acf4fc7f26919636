#!/usr/bin/env bash
# Reruns the P/D seed sweeps BENCHMARKS.md and docs/disaggregation.md cite and writes
# bench/results/disagg-seeds/results.md: agentic sessions at 8, 16 and 32 over seeds
# 42-51 (3 prefill + 5 decode, 3 prefill-and-decode + 5 decode, aggregated), and mixed
# chat at 60 starts/s with seeds 43 and 44 (3P5D and 4P4D, every policy). About 8
# minutes on 2 cores, with the release `disagg` binary (built here if missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release --locked -q -p infergate-bench --bin disagg
bin=target/release/disagg
out=bench/results/disagg-seeds
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

# The goodput of `policy` at `load` in a results.json, to three places.
goodput() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, load, policy = sys.argv[1], float(sys.argv[2]), sys.argv[3]
found = [
    result["goodput_per_s"]
    for workload in json.load(open(path))["workloads"]
    for name, results in workload["policies"]
    if name == policy
    for at, result in zip(workload["loads"], results)
    if at == load
]
if len(found) != 1:
    sys.exit(f"{path}: {len(found)} results for {policy} at {load:g}, expected 1")
print(f"{found[0]:.3f}")
PY
}

agentic_policies=("pd/infergate" "pd/infergate 3B5D" "agg/infergate" "agg/gie_default")
seeds=(42 43 44 45 46 47 48 49 50 51)
loads=(8 16 32)
declare -A cell
for seed in "${seeds[@]}"; do
  echo "agentic, seed $seed" >&2
  "$bin" --quick --workloads agentic --loads "$(IFS=,; echo "${loads[*]}")" --seed "$seed" --prefill-pods 3,3b \
    --policies "$(IFS=,; echo "${agentic_policies[*]}")" --out "$tmp/agentic-$seed" > /dev/null 2>&1
  for load in "${loads[@]}"; do
    for policy in "${agentic_policies[@]}"; do
      cell["$load/$policy/$seed"]="$(goodput "$tmp/agentic-$seed/results.json" "$load" "$policy")"
    done
  done
done

{
  echo "# P/D across seeds: the runs BENCHMARKS.md and docs/disaggregation.md cite"
  echo
  echo "Made by \`scripts/bench-disagg-seeds.sh\` on $(date -u +%F); each cell is one run's goodput"
  echo "(req/s meeting TTFT ≤ 2 s and the request's own ITL p90 ≤ 50 ms). The seed moves the sessions'"
  echo "offsets and the arrivals; one run of the quick suite uses seed 42."
  echo
  echo "\`disagg --quick --workloads agentic --loads $(IFS=,; echo "${loads[*]}") --seed N --prefill-pods 3,3b\`: \`pd/infergate\` on"
  echo "3 prefill + 5 decode, \`pd/infergate 3B5D\` on 3 pods that prefill and serve whole + 5 decode, \`agg/\` on 8 pods"
  echo "that do both. To three places: over the 600-s run one request is about 0.0017 req/s."
  for load in "${loads[@]}"; do
    echo
    echo "## Agentic sessions, $load at once, 8 pods"
    echo
    printf '| policy |'; printf ' %s |' "${seeds[@]}"; echo ' mean |'
    printf '|---|'; printf -- '---:|%.0s' "${seeds[@]}"; printf -- '---:|\n'
    for policy in "${agentic_policies[@]}"; do
      printf '| %s |' "$policy"
      values=()
      for seed in "${seeds[@]}"; do
        values+=("${cell[$load/$policy/$seed]}")
        printf ' %s |' "${cell[$load/$policy/$seed]}"
      done
      printf ' **%s** |\n' "$(printf '%s\n' "${values[@]}" | awk '{ s += $1 } END { printf "%.3f", s / NR }')"
    done
  done
  for seed in 43 44; do
    echo "mixed chat, seed $seed" >&2
    "$bin" --quick --workloads mixed-chat --loads 60 --seed "$seed" --prefill-pods 3,4 --out "$tmp/mixed-$seed" > /dev/null 2>&1
    echo
    echo "## Mixed chat at 60 starts/s, seed $seed"
    echo
    echo "\`disagg --quick --workloads mixed-chat --loads 60 --seed $seed --prefill-pods 3,4\`:"
    echo
    awk '/^\| policy \| fleet/ { on = 1 } on && /^\|/ { print } on && !/^\|/ { exit }' "$tmp/mixed-$seed/results.md"
  done
} > "$out/results.md.new"
mv "$out/results.md.new" "$out/results.md"
echo "wrote $out/results.md" >&2
