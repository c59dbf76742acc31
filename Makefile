# granary — `make demo` runs a campaign on the local emulator; `make test` runs every test.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_INCREMENTAL ?= 0
GRANULES ?= 10000

.PHONY: all build demo test unit lint fmt emulator clean

all: build

# A whole campaign on the local emulator (granary starts and stops moto itself).
demo:
	scripts/emulator.sh install
	$(CARGO) run --locked -p granary-cli --bin granary -- demo --granules $(GRANULES)

build:
	$(CARGO) build --workspace --locked

# The whole suite (unit + integration + campaign) against a fresh moto server on a free port.
# Set AWS_ENDPOINT_URL to run it against an emulator you started (e.g. LocalStack).
test:
	scripts/emulator.sh install
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  scripts/emulator.sh run $(CARGO) nextest run --workspace --locked --no-fail-fast; \
	else \
	  echo "cargo-nextest not found: using cargo test"; \
	  scripts/emulator.sh run $(CARGO) test --workspace --locked --no-fail-fast; \
	fi

# Unit tests only: no emulator needed.
unit:
	$(CARGO) test --workspace --locked --lib --bins

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

emulator:
	scripts/emulator.sh install

clean:
	$(CARGO) clean
	rm -rf .venv .emulator
