#!/usr/bin/env bash
# build-mooncake-baseline.sh - build upstream Mooncake's transfer engine bench, master and
# Python store module from source, for python/bench/bench_vs_mooncake.py (issue 12's table
# side by side in one run). A measurement aid, not part of crescent's build or tests.
#
#   bash scripts/build-mooncake-baseline.sh MOONCAKE YALANTINGLIBS [OUT]
#
# MOONCAKE and YALANTINGLIBS are source trees or bare git repositories (then the commit
# Mooncake pins for its extern/yalantinglibs submodule is taken from YALANTINGLIBS). OUT
# (default /tmp/mooncake-baseline) gets src/, prefix/ (yalantinglibs) and build/, the
# directory to pass as --mooncake-build. Debian's pybind11-dev stands in for the pybind11
# submodule; with pybind11 older than 2.11 one capsule constructor in store_py.cpp is
# rewritten to the older form (same name and ownership). Nothing else is patched.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 MOONCAKE YALANTINGLIBS [OUT]" >&2
    exit 2
fi
MC=$(realpath "$1")
YLT=$(realpath "$2")
OUT=${3:-/tmp/mooncake-baseline}
JOBS=${JOBS:-$(nproc)}

is_bare() { [ -f "$1/HEAD" ] && [ -d "$1/objects" ]; }

SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get install -y --no-install-recommends build-essential cmake git pkg-config \
    libibverbs-dev libgoogle-glog-dev libgflags-dev libjsoncpp-dev libunwind-dev libnuma-dev \
    libyaml-cpp-dev libcurl4-openssl-dev libasio-dev libssl-dev libzstd-dev libxxhash-dev \
    liburing-dev libmsgpack-dev libboost-dev pybind11-dev python3-dev python3-numpy

mkdir -p "$OUT/src" "$OUT/prefix" "$OUT/build"
if is_bare "$MC"; then
    # Large files some mirrors lack (traces, images) are not needed to build (git may still
    # name a missing one it skips).
    git --git-dir="$MC" archive HEAD -- . ':(exclude)FAST25-release' \
        ':(exclude)docs/source/image/vllm-integration-demo.gif' \
        ':(exclude)image/vllm-integration-demo.gif' | tar -x -C "$OUT/src"
    YLT_COMMIT=$(git --git-dir="$MC" ls-tree HEAD extern/yalantinglibs | awk '{print $3}')
else
    cp -a "$MC/." "$OUT/src/"
    YLT_COMMIT=
fi

YSRC="$OUT/src/extern/yalantinglibs"
if [ ! -f "$YSRC/CMakeLists.txt" ]; then
    mkdir -p "$YSRC"
    if is_bare "$YLT"; then
        git --git-dir="$YLT" archive "${YLT_COMMIT:-HEAD}" | tar -x -C "$YSRC"
    else
        cp -a "$YLT/." "$YSRC/"
    fi
fi
cmake -S "$YSRC" -B "$YSRC/build" -DBUILD_EXAMPLES=OFF -DBUILD_BENCHMARK=OFF \
    -DBUILD_UNIT_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$OUT/prefix"
cmake --build "$YSRC/build" -j "$JOBS"
cmake --install "$YSRC/build"

if [ ! -f "$OUT/src/extern/pybind11/CMakeLists.txt" ]; then
    mkdir -p "$OUT/src/extern/pybind11"
    echo 'find_package(pybind11 CONFIG REQUIRED)' > "$OUT/src/extern/pybind11/CMakeLists.txt"
fi
/usr/bin/python3 - "$OUT/src/mooncake-integration/store/store_py.cpp" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
old = re.compile(r'py::capsule\(raw_ptr, "mooncake\.PyClient\.shared_ptr", \[\]\(void \*p\) \{\s*'
                 r'delete static_cast<std::shared_ptr<PyClient> \*>\(p\);')
new = ('py::capsule(raw_ptr, "mooncake.PyClient.shared_ptr", [](PyObject *o) {\n'
       '                delete static_cast<std::shared_ptr<PyClient> *>(\n'
       '                    PyCapsule_GetPointer(o, "mooncake.PyClient.shared_ptr"));')
common = open("/usr/include/pybind11/detail/common.h").read()
ver = tuple(int(re.search(r"#define PYBIND11_VERSION_%s (\d+)" % part, common).group(1))
            for part in ("MAJOR", "MINOR"))
if ver < (2, 11) and old.search(text):
    open(path, "w").write(old.sub(new, text, count=1))
    print("store_py.cpp: capsule constructor rewritten for pybind11 %d.%d" % ver)
EOF

cmake -S "$OUT/src" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$OUT/prefix" \
    -DCMAKE_FIND_PACKAGE_TARGETS_GLOBAL=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
    -DPython3_EXECUTABLE=/usr/bin/python3 -DPYTHON_EXECUTABLE=/usr/bin/python3 \
    -DUSE_TCP=ON -DUSE_HTTP=ON -DUSE_ETCD=OFF -DUSE_CUDA=OFF -DUSE_REDIS=OFF -DUSE_TENT=OFF \
    -DBUILD_UNIT_TESTS=OFF -DBUILD_EXAMPLES=ON -DBUILD_BENCHMARK=OFF -DWITH_METRICS=OFF \
    -DWITH_TE=ON -DWITH_STORE=ON -DWITH_STORE_RUST=OFF -DWITH_P2P_STORE=OFF -DWITH_EP=OFF \
    -DENABLE_DEBUG_SYMBOLS=OFF
make -C "$OUT/build" -j "$JOBS" transfer_engine_bench mooncake_master store engine
echo "built: pass --mooncake-build $OUT/build to python/bench/bench_vs_mooncake.py"
