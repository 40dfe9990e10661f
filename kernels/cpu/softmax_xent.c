/* aq_softmax_xent_f32: softmax cross-entropy with integer labels, one row
 * per work-item; the backward turns the saved softmax into dlogits (and the
 * forward does too, given dlogits). */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/vmath.h"

/* One row's softmax into p; returns log(sum exp(x - max)) through *lse and
 * the max through *mx. Vectorised per ISA. */
AQ_INLINE void xent_row_body(const float *x, float *p, int64_t n, float *mx_out, float *lse_out) {
  /* Each exponential once: kept in p, then scaled (the same values and sum
   * as computing them twice). */
  float mx = aq_row_max(x, n), sum = aq_row_exp_sum(x, p, n, mx), inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) p[j] *= inv;
  *mx_out = mx, *lse_out = logf(sum);
}
AQ_VECTORISE(xent_row, (const float *x, float *p, int64_t n, float *mx, float *lse), (x, p, n, mx, lse))

/* One row's gradient from its softmax p. */
static void grad_row(const float *p, float *d, int64_t n, int32_t label, float scale) {
  for (int64_t j = 0; j < n; ++j) d[j] = p[j] * scale;
  d[label] -= scale;
}

static int xent(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_softmax_xent_args_t *a = kernarg;
  if (!a->logits || !a->labels || !a->probs || !a->loss || a->rows < 0 || a->classes <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r) {
    const float *x = a->logits + r * a->classes;
    float *p = a->probs + r * a->classes;
    int32_t label = a->labels[r];
    if (label < 0 || label >= a->classes) return 2;
    float mx, lse;
    xent_row(x, p, a->classes, &mx, &lse);
    a->loss[r] = lse - (x[label] - mx);
    if (a->dlogits) grad_row(p, a->dlogits + r * a->classes, a->classes, label, a->scale);
  }
  return 0;
}

static int xent_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_softmax_xent_args_t *a = kernarg;
  if (!a->labels || !a->probs || !a->dlogits || a->rows < 0 || a->classes <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r) {
    int32_t label = a->labels[r];
    if (label < 0 || label >= a->classes) return 2;
    grad_row(a->probs + r * a->classes, a->dlogits + r * a->classes, a->classes, label, a->scale);
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_softmax_xent_desc = {AQ_KERNEL_SOFTMAX_XENT, xent, sizeof(aq_softmax_xent_args_t),
                                                   8, 0, 0};
const aq_kernel_desc_t aq_cpu_softmax_xent_bwd_desc = {AQ_KERNEL_SOFTMAX_XENT_BWD, xent_bwd,
                                                       sizeof(aq_softmax_xent_args_t), 8, 0, 0};
