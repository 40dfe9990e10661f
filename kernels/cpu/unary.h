/* The loop every pointwise activation shares: f is inlined per kernel. */
#ifndef AQ_KERNELS_CPU_UNARY_H_
#define AQ_KERNELS_CPU_UNARY_H_

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"

#define AQ_UNARY_KERNEL(fname, expr)                                        \
  static int fname(const void *kernarg, const aq_dispatch_ctx_t *ctx) {     \
    const aq_unary_args_t *a = kernarg;                                     \
    if (!a->x || !a->y || a->n < 0) return 1;                               \
    int64_t lo, hi;                                                         \
    if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;                     \
    for (int64_t i = lo; i < hi; ++i) {                                     \
      float x = a->x[i];                                                    \
      a->y[i] = (expr);                                                     \
    }                                                                       \
    return 0;                                                               \
  }

#define AQ_UNARY_BWD_KERNEL(fname, expr)                                    \
  static int fname(const void *kernarg, const aq_dispatch_ctx_t *ctx) {     \
    const aq_unary_args_t *a = kernarg;                                     \
    if (!a->x || !a->dy || !a->y || a->n < 0) return 1;                     \
    int64_t lo, hi;                                                         \
    if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;                     \
    for (int64_t i = lo; i < hi; ++i) {                                     \
      float x = a->x[i], dy = a->dy[i];                                     \
      a->y[i] = (expr);                                                     \
    }                                                                       \
    return 0;                                                               \
  }

#endif
