#!/usr/bin/env bash
# One job across three worker processes, coordinated through etcd (docs/cluster.md, "Running a worker"):
#   1. installs what is missing (etcd included), builds the sluice tool (Release);
#   2. starts a private etcd;
#   3. runs word count in one process (the reference result);
#   4. runs it as three workers; once the job's first checkpoint has completed, kills a follower with
#      SIGKILL and starts it again; once the restarted attempt has completed a checkpoint, kills the
#      leader the same way and starts it again; then compares the published output with the
#      reference and says which checkpoint each restart resumed from.
#   scripts/run-cluster-demo.sh [--lines N] [--loopback]
# The workers' sinks are throttled (--slow-sink-us, as scripts/run-demo.sh), so both kills land
# while the job runs; if one cannot (the job ended first), the demo fails instead.
#
# As root (with iproute2), etcd and each worker run on "hosts" of their own: network namespaces
# sluice-demo-<pid>-{etcd,w0,w1,w2} on one bridge (in a namespace sluice-demo-<pid>-hub),
# 10.210.0.2-5, etcd over TCP at http://10.210.0.2:2379 and each worker's data port at
# <its address>:7000 (tests/support/netns.hpp builds the same). They are deleted on exit.
# Otherwise (or with --loopback) everything runs on this host: etcd on a Unix socket, the workers on
# loopback ports the kernel picked. Across real hosts, give each worker its own --listen/--advertise
# address and a shared checkpoint directory (docs/cluster.md).
# Environment: SLUICE_BUILD_DIR=<dir> (default <repo>/build), SLUICE_JOBS=<n>, SLUICE_SKIP_DEPS=1,
# SLUICE_DEMO_DIR=<dir> (default: a fresh temporary directory).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

lines=2000000
loopback=0
while [ $# -gt 0 ]; do
  case "$1" in
    --lines) lines=$2; shift 2 ;;
    --loopback) loopback=1; shift ;;
    *) echo "usage: $0 [--lines N] [--loopback]" >&2; exit 2 ;;
  esac
done

sluice_demo_tool "$repo"

work=${SLUICE_DEMO_DIR:-$(mktemp -d /tmp/sluice-cluster-demo-XXXXXX)}
mkdir -p "$work"
echo "==> working in $work"
rm -rf "$work/reference" "$work/reference-checkpoints" "$work/out" "$work/checkpoints" "$work"/worker-*.log

