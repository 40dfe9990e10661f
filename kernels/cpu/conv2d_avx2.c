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
 * depth slice does, so y is the same bit for bit.
 * The filter gradient walks the same grid: dy copied to planes Wp wide
 * (zeros at q >= Q), each dw[k, c, r, s] the dot product of dy's plane
 * with the padded image shifted by r Wp + s, KB filters by 12 / KB taps a
 * pass. (A position past Q multiplies a zero of dy by x: an Inf or NaN of
 * x there reaches dw, where the definition would not read it.) */
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

/* The filter gradient's dy on the padded-width grid: p Wp + q, zeros at
 * q >= Q, one plane per filter. */
static int64_t dy_plane(const aq_conv2d_args_t *a) { return (a->p * (a->wd + 2 * a->pad_w) + 15) / 16 * 16; }

size_t conv2d_wide_bwd_floats(const aq_conv2d_args_t *a) {
  return conv2d_wide_floats(a) + (size_t)(a->k * dy_plane(a) + (a->k * a->c * a->r * a->s) * 8);
}

int conv2d_wide_fits(const aq_conv2d_args_t *a) {
  return a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 && a->dil_w == 1 && a->s <= 32 &&
         a->c * a->r * a->s <= GEMM_KC && conv2d_wide_bwd_floats(a) * sizeof(float) <= GEMM_SCRATCH_BYTES;
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
  /* + 0 and then the bias: the GEMM path's write-back of a row bias. (The
   * sums leave their registers in an unrolled loop: indexed at run time,
   * the array would live on the stack, stored back at every tap.) */
  float out[WIDE_KB][16] __attribute__((aligned(32)));
  _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {
    _mm256_store_ps(out[k], _mm256_add_ps(acc[k][0], _mm256_setzero_ps()));
    _mm256_store_ps(out[k] + 8, _mm256_add_ps(acc[k][1], _mm256_setzero_ps()));
  }
  for (int k = 0; k < kb; ++k) {
    float bias = a->bias ? a->bias[k0 + k] : 0.0f;
    float *yk = y + (k0 + k) * pq;
    for (int j = 0; j < 16; ++j)
      if (dst[j] >= 0) yk[dst[j]] = a->bias ? out[k][j] + bias : out[k][j];
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

/* KB filters from dy's planes dyp x TB taps (their offsets in the padded
 * plane xc) over the flat positions [0, flat): acc[k][t] += dy x. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void wide_dw(int kb, int tb, const float *dyp,
                                                                         int64_t dplane, const float *xc,
                                                                         const int64_t *off, int64_t flat,
                                                                         float *acc) {
  __m256 s[12];
  _Pragma("GCC unroll 12") for (int u = 0; u < kb * tb; ++u) s[u] = _mm256_load_ps(acc + 8 * u);
  for (int64_t i = 0; i < flat; i += 8) {
    __m256 x[12], d[6];
    _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) x[t] = _mm256_loadu_ps(xc + off[t] + i);
    _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {
      d[k] = _mm256_loadu_ps(dyp + k * dplane + i);
      _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) s[k * tb + t] = _mm256_fmadd_ps(d[k], x[t], s[k * tb + t]);
    }
  }
  _Pragma("GCC unroll 12") for (int u = 0; u < kb * tb; ++u) _mm256_store_ps(acc + 8 * u, s[u]);
}

AQ_TARGET_AVX2 void conv2d_bwd_filter_wide_avx2(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, float *xp) {
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), hw = a->h * a->wd, pq = a->p * a->q;
  const int64_t rs = a->r * a->s, dplane = dy_plane(a), flat = dplane;
  float *dyp = xp + conv2d_wide_floats(a), *sums = dyp + a->k * dplane; /* sums: [k][c][rs][8 lanes] */
  memset(xp, 0, conv2d_wide_bwd_floats(a) * sizeof(float));
  int64_t off[GEMM_KC];
  for (int64_t t = 0; t < rs; ++t) off[t] = (t / a->s) * wp + t % a->s;
  for (int64_t n = 0; n < a->n; ++n) {
    const float *x = a->x + n * a->c * hw;
    for (int64_t c = 0; c < a->c; ++c)
      for (int64_t h = 0; h < a->h; ++h)
        memcpy(xp + c * plane + (h + a->pad_h) * wp + a->pad_w, x + c * hw + h * a->wd, (size_t)a->wd * sizeof(float));
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t p = 0; p < a->p; ++p)
        memcpy(dyp + (k - k0) * dplane + p * wp, a->dy + (n * a->k + k) * pq + p * a->q, (size_t)a->q * sizeof(float));
    for (int64_t kb0 = k0; kb0 < k1; kb0 += WIDE_KB) {
      int kb = (int)(k1 - kb0 < WIDE_KB ? k1 - kb0 : WIDE_KB), tb = 12 / kb;
      const float *dk = dyp + (kb0 - k0) * dplane;
      for (int64_t c = 0; c < a->c; ++c)
        for (int64_t t0 = 0; t0 < rs; t0 += tb) {
          int tn = (int)(rs - t0 < tb ? rs - t0 : tb);
          /* acc rows (k, t) of this block lie kb x tn apart in sums: gather them in a block of their own. */
          float blk[12 * 8] __attribute__((aligned(32)));
          for (int k = 0; k < kb; ++k)
            for (int t = 0; t < tn; ++t)
              memcpy(blk + 8 * (k * tn + t), sums + (((kb0 - k0 + k) * a->c + c) * rs + t0 + t) * 8, 32);
          const float *xc = xp + c * plane;
#define AQ_WIDE_DW(KB, TB) wide_dw(KB, TB, dk, dplane, xc, off + t0, flat, blk)
          switch (kb * 16 + tn) {
            case 6 * 16 + 2: AQ_WIDE_DW(6, 2); break;
            case 6 * 16 + 1: AQ_WIDE_DW(6, 1); break;
            case 5 * 16 + 2: AQ_WIDE_DW(5, 2); break;
            case 5 * 16 + 1: AQ_WIDE_DW(5, 1); break;
            case 4 * 16 + 3: AQ_WIDE_DW(4, 3); break;
            case 4 * 16 + 2: AQ_WIDE_DW(4, 2); break;
            case 4 * 16 + 1: AQ_WIDE_DW(4, 1); break;
            case 3 * 16 + 4: AQ_WIDE_DW(3, 4); break;
            case 3 * 16 + 3: AQ_WIDE_DW(3, 3); break;
            case 3 * 16 + 2: AQ_WIDE_DW(3, 2); break;
            case 3 * 16 + 1: AQ_WIDE_DW(3, 1); break;
            case 2 * 16 + 6: AQ_WIDE_DW(2, 6); break;
            default:
              for (int k = 0; k < kb; ++k)
                for (int t = 0; t < tn; ++t) wide_dw(1, 1, dk + k * dplane, dplane, xc, off + t0 + t, flat, blk + 8 * (k * tn + t));
          }
#undef AQ_WIDE_DW
          for (int k = 0; k < kb; ++k)
            for (int t = 0; t < tn; ++t)
              memcpy(sums + (((kb0 - k0 + k) * a->c + c) * rs + t0 + t) * 8, blk + 8 * (k * tn + t), 32);
        }
    }
  }
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t l = 0; l < a->c * rs; ++l) {
      const float *v = sums + ((k - k0) * a->c * rs + l) * 8;
      float t = 0.0f;
      for (int j = 0; j < 8; ++j) t += v[j];
      a->dw[k * a->c * rs + l] = t;
    }
}
#else
void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  (void)a, (void)n0, (void)n1, (void)xp;
}
void conv2d_bwd_filter_wide_avx2(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, float *xp) {
  (void)a, (void)k0, (void)k1, (void)xp;
}
#endif
