#!/usr/bin/env bash
# Builds sluice and runs every check CI runs:
#   1. Release build (Ninja) and the Catch2 tests through ctest, on io_uring and then again with
#      every executor on the epoll backend (SLUICE_BACKEND=epoll);
#      then the two demos (scripts/run-demo.sh, scripts/run-cluster-demo.sh --loopback);
#   2. install into a temporary prefix, then build and run a consumer project
#      (tests/install) against the installed CMake package;
#   3. an ASan+UBSan build (-O1 -g1, tests only) and the tests again, on io_uring, and the modules
#      that drive the backend directly (runtime, io, buffers, snapshot, sim) on epoll too;
#   4. a ThreadSanitizer build (-O1 -g1, tests only) and the tests again;
#      (-g1: line tables, enough for the sanitizers' stack traces; full -g took a third longer to build)
#   5. the deterministic simulation: 2,000+ seeds of the sample jobs under faults and crashes
#      (scripts/simulate.sh), then the planted bugs it must find (scripts/simulate-plants.sh). The
#      Release build of step 1 carries the planted bugs for this (-DSLUICE_PLANTS=ON), switched off
#      unless `sluice simulate --plant` asks; the demo's build and an install of your own do not.
#   6. the fuzz targets (clang 14, libFuzzer): each replays its committed corpus, then fuzzes for
#      SLUICE_FUZZ_SECONDS (scripts/fuzz.sh; its own build tree, <build>/fuzz).
#
# Environment:
#   SLUICE_BUILD_DIR=<dir>  base of the build trees (default: <repo>/build)
#   SLUICE_SKIP_ASAN=1      skip step 3
#   SLUICE_SKIP_TSAN=1      skip step 4
#   SLUICE_SKIP_SIM=1       skip step 5
#   SLUICE_SIM_SEEDS=<n>    seeds per job and fault class in step 5 (default 126)
#   SLUICE_SKIP_FUZZ=1      skip step 6
#   SLUICE_FUZZ_SECONDS=<s> fuzzing time per target in step 6 (default: 30)
#   SLUICE_JOBS=<n>         parallelism (default: nproc)
#   SLUICE_TEST_TIMEOUT=<s> per-test-case timeout (default: 300)
#   SLUICE_SKIP_DEPS=1      don't check/install Debian packages
#   CXX=clang++-14          pick the compiler (on a fresh build tree)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

build_base=${SLUICE_BUILD_DIR:-$repo/build}
jobs=${SLUICE_JOBS:-$(nproc)}
test_timeout=${SLUICE_TEST_TIMEOUT:-300}
start=$SECONDS
step="setup"
tmp=""

finish() {
  local rc=$?
  if [[ -n "$tmp" ]]; then rm -rf "$tmp"; fi
  if ((rc != 0)); then
    echo "run-tests: FAILED during: $step (exit $rc, after $((SECONDS - start))s)" >&2
  fi
}
trap finish EXIT

say() { echo; echo "==> [$((SECONDS - start))s] $*"; }
count_tests() { ctest --test-dir "$1" -N | sed -n 's/^Total Tests: //p'; }
# run_ctest <build dir> [ctest options]: the suite; when a test fails, a short account of each
# failure (scripts/ctest-failures.sh) closes the output, where a truncated log still shows it.
run_ctest() {
  local dir=$1
  shift
  local rc=0
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" "$@" || rc=$?
  if ((rc != 0)); then
    echo
    echo "==> the failed tests, in short:"
    "$repo/scripts/ctest-failures.sh" "$dir" || true
  fi
  return "$rc"
}

step="dependencies"
say "checking dependencies"
sluice_deps

# ---- 1. release build and tests -------------------------------------------
release="$build_base/release"
step="release configure"
say "configuring Release build in $release"
cmake -S "$repo" -B "$release" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_PLANTS=ON \
  -DSLUICE_TEST_TIMEOUT="$test_timeout"

step="release build"
say "building Release (-j$jobs)"
cmake --build "$release" -j "$jobs"

