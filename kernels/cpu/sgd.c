/* aq_sgd_momentum_f32: PyTorch's SGD update with momentum and weight decay,
 * vectorised per ISA (simd.h). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/update.h"

/* Rows of n elements (strides ld*): the standalone kernel's one range, or
 * a GEMM tile's rows when fused (update.h). */
AQ_INLINE void sgd_rows_body(int64_t rows, int64_t n, float *w, int64_t ldw, const float *grad, int64_t ldg,
                             float *vel, int64_t ldv, float lr, float momentum, float wd) {
  for (int64_t r = 0; r < rows; ++r, w += ldw, grad += ldg, vel += ldv)
    for (int64_t i = 0; i < n; ++i) {
      float g = grad[i] + wd * w[i];
      float v = momentum * vel[i] + g;
      vel[i] = v;
      w[i] -= lr * v;
    }
}
AQ_VECTORISE(sgd_rows,
             (int64_t rows, int64_t n, float *w, int64_t ldw, const float *grad, int64_t ldg, float *vel, int64_t ldv,
              float lr, float momentum, float wd),
             (rows, n, w, ldw, grad, ldg, vel, ldv, lr, momentum, wd))

void cpu_sgd_update(int64_t rows, int64_t cols, float *w, int64_t ldw, const float *grad, int64_t ldg,
                    float *velocity, int64_t ldv, float lr, float momentum, float wd) {
  sgd_rows(rows, cols, w, ldw, grad, ldg, velocity, ldv, lr, momentum, wd);
}

static int sgd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sgd_args_t *a = kernarg;
  if (!a->w || !a->grad || !a->velocity || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  sgd_rows(1, hi - lo, a->w + lo, 0, a->grad + lo, 0, a->velocity + lo, 0, a->lr, a->momentum, a->weight_decay);
  return 0;
}

/* Work-group g updates the entry its index falls in (ops.h). */
static int sgd_multi(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sgd_multi_args_t *a = kernarg;
  if (a->count < 1 || a->count > AQ_SGD_MULTI_MAX) return 1;
  int64_t w = ctx->workgroup_size[0] ? ctx->workgroup_size[0] : 1, g = ctx->group_id[0];
  for (int32_t k = 0; k < a->count; ++k) {
    const aq_sgd_args_t *s = &a->t[k];
    if (!s->w || !s->grad || !s->velocity || s->n < 0) return 1;
    int64_t groups = (s->n + w - 1) / w;
    if (g >= groups) {
      g -= groups;
      continue;
    }
    int64_t lo = g * w, hi = lo + w < s->n ? lo + w : s->n;
    sgd_rows(1, hi - lo, s->w + lo, 0, s->grad + lo, 0, s->velocity + lo, 0, s->lr, s->momentum, s->weight_decay);
    return 0;
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_sgd_desc = {AQ_KERNEL_SGD, sgd, sizeof(aq_sgd_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_sgd_multi_desc = {AQ_KERNEL_SGD_MULTI, sgd_multi, sizeof(aq_sgd_multi_args_t), 8, 0, 0};
