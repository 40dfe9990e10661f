/* One loop, compiled three times: a hot loop's body is an always-inline
 * function `NAME_body`; AQ_VECTORISE(NAME, (params), (args)) defines
 * NAME(params), which calls the body compiled for AVX-512, for AVX2+FMA or
 * for the baseline, picked once from the CPU's features (aq_cpu_isa, so
 * AQ_CPU_ISA caps it for tests). The kernels are built without -march, so
 * this is what lets the compiler use wide vectors where the CPU has them. */
#ifndef AQ_KERNELS_CPU_SIMD_H_
#define AQ_KERNELS_CPU_SIMD_H_

#include "kernels/cpu/isa.h"

#define AQ_INLINE static inline __attribute__((always_inline))

/* Eight float lanes as a GCC vector: a ymm register where the body is
 * compiled for AVX2 or AVX-512, two xmm for the baseline. A reduction
 * that keeps its sums in a pair of these (lanes 0-7, 8-15) adds each of
 * its 16 lanes in order whatever the ISA, so its result is the same bit
 * for bit on every path; written as arrays of 16 instead, GCC vectorises
 * such loops across iterations with permutes. (Wider GCC vectors than the
 * target's registers go through the stack.) */
typedef float aq_f32x8 __attribute__((vector_size(32)));
/* The same, at any float's address (loads and stores through it). */
typedef float aq_f32x8u __attribute__((vector_size(32), aligned(4), may_alias));
#define AQ_LOAD8(p) (*(const aq_f32x8u *)(p))

/* Sixteen lanes' sum (lo's then hi's), added in lane order in double. */
AQ_INLINE double aq_lanes_sum(const aq_f32x8 *lo, const aq_f32x8 *hi) {
  double t = 0;
  for (int i = 0; i < 8; ++i) t += (*lo)[i];
  for (int i = 0; i < 8; ++i) t += (*hi)[i];
  return t;
}

#if defined(__x86_64__)
#define AQ_VECTORISE(name, params, args)                                                           \
  AQ_TARGET_AVX512 static void name##_avx512 params { name##_body args; }                          \
  AQ_TARGET_AVX2 static void name##_avx2 params { name##_body args; }                              \
  static void name##_generic params { name##_body args; }                                          \
  static void name params {                                                                        \
    static void(*fn_) params;                                                                      \
    void(*f_) params = __atomic_load_n(&fn_, __ATOMIC_RELAXED);                                    \
    if (!f_) {                                                                                     \
      aq_cpu_isa_t isa_ = aq_cpu_isa();                                                            \
      f_ = isa_ == AQ_CPU_ISA_AVX512 ? name##_avx512 : isa_ == AQ_CPU_ISA_AVX2 ? name##_avx2       \
                                                                               : name##_generic;   \
      __atomic_store_n(&fn_, f_, __ATOMIC_RELAXED);                                                \
    }                                                                                              \
    f_ args;                                                                                       \
  }
#else
#define AQ_VECTORISE(name, params, args) \
  static void name params { name##_body args; }
#endif

#endif
