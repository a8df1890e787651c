#!/usr/bin/env bash
# One job across three worker processes, coordinated through etcd (README "A job across hosts"):
#   1. installs what is missing (etcd included), builds the sluice tool (Release);
#   2. starts a private etcd on a Unix socket in a temporary directory;
#   3. runs word count in one process (the reference result);
#   4. runs it as three workers on loopback, kills one with SIGKILL mid-run, starts it again, and
#      compares the published output with the reference.
#   scripts/run-cluster-demo.sh [--lines N] [--kill-after-ms MS] [--victim I]
#
# The workers run on this host's loopback (ports the kernel picked for them); across hosts, give
# each its own --listen/--advertise address and a shared checkpoint directory (README).
# Environment: SLUICE_BUILD_DIR=<dir> (default <repo>/build), SLUICE_JOBS=<n>, SLUICE_SKIP_DEPS=1,
# SLUICE_DEMO_DIR=<dir> (default: a fresh temporary directory).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

lines=2000000
kill_after_ms=1500
victim=1
while [ $# -gt 0 ]; do
  case "$1" in
    --lines) lines=$2; shift 2 ;;
    --kill-after-ms) kill_after_ms=$2; shift 2 ;;
    --victim) victim=$2; shift 2 ;;
    *) echo "usage: $0 [--lines N] [--kill-after-ms MS] [--victim 0|1|2]" >&2; exit 2 ;;
  esac
done

sluice_demo_tool "$repo"

work=${SLUICE_DEMO_DIR:-$(mktemp -d /tmp/sluice-cluster-demo-XXXXXX)}
mkdir -p "$work"
echo "==> working in $work"
rm -rf "$work/reference" "$work/reference-checkpoints" "$work/out" "$work/checkpoints" "$work"/worker-*.log

pids=()
etcd_pid=
cleanup() {
  for p in "${pids[@]}" $etcd_pid; do kill -KILL "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "==> starting etcd on a Unix socket"
# etcd 3.4 spells a Unix listener unix://NAME:PORT, relative to its working directory.
rm -rf "$work/etcd.data" "$work/etcd.client:0" "$work/etcd.peer:0"
(cd "$work" && exec etcd --name etcd --data-dir "$work/etcd.data" \
   --listen-client-urls unix://etcd.client:0 --advertise-client-urls unix://etcd.client:0 \
   --listen-peer-urls unix://etcd.peer:0 --initial-advertise-peer-urls unix://etcd.peer:0 \
   --initial-cluster etcd=unix://etcd.peer:0 >"$work/etcd.log" 2>&1) &
etcd_pid=$!
endpoint="unix://$work/etcd.client:0"
for _ in $(seq 100); do
  [ -S "$work/etcd.client:0" ] && ETCDCTL_API=3 etcdctl --endpoints "$endpoint" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
ETCDCTL_API=3 etcdctl --endpoints "$endpoint" endpoint health

"$sluice" corpus --output "$work/corpus.txt" --lines "$lines" --seed 42

echo "==> 1. word count in one process (the reference)"
"$sluice" wordcount --input "$work/corpus.txt" --output "$work/reference" \
  --checkpoint-dir "$work/reference-checkpoints" --quiet

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ports=("$(free_port)" "$(free_port)" "$(free_port)")
start_worker() {
  local i=$1
  "$sluice" wordcount --input "$work/corpus.txt" --output "$work/out" --checkpoint-dir "$work/checkpoints" \
    --parallelism 3 --checkpoint-interval-ms 200 --quiet \
    --cluster "$endpoint" --job-name demo --workers 3 --worker-index "$i" --listen "127.0.0.1:${ports[$i]}" \
    >>"$work/worker-$i.log" 2>&1 &
  pids[$i]=$!
}

echo "==> 2. the same job as 3 workers (data ports ${ports[*]}); worker $victim gets SIGKILL after ${kill_after_ms} ms"
for i in 0 1 2; do start_worker "$i"; done
sleep "$(awk -v ms="$kill_after_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
if kill -KILL "${pids[$victim]}" 2>/dev/null; then
  wait "${pids[$victim]}" 2>/dev/null || true
  echo "==> worker $victim killed; starting it again (the job restarts from its latest checkpoint)"
  start_worker "$victim"
else
  echo "==> worker $victim had already finished (try a larger --lines or a smaller --kill-after-ms)"
fi
status=0
for i in 0 1 2; do
  if ! wait "${pids[$i]}"; then
    echo "worker $i FAILED; its log:" >&2
    tail -n 20 "$work/worker-$i.log" >&2
    status=1
  fi
done
pids=()
[ "$status" = 0 ] || exit 1
grep -h "resumed from\|done" "$work"/worker-*.log || true

echo "==> 3. comparing the published output with the reference"
if cmp -s <(cat "$work"/reference/part-* | sort) <(cat "$work"/out/part-* | sort); then
  echo "OK: the 3 workers published exactly what one process did ($(cat "$work"/out/part-* | wc -l) words)"
else
  echo "MISMATCH: the workers' output differs from the reference" >&2
  exit 1
fi
