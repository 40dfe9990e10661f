#!/usr/bin/env bash
# Installs Aquila into a temporary PREFIX, then builds a program outside the
# tree from the installed copy with pkg-config alone, twice: linked with
# libaquila.so, and with libaquila.a. Each must start (no LD_LIBRARY_PATH, no
# AQ_CODE_OBJECT_PATH, from another directory), find the installed
# kernels-cpu.so and run a kernel of it. Prints "install: ok" at the end.
#   tools/test-install.sh [BUILD_DIR]
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
if ! make -s -C "$root" BUILD="$build" install PREFIX="$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "install: make install PREFIX=$prefix failed"
  exit 1
fi
mkdir "$tmp/outside"
cat >"$tmp/outside/prog.c" <<'C'
#include <stdio.h>
#include <string.h>

#include <aquila/aquila.h>

int main(int argc, char **argv) {
  (void)argc;
  aq_agent_t cpu;
  size_t n;
  aq_code_object_t co;
  aq_code_object_info_t info;
  aq_kernel_info_t k;
  aq_queue_t q;
  aq_signal_t done;
  if (aq_init(NULL) != AQ_OK || aq_agents(&cpu, 1, &n) != AQ_OK || aq_code_object_load("kernels-cpu.so", &co) != AQ_OK ||
      aq_code_object_get_info(co, &info) != AQ_OK || aq_code_object_find_kernel(co, "aq_noop", cpu, &k) != AQ_OK ||
      aq_queue_create(cpu, NULL, &q) != AQ_OK || aq_signal_create(1, &done) != AQ_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], aq_last_error());
    return 1;
  }
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1;
  p.workgroup_size_x = p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = k.kernel_object;
  p.completion_signal.handle = done.handle;
  if (aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL) != AQ_OK ||
      aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10ull * 1000000000ull, NULL) != AQ_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], aq_last_error());
    return 1;
  }
  printf("code object %s\n", info.path);
  return aq_shut_down() == AQ_OK ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cd "$tmp/outside"
# shellcheck disable=SC2046
cc -o prog-shared prog.c $(pkg-config --cflags --libs aquila)
# libaquila.a itself, then what it needs (pkg-config --static: Libs.private
# and the Requires.private packages' libraries).
libdir=$(pkg-config --variable=libdir aquila)
# shellcheck disable=SC2046
cc -o prog-static prog.c $(pkg-config --cflags aquila) "$libdir/libaquila.a" \
  $(pkg-config --static --libs aquila | sed 's/\(^\| \)-laquila\( \|$\)/ /')
if readelf -d prog-static | grep -q 'libaquila'; then
  echo "install: prog-static needs libaquila.so"
  exit 1
fi
status=0
for prog in prog-shared prog-static; do
  out=$(cd / && env -u LD_LIBRARY_PATH -u AQ_CODE_OBJECT_PATH "$tmp/outside/$prog" 2>&1) || true
  if [ "$out" = "code object $prefix/lib/aquila/kernels-cpu.so" ]; then
    echo "install: $prog ran and found $prefix/lib/aquila/kernels-cpu.so"
  else
    echo "install: $prog: $out"
    status=1
  fi
done
[ $status -eq 0 ] && echo "install: ok"
exit $status
