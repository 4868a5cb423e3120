#!/usr/bin/env bash
# The C tests again under ASan+UBSan (leaks included), the threaded engine
# tests under TSan, and a short libFuzzer run of every wire decoder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh -DCRESCENT_SANITIZE=address,undefined
ctest --test-dir build-asan --output-on-failure -j2 --timeout 600 -E '^bench_'

export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
# UCX's memory hooks (libucm interposes madvise/mmap) crash inside TSan's
# interceptors when a thread exits; crescent registers every buffer UCX touches
# explicitly, so it does not need UCX's memory events or its malloc hooks.
export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no
BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh -DCRESCENT_SANITIZE=thread
ctest --test-dir build-tsan --output-on-failure -j2 --timeout 600 -R '^engine_|^metadata_|^master_concurrency|^master_rpc_server|^store_|^disk_|^ha_|^thin_|^httpd_'

if [ -f fuzz/CMakeLists.txt ]; then
  CC=clang BUILD_DIR=build-fuzz bash scripts/build.sh -DCRESCENT_FUZZ=ON
  ctest --test-dir build-fuzz --output-on-failure -j2 --timeout 300 -R '^fuzz_'
fi
