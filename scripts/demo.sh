#!/usr/bin/env bash
# The main job: install what is missing, build, then start a target engine
# process and an initiator engine process on 127.0.0.1, move and verify a few
# hundred MiB between them over tcp, and print GB/s, requests/s and latency
# percentiles next to a plain socket copy and memcpy measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
exec "${BUILD_DIR:-build}/tools/bench/crescent-bench" engine \
  --op both --block-sizes 4K,64K,1M,4M --batch 16 --duration 1 --total 256M \
  --verify --baseline "$@"
