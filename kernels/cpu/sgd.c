/* aq_sgd_momentum_f32: PyTorch's SGD update with momentum and weight decay. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int sgd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sgd_args_t *a = kernarg;
  if (!a->w || !a->grad || !a->velocity || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) {
    float g = a->grad[i] + a->weight_decay * a->w[i];
    float v = a->momentum * a->velocity[i] + g;
    a->velocity[i] = v;
    a->w[i] -= a->lr * v;
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_sgd_desc = {AQ_KERNEL_SGD, sgd, sizeof(aq_sgd_args_t), 8, 0, 0};
