#!/usr/bin/env bash
# Builds the sluice tool (Release) and shows exactly-once recovery with the word-count job:
#   1. writes a generated corpus of words;
#   2. runs word count on it uninterrupted (the reference result);
#   3. runs it again with unaligned checkpoints, kills it with SIGKILL mid-run, resumes it with
#      the same arguments, and compares the published output with the reference.
#   scripts/run-demo.sh [--lines N] [--kill-after-ms MS]
#
# Environment: SLUICE_BUILD_DIR=<dir> (default <repo>/build), SLUICE_JOBS=<n>,
# SLUICE_SKIP_DEPS=1, SLUICE_DEMO_DIR=<dir> (default: a fresh temporary directory).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

lines=2000000
kill_after_ms=600
while [ $# -gt 0 ]; do
  case "$1" in
    --lines) lines=$2; shift 2 ;;
    --kill-after-ms) kill_after_ms=$2; shift 2 ;;
    *) echo "usage: $0 [--lines N] [--kill-after-ms MS]" >&2; exit 2 ;;
  esac
done

sluice_demo_tool "$repo"

work=${SLUICE_DEMO_DIR:-$(mktemp -d /tmp/sluice-demo-XXXXXX)}
mkdir -p "$work"
echo "==> working in $work"
rm -rf "$work/reference" "$work/out" "$work/checkpoints" "$work/reference-checkpoints"

"$sluice" corpus --output "$work/corpus.txt" --lines "$lines" --seed 42

echo "==> 1. word count, uninterrupted"
"$sluice" wordcount --input "$work/corpus.txt" --output "$work/reference" \
  --checkpoint-dir "$work/reference-checkpoints" --checkpoint-mode unaligned --checkpoint-interval-ms 200

echo "==> 2. word count with unaligned checkpoints, killed with SIGKILL after ${kill_after_ms} ms"
args=(wordcount --input "$work/corpus.txt" --output "$work/out" --checkpoint-dir "$work/checkpoints"
      --checkpoint-mode unaligned --checkpoint-interval-ms 100)
"$sluice" "${args[@]}" &
pid=$!
sleep "$(awk -v ms="$kill_after_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
if kill -KILL "$pid" 2>/dev/null; then
  wait "$pid" 2>/dev/null || true
  echo "    killed; what it left behind:"
  "$sluice" checkpoints "$work/checkpoints" | sed 's/^/    /'
else
  wait "$pid" || true
  echo "    (it finished before the kill; use a larger --lines or a smaller --kill-after-ms)"
fi

echo "==> 3. the same command again: it resumes from its newest valid checkpoint"
"$sluice" "${args[@]}"

published() { find "$1" -maxdepth 1 -type f ! -name '.*' ! -name '_*' -exec cat {} + | LC_ALL=C sort; }
if diff <(published "$work/reference") <(published "$work/out") > /dev/null; then
  echo "==> the resumed run's output equals the uninterrupted one: $(published "$work/out" | wc -l) words," \
       "counted exactly once"
else
  echo "==> MISMATCH between $work/reference and $work/out" >&2
  exit 1
fi
