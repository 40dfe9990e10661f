/* 2-D max and average pooling, a work-group per (n, c) plane. The forward
 * walks one output row at a time: for each tap (i, j) of the window, every
 * output column whose tap falls inside the input is updated, a loop over q
 * that is vectorised per ISA (simd.h). Taps are visited in the order (i, j)
 * with a strict '>' so the first maximum wins, as the backward expects.
 * The backward zeroes a plane of dx and adds each output's gradient at its
 * argmax (or over its window); fused with relu's backward, it masks the
 * plane before leaving it. */
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/update.h"

static int valid(const aq_pool_args_t *a) {
  return a->planes > 0 && a->h > 0 && a->w > 0 && a->p > 0 && a->q > 0 && a->kh > 0 && a->kw > 0 &&
         a->stride_h > 0 && a->stride_w > 0 && a->pad_h >= 0 && a->pad_w >= 0;
}

/* Output columns [q0, q1) whose tap at column offset off = j - pad_w lies in
 * [0, w): q * stride_w + off in [0, w). */
static void tap_range(const aq_pool_args_t *a, int64_t off, int64_t *q0, int64_t *q1) {
  int64_t lo = off >= 0 ? 0 : (-off + a->stride_w - 1) / a->stride_w;
  int64_t hi = a->w - off <= 0 ? 0 : (a->w - off - 1) / a->stride_w + 1;
  *q0 = lo, *q1 = hi < a->q ? hi : a->q;
}

/* One tap over output columns [q0, q1) of one row: best/arg (max) or sum. */
AQ_INLINE void tap_max_body(const float *xrow, int64_t sw, int64_t off, int32_t base, int64_t q0, int64_t q1,
                            float *best, int32_t *arg) {
  for (int64_t q = q0; q < q1; ++q) {
    /* Selects, not a branch: on random data the branch mispredicted half
     * the time, the strided taps' scalar loop's whole cost. */
    float v = xrow[q * sw + off], b = best[q];
    int32_t idx = base + (int32_t)(q * sw + off), gt = -(int32_t)(v > b);
    best[q] = v > b ? v : b;
    arg[q] = (idx & gt) | (arg[q] & ~gt);
  }
}
AQ_VECTORISE(tap_max,
             (const float *xrow, int64_t sw, int64_t off, int32_t base, int64_t q0, int64_t q1, float *best,
              int32_t *arg),
             (xrow, sw, off, base, q0, q1, best, arg))

AQ_INLINE void tap_sum_body(const float *xrow, int64_t sw, int64_t off, int64_t q0, int64_t q1, float *sum) {
  for (int64_t q = q0; q < q1; ++q) sum[q] += xrow[q * sw + off];
}
AQ_VECTORISE(tap_sum, (const float *xrow, int64_t sw, int64_t off, int64_t q0, int64_t q1, float *sum),
             (xrow, sw, off, q0, q1, sum))

/* A 2 x 2 window at stride 2 without padding (the common max pool): a
 * plane of p output rows of q, each from input rows 2 p and 2 p + 1 (w
 * apart), the taps in the general loop's order and with its strict '>',
 * as selects that vectorise. A plane a call, not a row: LeNet's rows of 5
 * or 14 outputs cost less than the call. */
AQ_INLINE void max2x2_plane_body(const float *x, int64_t w, int64_t p, int64_t q, float *y, int32_t *arg) {
  const float lowest = -3.402823466e38f;
  const int32_t at[4] = {0, 1, (int32_t)w, (int32_t)w + 1};
  for (int64_t row = 0; row < p; ++row, y += q, arg += q) {
    const float *r0 = x + 2 * row * w;
    int32_t base = (int32_t)(2 * row * w);
    for (int64_t j = 0; j < q; ++j) {
      const float t[4] = {r0[2 * j], r0[2 * j + 1], r0[w + 2 * j], r0[w + 2 * j + 1]};
      float b = lowest;
      int32_t i = -1;
      for (int u = 0; u < 4; ++u) {
        int32_t gt = -(int32_t)(t[u] > b);
        b = t[u] > b ? t[u] : b;
        i = ((base + 2 * (int32_t)j + at[u]) & gt) | (i & ~gt);
      }
      y[j] = i < 0 ? 0.0f : b;
      arg[j] = i;
    }
  }
}
AQ_VECTORISE(max2x2_plane, (const float *x, int64_t w, int64_t p, int64_t q, float *y, int32_t *arg),
             (x, w, p, q, y, arg))

static int max2x2(const aq_pool_args_t *a) {
  return a->kh == 2 && a->kw == 2 && a->stride_h == 2 && a->stride_w == 2 && a->pad_h == 0 && a->pad_w == 0 &&
         a->p == a->h / 2 && a->q == a->w / 2;
}

