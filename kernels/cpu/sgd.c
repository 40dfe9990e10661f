/* aq_sgd_momentum_f32: PyTorch's SGD update with momentum and weight decay,
 * vectorised per ISA (simd.h). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

AQ_INLINE void sgd_loop_body(float *w, const float *grad, float *vel, int64_t n, float lr, float momentum,
                             float wd) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] + wd * w[i];
    float v = momentum * vel[i] + g;
    vel[i] = v;
    w[i] -= lr * v;
  }
}
AQ_VECTORISE(sgd_loop, (float *w, const float *grad, float *vel, int64_t n, float lr, float momentum, float wd),
             (w, grad, vel, n, lr, momentum, wd))

static int sgd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sgd_args_t *a = kernarg;
  if (!a->w || !a->grad || !a->velocity || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  sgd_loop(a->w + lo, a->grad + lo, a->velocity + lo, hi - lo, a->lr, a->momentum, a->weight_decay);
  return 0;
}

const aq_kernel_desc_t aq_cpu_sgd_desc = {AQ_KERNEL_SGD, sgd, sizeof(aq_sgd_args_t), 8, 0, 0};
