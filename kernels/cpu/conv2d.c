/* conv2d, direct, NCHW: a work-group per output plane (forward), input plane
 * (backward data) or filter slice (backward filter), so no two groups write
 * the same element. */
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int valid(const aq_conv2d_args_t *a) {
  return a->n > 0 && a->c > 0 && a->h > 0 && a->wd > 0 && a->k > 0 && a->r > 0 && a->s > 0 && a->p > 0 && a->q > 0 &&
         a->stride_h > 0 && a->stride_w > 0 && a->dil_h > 0 && a->dil_w > 0 && a->pad_h >= 0 && a->pad_w >= 0;
}

static int conv2d(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (!a->x || !a->w || !a->y || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n * a->k, &lo, &hi)) return 0;
  for (int64_t nk = lo; nk < hi; ++nk) {
    int64_t n = nk / a->k, k = nk % a->k;
    float *y = a->y + nk * a->p * a->q;
    for (int64_t i = 0; i < a->p * a->q; ++i) y[i] = a->bias ? a->bias[k] : 0.0f;
    for (int64_t c = 0; c < a->c; ++c) {
      const float *x = a->x + (n * a->c + c) * a->h * a->wd, *w = a->w + (k * a->c + c) * a->r * a->s;
      for (int64_t r = 0; r < a->r; ++r)
        for (int64_t s = 0; s < a->s; ++s) {
          float wv = w[r * a->s + s];
          for (int64_t p = 0; p < a->p; ++p) {
            int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= a->h) continue;
            for (int64_t q = 0; q < a->q; ++q) {
              int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
              if (iw >= 0 && iw < a->wd) y[p * a->q + q] += wv * x[ih * a->wd + iw];
            }
          }
        }
    }
  }
  return 0;
}

static int conv2d_bwd_data(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (!a->w || !a->dy || !a->dx || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n * a->c, &lo, &hi)) return 0;
  for (int64_t nc = lo; nc < hi; ++nc) {
    int64_t n = nc / a->c, c = nc % a->c;
    float *dx = a->dx + nc * a->h * a->wd;
    memset(dx, 0, (size_t)(a->h * a->wd) * sizeof(float));
    for (int64_t k = 0; k < a->k; ++k) {
      const float *dy = a->dy + (n * a->k + k) * a->p * a->q, *w = a->w + (k * a->c + c) * a->r * a->s;
      for (int64_t r = 0; r < a->r; ++r)
        for (int64_t s = 0; s < a->s; ++s) {
          float wv = w[r * a->s + s];
          for (int64_t p = 0; p < a->p; ++p) {
            int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= a->h) continue;
            for (int64_t q = 0; q < a->q; ++q) {
              int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
              if (iw >= 0 && iw < a->wd) dx[ih * a->wd + iw] += wv * dy[p * a->q + q];
            }
          }
        }
    }
  }
  return 0;
}

static int conv2d_bwd_filter(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->dw || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->k * a->c, &lo, &hi)) return 0;
  for (int64_t kc = lo; kc < hi; ++kc) {
    int64_t k = kc / a->c, c = kc % a->c;
    float *dw = a->dw + kc * a->r * a->s;
    for (int64_t r = 0; r < a->r; ++r)
      for (int64_t s = 0; s < a->s; ++s) {
        double acc = 0;
        for (int64_t n = 0; n < a->n; ++n) {
          const float *x = a->x + (n * a->c + c) * a->h * a->wd, *dy = a->dy + (n * a->k + k) * a->p * a->q;
          for (int64_t p = 0; p < a->p; ++p) {
            int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= a->h) continue;
            for (int64_t q = 0; q < a->q; ++q) {
              int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
              if (iw >= 0 && iw < a->wd) acc += (double)dy[p * a->q + q] * x[ih * a->wd + iw];
            }
          }
        }
        dw[r * a->s + s] = (float)acc;
      }
    if (c == 0 && a->dbias) {
      double b = 0;
      for (int64_t n = 0; n < a->n; ++n)
        for (int64_t i = 0; i < a->p * a->q; ++i) b += a->dy[(n * a->k + k) * a->p * a->q + i];
      a->dbias[k] = (float)b;
    }
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_conv2d_desc = {AQ_KERNEL_CONV2D, conv2d, sizeof(aq_conv2d_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_conv2d_bwd_data_desc = {AQ_KERNEL_CONV2D_BWD_DATA, conv2d_bwd_data,
                                                      sizeof(aq_conv2d_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_conv2d_bwd_filter_desc = {AQ_KERNEL_CONV2D_BWD_FILTER, conv2d_bwd_filter,
                                                        sizeof(aq_conv2d_args_t), 8, 0, 0};
