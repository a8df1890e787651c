#!/usr/bin/env bash
# Runs the README's echo server (built against the installed package): starts it on a
# kernel-chosen port, echoes a line through it, stops it with SIGINT and expects a clean exit.
set -euo pipefail
server=$1
out=$(mktemp)
trap 'rm -f "$out"; kill -9 "$pid" 2>/dev/null || true' EXIT
"$server" 127.0.0.1:0 >"$out" &
pid=$!
for _ in $(seq 100); do
  grep -q '^listening on ' "$out" && break
  sleep 0.05
done
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$out")
[[ -n "$port" ]] || { echo "echo_smoke: the server did not start: $(cat "$out")" >&2; exit 1; }
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'hello sluice\n' >&3
IFS= read -r -t 5 reply <&3
exec 3>&-
[[ "$reply" == "hello sluice" ]] || { echo "echo_smoke: got '$reply'" >&2; exit 1; }
kill -INT "$pid"
status=0
wait "$pid" || status=$?
[[ $status -eq 0 ]] || { echo "echo_smoke: the server exited with $status after SIGINT" >&2; exit 1; }
grep -q '^stopped$' "$out" || { echo "echo_smoke: no clean stop: $(cat "$out")" >&2; exit 1; }
echo "echo_smoke: echoed '$reply' through port $port and stopped cleanly on SIGINT"
