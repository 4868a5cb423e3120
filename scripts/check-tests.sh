#!/usr/bin/env bash
# Every CTest entry is registered through cmake/crescent.cmake's cr_test() or
# cr_test_command() (exit 77 = skipped, a timeout, the environment): fail on
# an add_test() or a SKIP_RETURN_CODE set anywhere else, and on a test list
# that silently drops entries whose file is missing (if(EXISTS ...) under
# tests/). CTest: test_registration_check.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=$(git ls-files '*CMakeLists.txt' '*.cmake' 2>/dev/null | grep -v '^cmake/crescent.cmake$' |
  xargs grep -nE '^[^#]*\b(add_test|set_tests_properties)[[:space:]]*\(' || true)
if [ -n "$bad" ]; then
  echo "tests registered outside cr_test()/cr_test_command() (cmake/crescent.cmake):" >&2
  echo "$bad" >&2
  exit 1
fi
dropped=$(git ls-files 'tests/*CMakeLists.txt' | xargs grep -n 'if(EXISTS' || true)
if [ -n "$dropped" ]; then
  echo "a test list that skips missing files hides lost tests:" >&2
  echo "$dropped" >&2
  exit 1
fi
echo "test registration: every test goes through cr_test()/cr_test_command()"
