// conv2d, direct: a thread per output plane (forward), input plane (backward
// data) or filter slice (backward filter), as the CPU kernels split the work.
#include "common.cuh"

AQ_KERNEL void aq_conv2d_f32(aq_conv2d_args_t a) {
  int64_t nk = global_x();
  if (nk >= a.n * a.k) return;
  int64_t n = nk / a.k, k = nk % a.k;
  float *y = a.y + nk * a.p * a.q;
  for (int64_t p = 0; p < a.p; ++p)
    for (int64_t q = 0; q < a.q; ++q) {
      float acc = a.bias ? a.bias[k] : 0.0f;
      for (int64_t c = 0; c < a.c; ++c)
        for (int64_t r = 0; r < a.r; ++r) {
          int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h;
          if (ih < 0 || ih >= a.h) continue;
          for (int64_t s = 0; s < a.s; ++s) {
            int64_t iw = q * a.stride_w - a.pad_w + s * a.dil_w;
            if (iw >= 0 && iw < a.wd)
              acc += a.x[((n * a.c + c) * a.h + ih) * a.wd + iw] * a.w[((k * a.c + c) * a.r + r) * a.s + s];
          }
        }
      y[p * a.q + q] = acc;
    }
}

AQ_KERNEL void aq_conv2d_bwd_data_f32(aq_conv2d_args_t a) {
  int64_t nc = global_x();
  if (nc >= a.n * a.c) return;
  int64_t n = nc / a.c, c = nc % a.c;
  float *dx = a.dx + nc * a.h * a.wd;
  for (int64_t i = 0; i < a.h * a.wd; ++i) dx[i] = 0.0f;
  for (int64_t k = 0; k < a.k; ++k)
    for (int64_t r = 0; r < a.r; ++r)
      for (int64_t s = 0; s < a.s; ++s) {
        float wv = a.w[((k * a.c + c) * a.r + r) * a.s + s];
        for (int64_t p = 0; p < a.p; ++p) {
          int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h;
          if (ih < 0 || ih >= a.h) continue;
          for (int64_t q = 0; q < a.q; ++q) {
            int64_t iw = q * a.stride_w - a.pad_w + s * a.dil_w;
            if (iw >= 0 && iw < a.wd) dx[ih * a.wd + iw] += wv * a.dy[((n * a.k + k) * a.p + p) * a.q + q];
          }
        }
      }
}

AQ_KERNEL void aq_conv2d_bwd_filter_f32(aq_conv2d_args_t a) {
  int64_t kc = global_x();
  if (kc >= a.k * a.c) return;
  int64_t k = kc / a.c, c = kc % a.c;
  for (int64_t r = 0; r < a.r; ++r)
    for (int64_t s = 0; s < a.s; ++s) {
      float acc = 0.0f;
      for (int64_t n = 0; n < a.n; ++n)
        for (int64_t p = 0; p < a.p; ++p) {
          int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h;
          if (ih < 0 || ih >= a.h) continue;
          for (int64_t q = 0; q < a.q; ++q) {
            int64_t iw = q * a.stride_w - a.pad_w + s * a.dil_w;
            if (iw >= 0 && iw < a.wd)
              acc += a.dy[((n * a.k + k) * a.p + p) * a.q + q] * a.x[((n * a.c + c) * a.h + ih) * a.wd + iw];
          }
        }
      a.dw[kc * a.r * a.s + r * a.s + s] = acc;
    }
  if (c == 0 && a.dbias) {
    float b = 0.0f;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t i = 0; i < a.p * a.q; ++i) b += a.dy[(n * a.k + k) * a.p * a.q + i];
    a.dbias[k] = b;
  }
}
