# granary — `make demo` runs a campaign on the local emulator; `make test` runs every test.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_INCREMENTAL ?= 0
# `make demo`: a first look in about a minute; GRANULES=5000 for throughput, KEEP=1 to explore it.
GRANULES ?= 300
KEEP ?=
# Campaign sizes `make bench` runs on the emulator (100000 takes about an hour on moto) and on the
# in-memory twins with array windows under Batch's SubmitJob quota (granary's own cost; 100000
# takes about a minute), then 10000 in single-job mode beside them (held to 40 SubmitJob a second).
BENCH_CAMPAIGN ?= 10000
BENCH_CAMPAIGN_IN_MEMORY ?= 10000 100000

.PHONY: docs all build demo test test-localstack unit lint fmt emulator infra-lint package deploy bench clean mutants

all: build

# A whole campaign on the local emulator (granary-local starts and stops moto itself).
demo:
	scripts/emulator.sh install
	$(CARGO) build --locked -p granary-cli -p granary-local
	target/debug/granary-local demo --granules $(GRANULES) $(if $(KEEP),--keep)

build:
	$(CARGO) build --workspace --locked

# docs/configuration.md, generated from the settings catalogue (shared/src/config/catalogue.rs).
docs:
	$(CARGO) run --quiet --locked -p granary-cli -- settings --markdown > docs/configuration.md

# The whole suite (unit + integration + campaign + the template deployed into the emulator),
# against a fresh moto server on a free port. The template must pass cfn-lint and checkov first.
# Set AWS_ENDPOINT_URL to run it against an emulator you started (e.g. LocalStack).
test:
	scripts/emulator.sh install
	scripts/sql.sh install
	scripts/browser.sh install
	scripts/package.sh install
	scripts/infra.sh lint
	scripts/emulator.sh run scripts/test-suite.sh
	SIM_BUDGET_SECS=20 scripts/simulate-seeds.sh
	scripts/mutants.sh

# The proof can fail: each deliberate defect in shared/src/mutants.rs, switched on in turn, must
# make the test that guards it fail (about five minutes).
mutants:
	scripts/mutants.sh

# The tests that reach the endpoint, against LocalStack (core, on the host, loopback only;
# installed into .venv-localstack with Python 3.13): the in-memory proofs answer the same on any
# endpoint and ran in `make test`. It has no Batch: jobs go to granary's in-memory Batch, and the
# Batch events travel LocalStack's EventBridge rule into its SQS queue.
test-localstack:
	scripts/emulator.sh install
	scripts/sql.sh install
	scripts/infra.sh install
	scripts/localstack.sh install
	scripts/browser.sh install
	GRANARY_SUITE=endpoint scripts/localstack.sh run scripts/test-suite.sh

# Benchmarks against a fresh emulator (release build); figures printed, recorded in BENCHMARKS.md.
bench:
	scripts/emulator.sh install
	$(CARGO) build --release --locked -p granary-cli -p granary-local -p granary-bench -p queue-feeder -p job-monitor -p requeuer -p importer -p ingest
	scripts/emulator.sh run bash -c 'target/release/granary-bench window && target/release/granary-bench handlers && target/release/granary-bench lambdas && target/release/granary-bench campaign $(addprefix --granules ,$(BENCH_CAMPAIGN)) && target/release/granary-bench campaign --in-memory --array-windows --feeder-interval-ms 0 --granule-submit-count 10000 $(addprefix --granules ,$(BENCH_CAMPAIGN_IN_MEMORY)) && target/release/granary-bench campaign --in-memory --feeder-interval-ms 0 --granule-submit-count 1000 --granules 10000'
	# The array campaign through the real SDK, on a moto of its own (moto's ListJobs walks every
	# job it holds, the first campaign's included): ~20 minutes (BENCHMARKS.md).
	scripts/emulator.sh run target/release/granary-bench campaign --array-windows --array-retries --granule-submit-count 10000 --granules 10000

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

infra-lint:
	scripts/infra.sh lint

# Lambda zips with cargo-lambda, for the template's Architecture (ARCHITECTURE=x86_64 on a
# machine without the arm64 Rust target); sizes printed.
package:
	scripts/package.sh $(if $(ARCHITECTURE),--architecture $(ARCHITECTURE))

# Deploy to a real AWS account (needs the AWS SAM CLI, cargo-lambda and credentials; not run in CI).
deploy:
	scripts/deploy.sh

clean:
	$(CARGO) clean
	rm -rf .venv .venv-infra .venv-deploy .venv-sam .venv-package .venv-sql .venv-localstack .emulator