static int pool(const void *kernarg, const aq_dispatch_ctx_t *ctx, int max) {
  const aq_pool_args_t *a = kernarg;
  if (!a->x || !a->y || (max && !a->argmax) || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->planes, &lo, &hi)) return 0;
  if (max && max2x2(a)) {
    for (int64_t pl = lo; pl < hi; ++pl) {
      int64_t o = pl * a->p * a->q;
      max2x2_plane(a->x + pl * a->h * a->w, a->w, a->p, a->q, a->y + o, a->argmax + o);
    }
    return 0;
  }
  float inv = 1.0f / (float)(a->kh * a->kw);
  /* Each window column's range of output columns, once per call. */
  enum { KW_TABLE = 64 };
  int64_t tq0[KW_TABLE], tq1[KW_TABLE];
  for (int32_t j = 0; j < a->kw && j < KW_TABLE; ++j) tap_range(a, j - a->pad_w, &tq0[j], &tq1[j]);
  for (int64_t pl = lo; pl < hi; ++pl) {
    const float *x = a->x + pl * a->h * a->w;
    for (int64_t p = 0; p < a->p; ++p) {
      int64_t o = pl * a->p * a->q + p * a->q;
      float *y = a->y + o;
      int32_t *arg = max ? a->argmax + o : NULL;
      for (int64_t q = 0; q < a->q; ++q) {
        y[q] = max ? -3.402823466e38f : 0.0f;
        if (max) arg[q] = -1;
      }
      for (int32_t i = 0; i < a->kh; ++i) {
        int64_t ih = p * a->stride_h - a->pad_h + i;
        if (ih < 0 || ih >= a->h) continue;
        for (int32_t j = 0; j < a->kw; ++j) {
          int64_t off = j - a->pad_w, q0, q1;
          if (j < KW_TABLE) q0 = tq0[j], q1 = tq1[j];
          else tap_range(a, off, &q0, &q1);
          if (q0 >= q1) continue;
          /* Strided taps vectorise into gathers, slower than scalar code
           * for the short rows pooling sees; contiguous ones vectorise well. */
          if (a->stride_w == 1) {
            if (max) tap_max(x + ih * a->w, 1, off, (int32_t)(ih * a->w), q0, q1, y, arg);
            else tap_sum(x + ih * a->w, 1, off, q0, q1, y);
          } else {
            if (max) tap_max_body(x + ih * a->w, a->stride_w, off, (int32_t)(ih * a->w), q0, q1, y, arg);
            else tap_sum_body(x + ih * a->w, a->stride_w, off, q0, q1, y);
          }
        }
      }
      for (int64_t q = 0; q < a->q; ++q) {
        if (max && arg[q] < 0) y[q] = 0.0f; /* a window of padding only */
        if (!max) y[q] *= inv;
      }
    }
  }
  return 0;
}

/* mask: relu's forward output over the input planes (the fused backward:
 * each plane's gradient kept where it is positive), or NULL. */
static int pool_bwd_masked(const aq_pool_args_t *a, const aq_dispatch_ctx_t *ctx, int max, const float *mask) {
  if (!a->dy || !a->dx || (max && !a->argmax) || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->planes, &lo, &hi)) return 0;
  for (int64_t pl = lo; pl < hi; ++pl) {
    float *dx = a->dx + pl * a->h * a->w;
    memset(dx, 0, (size_t)(a->h * a->w) * sizeof(float));
    for (int64_t p = 0; p < a->p; ++p)
      for (int64_t q = 0; q < a->q; ++q) {
        int64_t o = pl * a->p * a->q + p * a->q + q;
        if (max) {
          if (a->argmax[o] >= 0 && a->argmax[o] < a->h * a->w) dx[a->argmax[o]] += a->dy[o];
          continue;
        }
        float g = a->dy[o] / (float)(a->kh * a->kw);
        for (int32_t i = 0; i < a->kh; ++i)
          for (int32_t j = 0; j < a->kw; ++j) {
            int64_t ih = p * a->stride_h - a->pad_h + i, iw = q * a->stride_w - a->pad_w + j;
            if (ih >= 0 && ih < a->h && iw >= 0 && iw < a->w) dx[ih * a->w + iw] += g;
          }
      }
    /* the plane is still in L1: relu's backward costs no pass over memory */
    if (mask) cpu_relu_mask(1, a->h * a->w, mask + pl * a->h * a->w, 0, dx, 0, dx, 0);
  }
  return 0;
}

static int pool_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx, int max) {
  return pool_bwd_masked(kernarg, ctx, max, NULL);
}

static int max_pool_bwd_relu(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_pool_relu_bwd_args_t *a = kernarg;
  return a->mask ? pool_bwd_masked(&a->pool, ctx, 1, a->mask) : 1;
}

static int max_pool(const void *k, const aq_dispatch_ctx_t *c) { return pool(k, c, 1); }
static int avg_pool(const void *k, const aq_dispatch_ctx_t *c) { return pool(k, c, 0); }
static int max_pool_bwd(const void *k, const aq_dispatch_ctx_t *c) { return pool_bwd(k, c, 1); }
static int avg_pool_bwd(const void *k, const aq_dispatch_ctx_t *c) { return pool_bwd(k, c, 0); }

const aq_kernel_desc_t aq_cpu_max_pool_desc = {AQ_KERNEL_MAX_POOL, max_pool, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_max_pool_bwd_desc = {AQ_KERNEL_MAX_POOL_BWD, max_pool_bwd, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_max_pool_bwd_relu_desc = {AQ_KERNEL_MAX_POOL_BWD_RELU, max_pool_bwd_relu,
                                                       sizeof(aq_pool_relu_bwd_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_avg_pool_desc = {AQ_KERNEL_AVG_POOL, avg_pool, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_avg_pool_bwd_desc = {AQ_KERNEL_AVG_POOL_BWD, avg_pool_bwd, sizeof(aq_pool_args_t), 8, 0, 0};
