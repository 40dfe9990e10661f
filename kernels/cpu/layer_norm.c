/* Layer norm over each row, forward and backward, each row's loops
 * vectorised per ISA (simd.h): statistics in 16 float lanes summed in double,
 * the parameter gradients a column per lane. */
#include <math.h>
#include <stddef.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

/* sum(x - shift) or sum((x - shift)^2), 16 lanes then double. */
AQ_INLINE double lane_sum(const float *x, int64_t n, float shift, int squares) {
  float s[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int t = 0; t < 16; ++t) {
      float d = x[j + t] - shift;
      s[t] += squares ? d * d : d;
    }
  double tot = 0;
  for (int t = 0; t < 16; ++t) tot += s[t];
  for (; j < n; ++j) {
    double d = (double)x[j] - shift;
    tot += squares ? d * d : d;
  }
  return tot;
}

AQ_INLINE void row_fwd_body(const float *x, float *y, int64_t n, const float *gamma, const float *beta, float eps,
                            float *mean_out, float *rstd_out) {
  double mean = lane_sum(x, n, 0.0f, 0) / (double)n;
  double var = lane_sum(x, n, (float)mean, 1) / (double)n;
  float m = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
  *mean_out = m, *rstd_out = rstd;
  if (gamma && beta)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rstd * gamma[j] + beta[j];
  else if (gamma)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rstd * gamma[j];
  else if (beta)
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rstd + beta[j];
  else
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * rstd;
}
AQ_VECTORISE(row_fwd,
             (const float *x, float *y, int64_t n, const float *gamma, const float *beta, float eps, float *mean,
              float *rstd),
             (x, y, n, gamma, beta, eps, mean, rstd))

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
AQ_INLINE void row_bwd_body(const float *x, const float *dy, float *dx, int64_t n, const float *gamma, float mean,
                            float rstd) {
  float sg[16] = {0}, sgx[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int t = 0; t < 16; ++t) {
      float g = dy[j + t] * (gamma ? gamma[j + t] : 1.0f), xh = (x[j + t] - mean) * rstd;
      sg[t] += g, sgx[t] += g * xh;
    }
  double a = 0, b = 0;
  for (int t = 0; t < 16; ++t) a += sg[t], b += sgx[t];
  for (; j < n; ++j) {
    float g = dy[j] * (gamma ? gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
    a += g, b += (double)g * xh;
  }
  float mg = (float)(a / (double)n), mgx = (float)(b / (double)n);
  for (j = 0; j < n; ++j) {
    float g = dy[j] * (gamma ? gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
    dx[j] = rstd * (g - mg - xh * mgx);
  }
}
AQ_VECTORISE(row_bwd,
             (const float *x, const float *dy, float *dx, int64_t n, const float *gamma, float mean, float rstd),
             (x, dy, dx, n, gamma, mean, rstd))

/* dgamma[j] += dy xhat, dbeta[j] += dy over one row, for columns [0, n). */
AQ_INLINE void row_params_body(const float *x, const float *dy, int64_t n, float mean, float rstd, double *dg,
                               double *db) {
  for (int64_t j = 0; j < n; ++j) {
    dg[j] += (double)(dy[j] * (x[j] - mean) * rstd);
    db[j] += (double)dy[j];
  }
}
AQ_VECTORISE(row_params,
             (const float *x, const float *dy, int64_t n, float mean, float rstd, double *dg, double *db),
             (x, dy, n, mean, rstd, dg, db))

static int layer_norm(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->y || !a->mean || !a->rstd || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r)
    row_fwd(a->x + r * a->cols, a->y + r * a->cols, a->cols, a->gamma, a->beta, a->eps, &a->mean[r], &a->rstd[r]);
  return 0;
}

static int layer_norm_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->dx || !a->mean || !a->rstd || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->rows, &lo, &hi)) return 0;
  for (int64_t r = lo; r < hi; ++r)
    row_bwd(a->x + r * a->cols, a->dy + r * a->cols, a->dx + r * a->cols, a->cols, a->gamma, a->mean[r], a->rstd[r]);
  return 0;
}

/* A work-group's columns, every row: rows outer so each row is read once,
 * contiguously. */
static int layer_norm_bwd_params(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_layer_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->mean || !a->rstd || !a->dgamma || !a->dbeta || a->rows < 0 || a->cols <= 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->cols, &lo, &hi)) return 0;
  enum { CHUNK = 256 };
  double dg[CHUNK], db[CHUNK];
  for (int64_t c0 = lo; c0 < hi; c0 += CHUNK) {
    int64_t n = hi - c0 < CHUNK ? hi - c0 : CHUNK;
    for (int64_t j = 0; j < n; ++j) dg[j] = db[j] = 0.0;
    for (int64_t r = 0; r < a->rows; ++r)
      row_params(a->x + r * a->cols + c0, a->dy + r * a->cols + c0, n, a->mean[r], a->rstd[r], dg, db);
    for (int64_t j = 0; j < n; ++j) a->dgamma[c0 + j] = (float)dg[j], a->dbeta[c0 + j] = (float)db[j];
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_layer_norm_desc = {AQ_KERNEL_LAYER_NORM, layer_norm, sizeof(aq_layer_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_layer_norm_bwd_desc = {AQ_KERNEL_LAYER_NORM_BWD, layer_norm_bwd,
                                                     sizeof(aq_layer_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_layer_norm_bwd_params_desc = {AQ_KERNEL_LAYER_NORM_BWD_PARAMS, layer_norm_bwd_params,
                                                            sizeof(aq_layer_norm_args_t), 8, 0, 0};
