#!/usr/bin/env bash
# The simulation's seed matrix, as CI runs it: every sample job under every fault class, cells in
# parallel, each a `sluice simulate` run over its own seeds (docs/simulation.md).
#
#   scripts/simulate.sh <sluice>        the sluice binary to use
#
# Environment:
#   SLUICE_SIM_SEEDS=<n>   seeds per job and fault class (default 130: 4 jobs x 4 classes x 130,
#                          plus 20 fault-free seeds per job, is 2,160 seeds)
#   SLUICE_SIM_FIRST=<n>   the first seed (default 1; a soak run moves it on)
#   SLUICE_JOBS=<n>        cells run at once (default: nproc)
set -euo pipefail

sluice=${1:?usage: scripts/simulate.sh <sluice binary>}
seeds=${SLUICE_SIM_SEEDS:-130}
first=${SLUICE_SIM_FIRST:-1}
jobs=${SLUICE_JOBS:-$(nproc)}
out=$(mktemp -d "${TMPDIR:-/tmp}/sluice-sim.XXXXXX")
trap 'rm -rf "$out"' EXIT

cells=()
for job in wordcount window join generate; do
  for faults in all disk net crash; do
    cells+=("$job $faults $first $((first + seeds - 1))")
  done
  cells+=("$job none $first $((first + 19))")
done

run_cell() {
  local sluice=$1 out=$2 job=$3 faults=$4 a=$5 b=$6
  local log="$out/$job-$faults.log"
  if "$sluice" simulate --job "$job" --faults "$faults" --seeds "$a-$b" >"$log" 2>&1; then
    echo ok >"$out/$job-$faults.rc"
  else
    echo failed >"$out/$job-$faults.rc"
  fi
}
export -f run_cell

start=$SECONDS
printf '%s\n' "${cells[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_cell "$0" "$1" "$2" "$3" "$4" "$5"' "$sluice" "$out"

failed=0
total=0
for cell in "${cells[@]}"; do
  read -r job faults a b <<<"$cell"
  total=$((total + b - a + 1))
  summary=$(grep '^simulate ' "$out/$job-$faults.log" || echo "simulate $job (faults $faults): no summary")
  echo "  $summary"
  if [[ "$(cat "$out/$job-$faults.rc" 2>/dev/null)" != ok ]]; then
    failed=1
    grep -v '^simulate ' "$out/$job-$faults.log" | head -40 | sed 's/^/    /'
  fi
done
echo "simulate.sh: $total seeds in $((SECONDS - start)) s"
exit "$failed"
