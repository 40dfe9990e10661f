/* aq_axpby_f32: z = alpha x + beta y, the elementwise add / sub / scale of
 * same-shaped tensors (broadcasting ones go through binary.c). */
#include <stddef.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

AQ_INLINE void axpby_loop_body(const float *x, const float *y, float *z, int64_t n, float alpha, float beta) {
  if (y)
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * x[i] + beta * y[i];
  else
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * x[i];
}
AQ_VECTORISE(axpby_loop, (const float *x, const float *y, float *z, int64_t n, float alpha, float beta),
             (x, y, z, n, alpha, beta))

static int axpby(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_axpby_args_t *a = kernarg;
  if (!a->x || !a->z || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  axpby_loop(a->x + lo, a->y ? a->y + lo : NULL, a->z + lo, hi - lo, a->alpha, a->beta);
  return 0;
}

const aq_kernel_desc_t aq_cpu_axpby_desc = {AQ_KERNEL_AXPBY, axpby, sizeof(aq_axpby_args_t), 8, 0, 0};
