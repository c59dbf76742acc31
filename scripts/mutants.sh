#!/usr/bin/env bash
# Shows that the proof can fail: builds granary with the `mutants` feature and, for each mutant in
# shared/src/mutants.rs, switches it on (GRANARY_MUTANT) and runs the test that must catch it. A
# mutant is "caught" when that test fails. Exits 1 if any mutant survives.
#
#   scripts/mutants.sh            every mutant
#   scripts/mutants.sh NAME...    only these
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
list=$(python3 - <<'PY'
import re
text = open("shared/src/mutants.rs").read()
for name, test in re.findall(r'name: "([^"]+)",\s*defect: "[^"]*",\s*caught_by: "([^"]+)"', text, re.S):
    print(f"{name}\t{test}")
PY
)
[ -n "$list" ] || { echo "no mutants found in shared/src/mutants.rs" >&2; exit 2; }
# Every entry of ALL read, none dropped by the pattern: the count is the array's length.
declared=$(grep -oE 'pub const ALL: \[Mutant; [0-9]+\]' shared/src/mutants.rs | grep -oE '[0-9]+\]' | tr -d ']')
read_=$(grep -c . <<<"$list")
[ "$declared" = "$read_" ] || { echo "shared/src/mutants.rs declares $declared mutants; $read_ were read" >&2; exit 2; }
wanted=("$@")
survived=0
mkdir -p "$root/.emulator"
# Built once; then the mutants' tests run two at a time (each crash harness keeps one core busy;
# GRANARY_MUTANT_JOBS=1 runs them one after the other).
jobs=${GRANARY_MUTANT_JOBS:-2}
# The build `make test` ran its suite on (scripts/test-suite.sh: the workspace with the switches
# compiled in, every one off): after it this is a no-op. Built for `-p granary` alone, Cargo
# would resolve the dependencies' features differently and compile them again (five minutes).
build=(--workspace --locked --features granary/mutants)
cargo nextest run "${build[@]}" --no-run >"$root/.emulator/mutants-build.log" 2>&1 \
  || { echo "building with the mutants feature failed (log: $root/.emulator/mutants-build.log)" >&2; exit 2; }
# A mutant's `caught_by` as a nextest filter over granary's own tests: `--test BIN NAME` or
# `--lib NAME` (NAME matched as a substring, as cargo test matches it).
filter_of() {
  case "$1 $#" in
    "--test 3") echo "package(=granary) & binary(=$2) & test($3)" ;;
    "--lib 2") echo "package(=granary) & kind(lib) & test($2)" ;;
    *) echo "caught_by must be --test BIN NAME or --lib NAME: $*" >&2; return 1 ;;
  esac
}
run_one() {
  local name=$1 test=$2 log="$root/.emulator/mutant-$1.log" filter
  # shellcheck disable=SC2086
  filter=$(filter_of $test) || { echo "caught_by is not --test BIN NAME or --lib NAME: $test" >"$log"; echo "not run" >"$log.result"; return; }
  GRANARY_MUTANT="$name" cargo nextest run "${build[@]}" --no-fail-fast --no-tests=fail -E "$filter" >"$log" 2>&1
  # Caught only when tests ran and one failed (nextest's 100): no test matched (4) or a build
  # that broke is a mutant nobody looked at.
  case $? in
    100) echo "caught" >"$log.result" ;;
    0) echo "SURVIVED" >"$log.result" ;;
    *) echo "not run" >"$log.result" ;;
  esac
}
# The harnesses that take minutes with a defect in start first, so the two lanes end together.
slow='ingest_crash_points|a_crash_inside_the_recovery'
list=$( (grep -E "$slow" <<<"$list"; grep -vE "$slow" <<<"$list") | grep -v '^$')
names=()
while IFS=$'\t' read -r name test; do
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
    continue
  fi
  rm -f "$root/.emulator/mutant-$name.log.result"
  names+=("$name")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_one "$name" "$test" &
done <<<"$list"
wait
printf '%-42s %-10s %s\n' "mutant" "result" "what the test said"
for name in "${names[@]}"; do
  log="$root/.emulator/mutant-$name.log"
  result=$(cat "$log.result" 2>/dev/null || echo "not run")
  if [ "$result" = "caught" ]; then
    # The panic's first line of message: what the audit found.
    said=$(grep -m1 -A1 "panicked at" "$log" | tail -1 | sed 's/^ *//' | cut -c1-110)
    printf '%-42s %-10s %s\n' "$name" "caught" "$said"
  else
    if [ "$result" = "SURVIVED" ]; then why="the test passed with the defect in"; else why="no test ran, or the build failed"; fi
    printf '%-42s %-10s %s\n' "$name" "$result" "$why (log: $log)"
    survived=$((survived + 1))
  fi
done
if [ "$survived" -gt 0 ]; then
  echo "$survived mutant(s) survived or were not run: the proof does not see those defects" >&2
  exit 1
fi
