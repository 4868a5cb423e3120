#!/usr/bin/env bash
# Run every libFuzzer target of a fuzz build for a time budget, by hand (not
# a CI test; the fuzz_*_smoke CTest entries are the short deterministic runs).
#
#   CC=clang cmake -S . -B build-fuzz -DCRESCENT_FUZZ=ON && cmake --build build-fuzz
#   scripts/fuzz-all.sh build-fuzz 600 [JOBS]
#
# Every target runs for SECONDS (-max_total_time) at nice 19, JOBS at a time
# (default: all at once, so each gets the same wall time and an equal share
# of the CPUs); new inputs go to <build>/fuzz/long/<name> (the seed corpus
# stays read-only behind it), crash inputs to <build>/fuzz/artifacts/long-<name>-*.
# Prints one line per target (executions, coverage, new corpus entries) and
# exits 1 when any target left a crash, leak or timeout input.
# FUZZ_TARGETS="disk_format error" limits the run to those targets;
# FUZZ_TIMEOUT (default 10) is libFuzzer's -timeout per input in seconds: on a
# loaded, shared machine a niced fuzzer can be descheduled for longer than
# 10 s, so check that a "timeout"/"slow-unit" input is slow when re-run alone
# (fuzz_<name> <input>) before calling it a finding.
set -uo pipefail
BUILD=${1:?usage: fuzz-all.sh BUILD_DIR SECONDS [JOBS]}
SECONDS_EACH=${2:?usage: fuzz-all.sh BUILD_DIR SECONDS [JOBS]}
SRC=$(cd "$(dirname "$0")/.." && pwd)
F="$BUILD/fuzz"
mapfile -t targets < <(cd "$F" && ls fuzz_* 2>/dev/null | grep -v '^fuzz_gen' | sort)
if [ -n "${FUZZ_TARGETS:-}" ]; then
  mapfile -t targets < <(for n in $FUZZ_TARGETS; do echo "fuzz_$n"; done)
fi
TIMEOUT=${FUZZ_TIMEOUT:-10}
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets in $F (build with -DCRESCENT_FUZZ=ON)"; exit 2; }
JOBS=${3:-${#targets[@]}}
mkdir -p "$F/long" "$F/artifacts" "$F/logs"
touch "$F/logs/.start"

run_one() {
  local t=$1 name=${1#fuzz_} dict="" maxlen=4096
  case $name in
    etcd_reply) dict="$SRC/fuzz/etcd.dict" ;;
    compat_notify) dict="$SRC/fuzz/compat_notify.dict" ;;
    disk_format) maxlen=16384 ;;
    *) dict="$SRC/fuzz/msgpack.dict" ;;
  esac
  mkdir -p "$F/long/$name"
  local seeds="$F/corpus/$name"
  [ -d "$seeds" ] || seeds= # (a target built NO_SEEDS starts from nothing)
  nice -n 19 "$F/$t" "$F/long/$name" ${seeds:+"$seeds"} -max_total_time="$SECONDS_EACH" \
    -max_len=$maxlen -timeout="$TIMEOUT" -rss_limit_mb=1024 -print_final_stats=1 \
    ${dict:+-dict=$dict} -artifact_prefix="$F/artifacts/long-$name-" \
    >"$F/logs/$name.log" 2>&1
  echo "$t exit $?" >>"$F/logs/$name.log"
}

echo "fuzzing ${#targets[@]} targets for ${SECONDS_EACH} s each, $JOBS at a time (nice 19)"
active=0
for t in "${targets[@]}"; do
  run_one "$t" &
  active=$((active + 1))
  if [ "$active" -ge "$JOBS" ]; then wait -n; active=$((active - 1)); fi
done
wait

fail=0
printf '%-22s %12s %8s %8s %s\n' target executions cov corpus result
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  log="$F/logs/$name.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -oE '(#[0-9]+)\s+DONE\s+cov: [0-9]+' "$log" | awk '{print $NF}' | tail -1)
  [ -n "$cov" ] || cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corpus=$(ls "$F/long/$name" | wc -l)
  found=$(find "$F/artifacts/" -name "long-$name-*" -newer "$F/logs/.start" 2>/dev/null | wc -l)
  result=ok
  if [ "$found" -gt 0 ] || ! grep -q "$t exit 0" "$log"; then
    result="FINDING: $(find "$F/artifacts/" -name "long-$name-*" -newer "$F/logs/.start" | tr '\n' ' ') (log $log)"
    fail=1
  fi
  printf '%-22s %12s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "$corpus" "$result"
done
exit $fail
