/* Batch norm per channel over (n, h, w): training (batch statistics, running
 * statistics updated), inference, and the backward. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int batch_norm(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->y || !a->running_mean || !a->running_var || a->n <= 0 || a->c <= 0 || a->hw <= 0) return 1;
  if (a->training && (!a->mean || !a->rstd)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c, &lo, &hi)) return 0;
  double m = (double)(a->n * a->hw);
  for (int64_t c = lo; c < hi; ++c) {
    double mean, var;
    if (a->training) {
      double s = 0, ss = 0;
      for (int64_t n = 0; n < a->n; ++n)
        for (int64_t i = 0; i < a->hw; ++i) s += a->x[(n * a->c + c) * a->hw + i];
      mean = s / m;
      for (int64_t n = 0; n < a->n; ++n)
        for (int64_t i = 0; i < a->hw; ++i) {
          double d = a->x[(n * a->c + c) * a->hw + i] - mean;
          ss += d * d;
        }
      var = ss / m;
      a->mean[c] = (float)mean, a->rstd[c] = (float)(1.0 / sqrt(var + a->eps));
      a->running_mean[c] = (1.0f - a->momentum) * a->running_mean[c] + a->momentum * (float)mean;
      a->running_var[c] = (1.0f - a->momentum) * a->running_var[c] + a->momentum * (float)(var * m / (m > 1 ? m - 1 : 1));
    } else {
      mean = a->running_mean[c], var = a->running_var[c];
    }
    float rstd = (float)(1.0 / sqrt(var + a->eps)), g = a->gamma ? a->gamma[c] : 1.0f, b = a->beta ? a->beta[c] : 0.0f;
    for (int64_t n = 0; n < a->n; ++n)
      for (int64_t i = 0; i < a->hw; ++i) {
        int64_t o = (n * a->c + c) * a->hw + i;
        a->y[o] = ((a->x[o] - (float)mean) * rstd) * g + b;
      }
  }
  return 0;
}

/* dx = g rstd / M (M dy - sum dy - xhat sum(dy xhat)). */
static int batch_norm_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->dx || !a->mean || !a->rstd || !a->dgamma || !a->dbeta || a->n <= 0 || a->c <= 0 ||
      a->hw <= 0)
    return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c, &lo, &hi)) return 0;
  double m = (double)(a->n * a->hw);
  for (int64_t c = lo; c < hi; ++c) {
    float mean = a->mean[c], rstd = a->rstd[c], g = a->gamma ? a->gamma[c] : 1.0f;
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < a->n; ++n)
      for (int64_t i = 0; i < a->hw; ++i) {
        int64_t o = (n * a->c + c) * a->hw + i;
        sdy += a->dy[o], sdyx += a->dy[o] * (a->x[o] - mean) * rstd;
      }
    a->dgamma[c] = (float)sdyx, a->dbeta[c] = (float)sdy;
    for (int64_t n = 0; n < a->n; ++n)
      for (int64_t i = 0; i < a->hw; ++i) {
        int64_t o = (n * a->c + c) * a->hw + i;
        float xh = (a->x[o] - mean) * rstd;
        a->dx[o] = (float)(g * rstd / m * (m * a->dy[o] - sdy - xh * sdyx));
      }
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_batch_norm_desc = {AQ_KERNEL_BATCH_NORM, batch_norm, sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_bwd_desc = {AQ_KERNEL_BATCH_NORM_BWD, batch_norm_bwd,
                                                     sizeof(aq_batch_norm_args_t), 8, 0, 0};
