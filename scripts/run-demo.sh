#!/usr/bin/env bash
# Builds the sluice tool (Release) and shows exactly-once recovery with the word-count job:
#   1. writes a generated corpus of words;
#   2. runs word count on it uninterrupted (the reference result: counts per window of lines);
#   3. runs it again, kills it with SIGKILL once its first checkpoint has completed and while it
#      still runs, reruns it with the same arguments (it says which checkpoint it resumed from),
#      and compares the published output with the reference.
# The killed run's sink is throttled (--slow-sink-us: at least 2 s for the 20,000 output lines of
# the defaults, on any machine), so the kill lands while it runs; if it cannot (the run ended
# first), the demo fails instead of telling the story.
#   scripts/run-demo.sh [--lines N]
#
# Environment: SLUICE_BUILD_DIR=<dir> (default <repo>/build), SLUICE_JOBS=<n>,
# SLUICE_SKIP_DEPS=1, SLUICE_DEMO_DIR=<dir> (default: a fresh temporary directory).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

lines=2000000
while [ $# -gt 0 ]; do
  case "$1" in
    --lines) lines=$2; shift 2 ;;
    *) echo "usage: $0 [--lines N]" >&2; exit 2 ;;
  esac
done

sluice_demo_tool "$repo"

work=${SLUICE_DEMO_DIR:-$(mktemp -d /tmp/sluice-demo-XXXXXX)}
mkdir -p "$work"
echo "==> working in $work"
rm -rf "$work/reference" "$work/out" "$work/checkpoints" "$work/reference-checkpoints"

"$sluice" corpus --output "$work/corpus.txt" --lines "$lines" --seed 42

job=(wordcount --input "$work/corpus.txt" --window-lines 10000 --checkpoint-mode unaligned --checkpoint-interval-ms 100)

echo "==> 1. word count per window of 10,000 lines, uninterrupted"
"$sluice" "${job[@]}" --output "$work/reference" --checkpoint-dir "$work/reference-checkpoints"


echo "==> 2. the same job, throttled, killed with SIGKILL once its first checkpoint has completed"
args=("${job[@]}" --output "$work/out" --checkpoint-dir "$work/checkpoints" --slow-sink-us 100)
"$sluice" "${args[@]}" --quiet &
pid=$!
while [ "$(sluice_newest_manifest "$work/checkpoints")" -lt 2 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
if ! kill -KILL "$pid" 2>/dev/null; then
  wait "$pid" || true
  echo "==> FAILED: the job ended before its first checkpoint could be seen, so the kill could not land" >&2
  exit 1
fi
wait "$pid" 2>/dev/null || true
echo "    killed while it ran; what it left behind:"
"$sluice" checkpoints "$work/checkpoints" | sed 's/^/    /'

echo "==> 3. the same command again: it resumes from its newest valid checkpoint"
"$sluice" "${args[@]}" 2>&1 | tee "$work/rerun.log"
resumed=$(grep -o 'resumed from checkpoint [0-9]*' "$work/rerun.log" | head -1 || true)
if [ -z "$resumed" ]; then
  echo "==> FAILED: the rerun did not resume from a checkpoint" >&2
  exit 1
fi

published() { find "$1" -maxdepth 1 -type f ! -name '.*' ! -name '_*' -exec cat {} + | LC_ALL=C sort; }
if diff <(published "$work/reference") <(published "$work/out") > /dev/null; then
  echo "==> the rerun $resumed; its output equals the uninterrupted run's:" \
       "$(published "$work/out" | wc -l) window counts, each counted exactly once"
else
  echo "==> MISMATCH between $work/reference and $work/out" >&2
  exit 1
fi
