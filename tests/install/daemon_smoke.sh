#!/usr/bin/env bash
# Runs examples/daemon (a service embedding a job in its own engine, built against the installed
# package) end to end:
#   start -> "ready (fresh start)" -> /metrics scraped -> a control-port "stats" answered ->
#   SIGTERM -> a final checkpoint, exit 0 -> restart -> "ready (resumed from checkpoint N)" with
#   the drain's N -> the input's end, exit 0 -> output exactly that of `sluice wordcount`.
#   daemon_smoke.sh DAEMON SLUICE_TOOL
set -euo pipefail
daemon=$1
tool=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-daemon.XXXXXX")
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() {
  echo "daemon_smoke: $*" >&2
  for f in "$tmp"/*.log; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
}
wait_for() {  # wait_for FILE REGEX SECONDS
  for _ in $(seq $(($3 * 20))); do
    grep -qE "$2" "$1" && return 0
    sleep 0.05
  done
  return 1
}
http_get() {  # http_get PORT PATH: the response, head and body
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3
  timeout 10 cat <&3
  exec 3>&-
}

"$tool" corpus --output "$tmp/in.txt" --lines 3000000 --seed 5 >/dev/null 2>&1
"$tool" wordcount --input "$tmp/in.txt" --output "$tmp/reference" --window-lines 1000 \
  --checkpoint-dir "$tmp/reference-chk" --quiet >/dev/null 2>&1

# --- first start: ready, scraped, drained by SIGTERM ---------------------------------------------
"$daemon" --input "$tmp/in.txt" --output "$tmp/out" --checkpoint-dir "$tmp/chk" \
  --metrics 127.0.0.1:0 >"$tmp/first.log" 2>&1 &
pid=$!
wait_for "$tmp/first.log" '^ready \(fresh start\)$' 30 || fail "no 'ready (fresh start)'"
wait_for "$tmp/first.log" '^metrics on ' 10 || fail "no metrics endpoint"
mport=$(sed -n 's|^metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$tmp/first.log")
http_get "$mport" /metrics >"$tmp/metrics.txt" || fail "scraping /metrics failed"
grep -q '^HTTP/1.1 200' "$tmp/metrics.txt" || fail "/metrics: $(head -1 "$tmp/metrics.txt")"
grep -q '^sluice_task_records_in_total{' "$tmp/metrics.txt" || fail "/metrics has no task records"
if command -v promtool >/dev/null 2>&1; then
  sed '1,/^\r$/d' "$tmp/metrics.txt" | promtool check metrics || fail "promtool check metrics failed"
fi
cport=$(sed -n 's/^control on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/first.log")
exec 4<>"/dev/tcp/127.0.0.1/$cport"
printf 'stats\n' >&4
IFS= read -r -t 10 stats <&4 || fail "no answer on the control port"
exec 4>&-
[[ "$stats" == records\ * ]] || fail "control port answered '$stats'"
kill -0 "$pid" 2>/dev/null || fail "the daemon ended before SIGTERM (input too small?)"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[[ $status -eq 0 ]] || fail "exit $status after SIGTERM (expected 0: drained)"
drained=$(sed -n 's/^job stopped with checkpoint \([0-9]*\) (resumable)$/\1/p' "$tmp/first.log")
[[ -n "$drained" ]] || fail "no 'job stopped with checkpoint N (resumable)'"

# --- restart: resumes from the drain's checkpoint and finishes ----------------------------------
"$daemon" --input "$tmp/in.txt" --output "$tmp/out" --checkpoint-dir "$tmp/chk" >"$tmp/second.log" 2>&1 &
pid=$!
status=0
wait "$pid" || status=$?
pid=
[[ $status -eq 0 ]] || fail "the restart exited with $status"
grep -q "^ready (resumed from checkpoint $drained)$" "$tmp/second.log" ||
  fail "the restart did not resume from checkpoint $drained"
sorted() { cat "$1"/part-* | LC_ALL=C sort; }
cmp -s <(sorted "$tmp/out") <(sorted "$tmp/reference") || fail "the output differs from sluice wordcount's"
echo "daemon_smoke: ready, $(grep -c '^sluice_' "$tmp/metrics.txt") series scraped, '$stats', drained to checkpoint" \
  "$drained on SIGTERM, resumed from it, output exact ($(sorted "$tmp/out" | wc -l) lines)"
