/* Batch norm per channel over (n, h, w): training (batch statistics, running
 * statistics updated), inference, and the backward. A channel is n planes of
 * hw contiguous floats; each plane goes through a loop vectorised per ISA
 * (simd.h), partial sums in 16 lanes, plane totals added in double. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

/* out[0] += sum(x), or out[0] += sum((x - shift)^2) when squares. */
AQ_INLINE void plane_sum_body(const float *x, int64_t n, float shift, int squares, double *out) {
  float s[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int t = 0; t < 16; ++t) {
      float d = x[i + t] - shift;
      s[t] += squares ? d * d : d;
    }
  double tot = 0;
  for (int t = 0; t < 16; ++t) tot += s[t];
  for (; i < n; ++i) {
    double d = (double)x[i] - shift;
    tot += squares ? d * d : d;
  }
  *out += tot;
}
AQ_VECTORISE(plane_sum, (const float *x, int64_t n, float shift, int squares, double *out),
             (x, n, shift, squares, out))

/* out[0] += sum(dy), out[1] += sum(dy (x - mean)). */
AQ_INLINE void plane_dsum_body(const float *dy, const float *x, int64_t n, float mean, double *out) {
  float s[16] = {0}, sx[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int t = 0; t < 16; ++t) s[t] += dy[i + t], sx[t] += dy[i + t] * (x[i + t] - mean);
  double a = 0, b = 0;
  for (int t = 0; t < 16; ++t) a += s[t], b += sx[t];
  for (; i < n; ++i) a += dy[i], b += (double)dy[i] * (x[i] - mean);
  out[0] += a, out[1] += b;
}
AQ_VECTORISE(plane_dsum, (const float *dy, const float *x, int64_t n, float mean, double *out), (dy, x, n, mean, out))

/* y = p * x + q (the normalisation folded into one multiply-add). */
AQ_INLINE void plane_affine_body(const float *x, float *y, int64_t n, float p, float q) {
  for (int64_t i = 0; i < n; ++i) y[i] = p * x[i] + q;
}
AQ_VECTORISE(plane_affine, (const float *x, float *y, int64_t n, float p, float q), (x, y, n, p, q))

/* dx = k_dy dy + k_x x + k. */
AQ_INLINE void plane_dx_body(const float *dy, const float *x, float *dx, int64_t n, float k_dy, float k_x, float k) {
  for (int64_t i = 0; i < n; ++i) dx[i] = k_dy * dy[i] + k_x * x[i] + k;
}
AQ_VECTORISE(plane_dx, (const float *dy, const float *x, float *dx, int64_t n, float k_dy, float k_x, float k),
             (dy, x, dx, n, k_dy, k_x, k))

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
      for (int64_t n = 0; n < a->n; ++n) plane_sum(a->x + (n * a->c + c) * a->hw, a->hw, 0.0f, 0, &s);
      mean = s / m;
      for (int64_t n = 0; n < a->n; ++n) plane_sum(a->x + (n * a->c + c) * a->hw, a->hw, (float)mean, 1, &ss);
      var = ss / m;
      a->mean[c] = (float)mean, a->rstd[c] = (float)(1.0 / sqrt(var + a->eps));
      a->running_mean[c] = (1.0f - a->momentum) * a->running_mean[c] + a->momentum * (float)mean;
      a->running_var[c] = (1.0f - a->momentum) * a->running_var[c] + a->momentum * (float)(var * m / (m > 1 ? m - 1 : 1));
    } else {
      mean = a->running_mean[c], var = a->running_var[c];
    }
    float rstd = (float)(1.0 / sqrt(var + a->eps)), g = a->gamma ? a->gamma[c] : 1.0f, b = a->beta ? a->beta[c] : 0.0f;
    float p = rstd * g, q = b - (float)mean * rstd * g;
    for (int64_t n = 0; n < a->n; ++n) {
      int64_t o = (n * a->c + c) * a->hw;
      plane_affine(a->x + o, a->y + o, a->hw, p, q);
    }
  }
  return 0;
}

/* dx = g rstd / M (M dy - sum dy - xhat sum(dy xhat)), with xhat = (x - mean)
 * rstd, folded into dx = k_dy dy + k_x x + k. */
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
    double sums[2] = {0, 0};
    for (int64_t n = 0; n < a->n; ++n) {
      int64_t o = (n * a->c + c) * a->hw;
      plane_dsum(a->dy + o, a->x + o, a->hw, mean, sums);
    }
    double sdy = sums[0], sdyx = sums[1] * rstd; /* sum(dy xhat) */
    a->dgamma[c] = (float)sdyx, a->dbeta[c] = (float)sdy;
    double kg = (double)g * rstd;
    float k_dy = (float)kg, k_x = (float)(-kg * rstd * sdyx / m);
    float k = (float)(-kg * sdy / m + kg * rstd * sdyx / m * mean);
    for (int64_t n = 0; n < a->n; ++n) {
      int64_t o = (n * a->c + c) * a->hw;
      plane_dx(a->dy + o, a->x + o, a->dx + o, a->hw, k_dy, k_x, k);
    }
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_batch_norm_desc = {AQ_KERNEL_BATCH_NORM, batch_norm, sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_bwd_desc = {AQ_KERNEL_BATCH_NORM_BWD, batch_norm_bwd,
                                                     sizeof(aq_batch_norm_args_t), 8, 0, 0};
