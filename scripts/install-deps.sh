#!/usr/bin/env bash
# Installs what crescent needs to build and test on Debian 12. Idempotent:
# packages already present are not reinstalled and apt is not touched at all
# when nothing is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libmsgpack-dev        # wire payload serialization (msgpack-c)
  libmicrohttpd-dev     # embedded HTTP metadata server
  libcurl4-openssl-dev  # HTTP metadata client
  libssl-dev            # HMAC-SHA256 for the shared-secret handshake
  libcmocka-dev         # C unit test framework
  libjansson-dev        # crescent-master --config_path JSON files; etcd v3 gateway JSON (libcrescent), admin JSON
  libhiredis-dev        # redis:// metadata backend (libcrescent)
  etcd-server           # tests/metadata: real etcd 3.4 servers (/usr/bin/etcd); tests skip without
  redis-server          # tests/metadata: real redis servers; tests skip without
  liburing-dev          # src/disk: io_uring I/O of the SSD tier's bucket files
  libxxhash-dev         # src/disk: XXH3 checksums of on-disk records
  libucx-dev            # src/engine/transports/ucx: RDMA/RoCE/IB through UCX (UCX_TLS=tcp,sm in tests)
  ucx-utils             # ucx_perftest: the baseline of crescent-bench engine --protocol ucx
  libyaml-dev           # crescent-master --config_path YAML files (Mooncake's conf/master.yaml)
  libpcre2-dev          # crescent-master remove_by_regex: PCRE2 with match/depth/heap limits
  clang libclang-rt-14-dev  # sanitizers and libFuzzer
  clang-format          # scripts/check-format.sh (CTest format_check)
  gdb                   # tests: ct_dump_stacks shows a hung daemon's threads in the test log
  iproute2              # tests/faults: ip netns / ip link for the namespace test beds (skip without)
  python3-dev           # python/: the crescent._crescent extension (/usr/bin/python3)
  python3-pytest        # python/tests: the Python conformance suite
  python3-numpy         # python/tests: numpy arrays as sources and destinations
  python3-torch         # python/tests: torch tensors (~1 min to install; tests skip without)
  python3-msgpack       # python/mooncake/structured_object_store: the msgpack_ragged codec
  python3-aiohttp       # python/mooncake/mooncake_store_service: the REST service (as Mooncake's)
  python3-pip python3-setuptools python3-wheel  # pip install of python/ (offline)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
