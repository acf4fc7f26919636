#!/usr/bin/env bash
# Reruns the P/D seed sweeps BENCHMARKS.md and docs/disaggregation.md cite and writes
# bench/results/disagg-seeds/results.md: agentic sessions at 32 over seeds 42-51
# (3 prefill + 5 decode, 3 prefill-and-decode + 5 decode, aggregated), and mixed chat at
# 60 starts/s with seeds 43 and 44 (3P5D and 4P4D, every policy). About 6 minutes on
# 2 cores, with the release `disagg` binary (built here if missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release --locked -q -p infergate-bench --bin disagg
bin=target/release/disagg
out=bench/results/disagg-seeds
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

# The goodput column of `policy`'s row in a results.md's first table after `anchor`.
goodput() {
  awk -v anchor="$2" -v policy="$3" -F'|' '
    index($0, anchor) == 1 { on = 1; next }
    on && $2 == " " policy " " { gsub(/[ *]/, "", $3); print $3; exit }' "$1"
}

agentic_policies=("pd/infergate" "pd/infergate 3B5D" "agg/infergate" "agg/gie_default")
seeds=(42 43 44 45 46 47 48 49 50 51)
declare -A cell
for seed in "${seeds[@]}"; do
  echo "agentic, seed $seed" >&2
  "$bin" --quick --workloads agentic --loads 32 --seed "$seed" --prefill-pods 3,3b \
    --policies "$(IFS=,; echo "${agentic_policies[*]}")" --out "$tmp/agentic-$seed" > /dev/null 2>&1
  for policy in "${agentic_policies[@]}"; do
    cell["$policy/$seed"]="$(goodput "$tmp/agentic-$seed/results.md" "At 32 sessions:" "$policy")"
  done
done

{
  echo "# P/D across seeds: the runs BENCHMARKS.md and docs/disaggregation.md cite"
  echo
  echo "Made by \`scripts/bench-disagg-seeds.sh\` on $(date -u +%F); each cell is one run's goodput"
  echo "(req/s meeting TTFT ≤ 2 s and the request's own ITL p90 ≤ 50 ms). The seed moves the sessions'"
  echo "offsets and the arrivals; one run of the quick suite uses seed 42."
  echo
  echo "## Agentic sessions, 32 at once, 8 pods"
  echo
  echo "\`disagg --quick --workloads agentic --loads 32 --seed N --prefill-pods 3,3b\`: \`pd/infergate\` on"
  echo "3 prefill + 5 decode, \`pd/infergate 3B5D\` on 3 pods that prefill and serve whole + 5 decode, \`agg/\` on 8 pods that do both:"
  echo
  printf '| policy |'; printf ' %s |' "${seeds[@]}"; echo ' mean |'
  printf '|---|'; printf -- '---:|%.0s' "${seeds[@]}"; printf -- '---:|\n'
  for policy in "${agentic_policies[@]}"; do
    printf '| %s |' "$policy"
    values=()
    for seed in "${seeds[@]}"; do values+=("${cell[$policy/$seed]}"); printf ' %s |' "${cell[$policy/$seed]}"; done
    printf ' **%s** |\n' "$(printf '%s\n' "${values[@]}" | awk '{ s += $1 } END { printf "%.2f", s / NR }')"
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
