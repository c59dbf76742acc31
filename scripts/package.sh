#!/usr/bin/env bash
# The Lambda packages (provided.al2023), built with cargo-lambda; their sizes printed.
#
#   scripts/package.sh install               cargo-lambda and zig from PyPI into .venv-package (once)
#   scripts/package.sh [--architecture A] [--dev] [FUNCTION...]
#
# A: arm64 or x86_64, as the template's `Architecture` parameter. Default: the value in
# infra/samconfig.toml's parameter_overrides, else the template's default (arm64). arm64 needs
# the aarch64-unknown-linux-gnu Rust target; x86_64 builds on any x86_64 machine.
# --dev: the dev profile (CI's quick check that packaging works), not release.
# FUNCTION: binaries to package (default: all ten). Zips land in target/lambda/<function>/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-package"
stamp="$venv/.installed-1"
all=(queue-feeder job-monitor requeuer importer-discover importer-step item-sweeper
  ingest-dispatcher ingest-submit archive-dispatcher archive-task)

install() {
  if [ -f "$stamp" ]; then return 0; fi
  # One installer at a time (CI packages in the background while `make test` installs).
  exec 9>"$venv.lock"
  flock 9
  if [ ! -f "$stamp" ]; then
    echo "installing cargo-lambda and ziglang into .venv-package (once)..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "cargo-lambda==1.9.2" "ziglang==0.17.1"
    touch "$stamp"
  fi
  exec 9>&-
}

# The Architecture infra/samconfig.toml deploys with, or the template's default.
configured_architecture() {
  local from_config
  from_config=$(grep -o 'Architecture=[a-z0-9_]*' "$root/infra/samconfig.toml" 2>/dev/null | head -n 1 || true)
  if [ -n "$from_config" ]; then
    echo "${from_config#Architecture=}"
  else
    echo arm64
  fi
}

# The binary's package: the cargo package that builds it.
package_of() {
  case "$1" in
    importer-discover | importer-step | item-sweeper) echo importer ;;
    ingest-dispatcher | ingest-submit) echo ingest ;;
    archive-dispatcher | archive-task) echo archive ;;
    queue-feeder | job-monitor | requeuer) echo "$1" ;;
    *) echo "unknown function $1 (one of: ${all[*]})" >&2; exit 2 ;;
  esac
}

if [ "${1:-}" = install ]; then
  install
  exit 0
fi
architecture=$(configured_architecture)
profile=(--release)
functions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --architecture) architecture="$2"; shift 2 ;;
    --dev) profile=(); shift ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) package_of "$1" >/dev/null; functions+=("$1"); shift ;;
  esac
done
[ ${#functions[@]} -gt 0 ] || functions=("${all[@]}")
case "$architecture" in
  arm64) target=aarch64-unknown-linux-gnu; flag=--arm64 ;;
  x86_64) target=x86_64-unknown-linux-gnu; flag=--x86-64 ;;
  *) echo "Architecture must be arm64 or x86_64, not $architecture" >&2; exit 2 ;;
esac
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  if ! rustup target add "$target" >/dev/null 2>&1; then
    echo "the Rust target $target is not installed and rustup could not fetch it." >&2
    echo "Build for this machine instead: make package ARCHITECTURE=x86_64, and deploy with" >&2
    echo "Architecture=x86_64 (infra/samconfig.toml's parameter_overrides)." >&2
    exit 1
  fi
fi
install
export PATH="$venv/bin:$PATH"
out="$root/target/lambda"
cd "$root"
packages=()
bins=()
for f in "${functions[@]}"; do
  p=$(package_of "$f")
  [[ " ${packages[*]} " == *" $p "* ]] || packages+=(--package "$p")
  bins+=(--bin "$f")
done
echo "packaging ${functions[*]} for $architecture (${profile[*]:-dev profile})" >&2
cargo lambda build "${profile[@]}" "$flag" --locked --output-format zip --lambda-dir "$out" \
  "${packages[@]}" "${bins[@]}"
echo
printf '%-18s %14s %14s\n' function "zip bytes" "binary bytes"
for f in "${functions[@]}"; do
  zip="$out/$f/bootstrap.zip"
  bin_size=$(python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).getinfo("bootstrap").file_size)' "$zip")
  printf '%-18s %14s %14s\n' "$f" "$(stat -c %s "$zip")" "$bin_size"
done
echo "packages ($architecture) in $out/<function>/bootstrap.zip"
