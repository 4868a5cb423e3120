#!/usr/bin/env bash
# test-gpu.sh - build crescent and run its GPU tests on a machine with an
# NVIDIA GPU that cannot fetch packages (docs/gpu.md, "Running the GPU
# tests"). Two steps:
#
#   1. Here, where apt works (once; the folder is ignored by git):
#        bash scripts/test-gpu.sh --fetch [DIR]        # DIR default: gpu-debs/
#      downloads with `apt-get download` the Debian -dev packages the build
#      needs, the runtime libraries they depend on, pkgconf, and a copy of
#      cuda.h (used only if the GPU machine has no CUDA headers).
#   2. On the GPU machine, from the tree's root, with DIR carried along:
#        bash scripts/test-gpu.sh [DIR]
#      unpacks the packages with `dpkg -x` into a prefix (runtime libraries
#      only where the machine lacks them), builds crescent there against
#      that prefix and the machine's python3 (the extension is built for
#      it), runs every GPU test (tests/gpu: two processes on one GPU,
#      device<->device/host, seed 000, kill -9; python/tests/test_gpu_torch.py
#      with torch CUDA tensors), a short benchmark, and prints a summary.
#      Exit 0 only if every GPU test passed (none skipped).
#
# Designed to finish in under 6 minutes on a 16-core machine. Environment:
# BUILD_DIR (default build-gpu), PREFIX (default /tmp/crescent-gpu-prefix),
# CUDA_HOME (where include/cuda.h is; default /usr/local/cuda), SKIP_BENCH=1,
# UNPACK_ALL=1 (unpack runtime libraries too, even where the machine has them).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DEV_PACKAGES=(libmsgpack-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libcmocka-dev
              libjansson-dev libhiredis-dev liburing-dev libxxhash-dev)
# Never unpacked: the machine's own C runtime must be used.
BASE_RE='^(libc6|libgcc-s1|gcc-12-base|libstdc\+\+6|libcrypt1|debconf|perl-base|dpkg|tar)$'

fetch() {
  local dir=$1
  mkdir -p "$dir"
  local rt
  rt=$(for d in "${DEV_PACKAGES[@]}" pkgconf; do
         apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances "$d" | awk '/Depends:/{print $2}'
       done | grep -v -- '-dev$' | grep -v '^<' | sort -u)
  local all
  # shellcheck disable=SC2086
  all=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
          --no-replaces --no-enhances $rt | grep -E '^[a-z0-9]' | grep -v -- '-dev$' |
        grep -vE "$BASE_RE" | sort -u)
  # shellcheck disable=SC2086
  (cd "$dir" && apt-get download "${DEV_PACKAGES[@]}" pkgconf $all) || {
    echo "test-gpu: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
  local cuda_h=${CUDA_HOME:-/usr/local/cuda}/include/cuda.h
  if [ -f "$cuda_h" ]; then
    mkdir -p "$dir/cuda-include" && cp "$cuda_h" "$dir/cuda-include/"
  fi
  echo "test-gpu: $(ls "$dir"/*.deb | wc -l) packages in $dir ($(du -sh "$dir" | cut -f1))"
}

if [ "${1:-}" = "--fetch" ]; then
  fetch "${2:-$ROOT/gpu-debs}"
  exit 0
fi

T0=$(date +%s)
DEBS=$(cd "${1:-gpu-debs}" 2>/dev/null && pwd) || {
  echo "test-gpu: no package folder '${1:-gpu-debs}' (run --fetch where apt works)" >&2; exit 2; }
PREFIX=${PREFIX:-/tmp/crescent-gpu-prefix}
BUILD_DIR=${BUILD_DIR:-build-gpu}
LIB=$PREFIX/usr/lib/x86_64-linux-gnu
LOG=$ROOT/$BUILD_DIR/test-gpu.log
mkdir -p "$PREFIX" "$BUILD_DIR"
: > "$LOG"
say() { echo "test-gpu: $*" | tee -a "$LOG"; }

