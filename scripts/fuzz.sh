#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang 14 in their own build tree and runs them.
#
#   scripts/fuzz.sh                  the long run: 1,000,000 executions per target
#   scripts/fuzz.sh --runs N         N executions per target
#   scripts/fuzz.sh --seconds S      S seconds per target (what scripts/run-tests.sh runs)
#   scripts/fuzz.sh --seeds          rewrite the generated seeds in fuzz/corpus/ (commit them)
#   scripts/fuzz.sh [...] frame csv_row    only these targets (default: all)
#
# Each target first replays its committed corpus, fuzz/corpus/<target>/ (generated seeds and
# regression inputs), then fuzzes from it and from a work corpus kept in the build tree, which
# grows across runs. A crash, a failed property, a leak, an input slower than 10 s, an allocation
# of 16 MiB or more, or 1 GiB of RSS fails the script; the input is saved under
# <fuzz tree>/artifacts/<target>/ and the command that replays it is printed. At the end, one line
# per target: executions, seconds, executions per second, coverage, corpus size.
#
# Environment:
#   SLUICE_BUILD_DIR=<dir>   base of the build trees (default <repo>/build); this one is <dir>/fuzz
#   SLUICE_JOBS=<n>          build parallelism (default: nproc)
#   SLUICE_FUZZ_CXX=<c++>    the compiler (default: clang++-14)
#   SLUICE_SKIP_DEPS=1       don't check/install Debian packages
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

all_targets=(frame hello manifest state_file csv_row)
# Per target: the largest input libFuzzer makes, and its dictionary if it has one.
declare -A max_len=([frame]=8192 [hello]=2048 [manifest]=8192 [state_file]=8192 [csv_row]=4096)
declare -A dict=([manifest]="$repo/fuzz/manifest.dict")
limits=(-rss_limit_mb=1024 -malloc_limit_mb=16 -timeout=10)

runs=1000000
seconds=""
seeds=0
targets=()
while (($#)); do
  case "$1" in
    --runs) runs=$2; seconds=""; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *)
      if [[ " ${all_targets[*]} " != *" $1 "* ]]; then
        echo "fuzz.sh: no target '$1' (targets: ${all_targets[*]})" >&2
        exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

cxx=${SLUICE_FUZZ_CXX:-clang++-14}
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found; scripts/deps.sh installs clang-14 and libclang-rt-14-dev" >&2
  exit 1
fi
tree="${SLUICE_BUILD_DIR:-$repo/build}/fuzz"
jobs=${SLUICE_JOBS:-$(nproc)}

sluice_deps
echo "==> fuzz: configuring $tree ($cxx, -O1, ASan+UBSan, libFuzzer)"
# Only the libraries and the fuzz targets; assertions stay on (no NDEBUG).
CXX="$cxx" cmake -S "$repo" -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DSLUICE_FUZZ=ON \
  -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_APPS=OFF >/dev/null
if ((seeds)); then build_targets=(fuzz_make_seeds); else build_targets=("${targets[@]/#/fuzz_}"); fi
echo "==> fuzz: building ${build_targets[*]} and the libraries they need (-j$jobs)"
cmake --build "$tree" -j "$jobs" --target "${build_targets[@]}"

if ((seeds)); then
  "$tree/fuzz/fuzz_make_seeds" "$repo/fuzz/corpus"
  exit 0
fi

if [[ -z "${ASAN_SYMBOLIZER_PATH:-}" && -x /usr/lib/llvm-14/bin/llvm-symbolizer ]]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer  # file:line in crash reports
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=()
for t in "${targets[@]}"; do
  exe="$tree/fuzz/fuzz_$t"
  corpus="$repo/fuzz/corpus/$t"
  work="$tree/corpus/$t"
  artifacts="$tree/artifacts/$t"
  log="$tree/logs/$t.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  options=("${limits[@]}" -max_len="${max_len[$t]}" -artifact_prefix="$artifacts/" -print_final_stats=1)
  [[ -n "${dict[$t]:-}" ]] && options+=(-dict="${dict[$t]}")

  echo "==> fuzz_$t: replaying the committed corpus ($(find "$corpus" -type f | wc -l) inputs)"
  if ! "$exe" "${limits[@]}" -artifact_prefix="$artifacts/" -runs=0 "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz.sh: fuzz_$t fails on its committed corpus (log: $log)" >&2
    exit 1
  fi

  if [[ -n "$seconds" ]]; then budget=(-max_total_time="$seconds"); what="${seconds}s"; else budget=(-runs="$runs"); what="$runs runs"; fi
  echo "==> fuzz_$t: fuzzing for $what"
  start=$(date +%s%N)
  if ! "$exe" "${options[@]}" "${budget[@]}" "$work" "$corpus" >"$log" 2>&1; then
    grep -v '^ *#[0-9]* 0x' "$log" | tail -n 40 >&2
    echo "fuzz.sh: fuzz_$t failed (log: $log). Replay the saved input with:" >&2
    echo "  $exe $(ls -t "$artifacts"/* 2>/dev/null | head -n 1)" >&2
    exit 1
  fi
  elapsed=$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN { printf "%.1f", ns / 1e9 }')
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  coverage=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
  corpus_size=$(grep -o 'corp: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  summary+=("$(printf '%-16s %9s executions %7s s %6s exec/s  %-18s corpus %s  crashes 0' \
                "fuzz_$t" "$executions" "$elapsed" "$rate" "$coverage" "$corpus_size")")
  echo "    ${summary[-1]}"
done

echo
echo "fuzz.sh: PASSED, no crash:"
printf '  %s\n' "${summary[@]}"
