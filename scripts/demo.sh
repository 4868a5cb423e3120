#!/usr/bin/env bash
# The main job: install what is missing, build, then run the store demo
# (tools/demo/demo.c): a crescent-master and three store client processes on
# 127.0.0.1 (P2PHANDSHAKE, no other server) put and get a KV-cache mix of
# 4 KiB-4 MiB blocks (batched and single, zero-copy and copying, replica_num
# 2), verify every byte, kill one client and show that replicated objects stay
# readable, print a summary table (ops/s, GB/s, latency p50/p99, memory used)
# and shut everything down. Exit status 0 on success; on failure non-zero and
# a message naming the step that failed. Takes a few seconds after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
BUILD="${BUILD_DIR:-build}"
exec "$BUILD/tools/demo/crescent-demo" --master-bin "$BUILD/tools/master/crescent-master" "$@"
