// 2-D max and average pooling, a thread per (n, c) plane.
#include "common.cuh"

__device__ inline void pool_plane(const aq_pool_args_t &a, int64_t pl, bool max) {
  const float *x = a.x + pl * a.h * a.w;
  for (int64_t p = 0; p < a.p; ++p)
    for (int64_t q = 0; q < a.q; ++q) {
      float best = -3.402823466e38f, sum = 0.0f;
      int32_t arg = -1;
      for (int32_t i = 0; i < a.kh; ++i)
        for (int32_t j = 0; j < a.kw; ++j) {
          int64_t ih = p * a.stride_h - a.pad_h + i, iw = q * a.stride_w - a.pad_w + j;
          if (ih < 0 || ih >= a.h || iw < 0 || iw >= a.w) continue;
          float v = x[ih * a.w + iw];
          sum += v;
          if (v > best) best = v, arg = (int32_t)(ih * a.w + iw);
        }
      int64_t o = pl * a.p * a.q + p * a.q + q;
      if (max) a.y[o] = arg >= 0 ? best : 0.0f, a.argmax[o] = arg;
      else a.y[o] = sum / (float)(a.kh * a.kw);
    }
}

__device__ inline void pool_plane_bwd(const aq_pool_args_t &a, int64_t pl, bool max) {
  float *dx = a.dx + pl * a.h * a.w;
  for (int64_t i = 0; i < a.h * a.w; ++i) dx[i] = 0.0f;
  for (int64_t p = 0; p < a.p; ++p)
    for (int64_t q = 0; q < a.q; ++q) {
      int64_t o = pl * a.p * a.q + p * a.q + q;
      if (max) {
        if (a.argmax[o] >= 0) dx[a.argmax[o]] += a.dy[o];
        continue;
      }
      float g = a.dy[o] / (float)(a.kh * a.kw);
      for (int32_t i = 0; i < a.kh; ++i)
        for (int32_t j = 0; j < a.kw; ++j) {
          int64_t ih = p * a.stride_h - a.pad_h + i, iw = q * a.stride_w - a.pad_w + j;
          if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) dx[ih * a.w + iw] += g;
        }
    }
}

AQ_KERNEL void aq_max_pool2d_f32(aq_pool_args_t a) {
  int64_t pl = global_x();
  if (pl < a.planes) pool_plane(a, pl, true);
}
AQ_KERNEL void aq_avg_pool2d_f32(aq_pool_args_t a) {
  int64_t pl = global_x();
  if (pl < a.planes) pool_plane(a, pl, false);
}
AQ_KERNEL void aq_max_pool2d_bwd_f32(aq_pool_args_t a) {
  int64_t pl = global_x();
  if (pl < a.planes) pool_plane_bwd(a, pl, true);
}
AQ_KERNEL void aq_avg_pool2d_bwd_f32(aq_pool_args_t a) {
  int64_t pl = global_x();
  if (pl < a.planes) pool_plane_bwd(a, pl, false);
}
