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
wanted=("$@")
survived=0
mkdir -p "$root/.emulator"
# Built once; then the mutants' tests run two at a time (each crash harness keeps one core busy;
# GRANARY_MUTANT_JOBS=1 runs them one after the other).
jobs=${GRANARY_MUTANT_JOBS:-2}
cargo nextest run -p granary --features mutants --no-run >"$root/.emulator/mutants-build.log" 2>&1 \
  || { echo "building with the mutants feature failed (log: $root/.emulator/mutants-build.log)" >&2; exit 2; }
run_one() {
  local name=$1 test=$2 log="$root/.emulator/mutant-$1.log"
  # shellcheck disable=SC2086
  if GRANARY_MUTANT="$name" cargo nextest run -p granary --features mutants --no-fail-fast $test >"$log" 2>&1; then
    echo "SURVIVED" >"$log.result"
  else
    echo "caught" >"$log.result"
  fi
}
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
    printf '%-42s %-10s %s\n' "$name" "SURVIVED" "the test passed with the defect in, or did not run (log: $log)"
    survived=$((survived + 1))
  fi
done
if [ "$survived" -gt 0 ]; then
  echo "$survived mutant(s) survived: the proof does not see those defects" >&2
  exit 1
fi
