#!/usr/bin/env bash
# Installs what sluice needs to build, on Debian 12 (or a similar
# Debian/Ubuntu), and checks that the kernel allows io_uring.
#
#   scripts/deps.sh            run it directly, or
#   source scripts/deps.sh     and call sluice_deps (what the other scripts do)
#
# Only missing packages are installed, with apt-get (through sudo when not
# root). SLUICE_SKIP_DEPS=1 skips the package step.
set -euo pipefail

SLUICE_PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config ccache
  liburing-dev libboost-context-dev libboost-dev libfmt-dev catch2
  libcli11-dev
  # one job across processes (issue 12): etcd and its client for the cluster tests, HTTP and JSON
  # parsers for the etcd gateway client, HMAC for the data port's hello, iproute2 for the tests'
  # network namespaces
  etcd-server etcd-client libhttp-parser-dev nlohmann-json3-dev libssl-dev iproute2
  # running as a systemd service (issue 13): sd_notify in the sluice tool
  libsystemd-dev
  # the epoll fallback's test under a seccomp filter that denies io_uring (optional: without it
  # that test is skipped)
  libseccomp-dev
  # promtool (in Debian's prometheus package): the metrics endpoint's tests check the scraped text
  # with `promtool check metrics` (optional: without it that check is skipped)
  prometheus
  # the NATS JetStream connectors' tests (issue 16) run a real nats-server (optional: skipped without)
  nats-server
  # the status page's test loads the page in headless Chromium and asserts on its DOM (optional:
  # without it that test is skipped); fonts so the saved screenshot has readable text
  chromium fonts-dejavu-core
  # the fuzz targets (scripts/fuzz.sh): clang 14, its libFuzzer and sanitizer runtimes, and
  # llvm-symbolizer for readable crash reports
  clang-14 libclang-rt-14-dev llvm-14
  # `sluice bench <name> --plot FILE.png` (issue 14) draws its figures with gnuplot
  gnuplot-nox
  # the PostgreSQL sink (issue 16): libpq to build against, and a PostgreSQL 15 server its tests
  # start (optional for the tests: without it they are skipped)
  libpq-dev postgresql-15
  # the kafka connectors (issue 16): librdkafka, whose built-in mock cluster the tests run against
  # (Debian 12 packages no Kafka broker)
  librdkafka-dev
)

sluice_deps_packages() {
  if [[ "${SLUICE_SKIP_DEPS:-0}" == 1 ]]; then
    echo "==> deps: SLUICE_SKIP_DEPS=1, not checking packages"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "==> deps: not a Debian/Ubuntu system (no dpkg/apt-get); install these" \
         "(or their equivalents) yourself: ${SLUICE_PACKAGES[*]}" >&2
    return 0
  fi

  local missing=() pkg status
  for pkg in "${SLUICE_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "install ok installed" ]]; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "==> deps: all ${#SLUICE_PACKAGES[@]} packages installed"
    return 0
  fi

  echo "==> deps: installing missing packages: ${missing[*]}"
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "error: missing packages (${missing[*]}), and this is neither root" \
           "nor is sudo available. As root, run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
      return 1
    fi
  fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

sluice_deps_kernel() {
  local knob=/proc/sys/kernel/io_uring_disabled value
  if [[ ! -r "$knob" ]]; then
    # Kernels before 6.6 have no such switch; io_uring is on unless seccomp
    # (e.g. a container runtime's default profile) blocks it.
    return 0
  fi
  value=$(<"$knob")
  if [[ "$value" != 0 ]]; then
    echo "WARNING: kernel.io_uring_disabled = $value, so io_uring is" \
         "restricted (1: only for the io_uring_group, 2: for everyone)." >&2
    echo "WARNING: sluice falls back to its epoll backend then (SLUICE_BACKEND=auto); for" \
         "io_uring, 'sudo sysctl kernel.io_uring_disabled=0'." >&2
  else
    echo "==> deps: kernel.io_uring_disabled = 0 (io_uring allowed)"
  fi
}

sluice_deps() {
  sluice_deps_packages
  sluice_deps_kernel
}

# sluice_demo_tool <repo>: what the demo scripts share: the packages, then a Release build of the
# sluice tool in ${SLUICE_BUILD_DIR:-<repo>/build}/release (-j${SLUICE_JOBS:-nproc}); sets $sluice.
sluice_demo_tool() {
  local repo=$1
  local release="${SLUICE_BUILD_DIR:-$repo/build}/release"
  local jobs=${SLUICE_JOBS:-$(nproc)}
  echo "==> checking dependencies"
  sluice_deps
  echo "==> configuring Release build in $release"
  cmake -S "$repo" -B "$release" -G Ninja -DCMAKE_BUILD_TYPE=Release
  echo "==> building the sluice tool (-j$jobs)"
  cmake --build "$release" --target sluice -j "$jobs"
  sluice="$release/apps/sluice/sluice"
}

# sluice_newest_manifest <checkpoint dir>: the newest checkpoint id whose manifest has bytes (0 if
# none): what the demos wait for before they kill. With one checkpoint in flight, chk-N's manifest
# appears only once chk-(N-1) has completed.
sluice_newest_manifest() {
  local newest=0 d id
  for d in "$1"/chk-*; do
    [ -s "$d/_manifest" ] || continue
    id=${d##*/chk-}
    [[ $id =~ ^[0-9]+$ ]] && [ "$id" -gt "$newest" ] && newest=$id
  done
  echo "$newest"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  sluice_deps
fi
