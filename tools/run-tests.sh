#!/usr/bin/env bash
# Runs each Criterion test program and adds up their results. Usage:
#   tools/run-tests.sh BUILD_DIR PROGRAM...
# Exits non-zero if any test failed or crashed, or if a program did not run.
set -u
build=$1; shift
passed=0; failed=0; skipped=0; status=0
export AQ_CODE_OBJECT_PATH="$build/tests/data${AQ_CODE_OBJECT_PATH:+:$AQ_CODE_OBJECT_PATH}"
for prog in "$@"; do
  name=$(basename "$prog")
  echo "== $name"
  log=$(mktemp)
  "$prog" --jobs "${AQ_TEST_JOBS:-2}" --short-filename 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -a 'Synthesis:' "$log" | tail -1)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "== $name: no Criterion summary (exit $rc)"; failed=$((failed + 1)); status=1; continue
  fi
  t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line")
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line")
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line")
  passed=$((passed + p)); failed=$((failed + f + c))
  [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$c" -eq 0 ] || status=1
  : "$t"
done
echo "tests: $passed passed, $failed failed"
exit $status
