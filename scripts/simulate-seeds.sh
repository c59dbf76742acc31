#!/usr/bin/env bash
# Simulated seeds on top of the suite: `granary-local simulate` (the chaos campaign, or the
# ingest queue, on one virtual clock with the deployed leases, schedules and timeouts and
# Batch's and the depositors' times) for as many seeds as fit in a budget, from a
# start that differs from run to run. A seed whose promise does not hold stops the run and
# prints the command that replays it.
#
#   scripts/simulate-seeds.sh                 180 s, seeds from a random start
#   SIM_BUDGET_SECS=60 SIM_FIRST_SEED=7 scripts/simulate-seeds.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
budget=${SIM_BUDGET_SECS:-180}
seed=${SIM_FIRST_SEED:-$(( $(date +%s) % 1000000 ))}
granules=${SIM_GRANULES:-1000}
# The build `make test` ran its suite on (scripts/test-suite.sh: the workspace, the mutant
# switches compiled in, every one off): after it this is a no-op. Built for `-p granary-local`
# alone, Cargo would resolve features differently and compile the workspace again (minutes).
cargo nextest run --workspace --locked --features granary/mutants --no-run >/dev/null 2>&1 \
  || { echo "building granary-local failed" >&2; exit 2; }
bin="$root/target/debug/granary-local"
start=$SECONDS
ran=0
hours=0
while (( SECONDS - start < budget )); do
  # Every third seed runs the ingest queue or archive jobs, turn about; of the rest, every
  # other one array windows and windows of retries, the deployed default.
  extra=(--granules "$granules")
  if (( seed % 6 == 0 )); then
    extra=(--ingest --crash-rate 0.05)
  elif (( seed % 6 == 3 )); then
    extra=(--archive --crash-rate 0.2)
  elif (( seed % 2 )); then
    extra+=(--env GRANARY_ARRAY_WINDOWS=on)
  fi
  if ! out=$("$bin" simulate --seed "$seed" "${extra[@]}" --json 2>&1); then
    echo "$out" | tail -40
    echo "simulated seed $seed FAILED; replay: granary-local simulate --seed $seed ${extra[*]}" >&2
    exit 1
  fi
  hours=$(python3 -c "import json,sys; print($hours + json.loads(sys.argv[1])['simulated_secs'] / 3600)" "$out")
  ran=$((ran + 1))
  seed=$((seed + 1))
done
echo "simulate: $ran seeds held (last $((seed - 1))), $(printf '%.1f' "$hours") simulated hours in $((SECONDS - start)) s"