step="release tests"
say "running tests (Release, -j$jobs)"
run_ctest "$release"
release_tests=$(count_tests "$release")
# The second I/O backend (docs/design.md: the epoll fallback where io_uring is unavailable): the
# whole suite again, every executor on epoll.
step="release tests on epoll"
say "running tests (Release, SLUICE_BACKEND=epoll, -j$jobs)"
SLUICE_BACKEND=epoll run_ctest "$release"

# The README's demos, as a user runs them: each fails unless its kills landed while the job ran and
# the resumed output equals the uninterrupted one.
step="demos"
demo_dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demos.XXXXXX")
say "running scripts/run-demo.sh"
SLUICE_SKIP_DEPS=1 SLUICE_BUILD_DIR="$build_base" SLUICE_DEMO_DIR="$demo_dir/single" "$repo/scripts/run-demo.sh"
say "running scripts/run-cluster-demo.sh --loopback"
SLUICE_SKIP_DEPS=1 SLUICE_BUILD_DIR="$build_base" SLUICE_DEMO_DIR="$demo_dir/cluster" \
  "$repo/scripts/run-cluster-demo.sh" --loopback
rm -rf "$demo_dir"

# ---- 2. installed package, used by a consumer project ----------------------
step="install consumer"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install.XXXXXX")
prefix="$tmp/prefix"
say "installing into $prefix"
cmake --install "$release" --prefix "$prefix"

say "building tests/install against the installed package"
cmake -S "$repo/tests/install" -B "$tmp/consumer" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
cmake --build "$tmp/consumer" -j "$jobs"

say "running the consumer"
"$tmp/consumer/consumer"
say "building a runtime-only consumer: find_package(sluice COMPONENTS io), no C++ standard set"
cmake -S "$repo/tests/install/runtime_only" -B "$tmp/runtime_only" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
cmake --build "$tmp/runtime_only" -j "$jobs"
"$repo/tests/install/echo_smoke.sh" "$tmp/runtime_only/echo_server_runtime_only"
say "running the README's echo server example end to end"
"$repo/tests/install/echo_smoke.sh" "$tmp/consumer/echo_server"
if [[ -x "$prefix/bin/sluice" ]]; then
  say "running the installed tool: sluice --version"
  "$prefix/bin/sluice" --version
fi
say "running the embedding daemon (examples/daemon) end to end: ready, metrics, SIGTERM drain, resume"
"$repo/tests/install/daemon_smoke.sh" "$tmp/consumer/daemon/sluice_daemon" "$release/apps/sluice/sluice"
say "building a consumer with pkg-config (sluice.pc) instead of CMake"
pc_flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sluice)
# shellcheck disable=SC2086 # (word splitting of the flags is meant)
c++ -std=c++20 -O1 -o "$tmp/echo_pkgconfig" "$repo/examples/echo_server.cpp" $pc_flags
"$repo/tests/install/echo_smoke.sh" "$tmp/echo_pkgconfig"
install_result="ok"

# ---- 3. and 4. sanitizers ---------------------------------------------------
# sanitized_suite <dir> <step> <name> <cmake option>: configures, builds and runs the suite with one
# sanitizer, at -O1 without NDEBUG (assertions stay on). The caller puts the sanitizer's runtime
# options in front of the call; they reach ctest's tests.
sanitized_suite() {
  local dir=$1 label=$2 name=$3 option=$4
  step="$label configure"
  say "configuring $name build in $dir"
  cmake -S "$repo" -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -D"$option"=ON -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_APPS=OFF \
    -DSLUICE_TEST_TIMEOUT="$test_timeout"

  step="$label build"
  say "building $name (-j$jobs)"
  cmake --build "$dir" -j "$jobs"

  step="$label tests"
  say "running tests under $name (-j$jobs)"
  run_ctest "$dir"
  if [[ -n "${epoll_labels:-}" ]]; then
    step="$label tests on epoll"
    say "running the $epoll_labels tests under $name on the epoll backend (SLUICE_BACKEND=epoll, -j$jobs)"
    SLUICE_BACKEND=epoll run_ctest "$dir" -L "$epoll_labels"
  fi
}

