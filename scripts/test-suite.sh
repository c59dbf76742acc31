#!/usr/bin/env bash
# The whole test suite, run by `make test` inside scripts/emulator.sh (AWS_ENDPOINT_URL is set):
# deploy infra/template.yaml into the emulator, then run every test with the stack's outputs.
#
# What the endpoint cannot do is decided here, once, and the tests that need it are left out
# through the test runner, which reports them as skipped (never a test that returns early and
# counts as passed): the tests in tests/needs-batch.txt when the endpoint answers that Batch's API
# is not implemented. Every other test runs there, with granary's in-memory Batch as the job
# runner; the template is deployed with what the endpoint lacks stood in for
# (infra/emulator_deploy.py), or the run stops.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.emulator"
export GRANARY_DEPLOYED_STACK="$root/.emulator/deployed-stack-$$.json"
"$root/scripts/infra.sh" deploy "$GRANARY_DEPLOYED_STACK"

# "yes" or "no"; any answer other than "not implemented" stops the run (an endpoint that is down
# must not read as "no Batch").
batch=$("$root/.venv/bin/python" - <<'PY'
import os, boto3, botocore
client = boto3.client("batch", region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
try:
    client.describe_job_queues()
    print("yes")
except botocore.exceptions.ClientError as e:
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    text = str(e).lower()
    if status == 501 or "not yet implemented" in text or "not implemented" in text:
        print("no")
    else:
        raise
PY
)

skips=()   # "<binary> <test>" or "<binary> *"
if [ "$batch" = no ]; then
  while read -r bin name; do
    [ -n "$bin" ] && [ "${bin:0:1}" != "#" ] && skips+=("$bin $name")
  done < "$root/tests/needs-batch.txt"
fi

# GRANARY_SUITE=endpoint: only the tests that reach the endpoint (the emulator tests and the CLI's
# integration tests). The rest run on the in-memory twins and answer the same on any endpoint:
# `make test` runs them once; the LocalStack leg need not run them again.
only=""
if [ "${GRANARY_SUITE:-all}" = endpoint ]; then
  only="package(granary-tests) | (package(granary-cli) & kind(test))"
  echo "only the tests that reach the endpoint: $only" >&2
fi

# Built with the mutant switches compiled in (`granary/mutants`; every one is off unless
# GRANARY_MUTANT names it, and no test sets it), so scripts/mutants.sh, the last step of
# `make test`, runs on this very build instead of compiling the workspace a second time.
features=(--features granary/mutants)
# The Lambda binaries themselves (a test build compiles only their unit tests): the functions
# run under cargo-lambda's Runtime API emulator in local/tests/lambda_runtime.rs. The whole
# workspace with every target, so the dependencies resolve their features as the tests' build
# did and only the binaries compile (selected with -p, Cargo compiled half the graph again).
cargo build --workspace --all-targets --locked "${features[@]}"
if cargo nextest --version >/dev/null 2>&1; then
  args=(run --workspace --locked --no-fail-fast "${features[@]}")
  if [ -n "$only" ] && [ ${#skips[@]} -eq 0 ]; then
    args+=(-E "$only")
  fi
  if [ ${#skips[@]} -gt 0 ]; then
    expr=""
    for s in "${skips[@]}"; do
      bin=${s%% *} name=${s#* }
      if [ "$name" = "*" ]; then term="binary(=$bin)"; else term="(binary(=$bin) & test(=$name))"; fi
      expr="${expr:+$expr | }$term"
    done
    echo "skipping ${#skips[@]} test groups this endpoint cannot run (Batch: $batch): ${skips[*]}" >&2
    if [ -n "$only" ]; then
      args+=(-E "($only) & not ($expr)")
    else
      args+=(-E "not ($expr)")
    fi
  fi
  exec cargo nextest "${args[@]}"
else
  echo "cargo-nextest not found: using cargo test" >&2
  args=()
  for s in "${skips[@]}"; do
    name=${s#* }
    if [ "$name" = "*" ]; then args+=(--skip "deployed_stack"); else args+=(--skip "$name"); fi
  done
  echo "skipping ${#skips[@]} test groups this endpoint cannot run (Batch: $batch)" >&2
  exec cargo test --workspace --locked --no-fail-fast "${features[@]}" -- "${args[@]}"
fi
