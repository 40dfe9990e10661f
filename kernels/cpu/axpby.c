/* aq_axpby_f32: z = alpha x + beta y, the elementwise add / sub / scale. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int axpby(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_axpby_args_t *a = kernarg;
  if (!a->x || !a->z || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  if (a->y)
    for (int64_t i = lo; i < hi; ++i) a->z[i] = a->alpha * a->x[i] + a->beta * a->y[i];
  else
    for (int64_t i = lo; i < hi; ++i) a->z[i] = a->alpha * a->x[i];
  return 0;
}

const aq_kernel_desc_t aq_cpu_axpby_desc = {AQ_KERNEL_AXPBY, axpby, sizeof(aq_axpby_args_t), 8, 0, 0};
