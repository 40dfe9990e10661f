// 2-D max and average pooling over (n, c) planes, forward and backward, as
// the CPU kernels define them (max-pool saves the argmax, -1 and y = 0 for a
// window of padding only; average divides by kh * kw, padding included).
// Forward: a thread per output; backward: a thread per input element,
// gathering the windows that cover it (no atomics), or a thread an output
// where the windows tile the plane; max-pool's also with relu's backward in
// its write-back (the fused _bwd_relu). Grid-stride: any launch.
#include "common.cuh"
#include "launch.h"

namespace pool {

__device__ inline bool valid(const aq_pool_args_t &a) {
  return a.planes > 0 && a.h > 0 && a.w > 0 && a.p > 0 && a.q > 0 && a.kh > 0 && a.kw > 0 && a.stride_h > 0 &&
         a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0;
}

__device__ inline void forward(const aq_pool_args_t &a, bool max) {
  const int64_t total = a.planes * a.p * a.q;
  const bool nr = narrow_items(total);
  for (int64_t o = grid_thread(); o < total; o += grid_threads()) {
    int64_t pl, p, q;
    plane_coords(o, a.p, a.q, nr, pl, p, q);
    const float *x = a.x + pl * a.h * a.w;
    float best = -3.402823466e38f, sum = 0.0f;
    int32_t arg = -1;
    for (int32_t i = 0; i < a.kh; ++i) {
      const int64_t ih = p * a.stride_h - a.pad_h + i;
      if (ih < 0 || ih >= a.h) continue;
      for (int32_t j = 0; j < a.kw; ++j) {
        const int64_t iw = q * a.stride_w - a.pad_w + j;
        if (iw < 0 || iw >= a.w) continue;
        const float v = x[ih * a.w + iw];
        sum += v;
        if (v > best) best = v, arg = (int32_t)(ih * a.w + iw);
      }
    }
    if (max) a.y[o] = arg >= 0 ? best : 0.0f, a.argmax[o] = arg;
    else a.y[o] = sum / (float)(a.kh * a.kw);
  }
}

// Outputs along one axis whose window covers input i: lo..hi inclusive.
// Divides in 32 bits where narrow and t + stride is under 2^32.
__device__ inline void covering(int64_t i, int64_t pad, int32_t k, int32_t stride, int64_t outs, bool narrow,
                                int64_t &lo, int64_t &hi) {
  const int64_t t = i + pad; /* o * stride <= t <= o * stride + k - 1 */
  narrow = narrow && narrow_items(t + stride);
  lo = 0;
  if (t - k + 1 > 0) div_mod(t - k + 1 + stride - 1, stride, narrow, lo);
  div_mod(t, stride, narrow, hi);
  if (hi > outs - 1) hi = outs - 1;
}

// Windows that tile the plane (launch.h, aq_pool_tiles): a thread an
// output writes its window's gradient whole: two independent loads and
// kh * kw stores, where gathering took divisions and a load that waits on
// the argmax's. mask: as backward's.
__device__ inline void backward_tiles(const aq_pool_args_t &a, bool max, const float *mask) {
  const int64_t total = a.planes * a.p * a.q;
  const float inv = 1.0f / (float)(a.kh * a.kw);
  const bool nr = narrow_items(total);
  for (int64_t o = grid_thread(); o < total; o += grid_threads()) {
    int64_t pl, p, q;
    plane_coords(o, a.p, a.q, nr, pl, p, q);
    const float g = a.dy[o];
    const int32_t arg = max ? a.argmax[o] : -1;
    const int64_t plane = pl * a.h * a.w;
    for (int32_t i = 0; i < a.kh; ++i)
      for (int32_t j = 0; j < a.kw; ++j) {
        const int64_t e = (p * a.kh + i) * a.w + q * a.kw + j;
        const float v = max ? (e == arg ? g : 0.0f) : g * inv;
        a.dx[plane + e] = !mask || mask[plane + e] > 0.0f ? v : 0.0f;
      }
  }
}

// mask: relu's forward output over the input (the fused backward keeps the
// gradient where it is positive, as aq_relu_bwd_f32 does), or null.
__device__ inline void backward(const aq_pool_args_t &a, bool max, const float *mask = nullptr) {
  if (aq_pool_tiles(&a)) return backward_tiles(a, max, mask);
  const int64_t total = a.planes * a.h * a.w;
  const float inv = 1.0f / (float)(a.kh * a.kw);
  const bool nr = narrow_items(total);
  for (int64_t e = grid_thread(); e < total; e += grid_threads()) {
    int64_t pl, ih, iw, p0, p1, q0, q1;
    plane_coords(e, a.h, a.w, nr, pl, ih, iw);
    covering(ih, a.pad_h, a.kh, a.stride_h, a.p, nr, p0, p1);
    covering(iw, a.pad_w, a.kw, a.stride_w, a.q, nr, q0, q1);
    const int32_t me = (int32_t)(ih * a.w + iw);
    float g = 0.0f;
    for (int64_t p = p0; p <= p1; ++p)
      for (int64_t q = q0; q <= q1; ++q) {
        const int64_t o = (pl * a.p + p) * a.q + q;
        if (max) {
          if (a.argmax[o] == me) g += a.dy[o];
        } else {
          g += a.dy[o] * inv;
        }
      }
    a.dx[e] = !mask || mask[e] > 0.0f ? g : 0.0f;
  }
}

}  // namespace pool

AQ_KERNEL void aq_max_pool2d_f32(aq_pool_args_t a) {
  if (a.x && a.y && a.argmax && pool::valid(a)) pool::forward(a, true);
}
AQ_KERNEL void aq_avg_pool2d_f32(aq_pool_args_t a) {
  if (a.x && a.y && pool::valid(a)) pool::forward(a, false);
}
AQ_KERNEL void aq_max_pool2d_bwd_f32(aq_pool_args_t a) {
  if (a.dy && a.dx && a.argmax && pool::valid(a)) pool::backward(a, true);
}
AQ_KERNEL void aq_max_pool2d_bwd_relu_f32(aq_pool_relu_bwd_args_t a) {
  if (a.pool.dy && a.pool.dx && a.pool.argmax && a.mask && pool::valid(a.pool)) pool::backward(a.pool, true, a.mask);
}
AQ_KERNEL void aq_avg_pool2d_bwd_f32(aq_pool_args_t a) {
  if (a.dy && a.dx && pool::valid(a)) pool::backward(a, false);
}
