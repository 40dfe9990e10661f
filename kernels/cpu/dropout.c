/* Seeded dropout: the mask is a hash of (seed, index), so the backward and
 * any re-run with the same seed see the same mask without storing it. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int dropout(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_dropout_args_t *a = kernarg;
  if (!a->x || !a->y || a->n < 0 || !(a->p >= 0.0f && a->p < 1.0f)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  uint32_t cut = (uint32_t)((double)a->p * 4294967296.0);
  float scale = 1.0f / (1.0f - a->p);
  for (int64_t i = lo; i < hi; ++i) a->y[i] = aq_dropout_hash(a->seed, (uint64_t)i) >= cut ? a->x[i] * scale : 0.0f;
  return 0;
}

const aq_kernel_desc_t aq_cpu_dropout_desc = {AQ_KERNEL_DROPOUT, dropout, sizeof(aq_dropout_args_t), 8, 0, 0};
/* The backward is the same map applied to dy. */
const aq_kernel_desc_t aq_cpu_dropout_bwd_desc = {AQ_KERNEL_DROPOUT_BWD, dropout, sizeof(aq_dropout_args_t), 8, 0, 0};
