/* Layer norm over each row, forward and backward. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int layer_norm(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->y || !a->mean || !a->rstd || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r) {
    const float *x = a->x + r * a->cols;
    double s = 0, ss = 0;
    for (int64_t j = 0; j < a->cols; ++j) s += x[j];
    double mean = s / a->cols;
    for (int64_t j = 0; j < a->cols; ++j) ss += (x[j] - mean) * (x[j] - mean);
    float rstd = (float)(1.0 / sqrt(ss / a->cols + a->eps));
    a->mean[r] = (float)mean, a->rstd[r] = rstd;
    float *y = a->y + r * a->cols;
    for (int64_t j = 0; j < a->cols; ++j)
      y[j] = ((x[j] - (float)mean) * rstd) * (a->gamma ? a->gamma[j] : 1.0f) + (a->beta ? a->beta[j] : 0.0f);
  }
  return 0;
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
static int layer_norm_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->dx || !a->mean || !a->rstd || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r) {
    const float *x = a->x + r * a->cols, *dy = a->dy + r * a->cols;
    float mean = a->mean[r], rstd = a->rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < a->cols; ++j) {
      float g = dy[j] * (a->gamma ? a->gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
      sg += g, sgx += g * xh;
    }
    float mg = (float)(sg / a->cols), mgx = (float)(sgx / a->cols);
    float *dx = a->dx + r * a->cols;
    for (int64_t j = 0; j < a->cols; ++j) {
      float g = dy[j] * (a->gamma ? a->gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
      dx[j] = rstd * (g - mg - xh * mgx);
    }
  }
  return 0;
}

static int layer_norm_bwd_params(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->mean || !a->rstd || !a->dgamma || !a->dbeta || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->cols, &lo, &hi)) return 0;
  for (int64_t j = lo; j < hi; ++j) {
    double dg = 0, db = 0;
    for (int64_t r = 0; r < a->rows; ++r) {
      float dy = a->dy[r * a->cols + j];
      dg += dy * (a->x[r * a->cols + j] - a->mean[r]) * a->rstd[r];
      db += dy;
    }
    a->dgamma[j] = (float)dg, a->dbeta[j] = (float)db;
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_layer_norm_desc = {AQ_KERNEL_LAYER_NORM, layer_norm, sizeof(aq_layer_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_layer_norm_bwd_desc = {AQ_KERNEL_LAYER_NORM_BWD, layer_norm_bwd,
                                                     sizeof(aq_layer_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_layer_norm_bwd_params_desc = {AQ_KERNEL_LAYER_NORM_BWD_PARAMS, layer_norm_bwd_params,
                                                            sizeof(aq_layer_norm_args_t), 8, 0, 0};
