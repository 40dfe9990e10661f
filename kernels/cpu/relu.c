/* aq_relu_f32 and its backward. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int relu(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_relu_args_t *a = kernarg;
  if (!a->x || !a->y || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) a->y[i] = a->x[i] > 0.0f ? a->x[i] : 0.0f;
  return 0;
}

static int relu_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_relu_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->y || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) a->y[i] = a->x[i] > 0.0f ? a->dy[i] : 0.0f;
  return 0;
}

const aq_kernel_desc_t aq_cpu_relu_desc = {AQ_KERNEL_RELU, relu, sizeof(aq_relu_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_relu_bwd_desc = {AQ_KERNEL_RELU_BWD, relu_bwd, sizeof(aq_relu_args_t), 8, 0, 0};
