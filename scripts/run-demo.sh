#!/usr/bin/env bash
# Builds the sluice tool (Release) and runs its demo:
#   scripts/run-demo.sh [args passed to `sluice demo`...]
#
# Environment: SLUICE_BUILD_DIR=<dir> (default <repo>/build), SLUICE_JOBS=<n>,
# SLUICE_SKIP_DEPS=1.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

build_base=${SLUICE_BUILD_DIR:-$repo/build}
release="$build_base/release"
jobs=${SLUICE_JOBS:-$(nproc)}

echo "==> checking dependencies"
sluice_deps

echo "==> configuring Release build in $release"
cmake -S "$repo" -B "$release" -G Ninja -DCMAKE_BUILD_TYPE=Release

echo "==> building the sluice tool (-j$jobs)"
cmake --build "$release" --target sluice -j "$jobs"

echo "==> running: $release/apps/sluice/sluice demo $*"
exec "$release/apps/sluice/sluice" demo "$@"
