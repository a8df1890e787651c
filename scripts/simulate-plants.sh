#!/usr/bin/env bash
# Shows that the simulation finds every planted bug (docs/simulation.md, "Planted bugs"): for each
# one, `sluice simulate --plant NAME --first-failure` searches its seeds until one fails, and the seed
# that failed must then pass with the bug switched off, so the failure is the planted bug's and not
# the seed's. Fails if a planted bug escapes its seed budget, or if the binary has none of them
# (it must be built with -DSLUICE_PLANTS=ON).
#
#   scripts/simulate-plants.sh <sluice>        the sluice binary to use
#
# The searches run the seeds' historic scenarios (--stop none: no seed stops its job), so the first
# failing seeds in docs/simulation.md stay put and a drawn stop's own failure is never taken for the
# planted bug's. Every seed ends (the simulator's step budgets and its watchdog over a process that
# spins inside one step); a search that still runs past SLUICE_PLANT_TIMEOUT is killed and fails.
#
# Environment:
#   SLUICE_PLANT_SEEDS=<n>     the seed budget of each planted bug and job (default 500)
#   SLUICE_PLANT_TIMEOUT=<s>   the most one search may take (default 3600)
set -euo pipefail

sluice=${1:?usage: scripts/simulate-plants.sh <sluice binary>}
budget=${SLUICE_PLANT_SEEDS:-500}
limit=${SLUICE_PLANT_TIMEOUT:-3600}

# Where each planted bug is searched for: the jobs, in order, with the fault class. The budget is
# per job; the bug must be found in one of them.
declare -A where=(
  [abort-before-start]="window:all wordcount:all"
  [inline-recycle]="wordcount:all window:all"
  [double-recycle]="wordcount:none window:none"
  [obsolete-barrier-loss]="wordcount:all join:all"
  [snapshot-mid-record]="window:all wordcount:all"
  [manifest-before-state]="window:all join:all generate:all"
  [queued-barrier-waits]="join:all window:all"
  [delta-loses-write]="wordcount:all window:all"
  [retention-drops-base]="wordcount:all window:all"
  [emission-cursor-lost]="wordcount:all wordcount:crash"
)

mapfile -t plants < <("$sluice" simulate --list-plants)
if ((${#plants[@]} == 0)); then
  echo "simulate-plants.sh: $sluice has no planted bugs: build it with -DSLUICE_PLANTS=ON" >&2
  exit 1
fi

start=$SECONDS
escaped=0
for plant in "${plants[@]}"; do
  cells=${where[$plant]:-}
  if [[ -z "$cells" ]]; then
    echo "  $plant: no search is set for it in scripts/simulate-plants.sh" >&2
    escaped=1
    continue
  fi
  found=""
  tried=0
  for cell in $cells; do
    job=${cell%%:*}
    faults=${cell#*:}
    rc=0
    out=$(timeout "$limit" "$sluice" simulate --job "$job" --faults "$faults" --seeds "1-$budget" --plant "$plant" \
      --first-failure --twice-every 0 --stop none) || rc=$?
    if ((rc == 124)); then
      echo "  $plant: the search of $job (faults $faults) did not end within $limit s" >&2
      escaped=1
      found=none
      break
    fi
    seed=$(sed -n 's/^FAIL seed \([0-9]*\) .*/\1/p' <<<"$out" | head -1)
    if [[ -z "$seed" ]]; then
      tried=$((tried + budget))
      continue
    fi
    tried=$((tried + seed))
    why=$(grep -m1 '^FAIL seed' <<<"$out" | sed 's/^FAIL seed [0-9]* ([^)]*): //' | cut -c1-160)
    # The same seed without the bug must pass.
    if ! timeout "$limit" "$sluice" simulate --job "$job" --faults "$faults" --seeds "$seed" --twice-every 0 \
      --stop none >/dev/null; then
      echo "  $plant: seed $seed of $job (faults $faults) fails without the planted bug too:" >&2
      timeout "$limit" "$sluice" simulate --job "$job" --faults "$faults" --seeds "$seed" --twice-every 0 \
        --stop none | head -20 >&2 || true
      escaped=1
      found=none
      break
    fi
    found="$job seed $seed (faults $faults), $tried seed(s) searched: $why"
    break
  done
  if [[ -z "$found" ]]; then
    echo "  $plant: ESCAPED: no seed of $cells (1-$budget each) found it" >&2
    escaped=1
  elif [[ "$found" != none ]]; then
    echo "  $plant: found by $found"
  fi
done
echo "simulate-plants.sh: ${#plants[@]} planted bugs in $((SECONDS - start)) s"
exit "$escaped"
