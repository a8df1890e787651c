#!/usr/bin/env bash
# ctest-failures.sh <build dir> [lines per test]
# After a failed ctest run: a short account of each failed test, taken from ctest's own log
# (Testing/Temporary/LastTest.log), so the end of a long CI log says why each one failed: its
# failed assertions and the error lines of its output, at most [lines per test] (default 18) each.
set -euo pipefail
log="$1/Testing/Temporary/LastTest.log"
per_test=${2:-18}
[[ -f "$log" ]] || exit 0
awk -v per_test="$per_test" '
  function flush() {
    if (name != "" && failed) {
      print "--- failed: " name
      first = (n > per_test) ? n - per_test + 1 : 1
      for (i = first; i <= n; ++i) print "    " kept[i]
    }
    name = ""; failed = 0; n = 0; in_output = 0
  }
  /^[0-9]+\/[0-9]+ Testing: / { flush(); name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name); next }
  /^Output:$/ { in_output = 1; next }
  /^<end of output>$/ { in_output = 0; next }
  /^Test Failed\.|^Test time out|^Test Passed\./ { if ($0 !~ /Passed/) failed = 1; next }
  in_output && /FAILED|failed|CHECK|REQUIRE|[Ee]rror|with expansion|threw|exception|timed out|exit(ed)? |Aborted|sanitizer|SUMMARY|FATAL|PANIC/ {
    kept[++n] = substr($0, 1, 300)
  }
  END { flush() }
' "$log"
