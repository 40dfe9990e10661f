// conv2d's direct loops (NCHW; stride, padding, dilation), with the kernarg
// struct and index conventions of ops.h, templated on the element type of
// the tensors a pass reads (float, or uint16_t holding bf16); outputs and
// accumulation are fp32. They are aq_conv2d_*_f32 (conv2d.cu), and the exact
// path of the bf16 kernels (conv2d_bf16.cu) for launches their tensor-core
// tiles do not take.
//
// Every loop walks its outputs with a grid-stride loop, so any launch shape
// is correct (aq_gpu_op_shape in launch.h gives the efficient one):
//  - forward: a thread per output element y[n,k,p,q] (consecutive threads
//    along q read consecutive x; w is the same across a warp);
//  - backward data: a thread per input element dx[n,c,h,w], gathering the
//    outputs whose windows cover it (no atomics, deterministic);
//  - backward filter: a warp per weight dw[k,c,r,s] (and per dbias[k]),
//    lanes striding over n, p, q, summed by shuffles in a fixed order.
#pragma once
#include "common.cuh"

namespace conv {

__device__ inline bool valid(const aq_conv2d_args_t &a) {
  return a.n > 0 && a.c > 0 && a.h > 0 && a.wd > 0 && a.k > 0 && a.r > 0 && a.s > 0 && a.p > 0 && a.q > 0 &&
         a.stride_h > 0 && a.stride_w > 0 && a.dil_h > 0 && a.dil_w > 0 && a.pad_h >= 0 && a.pad_w >= 0;
}

__device__ __forceinline__ float ld(const float *p) { return __ldg(p); }
__device__ __forceinline__ float ld(const uint16_t *p) { return __uint_as_float((uint32_t)__ldg(p) << 16); }

template <typename T>
__device__ void forward(const aq_conv2d_args_t &a, const T *xs, const T *ws) {
  const int64_t total = a.n * a.k * a.p * a.q, plane = a.h * a.wd;
  for (int64_t o = grid_thread(); o < total; o += grid_threads()) {
    const int64_t q = o % a.q, p = (o / a.q) % a.p, k = (o / (a.p * a.q)) % a.k, n = o / (a.p * a.q * a.k);
    const int64_t h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
    float acc = a.bias ? a.bias[k] : 0.0f;
    const T *x = xs + n * a.c * plane, *w = ws + k * a.c * a.r * a.s;
    for (int64_t c = 0; c < a.c; ++c, x += plane, w += a.r * a.s)
      for (int64_t r = 0; r < a.r; ++r) {
        const int64_t ih = h0 + r * a.dil_h;
        if (ih < 0 || ih >= a.h) continue;
        for (int64_t s = 0; s < a.s; ++s) {
          const int64_t iw = w0 + s * a.dil_w;
          if (iw >= 0 && iw < a.wd) acc = fmaf(ld(w + r * a.s + s), ld(x + ih * a.wd + iw), acc);
        }
      }
    a.y[o] = acc;
  }
}

template <typename T>
__device__ void backward_data(const aq_conv2d_args_t &a, const T *ws, const T *dys) {
  const int64_t total = a.n * a.c * a.h * a.wd, oplane = a.p * a.q;
  for (int64_t i = grid_thread(); i < total; i += grid_threads()) {
    const int64_t iw = i % a.wd, ih = (i / a.wd) % a.h, c = (i / (a.h * a.wd)) % a.c, n = i / (a.h * a.wd * a.c);
    float acc = 0.0f;
    for (int64_t r = 0; r < a.r; ++r) {
      /* p * stride_h = ih + pad_h - r * dil_h */
      const int64_t ph = ih + a.pad_h - r * a.dil_h;
      if (ph < 0 || ph % a.stride_h) continue;
      const int64_t p = ph / a.stride_h;
      if (p >= a.p) continue;
      for (int64_t s = 0; s < a.s; ++s) {
        const int64_t qw = iw + a.pad_w - s * a.dil_w;
        if (qw < 0 || qw % a.stride_w) continue;
        const int64_t q = qw / a.stride_w;
        if (q >= a.q) continue;
        const T *dy = dys + n * a.k * oplane + p * a.q + q, *w = ws + (c * a.r + r) * a.s + s;
        for (int64_t k = 0; k < a.k; ++k) acc = fmaf(ld(w + k * a.c * a.r * a.s), ld(dy + k * oplane), acc);
      }
    }
    a.dx[i] = acc;
  }
}

template <typename T>
__device__ void backward_filter(const aq_conv2d_args_t &a, const T *xs, const T *dys) {
  const int lane = (int)(grid_thread() & 31);
  const int64_t weights = a.k * a.c * a.r * a.s, items = weights + (a.dbias ? a.k : 0);
  const int64_t warps = grid_threads() / 32, oplane = a.p * a.q, iplane = a.h * a.wd;
  if (block_threads() % 32) { /* blocks of partial warps: a thread per item, no shuffles */
    for (int64_t it = grid_thread(); it < items; it += grid_threads()) {
      double acc = 0;
      if (it < weights) {
        const int64_t s = it % a.s, r = (it / a.s) % a.r, c = (it / (a.s * a.r)) % a.c, k = it / (a.s * a.r * a.c);
        for (int64_t j = 0; j < a.n * oplane; ++j) {
          const int64_t n = j / oplane, p = (j / a.q) % a.p, q = j % a.q;
          const int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h, iw = q * a.stride_w - a.pad_w + s * a.dil_w;
          if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.wd)
            acc += (double)ld(dys + (n * a.k + k) * oplane + p * a.q + q) * ld(xs + (n * a.c + c) * iplane + ih * a.wd + iw);
        }
        a.dw[it] = (float)acc;
      } else {
        const int64_t k = it - weights;
        for (int64_t j = 0; j < a.n * oplane; ++j) acc += ld(dys + ((j / oplane) * a.k + k) * oplane + j % oplane);
        a.dbias[k] = (float)acc;
      }
    }
    return;
  }
  for (int64_t it = grid_thread() / 32; it < items; it += warps) {
    float acc = 0.0f;
    if (it < weights) {
      const int64_t s = it % a.s, r = (it / a.s) % a.r, c = (it / (a.s * a.r)) % a.c, k = it / (a.s * a.r * a.c);
      for (int64_t j = lane; j < a.n * oplane; j += 32) {
        const int64_t n = j / oplane, p = (j / a.q) % a.p, q = j % a.q;
        const int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h, iw = q * a.stride_w - a.pad_w + s * a.dil_w;
        if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.wd)
          acc = fmaf(ld(dys + (n * a.k + k) * oplane + p * a.q + q), ld(xs + (n * a.c + c) * iplane + ih * a.wd + iw), acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) a.dw[it] = acc;
    } else {
      const int64_t k = it - weights;
      for (int64_t j = lane; j < a.n * oplane; j += 32) acc += ld(dys + ((j / oplane) * a.k + k) * oplane + j % oplane);
      acc = warp_sum(acc);
      if (lane == 0) a.dbias[k] = acc;
    }
  }
}

}  // namespace conv
