/* Batch norm per channel over (n, h, w): training (batch statistics, running
 * statistics updated), inference, and the backward; each pass whole (an
 * item a channel) or as the graph runs it, in two kernels over slices of
 * the channels (ops.h: _stats, then _apply, which also runs with relu in
 * its write-back when the exec fuses the pair). A channel is n planes of hw
 * contiguous floats; each plane, or the part of it in a slice, goes through
 * a loop vectorised per ISA (simd.h), partial sums in 16 lanes, plane totals
 * added in double. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

/* out[0] += sum(x), or out[0] += sum((x - shift)^2) when squares. */
AQ_INLINE void plane_sum_body(const float *x, int64_t n, float shift, int squares, double *out) {
  aq_f32x8 s0 = {0}, s1 = {0}, sh = s0 + shift;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    aq_f32x8 d0 = AQ_LOAD8(x + i) - sh, d1 = AQ_LOAD8(x + i + 8) - sh;
    s0 += squares ? d0 * d0 : d0, s1 += squares ? d1 * d1 : d1;
  }
  double tot = aq_lanes_sum(&s0, &s1);
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
  aq_f32x8 s0 = {0}, s1 = {0}, p0 = {0}, p1 = {0}, m = s0 + mean;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    aq_f32x8 d0 = AQ_LOAD8(dy + i), d1 = AQ_LOAD8(dy + i + 8);
    s0 += d0, s1 += d1, p0 += d0 * (AQ_LOAD8(x + i) - m), p1 += d1 * (AQ_LOAD8(x + i + 8) - m);
  }
  double a = aq_lanes_sum(&s0, &s1), b = aq_lanes_sum(&p0, &p1);
  for (; i < n; ++i) a += dy[i], b += (double)dy[i] * (x[i] - mean);
  out[0] += a, out[1] += b;
}
AQ_VECTORISE(plane_dsum, (const float *dy, const float *x, int64_t n, float mean, double *out), (dy, x, n, mean, out))

/* y = p * x + q (the normalisation folded into one multiply-add). */
AQ_INLINE void plane_affine_body(const float *x, float *y, int64_t n, float p, float q) {
  for (int64_t i = 0; i < n; ++i) y[i] = p * x[i] + q;
}
AQ_VECTORISE(plane_affine, (const float *x, float *y, int64_t n, float p, float q), (x, y, n, p, q))

/* The same with relu in the write-back (the fused _apply): relu.c's select
 * on plane_affine's value, so each element is what the pair writes. */
AQ_INLINE void plane_affine_relu_body(const float *x, float *y, int64_t n, float p, float q) {
  for (int64_t i = 0; i < n; ++i) {
    float v = p * x[i] + q;
    y[i] = v > 0.0f ? v : 0.0f;
  }
}
AQ_VECTORISE(plane_affine_relu, (const float *x, float *y, int64_t n, float p, float q), (x, y, n, p, q))

/* dx = k_dy dy + k_x x + k. */
AQ_INLINE void plane_dx_body(const float *dy, const float *x, float *dx, int64_t n, float k_dy, float k_x, float k) {
  for (int64_t i = 0; i < n; ++i) dx[i] = k_dy * dy[i] + k_x * x[i] + k;
}
AQ_VECTORISE(plane_dx, (const float *dy, const float *x, float *dx, int64_t n, float k_dy, float k_x, float k),
             (dy, x, dx, n, k_dy, k_x, k))

/* Training: the batch's statistics of channel c saved, the running ones
 * updated (the running variance unbiased). */
static void store_stats(const aq_batch_norm_args_t *a, int64_t c, double mean, double var) {
  double m = (double)(a->n * a->hw);
  a->mean[c] = (float)mean, a->rstd[c] = (float)(1.0 / sqrt(var + a->eps));
  a->running_mean[c] = (1.0f - a->momentum) * a->running_mean[c] + a->momentum * (float)mean;
  a->running_var[c] = (1.0f - a->momentum) * a->running_var[c] + a->momentum * (float)(var * m / (m > 1 ? m - 1 : 1));
}

/* y = p x + q normalises channel c. */
static void affine(const aq_batch_norm_args_t *a, int64_t c, double mean, double var, float *p, float *q) {
  float rstd = (float)(1.0 / sqrt(var + a->eps)), g = a->gamma ? a->gamma[c] : 1.0f, b = a->beta ? a->beta[c] : 0.0f;
  *p = rstd * g, *q = b - (float)mean * rstd * g;
}

/* dx = k[0] dy + k[1] x + k[2] for channel c, from sum(dy) and sum(dy xhat);
 * dgamma and dbeta written where `grads`. */
