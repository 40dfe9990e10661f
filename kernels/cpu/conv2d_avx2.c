/* conv2d forward as a direct loop on the padded-width grid, for the
 * small filter volumes (LeNet's 1 -> 6 and 6 -> 16 5x5 layers) where the
 * GEMM path spends most of its time packing im2col panels for few
 * multiply-adds. Each image is copied once into a zero-padded plane per
 * channel, Wp = W + 2 pad floats wide. Output pixel (p, q) is then computed
 * at flat position i = p Wp + q, and tap (c, r, s) reads the padded plane
 * at i + r Wp + s: contiguous across rows, so 16 consecutive positions
 * are two vector loads whatever the row breaks (positions with q >= Q are
 * computed and dropped). Six filters a pass keep 12 accumulators; each
 * sum runs over (c, r, s) in order from zero, as the GEMM path's single
 * depth slice does, so y is the same bit for bit. */
#include "kernels/cpu/conv2d_avx2.h"

#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { WIDE_KB = 6, WIDE_SLACK = 64 };

static int64_t padded_plane(const aq_conv2d_args_t *a) {
  return (a->h + 2 * a->pad_h) * (a->wd + 2 * a->pad_w) + WIDE_SLACK;
}

size_t conv2d_wide_floats(const aq_conv2d_args_t *a) { return (size_t)(a->c * padded_plane(a)); }

int conv2d_wide_fits(const aq_conv2d_args_t *a) {
  return a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 && a->dil_w == 1 && a->s <= 32 &&
         a->c * a->r * a->s <= GEMM_KC && conv2d_wide_floats(a) * sizeof(float) <= GEMM_SCRATCH_BYTES;
}

#if defined(__x86_64__)
/* KB filters from k0 over 16 flat positions from i0: acc then y. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void wide_block(const aq_conv2d_args_t *a, int kb,
                                                                            int64_t k0, int64_t i0, const float *xp,
                                                                            int64_t plane, int64_t wp,
                                                                            const int32_t *dst, float *y) {
  const int64_t rs = a->r * a->s, crs = a->c * rs, pq = a->p * a->q;
  __m256 acc[WIDE_KB][2];
  _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < a->c; ++c)
    for (int64_t r = 0; r < a->r; ++r) {
      const float *xr = xp + c * plane + r * wp + i0;
      const float *wr = a->w + k0 * crs + c * rs + r * a->s;
      for (int64_t s = 0; s < a->s; ++s) {
        __m256 x0 = _mm256_loadu_ps(xr + s), x1 = _mm256_loadu_ps(xr + s + 8);
        _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {
          __m256 wv = _mm256_broadcast_ss(wr + k * crs + s);
          acc[k][0] = _mm256_fmadd_ps(wv, x0, acc[k][0]);
          acc[k][1] = _mm256_fmadd_ps(wv, x1, acc[k][1]);
        }
      }
    }
  float out[2 * 8] __attribute__((aligned(32)));
  for (int k = 0; k < kb; ++k) {
    /* + 0 and then the bias: the GEMM path's write-back of a row bias. */
    __m256 z = _mm256_setzero_ps();
    _mm256_store_ps(out, _mm256_add_ps(acc[k][0], z));
    _mm256_store_ps(out + 8, _mm256_add_ps(acc[k][1], z));
    float bias = a->bias ? a->bias[k0 + k] : 0.0f;
    float *yk = y + (k0 + k) * pq;
    for (int j = 0; j < 16; ++j)
      if (dst[j] >= 0) yk[dst[j]] = a->bias ? out[j] + bias : out[j];
  }
}

AQ_TARGET_AVX2 void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a);
  const int64_t hw = a->h * a->wd, flat = a->p * wp;
  memset(xp, 0, conv2d_wide_floats(a) * sizeof(float));
  for (int64_t n = n0; n < n1; ++n) {
    const float *x = a->x + n * a->c * hw;
    for (int64_t c = 0; c < a->c; ++c)
      for (int64_t h = 0; h < a->h; ++h)
        memcpy(xp + c * plane + (h + a->pad_h) * wp + a->pad_w, x + c * hw + h * a->wd, (size_t)a->wd * sizeof(float));
    float *y = a->y + n * a->k * a->p * a->q;
    for (int64_t i0 = 0, p = 0, q = 0; i0 < flat; i0 += 16) {
      int32_t dst[16]; /* where each position's output goes in a plane of y, or -1 */
      for (int j = 0; j < 16; ++j) {
        dst[j] = p < a->p && q < a->q ? (int32_t)(p * a->q + q) : -1;
        if (++q == wp) q = 0, ++p;
      }
      for (int64_t k0 = 0; k0 < a->k; k0 += WIDE_KB) {
        switch (a->k - k0 < WIDE_KB ? a->k - k0 : WIDE_KB) {
          case 6: wide_block(a, 6, k0, i0, xp, plane, wp, dst, y); break;
          case 5: wide_block(a, 5, k0, i0, xp, plane, wp, dst, y); break;
          case 4: wide_block(a, 4, k0, i0, xp, plane, wp, dst, y); break;
          case 3: wide_block(a, 3, k0, i0, xp, plane, wp, dst, y); break;
          case 2: wide_block(a, 2, k0, i0, xp, plane, wp, dst, y); break;
          default: wide_block(a, 1, k0, i0, xp, plane, wp, dst, y); break;
        }
      }
    }
  }
}
#else
void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  (void)a, (void)n0, (void)n1, (void)xp;
}
#endif
