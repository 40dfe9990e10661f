#!/usr/bin/env bash
# Fails if libaquila (the static archive or the shared library) defines a
# global symbol without the aq_ prefix. The rule: the public API is aq_*
# (include/aquila), and every internal symbol one file shares with another
# is aq_* too (hidden in the .so by -fvisibility=hidden, but visible to
# whoever links the .a); anything else is static. tools/prefix-symbols.sh
# renames offenders.
#   tools/check-symbols.sh BUILD_DIR
set -u
build=${1:-build}
status=0
for lib in "$build/lib/libaquila.a" "$build/lib/libaquila.so"; do
  [ -e "$lib" ] || { echo "check-symbols: no $lib"; status=1; continue; }
  if [ "${lib##*.}" = so ]; then list=$(nm -D --defined-only "$lib"); else list=$(nm -g --defined-only "$lib"); fi
  bad=$(awk 'NF == 3 && $3 !~ /^aq_/ && $2 !~ /^[wWvV]$/ { print $3 }' <<<"$list" | sort -u)
  # The loader's and the toolchain's own (_init, _fini, __bss_start...),
  # and what a sanitizer build adds beside each global (__odr_asan.aq_...).
  bad=$(grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$|^__(odr_asan|asan|tsan|ubsan)' <<<"$bad" || true)
  if [ -n "$bad" ]; then
    echo "check-symbols: $lib defines $(wc -l <<<"$bad") globals without the aq_ prefix:"
    sed 's/^/  /' <<<"$bad"
    status=1
  else
    echo "check-symbols: $lib: every global is aq_*"
  fi
done
exit $status
