#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 30) from its seed corpus in
# fuzz/seeds/, and prints executions and coverage per target. A crash fails the run and
# leaves the input in fuzz/artifacts/<target>/.
#
# The fuzzers build with the machine's stable toolchain and no sanitizer
# (`--sanitizer none`): the code under test is safe Rust, so a panic or an abort is
# what a finding looks like; libFuzzer's coverage guidance works the same.
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"
command -v cargo-fuzz > /dev/null || cargo install --locked cargo-fuzz@0.13.2
target_dir="$root/target/fuzz"
cargo fuzz build --sanitizer none -O --target-dir "$target_dir"

printf '| target | seconds | executions | execs/s | coverage (edges) | features | corpus |\n'
printf '|---|---:|---:|---:|---:|---:|---:|\n'
for target in $(cargo fuzz list); do
  corpus="corpus/$target"
  mkdir -p "$corpus"
  log="$(mktemp)"
  if ! cargo fuzz run --sanitizer none -O --target-dir "$target_dir" "$target" "$corpus" "seeds/$target" -- \
      -max_total_time="$seconds" -print_final_stats=1 > "$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz target $target failed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)"
  rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)"
  last="$(grep -E '#[0-9]+.*cov: ' "$log" | tail -1)"
  cov="$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<< "$last")"
  ft="$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<< "$last")"
  units="$(sed -nE 's/.*corp: ([0-9]+)\/.*/\1/p' <<< "$last")"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$target" "$seconds" "$runs" "$rate" "${cov:-?}" "${ft:-?}" "${units:-?}"
  rm -f "$log"
done
