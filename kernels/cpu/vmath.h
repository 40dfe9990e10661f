/* Branch-free float math the compiler can vectorise (libm's calls stop it):
 * exp by range reduction to [-ln2/2, ln2/2] and Cephes' degree-6
 * polynomial (about 2 ulp over the clamped range), tanh and the logistic
 * function through it. Inputs past the clamps saturate as the true
 * functions do, to within float's resolution. */
#ifndef AQ_KERNELS_CPU_VMATH_H_
#define AQ_KERNELS_CPU_VMATH_H_

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/simd.h"

AQ_INLINE float aq_expf(float x) {
  x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
  /* n = round(x / ln2) by the 1.5 * 2^23 trick (no libm, any ISA). */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

AQ_INLINE float aq_sigmoidf(float x) { return 1.0f / (1.0f + aq_expf(-x)); }

/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); below |x| = 2^-6 its Taylor
 * series x - x^3/3 + 2x^5/15 keeps the relative error small. */
AQ_INLINE float aq_tanhf(float x) {
  float ax = x < 0.0f ? -x : x;
  float big = 1.0f - 2.0f / (aq_expf(2.0f * ax) + 1.0f);
  float x2 = x * x, small = ax * (1.0f + x2 * (-0.333333333f + x2 * 0.133333333f));
  float t = ax < 0.015625f ? small : big;
  return x < 0.0f ? -t : t;
}

/* Row reductions in 16 independent lanes, so they vectorise without
 * reassociating a single sum (which the compiler may not do by itself). */
AQ_INLINE float aq_row_max(const float *x, int64_t n) {
  float m[16];
  for (int t = 0; t < 16; ++t) m[t] = -3.402823466e38f;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int t = 0; t < 16; ++t) m[t] = x[j + t] > m[t] ? x[j + t] : m[t];
  float mx = -3.402823466e38f;
  for (int t = 0; t < 16; ++t) mx = m[t] > mx ? m[t] : mx;
  for (; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

/* sum_j exp(x[j] - shift) */
AQ_INLINE float aq_row_sum_exp(const float *x, int64_t n, float shift) {
  float s[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int t = 0; t < 16; ++t) s[t] += aq_expf(x[j + t] - shift);
  float sum = 0.0f;
  for (int t = 0; t < 16; ++t) sum += s[t];
  for (; j < n; ++j) sum += aq_expf(x[j] - shift);
  return sum;
}

/* The same sum as aq_row_sum_exp, in the same order, keeping each
 * exp(x[j] - shift) in e[j] (so a softmax computes every exponential once). */
AQ_INLINE float aq_row_exp_sum(const float *x, float *e, int64_t n, float shift) {
  float s[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int t = 0; t < 16; ++t) {
      float v = aq_expf(x[j + t] - shift);
      e[j + t] = v;
      s[t] += v;
    }
  float sum = 0.0f;
  for (int t = 0; t < 16; ++t) sum += s[t];
  for (; j < n; ++j) {
    float v = aq_expf(x[j] - shift);
    e[j] = v;
    sum += v;
  }
  return sum;
}

#endif