# --- 1. unpack: -dev packages always, runtime libraries the machine lacks ---
have_soname() { ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "; }
unpacked=0 kept=0
for deb in "$DEBS"/*.deb; do
  name=$(dpkg-deb -f "$deb" Package)
  sonames=$(dpkg-deb -c "$deb" | awk '{print $NF}' | grep -E '/lib[^/]*\.so\.[0-9]+$' |
            xargs -r -n1 basename | sort -u)
  if [[ "$name" != *-dev && -n "$sonames" && "${UNPACK_ALL:-0}" != 1 ]]; then
    missing=0
    for so in $sonames; do have_soname "$so" || missing=1; done
    if [ $missing = 0 ]; then kept=$((kept + 1)); continue; fi
  fi
  if [[ "$name" =~ ^pkgconf ]] && command -v pkg-config >/dev/null; then continue; fi
  dpkg -x "$deb" "$PREFIX" && unpacked=$((unpacked + 1))
done
say "unpacked $unpacked packages into $PREFIX; $kept runtime libraries taken from the machine"
# .so links of -dev packages whose library the machine provides
for l in "$LIB"/*.so; do
  [ -e "$l" ] && continue
  base=$(basename "$l")
  sys=$(ldconfig -p | awk -v b="$base." 'index($1, b) == 1 {print $NF; exit}')
  [ -n "$sys" ] && ln -sf "$sys" "$l"
done
# pkg-config files point into the prefix
for pc in "$LIB"/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -i -E "s#^prefix=/usr#prefix=$PREFIX/usr#; s#(=|-I|-L)/usr/(include|lib)#\1$PREFIX/usr/\2#g" "$pc"
done
export PKG_CONFIG_PATH=$LIB/pkgconfig:$PREFIX/usr/share/pkgconfig
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PKG_CONFIG=$(command -v pkg-config || true)
[ -z "$PKG_CONFIG" ] && [ -x "$PREFIX/usr/bin/pkgconf" ] && PKG_CONFIG=$PREFIX/usr/bin/pkgconf

CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
[ -f "$CUDA_INC/cuda.h" ] || CUDA_INC=$DEBS/cuda-include
PY=$(command -v python3)
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
say "python3: $PY ($("$PY" --version 2>&1)); CUDA headers: $CUDA_INC; $(nvidia-smi -L 2>/dev/null | head -1)"

# --- 2. build ---------------------------------------------------------------
FLAGS="-I$PREFIX/usr/include -I$PREFIX/usr/include/x86_64-linux-gnu"
LDF="-L$LIB -Wl,-rpath,$LIB -Wl,-rpath-link,$LIB"
if ! cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCRESCENT_WITH_CUDA=ON -DCR_CUDA_INCLUDE_DIR="$CUDA_INC" -DPython3_EXECUTABLE="$PY" \
      ${PKG_CONFIG:+-DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG"} -DCMAKE_C_FLAGS="$FLAGS" \
      -DCMAKE_EXE_LINKER_FLAGS="$LDF" -DCMAKE_SHARED_LINKER_FLAGS="$LDF" \
      -DCMAKE_MODULE_LINKER_FLAGS="$LDF" >>"$LOG" 2>&1; then
  tail -30 "$LOG"; say "FAILED: cmake configure (log: $LOG)"; exit 1
fi
TARGETS=(crescent-gpu-test crescent_fakecuda device_pointer_test crescent-master crescent-bench)
grep -q "Python bindings skipped" "$LOG" || TARGETS+=(_crescent crescent_python)
if ! cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" >>"$LOG" 2>&1; then
  grep -E "error|Error" "$LOG" | head -30; say "FAILED: build (log: $LOG)"; exit 1
fi
say "built in $(( $(date +%s) - T0 )) s"

# --- 3. the GPU tests ---------------------------------------------------------
declare -A RESULT
ctest --test-dir "$BUILD_DIR" -R '^(gpu_|device_)' --output-on-failure --timeout 240 \
  >"$BUILD_DIR/ctest-gpu.log" 2>&1
cat "$BUILD_DIR/ctest-gpu.log" >>"$LOG"
while read -r name status; do RESULT[$name]=$status; done < <(
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([a-z0-9_]+) \.+ *(\*\*\*)?([A-Za-z]+).*/\1 \3/p' \
    "$BUILD_DIR/ctest-gpu.log")
grep -E "^(auto|tcp|seed000|kill|pair)" "$BUILD_DIR/ctest-gpu.log" | sed 's/^/  /'

if ! "$PY" -c 'import pytest' >/dev/null 2>&1; then
  RESULT[python_gpu_torch]=NotRun
  say "no pytest for $PY: python GPU test not run"
elif [ -f "$BUILD_DIR/python/crescent/__init__.py" ] && ls "$BUILD_DIR"/python/crescent/_crescent*.so >/dev/null 2>&1; then
  PYTHONPATH=$BUILD_DIR/python CRESCENT_MASTER_BIN=$BUILD_DIR/src/master/crescent-master \
    PYTHONDONTWRITEBYTECODE=1 timeout 300 "$PY" -m pytest -q -p no:cacheprovider -rs \
    python/tests/test_gpu_torch.py >"$BUILD_DIR/pytest-gpu.log" 2>&1
  rc=$?
  cat "$BUILD_DIR/pytest-gpu.log" >>"$LOG"
  tail -3 "$BUILD_DIR/pytest-gpu.log" | sed 's/^/  /'
  if [ $rc = 0 ] && ! grep -q skipped "$BUILD_DIR/pytest-gpu.log"; then RESULT[python_gpu_torch]=Passed
  elif [ $rc = 0 ] || [ $rc = 5 ]; then RESULT[python_gpu_torch]=Skipped
  else RESULT[python_gpu_torch]=Failed; fi
else
  RESULT[python_gpu_torch]=NotBuilt
  say "python extension not built for $PY (no Python.h?): python GPU test not run"
fi

# --- 4. a short benchmark (figures for docs/PERFORMANCE.md) -------------------
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -x "$BUILD_DIR/tools/bench/crescent-bench" ]; then
  B=$BUILD_DIR/tools/bench/crescent-bench
  for args in "--location cuda:0 --remote-location cuda:0 --protocol auto --baseline" \
              "--location cuda:0 --protocol tcp" "--location cpu --protocol tcp"; do
    say "crescent-bench engine $args --block-sizes 1M,16M --duration 2"
    # shellcheck disable=SC2086
    timeout 60 "$B" engine $args --block-sizes 1M,16M --duration 2 2>&1 | tee -a "$LOG" | sed 's/^/  /'
  done
fi

# --- 5. summary ----------------------------------------------------------------
pass=0 fail=0 skip=0
echo "==== GPU test summary ($(( $(date +%s) - T0 )) s) ====" | tee -a "$LOG"
for k in $(printf '%s\n' "${!RESULT[@]}" | sort); do
  printf '  %-28s %s\n' "$k" "${RESULT[$k]}" | tee -a "$LOG"
  case ${RESULT[$k]} in Passed) pass=$((pass + 1)) ;; Skipped|NotBuilt|NotRun) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)) ;; esac
done
echo "$pass passed, $fail failed, $skip skipped" | tee -a "$LOG"
[ $fail = 0 ] && [ $skip = 0 ]
