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
printf '%-42s %-10s %s\n' "mutant" "result" "what the test said"
while IFS=$'\t' read -r name test; do
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
    continue
  fi
  log="$root/.emulator/mutant-$name.log"
  # shellcheck disable=SC2086
  if GRANARY_MUTANT="$name" cargo nextest run -p granary --features mutants --no-fail-fast $test >"$log" 2>&1; then
    printf '%-42s %-10s %s\n' "$name" "SURVIVED" "the test passed with the defect in (log: $log)"
    survived=$((survived + 1))
  else
    # The panic's first line of message: what the audit found.
    said=$(grep -m1 -A1 "panicked at" "$log" | tail -1 | sed 's/^ *//' | cut -c1-110)
    printf '%-42s %-10s %s\n' "$name" "caught" "$said"
  fi
done <<<"$list"
if [ "$survived" -gt 0 ]; then
  echo "$survived mutant(s) survived: the proof does not see those defects" >&2
  exit 1
fi
