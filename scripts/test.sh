#!/usr/bin/env bash
# Install dependencies, build, and run every test (CTest: unit tests, header
# checks, multi-process engine and metadata tests, tool smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 300
