#!/usr/bin/env bash
# Runs each Criterion test program and adds up their results. Usage:
#   tools/run-tests.sh BUILD_DIR PROGRAM...
# Exits non-zero if any test failed or crashed, or if a program did not run.
set -u
build=$1; shift
passed=0; failed=0; skipped=0; status=0
# The names of failed tests, repeated after the totals: CI shows only the
# tail of a run, and the failure is what a reader needs from it.
failures=()
# Programs to run; "--quick" after a program is passed to it.
progs=(); args=()
for a in "$@"; do
  if [ "$a" = --quick ]; then args[${#progs[@]}-1]="--quick"; else progs+=("$a"); args+=(""); fi
done
here=$(cd "$(dirname "$0")" && pwd)
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Absolute: the runtime warns about relative entries (they follow the working directory).
data=$(cd "$build/tests/data" 2>/dev/null && pwd || echo "$build/tests/data")
export AQ_CODE_OBJECT_PATH="$data${AQ_CODE_OBJECT_PATH:+:$AQ_CODE_OBJECT_PATH}"
# heft (the default placement) keeps performance models: the tests' go to
# the build tree, not the user's cache.
export AQ_PERF_DIR="${AQ_PERF_DIR:-$(cd "$build" && pwd)/perf-models}"
for i in "${!progs[@]}"; do
  prog=${progs[$i]}
  name=$(basename "$prog")
  echo "== $name"
  log=$(mktemp)
  if [ "$name" = stress ]; then
    "$prog" ${args[$i]} 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    line=$(grep -a '^stress: [0-9]* passed, [0-9]* failed' "$log" | tail -1)
    rm -f "$log"
    if [ -z "$line" ]; then echo "== stress: no summary (exit $rc)"; failed=$((failed + 1)); status=1; continue; fi
    p=$(sed -n 's/^stress: \([0-9]*\) passed.*/\1/p' <<<"$line")
    f=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
    [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] || { status=1; failures+=("stress: exit $rc, $f failed"); }
    continue
  fi
  "$prog" --jobs "${AQ_TEST_JOBS:-2}" --short-filename 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -a 'Synthesis:' "$log" | tail -1)
  # Criterion's "[FAIL] suite::test" lines and the assertion or crash lines
  # ("[----] file:line: ...") that precede them.
  while IFS= read -r l; do failures+=("$name: $l"); done < <(grep -a -E '^\[(FAIL|----)\]' "$log" | grep -a -v -E 'Synthesis|^\[----\] (Criterion|[[:space:]]*$)' | head -20)
  # A test whose setup or teardown exited (a sanitizer's report from a
  # worker thread, a crash in aq_shutdown) is one Criterion counts as
  # passing (its warning is among the failures' lines above).
  torn=$(grep -a -c 'exited during its setup or teardown' "$log")
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "== $name: no Criterion summary (exit $rc)"; failed=$((failed + 1)); status=1
    failures+=("$name: no Criterion summary (exit $rc)"); continue
  fi
  t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line")
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line")
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line")
  passed=$((passed + p - torn)); failed=$((failed + f + torn)) # Failing counts the crashes too
  [ "$torn" -eq 0 ] || status=1
  # Criterion leaves skipped tests out of its count: they are the listed
  # ones it did not test.
  listed=$("$prog" --list 2>/dev/null | grep -cE '(├|└)──')
  [ "$listed" -gt "$t" ] && skipped=$((skipped + listed - t))
  # Criterion exits 1 when any test was skipped, even with nothing failed:
  # a non-zero exit fails the run only if some test it ran did not pass.
  if [ "$f" -ne 0 ] || [ "$c" -ne 0 ] || { [ "$rc" -ne 0 ] && [ "$p" -ne "$t" ]; }; then status=1; fi
done
if [ "${#failures[@]}" -gt 0 ]; then
  echo "== what failed"
  printf '  %s\n' "${failures[@]}"
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