pids=()
etcd_pid=
ns_prefix=sluice-demo-$$-
namespaces=()
cleanup() {
  for p in "${pids[@]}" $etcd_pid; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

# Hosts as network namespaces, when this can make them.
use_netns=0
if [ "$loopback" = 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "==> not root: no network namespaces; etcd and the workers share this host's loopback"
  elif ! command -v ip >/dev/null 2>&1; then
    echo "==> iproute2's ip is missing: no network namespaces; running on loopback"
  elif ! command -v nsenter >/dev/null 2>&1; then
    echo "==> nsenter (util-linux) is missing: no network namespaces; running on loopback"
  elif ! ip netns add "${ns_prefix}hub" 2>/dev/null; then
    echo "==> ip netns add failed here: no network namespaces; running on loopback"
  else
    namespaces+=("${ns_prefix}hub")
    use_netns=1
  fi
fi
# What runs a command on host $1: nsenter execs the command itself (`ip netns exec` may fork and
# wait), so a background process's $! is the worker or etcd itself, which the demo kills.
enter() { entered=(); if [ "$use_netns" = 1 ]; then entered=(nsenter "--net=/var/run/netns/${ns_prefix}$1"); fi; }
in_host() { enter "$1"; shift; "${entered[@]}" "$@"; }
if [ "$use_netns" = 1 ]; then
  hub=${ns_prefix}hub
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  n=2
  for h in etcd w0 w1 w2; do
    ns=${ns_prefix}$h
    ip netns add "$ns"
    namespaces+=("$ns")
    ip link add "v$n" netns "$hub" type veth peer name eth0 netns "$ns"
    ip -n "$hub" link set "v$n" master br0 up
    ip -n "$ns" addr add "10.210.0.$n/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    n=$((n + 1))
  done
  echo "==> hosts: etcd 10.210.0.2, workers 10.210.0.3-5 (network namespaces ${ns_prefix}*, one bridge)"
fi

rm -rf "$work/etcd.data" "$work/etcd.client:0" "$work/etcd.peer:0"
if [ "$use_netns" = 1 ]; then
  echo "==> starting etcd on its own host, over TCP"
  endpoint=http://10.210.0.2:2379
  enter etcd
  "${entered[@]}" etcd --name etcd --data-dir "$work/etcd.data" \
    --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
    --listen-peer-urls http://10.210.0.2:2380 --initial-advertise-peer-urls http://10.210.0.2:2380 \
    --initial-cluster etcd=http://10.210.0.2:2380 >"$work/etcd.log" 2>&1 &
  etcd_pid=$!
else
  echo "==> starting etcd on a Unix socket"
  # etcd 3.4 spells a Unix listener unix://NAME:PORT, relative to its working directory.
  (cd "$work" && exec etcd --name etcd --data-dir "$work/etcd.data" \
     --listen-client-urls unix://etcd.client:0 --advertise-client-urls unix://etcd.client:0 \
     --listen-peer-urls unix://etcd.peer:0 --initial-advertise-peer-urls unix://etcd.peer:0 \
     --initial-cluster etcd=unix://etcd.peer:0 >"$work/etcd.log" 2>&1) &
  etcd_pid=$!
  endpoint="unix://$work/etcd.client:0"
fi
disown "$etcd_pid"  # killed on exit without bash's "Killed" report
for _ in $(seq 100); do
  in_host etcd env ETCDCTL_API=3 etcdctl --endpoints "$endpoint" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
in_host etcd env ETCDCTL_API=3 etcdctl --endpoints "$endpoint" endpoint health

"$sluice" corpus --output "$work/corpus.txt" --lines "$lines" --seed 42

job=(wordcount --input "$work/corpus.txt" --window-lines 10000 --parallelism 3 --checkpoint-interval-ms 200)
echo "==> 1. word count per window of 10,000 lines in one process (the reference)"
"$sluice" "${job[@]}" --output "$work/reference" --checkpoint-dir "$work/reference-checkpoints" --quiet

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if [ "$use_netns" = 1 ]; then
  listen=(10.210.0.3:7000 10.210.0.4:7000 10.210.0.5:7000)
else
  listen=("127.0.0.1:$(free_port)" "127.0.0.1:$(free_port)" "127.0.0.1:$(free_port)")
fi
start_worker() {
  local i=$1
  enter "w$i"
  # (SLUICE_LOG=info: the log names the leader, which the demo kills second.)
  "${entered[@]}" env SLUICE_LOG=info "$sluice" "${job[@]}" --output "$work/out" --checkpoint-dir "$work/checkpoints" --slow-sink-us 100 \
    --cluster "$endpoint" --job-name demo --workers 3 --worker-index "$i" --listen "${listen[$i]}" \
    >>"$work/worker-$i.log" 2>&1 &
  pids[$i]=$!
}

running() { kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || kill -0 "${pids[2]}" 2>/dev/null; }
# Waits until a checkpoint newer than $1 has completed (chk-($1+2)'s manifest is seen), while the job runs.
wait_for_checkpoint_after() {
  local after=$1
  while [ "$(sluice_newest_manifest "$work/checkpoints")" -lt $((after + 2)) ] && running; do sleep 0.02; done
  running
}
# The worker that leads the job now: the newest "worker N leads job" line of the workers' logs.
leader() { grep -h "leads job" "$work"/worker-*.log | sort | tail -1 | sed 's/.*worker \([0-9]*\) leads.*/\1/'; }
kill_and_restart() {
  local i=$1 role=$2
  if ! kill -KILL "${pids[$i]}" 2>/dev/null; then
    echo "==> FAILED: worker $i ($role) had ended before the kill could land" >&2
    exit 1
  fi
  wait "${pids[$i]}" 2>/dev/null || true
  echo "==> worker $i ($role) killed with SIGKILL after checkpoint $(sluice_newest_manifest "$work/checkpoints");" \
       "starting it again (the job restarts from its newest valid checkpoint)"
  start_worker "$i"
}

echo "==> 2. the same job as 3 workers (data ports ${listen[*]}), throttled"
for i in 0 1 2; do start_worker "$i"; done
if ! wait_for_checkpoint_after 0; then
  echo "==> FAILED: the job ended before its first checkpoint could be seen, so no kill could land" >&2
  exit 1
fi
lead=$(leader)
follower=$(( (lead + 1) % 3 ))
kill_and_restart "$follower" follower
if ! wait_for_checkpoint_after "$(sluice_newest_manifest "$work/checkpoints")"; then
  echo "==> FAILED: the job ended before the restarted attempt completed a checkpoint" >&2
  exit 1
fi
lead=$(leader)
kill_and_restart "$lead" leader
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
echo "==> what the workers said on resuming and at the end:"
grep -h "resumed from\|leads job\|: done" "$work"/worker-*.log | sort | sed 's/^/    /' || true

echo "==> 3. comparing the published output with the reference"
if cmp -s <(cat "$work"/reference/part-* | sort) <(cat "$work"/out/part-* | sort); then
  echo "OK: the 3 workers, a follower and the leader killed once each, published exactly what one process" \
       "did ($(cat "$work"/out/part-* | wc -l) window counts)"
else
  echo "MISMATCH: the workers' output differs from the reference" >&2
  exit 1
fi
