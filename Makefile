# The two commands of the README: `make run` (the main job on a built-in default) and
# `make test` (every test, as CI runs it). Both install what they need first.

CARGO ?= cargo
# Every GPU test must really run on a GPU (lavapipe in CI): never skip silently.
export MPSRT_REQUIRE_GPU ?= 1

.PHONY: run demo test deps build fmt-check clippy rust-test conformance info bench python-build python-test

deps:
	./scripts/install-deps.sh

build: deps
	$(CARGO) build --release -p mpsrt-cli

## Main job: serve the example model repository (Triton protocol: HTTP :8000, gRPC :8001,
## metrics :8002) with the ONNX engine on the GPU (CPU fallback). Ctrl-C drains and exits.
run: build
	./target/release/mpsrt serve --model-repository examples/model_repository

## The seed's basic-usage demo on the GPU (CPU fallback), then device info.
demo: build
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

# The ONNX light models ship inside the `onnx` wheel; tritonclient drives the server tests.
rust-test: deps
	MPSRT_ONNX_DATA=$$($(CURDIR)/.venv/bin/python -c 'import onnx, os; print(os.path.dirname(onnx.__file__))') \
	MPSRT_TRITONCLIENT_PYTHON=$(CURDIR)/.venv/bin/python \
	$(CARGO) test --workspace

## ONNX conformance (node tests + the nine light models, CPU and GPU): regenerates
## CONFORMANCE.md and fails if a pass count falls below the committed baseline.
conformance: deps
	./scripts/conformance.sh --check

## Every test: formatting, lints, ONNX conformance, Rust tests (GPU kernels on lavapipe), the
## Python suite.
test: deps fmt-check clippy conformance rust-test python-test

## Python package: build the `mpsrt` extension (maturin, dev profile) into .venv and run pytest.
## GPU tests run on lavapipe; MPSRT_REQUIRE_GPU=1 (exported above) turns a missing GPU into failures.
# Same target dir as cargo test, so the extension reuses the already-built dependencies.
PY_TARGET_DIR ?= $(CURDIR)/target

python-build: deps
	cd python && VIRTUAL_ENV=$(CURDIR)/.venv PATH=$(CURDIR)/.venv/bin:$$PATH \
		CARGO_TARGET_DIR=$(PY_TARGET_DIR) $(CURDIR)/.venv/bin/maturin develop -q

python-test: python-build
	cd python && MPSRT_REQUIRE_GPU=$(MPSRT_REQUIRE_GPU) $(CURDIR)/.venv/bin/python -m pytest tests -q
