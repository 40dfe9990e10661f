/* aq_adam_f32 (Adam and AdamW) and aq_increment_f32, its step counter. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int adam(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_adam_args_t *a = kernarg;
  if (!a->w || !a->grad || !a->m || !a->v || !a->steps || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  float t = a->steps[0] + 1.0f;
  float c1 = 1.0f - powf(a->beta1, t), c2 = 1.0f - powf(a->beta2, t);
  for (int64_t i = lo; i < hi; ++i) {
    float g = a->grad[i] + (a->decoupled ? 0.0f : a->weight_decay * a->w[i]);
    float m = a->beta1 * a->m[i] + (1.0f - a->beta1) * g;
    float v = a->beta2 * a->v[i] + (1.0f - a->beta2) * g * g;
    a->m[i] = m, a->v[i] = v;
    float step = (m / c1) / (sqrtf(v / c2) + a->eps);
    a->w[i] -= a->lr * (step + (a->decoupled ? a->weight_decay * a->w[i] : 0.0f));
  }
  return 0;
}

static int increment(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)ctx;
  const aq_increment_args_t *a = kernarg;
  if (!a->x) return 1;
  a->x[0] += 1.0f;
  return 0;
}

const aq_kernel_desc_t aq_cpu_adam_desc = {AQ_KERNEL_ADAM, adam, sizeof(aq_adam_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_increment_desc = {AQ_KERNEL_INCREMENT, increment, sizeof(aq_increment_args_t), 8, 0, 0};