asan_result="skipped (SLUICE_SKIP_ASAN=1)"
if [[ "${SLUICE_SKIP_ASAN:-0}" != 1 ]]; then
  # On epoll, the modules whose tests drive the backend directly (its operations, the executors,
  # TCP, the state files); the whole suite runs on epoll in step 1.
  asan_epoll_labels="^(runtime|io|buffers|snapshot|sim)$"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    epoll_labels="$asan_epoll_labels" sanitized_suite "$build_base/asan" asan ASan+UBSan SLUICE_SANITIZE
  asan_result="$(count_tests "$build_base/asan") tests passed on io_uring, $(ctest --test-dir "$build_base/asan" -N -L "$asan_epoll_labels" | sed -n 's/^Total Tests: //p') of them on epoll"
fi

# The engine's threads, the inbox and cross-executor releases: the races a single-threaded
# simulation cannot see. Any report fails the test that produced it (TSan exits 66);
# halt_on_error: the first report ends that test, with the report in its output.
tsan_result="skipped (SLUICE_SKIP_TSAN=1)"
if [[ "${SLUICE_SKIP_TSAN:-0}" != 1 ]]; then
  # die_after_fork=0: crash tests fork a child after the log writer and the blocking-work pool have
  # started threads, and the child runs a job (new threads); TSan refuses that by default.
  tsan_start=$SECONDS
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0 \
    sanitized_suite "$build_base/tsan" tsan ThreadSanitizer SLUICE_TSAN
  tsan_result="$(count_tests "$build_base/tsan") tests passed in $((SECONDS - tsan_start))s"
fi

# ---- 5. the deterministic simulation ---------------------------------------
sim_result="skipped (SLUICE_SKIP_SIM=1)"
if [[ "${SLUICE_SKIP_SIM:-0}" != 1 ]]; then
  step="simulation seeds"
  say "simulating the sample jobs under faults and crashes (scripts/simulate.sh)"
  sim_log=$(mktemp "${TMPDIR:-/tmp}/sluice-sim-log.XXXXXX")
  SLUICE_JOBS="$jobs" "$repo/scripts/simulate.sh" "$release/apps/sluice/sluice" | tee "$sim_log"
  sim_result=$(tail -n 1 "$sim_log" | sed 's/^simulate.sh: //')
  rm -f "$sim_log"
  if [[ -x "$repo/scripts/simulate-plants.sh" ]]; then
    step="simulation planted bugs"
    say "checking that the simulation finds every planted bug (scripts/simulate-plants.sh)"
    "$repo/scripts/simulate-plants.sh" "$release/apps/sluice/sluice"
    sim_result="$sim_result; every planted bug found"
  fi
fi

# ---- 6. fuzzing ------------------------------------------------------------
# Self-contained: its own build tree and its own result line (scripts/fuzz.sh).
if [[ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]]; then
  step="fuzz"
  fuzz_seconds=${SLUICE_FUZZ_SECONDS:-30}
  fuzz_start=$SECONDS
  say "fuzzing: each target's committed corpus, then ${fuzz_seconds}s of fuzzing per target"
  SLUICE_SKIP_DEPS=1 SLUICE_BUILD_DIR="$build_base" SLUICE_JOBS="$jobs" \
    "$repo/scripts/fuzz.sh" --seconds "$fuzz_seconds"
  echo "run-tests: fuzz passed in $((SECONDS - fuzz_start))s (every target in fuzz/, ${fuzz_seconds}s each, no crash)"
else
  echo "run-tests: fuzz skipped (SLUICE_SKIP_FUZZ=1)"
fi

step="summary"
echo
echo "run-tests: PASSED in $((SECONDS - start))s — release: $release_tests tests passed;" \
     "the same on epoll;" \
     "install consumer: $install_result; asan+ubsan: $asan_result; tsan: $tsan_result; simulation: $sim_result"
