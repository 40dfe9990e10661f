/* Seeded dropout: the mask is a hash of (seed, index), so the backward and
 * any re-run with the same seed see the same mask without storing it. The
 * hash is plain integer arithmetic, vectorised per ISA (simd.h). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

AQ_INLINE void dropout_loop_body(const float *x, float *y, int64_t lo, int64_t n, uint64_t seed, uint32_t cut,
                                 float scale) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = aq_dropout_hash(seed, (uint64_t)(lo + i)) >= cut ? x[i] * scale : 0.0f;
}
AQ_VECTORISE(dropout_loop,
             (const float *x, float *y, int64_t lo, int64_t n, uint64_t seed, uint32_t cut, float scale),
             (x, y, lo, n, seed, cut, scale))

static int dropout(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_dropout_args_t *a = kernarg;
  if (!a->x || !a->y || a->n < 0 || !(a->p >= 0.0f && a->p < 1.0f)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  uint32_t cut = (uint32_t)((double)a->p * 4294967296.0);
  float scale = 1.0f / (1.0f - a->p);
  dropout_loop(a->x + lo, a->y + lo, lo, hi - lo, a->seed, cut, scale);
  return 0;
}

const aq_kernel_desc_t aq_cpu_dropout_desc = {AQ_KERNEL_DROPOUT, dropout, sizeof(aq_dropout_args_t), 8, 0, 0};
/* The backward is the same map applied to dy. */
const aq_kernel_desc_t aq_cpu_dropout_bwd_desc = {AQ_KERNEL_DROPOUT_BWD, dropout, sizeof(aq_dropout_args_t), 8, 0, 0};
