#!/usr/bin/env bash
# Configure and build crescent into build/ (or $BUILD_DIR). Extra arguments go
# to cmake's configure step, e.g. -DCRESCENT_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
