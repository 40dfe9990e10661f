/* The loop every pointwise activation shares: the expression is inlined
 * into a loop that AQ_VECTORISE compiles for AVX-512, AVX2 and the
 * baseline (vmath.h's functions keep it free of libm calls). */
#ifndef AQ_KERNELS_CPU_UNARY_H_
#define AQ_KERNELS_CPU_UNARY_H_

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vmath.h"

#define AQ_UNARY_KERNEL(fname, expr)                                                          \
  AQ_INLINE void fname##_loop_body(const float *xs, float *ys, int64_t n) {                   \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      float x = xs[i];                                                                        \
      ys[i] = (expr);                                                                         \
    }                                                                                         \
  }                                                                                           \
  AQ_VECTORISE(fname##_loop, (const float *xs, float *ys, int64_t n), (xs, ys, n))           \
  static int fname(const void *kernarg, const aq_dispatch_ctx_t *ctx) {                       \
    const aq_unary_args_t *a = kernarg;                                                       \
    if (!a->x || !a->y || a->n < 0) return 1;                                                 \
    int64_t lo, hi;                                                                           \
    if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;                                       \
    fname##_loop(a->x + lo, a->y + lo, hi - lo);                                              \
    return 0;                                                                                 \
  }

#define AQ_UNARY_BWD_KERNEL(fname, expr)                                                      \
  AQ_INLINE void fname##_loop_body(const float *xs, const float *dys, float *ys, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      float x = xs[i], dy = dys[i];                                                           \
      ys[i] = (expr);                                                                         \
    }                                                                                         \
  }                                                                                           \
  AQ_VECTORISE(fname##_loop, (const float *xs, const float *dys, float *ys, int64_t n),      \
               (xs, dys, ys, n))                                                              \
  static int fname(const void *kernarg, const aq_dispatch_ctx_t *ctx) {                       \
    const aq_unary_args_t *a = kernarg;                                                       \
    if (!a->x || !a->dy || !a->y || a->n < 0) return 1;                                       \
    int64_t lo, hi;                                                                           \
    if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;                                       \
    fname##_loop(a->x + lo, a->dy + lo, a->y + lo, hi - lo);                                  \
    return 0;                                                                                 \
  }

#endif
