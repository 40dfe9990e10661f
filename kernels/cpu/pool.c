/* 2-D max and average pooling, a work-group per (n, c) plane. */
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int valid(const aq_pool_args_t *a) {
  return a->planes > 0 && a->h > 0 && a->w > 0 && a->p > 0 && a->q > 0 && a->kh > 0 && a->kw > 0 &&
         a->stride_h > 0 && a->stride_w > 0 && a->pad_h >= 0 && a->pad_w >= 0;
}

static int pool(const void *kernarg, const aq_dispatch_ctx_t *ctx, int max) {
  const aq_pool_args_t *a = kernarg;
  if (!a->x || !a->y || (max && !a->argmax) || !valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->planes, &lo, &hi)) return 0;
  for (int64_t pl = lo; pl < hi; ++pl) {
    const float *x = a->x + pl * a->h * a->w;
    for (int64_t p = 0; p < a->p; ++p)
      for (int64_t q = 0; q < a->q; ++q) {
        float best = -3.402823466e38f, sum = 0.0f;
        int32_t arg = -1;
        for (int32_t i = 0; i < a->kh; ++i)
          for (int32_t j = 0; j < a->kw; ++j) {
            int64_t ih = p * a->stride_h - a->pad_h + i, iw = q * a->stride_w - a->pad_w + j;
            if (ih < 0 || ih >= a->h || iw < 0 || iw >= a->w) continue;
            float v = x[ih * a->w + iw];
            sum += v;
            if (v > best) best = v, arg = (int32_t)(ih * a->w + iw);
          }
        int64_t o = pl * a->p * a->q + p * a->q + q;
        if (max) a->y[o] = arg >= 0 ? best : 0.0f, a->argmax[o] = arg;
        else a->y[o] = sum / (float)(a->kh * a->kw);
      }
  }
  return 0;
}

static int pool_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx, int max) {
  const aq_pool_args_t *a = kernarg;
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
          if (a->argmax[o] >= 0) dx[a->argmax[o]] += a->dy[o];
          continue;
        }
        float g = a->dy[o] / (float)(a->kh * a->kw);
        for (int32_t i = 0; i < a->kh; ++i)
          for (int32_t j = 0; j < a->kw; ++j) {
            int64_t ih = p * a->stride_h - a->pad_h + i, iw = q * a->stride_w - a->pad_w + j;
            if (ih >= 0 && ih < a->h && iw >= 0 && iw < a->w) dx[ih * a->w + iw] += g;
          }
      }
  }
  return 0;
}

static int max_pool(const void *k, const aq_dispatch_ctx_t *c) { return pool(k, c, 1); }
static int avg_pool(const void *k, const aq_dispatch_ctx_t *c) { return pool(k, c, 0); }
static int max_pool_bwd(const void *k, const aq_dispatch_ctx_t *c) { return pool_bwd(k, c, 1); }
static int avg_pool_bwd(const void *k, const aq_dispatch_ctx_t *c) { return pool_bwd(k, c, 0); }

const aq_kernel_desc_t aq_cpu_max_pool_desc = {AQ_KERNEL_MAX_POOL, max_pool, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_max_pool_bwd_desc = {AQ_KERNEL_MAX_POOL_BWD, max_pool_bwd, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_avg_pool_desc = {AQ_KERNEL_AVG_POOL, avg_pool, sizeof(aq_pool_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_avg_pool_bwd_desc = {AQ_KERNEL_AVG_POOL_BWD, avg_pool_bwd, sizeof(aq_pool_args_t), 8, 0, 0};
