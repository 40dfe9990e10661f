/* Run-time choice of the vector ISA a kernel's hot loop uses. Kernels are
 * compiled for the baseline x86-64; the wide paths are functions with a
 * target attribute, picked once from the CPU's features. */
#ifndef AQ_KERNELS_CPU_ISA_H_
#define AQ_KERNELS_CPU_ISA_H_

#include "kernels/cpu/settings.h"

typedef enum aq_cpu_isa {
  AQ_CPU_ISA_GENERIC = 0,
  AQ_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + BMI2 (every AVX2 CPU has the last) */
  AQ_CPU_ISA_AVX512 = 2, /* AVX-512 F */
} aq_cpu_isa_t;

#define AQ_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2")))
#define AQ_TARGET_AVX2 __attribute__((target("avx2,fma")))

/* The widest ISA this CPU runs, capped by AQ_CPU_ISA=generic|avx2|avx512 so
 * tests can exercise every path on one machine. */
aq_cpu_isa_t aq_cpu_isa(void);

/* The CPU's family if it is an AMD one (0x19: Zen 3 and Zen 4, 0x1a: Zen
 * 5), else 0: where the cores' cost of a multiply-add against a load picks
 * a kernel. */
unsigned aq_cpu_amd_family(void);

#endif
