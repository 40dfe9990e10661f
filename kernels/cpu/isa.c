/* CPU feature detection for the kernels' run-time dispatch. */
#include "kernels/cpu/isa.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

aq_cpu_isa_t aq_cpu_isa(void) {
  static int cached = -1; /* workers may race here; they compute the same value */
  int seen = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (seen >= 0) return (aq_cpu_isa_t)seen;
  aq_cpu_isa_t isa = AQ_CPU_ISA_GENERIC;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("popcnt"))
    isa = AQ_CPU_ISA_AVX2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt"))
    isa = AQ_CPU_ISA_AVX512;
#endif
  uint32_t cap = aq_cpu_settings()->cpu_isa; /* AQ_CPU_ISA: 0 widest, 1 avx512, 2 avx2, 3 generic */
  if (cap) {
    aq_cpu_isa_t want = cap == 3 ? AQ_CPU_ISA_GENERIC : cap == 2 ? AQ_CPU_ISA_AVX2 : AQ_CPU_ISA_AVX512;
    if (want < isa) isa = want;
  }
  __atomic_store_n(&cached, (int)isa, __ATOMIC_RELAXED);
  return isa;
}

unsigned aq_cpu_amd_family(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth" enticAMD */ || !__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  unsigned base = (a >> 8) & 0xf;
  return base + (base == 0xf ? (a >> 20) & 0xff : 0);
#else
  return 0;
#endif
}