static void dx_terms(const aq_batch_norm_args_t *a, int64_t c, double sdy, double sdyx, int grads, float k[3]) {
  double m = (double)(a->n * a->hw);
  float mean = a->mean[c], rstd = a->rstd[c], g = a->gamma ? a->gamma[c] : 1.0f;
  if (grads) a->dgamma[c] = (float)sdyx, a->dbeta[c] = (float)sdy;
  double kg = (double)g * rstd;
  k[0] = (float)kg, k[1] = (float)(-kg * rstd * sdyx / m);
  k[2] = (float)(-kg * sdy / m + kg * rstd * sdyx / m * mean);
}

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
      store_stats(a, c, mean, var);
    } else {
      mean = a->running_mean[c], var = a->running_var[c];
    }
    float p, q;
    affine(a, c, mean, var, &p, &q);
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
  for (int64_t c = lo; c < hi; ++c) {
    double sums[2] = {0, 0};
    for (int64_t n = 0; n < a->n; ++n) {
      int64_t o = (n * a->c + c) * a->hw;
      plane_dsum(a->dy + o, a->x + o, a->hw, a->mean[c], sums);
    }
    float k[3];
    dx_terms(a, c, sums[0], sums[1] * a->rstd[c], 1, k); /* sums[1] rstd: sum(dy xhat) */
    for (int64_t n = 0; n < a->n; ++n) {
      int64_t o = (n * a->c + c) * a->hw;
      plane_dx(a->dy + o, a->x + o, a->dx + o, a->hw, k[0], k[1], k[2]);
    }
  }
  return 0;
}

/* ---- the two-kernel passes (ops.h): an item a slice of a channel ---- */

static int sliced(const aq_batch_norm_args_t *a) {
  return a->n > 0 && a->c > 0 && a->hw > 0 && a->slices >= 1;
}

/* Item it's channel, and its slice's [lo, hi) of the channel's values. */
static int64_t slice_of(const aq_batch_norm_args_t *a, int64_t it, int64_t *lo, int64_t *hi) {
  int64_t m = a->n * a->hw, s = it % a->slices;
  *lo = s * m / a->slices, *hi = (s + 1) * m / a->slices;
  return it / a->slices;
}

/* The run of channel c's values from i (< hi) within one plane: its offset
 * in the tensor, its length in *len. */
static int64_t run_at(const aq_batch_norm_args_t *a, int64_t c, int64_t i, int64_t hi, int64_t *len) {
  int64_t n = i / a->hw, end = (n + 1) * a->hw < hi ? (n + 1) * a->hw : hi;
  *len = end - i;
  return (n * a->c + c) * a->hw + i % a->hw;
}

/* Channel c's partial sums added in slice order. */
static void channel_sums(const aq_batch_norm_args_t *a, int64_t c, double out[2]) {
  const double *p = a->partial + c * a->slices * 2;
  out[0] = out[1] = 0;
  for (int64_t s = 0; s < a->slices; ++s) out[0] += p[2 * s], out[1] += p[2 * s + 1];
}

/* Item it's slice sums: of x - shift and its square (shift: the channel's
 * first value), or backward of dy and dy (x - mean). Each run (the
 * slice's part of one plane) goes through 16 float lanes kept across the
 * runs, its tail added in double; the lanes are added up once, at the
 * end: per plane, their 16 dependent double adds cost as much as a plane
 * of LeNet's sizes. */
AQ_INLINE void slice_sums_v_body(const aq_batch_norm_args_t *a, int64_t it, int backward, double *out) {
  int64_t b, e, c = slice_of(a, it, &b, &e);
  const float ref = backward ? a->mean[c] : a->x[c * a->hw];
  aq_f32x8 s0 = {0}, s1 = {0}, q0 = {0}, q1 = {0}, m = s0 + ref;
  double ta = 0, tb = 0;
  for (int64_t i = b, len; i < e; i += len) {
    int64_t o = run_at(a, c, i, e, &len), j = 0;
    const float *x = a->x + o;
    if (backward) {
      const float *dy = a->dy + o;
      for (; j + 16 <= len; j += 16) {
        aq_f32x8 d0 = AQ_LOAD8(dy + j), d1 = AQ_LOAD8(dy + j + 8);
        s0 += d0, s1 += d1, q0 += d0 * (AQ_LOAD8(x + j) - m), q1 += d1 * (AQ_LOAD8(x + j + 8) - m);
      }
      for (; j < len; ++j) ta += dy[j], tb += (double)dy[j] * (x[j] - ref);
    } else {
      for (; j + 16 <= len; j += 16) {
        aq_f32x8 d0 = AQ_LOAD8(x + j) - m, d1 = AQ_LOAD8(x + j + 8) - m;
        s0 += d0, s1 += d1, q0 += d0 * d0, q1 += d1 * d1;
      }
      for (; j < len; ++j) {
        double d = (double)x[j] - ref;
        ta += d, tb += d * d;
      }
    }
  }
  out[0] = aq_lanes_sum(&s0, &s1) + ta, out[1] = aq_lanes_sum(&q0, &q1) + tb;
}
AQ_VECTORISE(slice_sums_v, (const aq_batch_norm_args_t *a, int64_t it, int backward, double *out),
             (a, it, backward, out))

