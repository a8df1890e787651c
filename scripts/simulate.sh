#!/usr/bin/env bash
# The simulation's seed matrix, as CI runs it: every sample job under every fault class, cells in
# parallel, each a `sluice simulate` run over its own seeds (docs/simulation.md). A quarter of the
# seeds stop their job while it runs (a drain, a stop now, or both), and every seed ends within the
# simulator's budgets.
#
#   scripts/simulate.sh <sluice>        the sluice binary to use
#
# Environment:
#   SLUICE_SIM_SEEDS=<n>   seeds per job and fault class (default 126: 4 jobs x 4 classes x 126,
#                          plus 20 fault-free seeds per job, plus 60 join seeds on rings of 8
#                          operations, is 2,156 seeds)
#   SLUICE_SIM_FIRST=<n>   the first seed (default 1; a soak run moves it on)
#   SLUICE_JOBS=<n>        cells run at once (default: nproc)
set -euo pipefail

sluice=${1:?usage: scripts/simulate.sh <sluice binary>}
seeds=${SLUICE_SIM_SEEDS:-126}
first=${SLUICE_SIM_FIRST:-1}
jobs=${SLUICE_JOBS:-$(nproc)}
out=$(mktemp -d "${TMPDIR:-/tmp}/sluice-sim.XXXXXX")
trap 'rm -rf "$out"' EXIT

# A cell: job, fault class, first and last seed, ring (0: each seed draws its own).
cells=()
for job in wordcount window join generate; do
  for faults in all disk net crash; do
    cells+=("$job $faults $first $((first + seeds - 1)) 0")
  done
  cells+=("$job none $first $((first + 19)) 0")
done
# Rings of 8: more waits (recvs on idle connections, accepts) than a ring's wait share, so the
# admission rule (runtime/admission.hpp) must keep room for file writes, fsyncs and sends.
cells+=("join all $first $((first + 59)) 8")

run_cell() {
  local sluice=$1 out=$2 job=$3 faults=$4 a=$5 b=$6 ring=$7
  local name="$job-$faults"
  [[ "$ring" != 0 ]] && name="$name-ring$ring"
  local log="$out/$name.log"
  if "$sluice" simulate --job "$job" --faults "$faults" --seeds "$a-$b" --ring "$ring" >"$log" 2>&1; then
    echo ok >"$out/$name.rc"
  else
    echo failed >"$out/$name.rc"
  fi
}
export -f run_cell

start=$SECONDS
printf '%s\n' "${cells[@]}" |
  xargs -P "$jobs" -L 1 bash -c 'run_cell "$0" "$1" "$2" "$3" "$4" "$5" "$6"' "$sluice" "$out"

failed=0
total=0
for cell in "${cells[@]}"; do
  read -r job faults a b ring <<<"$cell"
  total=$((total + b - a + 1))
  name="$job-$faults"
  [[ "$ring" != 0 ]] && name="$name-ring$ring"
  summary=$(grep '^simulate ' "$out/$name.log" || echo "simulate $job (faults $faults): no summary")
  [[ "$ring" != 0 ]] && summary="$summary [--ring $ring]"
  echo "  $summary"
  if [[ "$(cat "$out/$name.rc" 2>/dev/null)" != ok ]]; then
    failed=1
    grep -v '^simulate ' "$out/$name.log" | head -40 | sed 's/^/    /'
  fi
done
echo "simulate.sh: $total seeds in $((SECONDS - start)) s"
exit "$failed"
