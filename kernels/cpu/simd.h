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
