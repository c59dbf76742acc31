#!/usr/bin/env bash
# The whole test suite, run by `make test` inside scripts/emulator.sh (AWS_ENDPOINT_URL is set):
# deploy infra/template.yaml into the emulator, then run every test with the stack's outputs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.emulator"
export GRANARY_DEPLOYED_STACK="$root/.emulator/deployed-stack-$$.json"
"$root/scripts/infra.sh" deploy "$GRANARY_DEPLOYED_STACK"
if cargo nextest --version >/dev/null 2>&1; then
  exec cargo nextest run --workspace --locked --no-fail-fast
else
  echo "cargo-nextest not found: using cargo test" >&2
  exec cargo test --workspace --locked --no-fail-fast
fi
