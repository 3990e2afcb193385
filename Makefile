# The two commands of the README: `make run` (the main job on a built-in default) and
# `make test` (every test, as CI runs it). Both install what they need first.

CARGO ?= cargo
# Every GPU test must really run on a GPU (lavapipe in CI): never skip silently.
export MPSRT_REQUIRE_GPU ?= 1

.PHONY: run test deps build fmt-check clippy rust-test info bench

deps:
	./scripts/install-deps.sh

build: deps
	$(CARGO) build --release -p mpsrt-cli

## Main job: the seed's basic-usage demo on the GPU (CPU fallback), then device info.
run: build
	./target/release/mpsrt demo
	./target/release/mpsrt info

info: build
	./target/release/mpsrt info

bench: build
	./target/release/mpsrt bench elementwise

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

rust-test:
	$(CARGO) test --workspace

## Every test: formatting, lints, Rust unit/integration tests (GPU kernels on lavapipe).
test: deps fmt-check clippy rust-test
