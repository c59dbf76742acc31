#!/usr/bin/env bash
# Builds the Lambda packages (arm64, provided.al2023) with cargo-lambda and prints their sizes.
# cargo-lambda and zig (its cross-linker) come from PyPI into .venv-package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-package"
stamp="$venv/.installed-1"
if [ ! -f "$stamp" ]; then
  echo "installing cargo-lambda and ziglang into .venv-package (once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "cargo-lambda==1.9.2" "ziglang==0.17.1"
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
if ! rustup target list --installed 2>/dev/null | grep -q '^aarch64-unknown-linux-gnu$'; then
  rustup target add aarch64-unknown-linux-gnu
fi
out="$root/target/lambda"
cd "$root"
for p in queue-feeder job-monitor requeuer importer ingest archive; do
  cargo lambda build --release --arm64 --output-format zip --lambda-dir "$out" --package "$p"
done
echo
printf '%-18s %12s %12s\n' function zip bootstrap
for f in queue-feeder job-monitor requeuer importer-discover importer-step item-sweeper ingest-dispatcher ingest-submit archive-dispatcher archive-task; do
  zip="$out/$f/bootstrap.zip"
  bin_size=$(unzip -l "$zip" | awk '/bootstrap$/ {print $1}')
  printf '%-18s %12s %12s\n' "$f" "$(stat -c %s "$zip")" "$bin_size"
done
echo "packages in $out/<function>/bootstrap.zip"