/* Item it's slice sums into the partial buffer. */
static void slice_sums(const aq_batch_norm_args_t *a, int64_t it, int backward) {
  double sums[2];
  slice_sums_v(a, it, backward, sums);
  a->partial[2 * it] = sums[0], a->partial[2 * it + 1] = sums[1];
}

static int batch_norm_stats(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->partial || !sliced(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c * a->slices, &lo, &hi)) return 0;
  for (int64_t it = lo; it < hi; ++it) slice_sums(a, it, 0);
  return 0;
}

/* _apply, and with relu in its write-back where `relu`. */
static int apply(const void *kernarg, const aq_dispatch_ctx_t *ctx, int relu) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->y || !a->running_mean || !a->running_var || !sliced(a)) return 1;
  if (a->training && (!a->mean || !a->rstd || !a->partial)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c * a->slices, &lo, &hi)) return 0;
  double m = (double)(a->n * a->hw);
  for (int64_t it = lo; it < hi; ++it) {
    int64_t b, e, c = slice_of(a, it, &b, &e);
    double mean, var;
    if (a->training) { /* the running statistics are slice 0's to update */
      double sums[2];
      channel_sums(a, c, sums);
      mean = sums[0] / m, var = sums[1] / m - mean * mean, mean += a->x[c * a->hw];
      if (var < 0) var = 0;
      if (it % a->slices == 0) store_stats(a, c, mean, var);
    } else {
      mean = a->running_mean[c], var = a->running_var[c];
    }
    float p, q;
    affine(a, c, mean, var, &p, &q);
    for (int64_t i = b, len; i < e; i += len) {
      int64_t o = run_at(a, c, i, e, &len);
      if (relu) plane_affine_relu(a->x + o, a->y + o, len, p, q);
      else plane_affine(a->x + o, a->y + o, len, p, q);
    }
  }
  return 0;
}

static int batch_norm_apply(const void *k, const aq_dispatch_ctx_t *c) { return apply(k, c, 0); }
static int batch_norm_apply_relu(const void *k, const aq_dispatch_ctx_t *c) { return apply(k, c, 1); }

static int batch_norm_bwd_stats(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->mean || !a->partial || !sliced(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c * a->slices, &lo, &hi)) return 0;
  for (int64_t it = lo; it < hi; ++it) slice_sums(a, it, 1);
  return 0;
}

static int batch_norm_bwd_apply(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_batch_norm_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->dx || !a->mean || !a->rstd || !a->dgamma || !a->dbeta || !a->partial || !sliced(a))
    return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->c * a->slices, &lo, &hi)) return 0;
  for (int64_t it = lo; it < hi; ++it) {
    int64_t b, e, c = slice_of(a, it, &b, &e);
    double sums[2];
    float k[3];
    channel_sums(a, c, sums);
    dx_terms(a, c, sums[0], sums[1] * a->rstd[c], it % a->slices == 0, k);
    for (int64_t i = b, len; i < e; i += len) {
      int64_t o = run_at(a, c, i, e, &len);
      plane_dx(a->dy + o, a->x + o, a->dx + o, len, k[0], k[1], k[2]);
    }
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_batch_norm_desc = {AQ_KERNEL_BATCH_NORM, batch_norm, sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_bwd_desc = {AQ_KERNEL_BATCH_NORM_BWD, batch_norm_bwd,
                                                     sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_stats_desc = {AQ_KERNEL_BATCH_NORM_STATS, batch_norm_stats,
                                                       sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_apply_desc = {AQ_KERNEL_BATCH_NORM_APPLY, batch_norm_apply,
                                                       sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_apply_relu_desc = {AQ_KERNEL_BATCH_NORM_APPLY_RELU, batch_norm_apply_relu,
                                                            sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_bwd_stats_desc = {AQ_KERNEL_BATCH_NORM_BWD_STATS, batch_norm_bwd_stats,
                                                           sizeof(aq_batch_norm_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_batch_norm_bwd_apply_desc = {AQ_KERNEL_BATCH_NORM_BWD_APPLY, batch_norm_bwd_apply,
                                                           sizeof(aq_batch_norm_args_t), 8, 0, 0};
