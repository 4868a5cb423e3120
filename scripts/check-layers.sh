#!/usr/bin/env bash
# Include directions between the layers of src/ (docs/ARCHITECTURE.md,
# "Layout and layers"). The build already refuses an upward include (each
# layer's include roots expose only what it depends on); this check states
# the table in one place, also catches includes that climb out with "../",
# and runs without a build. Exit 0 when every include is allowed, 1 with one
# line per violation otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# layer: the layers it may include (besides itself and include/crescent).
declare -A ALLOWED=(
  [base]=""
  [proto]="base"
  [disk]="base"
  [metadata]="proto base"
  [device]="base"  # CUDA driver (dlopen) and memory classification; built with CUDA headers
  [engine]="metadata proto base device"
  [store]="engine metadata proto disk base"
  [httpd]="base"
  [mdserver]="httpd base"
  [master]="mdserver httpd metadata proto base"
  [client]="store engine metadata proto disk httpd base"  # crescent-client (daemon-only)
  [compat]=""  # libcrescent-mooncake-compat: crescent's public headers only
)

bad=0
for layer in "${!ALLOWED[@]}"; do
  [ -d "src/$layer" ] || continue
  allowed=" $layer ${ALLOWED[$layer]} crescent "
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$line")
    case "$inc" in
      ../*|*/../*)
        echo "$file: includes \"$inc\" (climbs out of its layer with ..)"
        bad=1
        continue ;;
      */*) top=${inc%%/*} ;;
      *) continue ;; # same-directory include
    esac
    if [[ "$allowed" != *" $top "* ]]; then
      echo "$file: layer '$layer' includes \"$inc\" from layer '$top' (allowed: ${ALLOWED[$layer]:-none})"
      bad=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "src/$layer" \
             --include='*.c' --include='*.h' | sed -E 's/^([^:]*):[0-9]+:/\1:/')
done
for d in src/*/; do
  d=${d#src/}; d=${d%/}
  if [ -z "${ALLOWED[$d]+x}" ]; then
    echo "src/$d: a folder that is not in the layer table of scripts/check-layers.sh"
    bad=1
  fi
done
exit $bad
