#!/usr/bin/env bash
# Is every C file formatted with the committed .clang-format? Exit 0 when
# it is, 1 listing the files that are not (fix: clang-format -i <file>), 77
# when clang-format is not installed (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format not installed"; exit 77; }
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tools tests fuzz python/src -name '*.[ch]')
out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1 | grep -E '^[^ ]+\.[ch]:[0-9]+' | cut -d: -f1 | sort -u || true)
if [ -n "$out" ]; then
  echo "not clang-formatted:"; echo "$out"; exit 1
fi
echo "${#files[@]} files formatted"
