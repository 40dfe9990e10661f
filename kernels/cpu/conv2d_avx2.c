/* conv2d's direct paths for the small filter volumes (LeNet's 1 -> 6 and
 * 6 -> 16 5x5 layers), where the GEMM path spends most of its time packing
 * im2col panels for few multiply-adds. AVX2 + FMA; AVX-512 CPUs run them
 * too.
 * Forward on the padded-width grid: each image is copied once into a
 * zero-padded plane per channel, Wp = W + 2 pad floats wide. Output pixel
 * (p, q) is then computed at flat position i = p Wp + q, and tap (c, r, s)
 * reads the padded plane at i + r Wp + s: contiguous across rows, so 16
 * consecutive positions are two vector loads whatever the row breaks
 * (positions with q >= Q are computed and dropped). Six filters a pass
 * keep 12 accumulators; each sum runs over (c, r, s) in order from zero,
 * as the GEMM path's single depth slice does, so y is the same bit for
 * bit. Where K is a multiple of 8 and that costs fewer multiply-adds, the
 * filters ride in the lanes instead (same sums, no dropped lanes).
 * The filter gradient walks the same grid: dy copied to planes Wp wide
 * (zeros at q >= Q) or read in place row by row, each dw[k, c, r, s] the
 * dot product of dy's plane with the padded image shifted by r Wp + s, KB
 * filters by 12 / KB taps a pass; or, K a multiple of 16, the filters in
 * the lanes. (A position past Q multiplies a zero of dy by x: an Inf or
 * NaN of x there reaches dw, where the definition would not read it.)
 * The data gradient: the column matrix W^T dy[n] by a direct loop, added
 * into dx by a vector col2im. */
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

/* The padded planes of one image, rounded to whole vectors. */
static int64_t padded_floats(const aq_conv2d_args_t *a) { return (a->c * padded_plane(a) + 15) / 16 * 16; }

/* The filter gradient's dy on the padded-width grid: p Wp + q, zeros at
 * q >= Q, one plane per filter. */
static int64_t dy_plane(const aq_conv2d_args_t *a) { return (a->p * (a->wd + 2 * a->pad_w) + 15) / 16 * 16; }

size_t conv2d_wide_bwd_floats(const aq_conv2d_args_t *a) {
  return (size_t)(padded_floats(a) + a->k * dy_plane(a) + (a->k * a->c * a->r * a->s) * 8);
}

int conv2d_col2im_fits(const aq_conv2d_args_t *a) {
  return a->stride_h == 1 && a->stride_w == 1 && a->wd <= 64 && a->s <= 32 && (a->s - 1) * a->dil_w + 8 <= COLS_GUARD;
}

int conv2d_wide_fits(const aq_conv2d_args_t *a) {
  return a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 && a->dil_w == 1 && a->s <= 32 &&
         a->c * a->r * a->s <= GEMM_KC && conv2d_wide_bwd_floats(a) * sizeof(float) <= GEMM_SCRATCH_BYTES &&
         conv2d_wide_fwd_floats(a) * sizeof(float) <= GEMM_SCRATCH_BYTES;
}

#if defined(__x86_64__)
/* dst[0 .. n) = src[0 .. n), in vectors and one masked tail (a memcpy call
 * a row costs more than the row's copy at these widths). */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void copy_row(float *dst, const float *src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  if (i < n) {
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(dst + i, m, _mm256_maskload_ps(src + i, m));
  }
}

/* Images [n0, n1)'s channels [c0, c1) into their zero-padded planes (the
 * padding written once, before). */
AQ_TARGET_AVX2 static void copy_padded(const aq_conv2d_args_t *a, int64_t n, int64_t c0, int64_t c1, float *xp) {
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), hw = a->h * a->wd;
  const float *x = a->x + n * a->c * hw;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t h = 0; h < a->h; ++h) copy_row(xp + c * plane + (h + a->pad_h) * wp + a->pad_w, x + c * hw + h * a->wd, a->wd);
}

/* KB filters (their weights wt[l KB + k], tap by tap) over 2 vectors of
 * flat positions from i0 (16 with AVX2, 32 with AVX-512: the same sums in
 * the same order, so y is the same bit for bit on either): the sums, + 0
 * and the bias as the GEMM path's write-back of a row bias does, go to
 * the flat output planes yf. (The sums leave their registers in an
 * unrolled loop: indexed at run time, the array would live on the stack,
 * stored back at every tap.) */
#define AQ_WIDE_BLOCK(NAME, TARGET, V, N, ZERO, LOADU, SET1, FMADD, ADD, STOREU)                                  \
  TARGET static inline __attribute__((always_inline)) void NAME(int kb, const float *wt, int64_t crs,            \
                                                                const float *xp, const int64_t *off, int64_t i0, \
                                                                const float *bias, float *yf, int64_t yplane) {  \
    V acc[WIDE_KB][2];                                                                                           \
    _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) acc[k][0] = acc[k][1] = ZERO();                         \
    for (int64_t l = 0; l < crs; ++l) {                                                                          \
      const float *xr = xp + off[l] + i0;                                                                        \
      V x0 = LOADU(xr), x1 = LOADU(xr + N);                                                                      \
      _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {                                                     \
        V wv = SET1(wt[l * kb + k]);                                                                             \
        acc[k][0] = FMADD(wv, x0, acc[k][0]);                                                                    \
        acc[k][1] = FMADD(wv, x1, acc[k][1]);                                                                    \
      }                                                                                                          \
    }                                                                                                            \
    _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {                                                       \
      V v0 = ADD(acc[k][0], ZERO()), v1 = ADD(acc[k][1], ZERO());                                                \
      if (bias) v0 = ADD(v0, SET1(bias[k])), v1 = ADD(v1, SET1(bias[k]));                                        \
      STOREU(yf + k * yplane + i0, v0);                                                                          \
      STOREU(yf + k * yplane + i0 + N, v1);                                                                      \
    }                                                                                                            \
  }
AQ_WIDE_BLOCK(wide_block, AQ_TARGET_AVX2, __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps,
              _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)
AQ_WIDE_BLOCK(wide_block512, AQ_TARGET_AVX512, __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps,
              _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
#undef AQ_WIDE_BLOCK

/* One image's flat outputs, blocks of STEP positions by up to 6 filters
 * (wt: each block of filters' weights tap by tap). */
#define AQ_WIDE_IMAGE(NAME, TARGET, BLOCK, STEP)                                                                 \
  TARGET static void NAME(const aq_conv2d_args_t *a, const float *xp, const int64_t *off, const float *wt,       \
                          int64_t crs, int64_t end, float *yf, int64_t yplane) {                                 \
    for (int64_t i0 = 0; i0 < end; i0 += STEP)                                                                   \
      for (int64_t k0 = 0; k0 < a->k; k0 += WIDE_KB) {                                                           \
        const float *w = wt + k0 * crs, *b = a->bias ? a->bias + k0 : NULL;                                      \
        float *y = yf + k0 * yplane;                                                                             \
        switch (a->k - k0 < WIDE_KB ? a->k - k0 : WIDE_KB) {                                                     \
          case 6: BLOCK(6, w, crs, xp, off, i0, b, y, yplane); break;                                            \
          case 5: BLOCK(5, w, crs, xp, off, i0, b, y, yplane); break;                                            \
          case 4: BLOCK(4, w, crs, xp, off, i0, b, y, yplane); break;                                            \
          case 3: BLOCK(3, w, crs, xp, off, i0, b, y, yplane); break;                                            \
          case 2: BLOCK(2, w, crs, xp, off, i0, b, y, yplane); break;                                            \
          default: BLOCK(1, w, crs, xp, off, i0, b, y, yplane); break;                                           \
        }                                                                                                        \
      }                                                                                                          \
  }
AQ_WIDE_IMAGE(wide_image256, AQ_TARGET_AVX2, wide_block, 16)
AQ_WIDE_IMAGE(wide_image512, AQ_TARGET_AVX512, wide_block512, 32)
#undef AQ_WIDE_IMAGE

/* The forward's flat output plane: P Wp positions rounded to whole blocks
 * of either ISA. */
static int64_t out_plane(const aq_conv2d_args_t *a) { return (a->p * (a->wd + 2 * a->pad_w) + 31) / 32 * 32; }

/* The forward's scratch: the padded image, K flat output planes, the
 * weights tap by tap (each block of filters' own [l][k] run). */
size_t conv2d_wide_fwd_floats(const aq_conv2d_args_t *a) {
  return (size_t)(padded_floats(a) + a->k * (out_plane(a) + 8) + a->k * a->c * a->r * a->s);
}

/* The forward with the filters in the lanes, for K a multiple of 8: KV
 * vectors of filters x KVEC_NP positions (each its own pointer into the
 * padded image) a block, the sums over (c, r, s) in order from zero as on
 * the grid, into out[position][K]. Where K fills whole vectors, every
 * lane is a real output, not one of the padded width's. */
enum { KVEC_NP = 6 };
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void kvec_block(int kv, const float *wt, int64_t K,
                                                                            int64_t crs, const float *const *xb,
                                                                            const int64_t *off, float *out) {
  __m256 acc[2][KVEC_NP];
  _Pragma("GCC unroll 6") for (int j = 0; j < KVEC_NP; ++j) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
  for (int64_t l = 0; l < crs; ++l) {
    __m256 w0 = _mm256_loadu_ps(wt + l * K), w1 = kv > 1 ? _mm256_loadu_ps(wt + l * K + 8) : w0;
    const int64_t o = off[l];
    /* One broadcast at a time: all six live at once would push sums out
     * of the 16 registers. */
    _Pragma("GCC unroll 6") for (int j = 0; j < KVEC_NP; ++j) {
      __m256 xv = _mm256_broadcast_ss(xb[j] + o);
      acc[0][j] = _mm256_fmadd_ps(w0, xv, acc[0][j]);
      if (kv > 1) acc[1][j] = _mm256_fmadd_ps(w1, xv, acc[1][j]);
    }
  }
  _Pragma("GCC unroll 6") for (int j = 0; j < KVEC_NP; ++j) {
    _mm256_storeu_ps(out + j * K, acc[0][j]);
    if (kv > 1) _mm256_storeu_ps(out + j * K + 8, acc[1][j]);
  }
}

/* Multiply-adds (in vectors) of each forward, per image. */
static int64_t wide_fmas(const aq_conv2d_args_t *a) {
  return dy_plane(a) / 8 * (a->k + WIDE_KB - 1) / WIDE_KB * WIDE_KB * a->c * a->r * a->s;
}
static int64_t kvec_fmas(const aq_conv2d_args_t *a) {
  return (a->p * a->q + KVEC_NP - 1) / KVEC_NP * KVEC_NP * (a->k / 8) * a->c * a->r * a->s;
}

AQ_TARGET_AVX2 static void fwd_kvec(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), pq = a->p * a->q, K = a->k;
  const int64_t rs = a->r * a->s, crs = a->c * rs;
  float *wt = xp + padded_floats(a), *yt = wt + crs * K; /* yt: [position][K], a block's slack after it */
  memset(xp, 0, (size_t)padded_floats(a) * sizeof(float));
  int64_t off[GEMM_KC];
  for (int64_t l = 0; l < crs; ++l) {
    off[l] = (l / rs) * plane + ((l % rs) / a->s) * wp + l % a->s;
    for (int64_t k = 0; k < K; ++k) wt[l * K + k] = a->w[k * crs + l];
  }
  for (int64_t n = n0; n < n1; ++n) {
    copy_padded(a, n, 0, a->c, xp);
    for (int64_t pos0 = 0; pos0 < pq; pos0 += KVEC_NP) {
      const float *xb[KVEC_NP];
      for (int j = 0; j < KVEC_NP; ++j) {
        int64_t pos = pos0 + j < pq ? pos0 + j : pq - 1; /* past the last: a real position, its sums dropped */
        xb[j] = xp + (pos / a->q) * wp + pos % a->q;
      }
      for (int64_t k0 = 0; k0 < K; k0 += 16) {
        if (K - k0 >= 16) kvec_block(2, wt + k0, K, crs, xb, off, yt + pos0 * K + k0);
        else kvec_block(1, wt + k0, K, crs, xb, off, yt + pos0 * K + k0);
      }
    }
    float *y = a->y + n * K * pq;
    for (int64_t k = 0; k < K; ++k) {
      float b = a->bias ? a->bias[k] : 0.0f;
      for (int64_t pos = 0; pos < pq; ++pos) {
        float v = yt[pos * K + k] + 0.0f;
        y[k * pq + pos] = a->bias ? v + b : v;
      }
    }
  }
}

AQ_TARGET_AVX2 void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  /* (AVX-512 runs the grid's blocks in vectors of 16, the lanes' path in 8.) */
  if (a->k % 8 == 0 && kvec_fmas(a) < wide_fmas(a) / (aq_cpu_isa() >= AQ_CPU_ISA_AVX512 ? 2 : 1)) {
    fwd_kvec(a, n0, n1, xp);
    return;
  }
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), pq = a->p * a->q;
  const int64_t rs = a->r * a->s, crs = a->c * rs, yplane = out_plane(a);
  float *yf = xp + padded_floats(a), *wt = yf + a->k * yplane;
  memset(xp, 0, (size_t)padded_floats(a) * sizeof(float));
  int64_t off[GEMM_KC];
  for (int64_t l = 0; l < crs; ++l) off[l] = (l / rs) * plane + ((l % rs) / a->s) * wp + l % a->s;
  for (int64_t k0 = 0; k0 < a->k; k0 += WIDE_KB) {
    int64_t kb = a->k - k0 < WIDE_KB ? a->k - k0 : WIDE_KB;
    for (int64_t l = 0; l < crs; ++l)
      for (int64_t k = 0; k < kb; ++k) wt[k0 * crs + l * kb + k] = a->w[(k0 + k) * crs + l];
  }
  int wide512 = aq_cpu_isa() >= AQ_CPU_ISA_AVX512;
  for (int64_t n = n0; n < n1; ++n) {
    copy_padded(a, n, 0, a->c, xp);
    if (wide512) wide_image512(a, xp, off, wt, crs, yplane, yf, yplane);
    else wide_image256(a, xp, off, wt, crs, dy_plane(a), yf, yplane);
    float *y = a->y + n * a->k * pq;
    for (int64_t k = 0; k < a->k; ++k)
      for (int64_t p = 0; p < a->p; ++p) copy_row(y + k * pq + p * a->q, yf + k * yplane + p * wp, a->q);
  }
}

/* The data gradient's columns, dcol (C R S x P Q) = W^T dy[n], for small
 * filter volumes: LB <= 6 rows (taps l0 ..) by 16 positions from j0, the
 * sums over the K filters in order from zero. Rows ld floats apart in
 * dyc (dy's planes, zero-padded to whole blocks) and in dcol. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void dcol_block(int lb, const float *w, int64_t crs,
                                                                            int64_t kk, const float *dyc,
                                                                            int64_t ld, int64_t j0, float *dcol) {
  __m256 acc[6][2];
  _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kk; ++k) {
    __m256 d0 = _mm256_loadu_ps(dyc + k * ld + j0), d1 = _mm256_loadu_ps(dyc + k * ld + j0 + 8);
    _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) {
      __m256 wv = _mm256_broadcast_ss(w + k * crs + i);
      acc[i][0] = _mm256_fmadd_ps(wv, d0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(wv, d1, acc[i][1]);
    }
  }
  _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) {
    _mm256_storeu_ps(dcol + i * ld + j0, acc[i][0]);
    _mm256_storeu_ps(dcol + i * ld + j0 + 8, acc[i][1]);
  }
}

/* The same over 32 positions in two AVX-512 vectors: the same sums. */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void dcol_block512(int lb, const float *w, int64_t crs,
                                                                                 int64_t kk, const float *dyc,
                                                                                 int64_t ld, int64_t j0,
                                                                                 float *dcol) {
  __m512 acc[6][2];
  _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kk; ++k) {
    __m512 d0 = _mm512_loadu_ps(dyc + k * ld + j0), d1 = _mm512_loadu_ps(dyc + k * ld + j0 + 16);
    _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) {
      __m512 wv = _mm512_set1_ps(w[k * crs + i]);
      acc[i][0] = _mm512_fmadd_ps(wv, d0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(wv, d1, acc[i][1]);
    }
  }
  _Pragma("GCC unroll 6") for (int i = 0; i < lb; ++i) {
    _mm512_storeu_ps(dcol + i * ld + j0, acc[i][0]);
    _mm512_storeu_ps(dcol + i * ld + j0 + 16, acc[i][1]);
  }
}

/* dcol's rows of blocks of STEP positions by up to 6 taps. */
#define AQ_DCOL_ROWS(NAME, TARGET, BLOCK, STEP)                                                                  \
  TARGET static void NAME(const aq_conv2d_args_t *a, const float *dyc, int64_t ld, float *dcol) {              \
    const int64_t crs = a->c * a->r * a->s;                                                                      \
    for (int64_t j0 = 0; j0 < ld; j0 += STEP)                                                                    \
      for (int64_t l0 = 0; l0 < crs; l0 += 6) {                                                                  \
        const float *w = a->w + l0;                                                                              \
        float *d = dcol + l0 * ld;                                                                               \
        switch (crs - l0 < 6 ? crs - l0 : 6) {                                                                   \
          case 6: BLOCK(6, w, crs, a->k, dyc, ld, j0, d); break;                                                 \
          case 5: BLOCK(5, w, crs, a->k, dyc, ld, j0, d); break;                                                 \
          case 4: BLOCK(4, w, crs, a->k, dyc, ld, j0, d); break;                                                 \
          case 3: BLOCK(3, w, crs, a->k, dyc, ld, j0, d); break;                                                 \
          case 2: BLOCK(2, w, crs, a->k, dyc, ld, j0, d); break;                                                 \
          default: BLOCK(1, w, crs, a->k, dyc, ld, j0, d); break;                                                \
        }                                                                                                        \
      }                                                                                                          \
  }
AQ_DCOL_ROWS(dcol_rows256, AQ_TARGET_AVX2, dcol_block, 16)
AQ_DCOL_ROWS(dcol_rows512, AQ_TARGET_AVX512, dcol_block512, 32)
#undef AQ_DCOL_ROWS

/* P Q rounded to whole blocks of the ISA's (16 positions, 32 with
 * AVX-512). */
int64_t conv2d_cols_ld(const aq_conv2d_args_t *a) {
  int64_t unit = aq_cpu_isa() >= AQ_CPU_ISA_AVX512 ? 32 : 16;
  return (a->p * a->q + unit - 1) / unit * unit;
}

AQ_TARGET_AVX2 void conv2d_bwd_data_cols_avx2(const aq_conv2d_args_t *a, int64_t n, float *dyc, float *dcol) {
  const int64_t pq = a->p * a->q, ld = conv2d_cols_ld(a);
  for (int64_t k = 0; k < a->k; ++k) {
    copy_row(dyc + k * ld, a->dy + (n * a->k + k) * pq, pq);
    for (int64_t j = pq; j < ld; ++j) dyc[k * ld + j] = 0.0f;
  }
  if (ld % 32 == 0 && aq_cpu_isa() >= AQ_CPU_ISA_AVX512) dcol_rows512(a, dyc, ld, dcol);
  else dcol_rows256(a, dyc, ld, dcol);
}

/* dx[n] = col2im(dcol) at stride 1, for W <= 64 and taps reaching at most
 * COLS_GUARD floats either side of a row: each vector of 8 columns of a
 * row of dx sums its taps (r, s) in order in a register, tap s reading
 * dcol's row shifted by s dil - pad, the lanes outside that row masked
 * off (dcol needs COLS_GUARD readable floats before and after it). */
AQ_TARGET_AVX2 void conv2d_col2im_avx2(const aq_conv2d_args_t *a, const float *dcol, int64_t ld, float *dx) {
  const int64_t W = a->wd, nv = (W + 7) / 8, rs = a->r * a->s, P = a->p, Q = a->q;
  __m256 mask[32][8];
  for (int64_t s = 0; s < a->s; ++s)
    for (int64_t j = 0; j < nv; ++j) {
      __m256i iw = _mm256_add_epi32(_mm256_set1_epi32((int)(8 * j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      __m256i q = _mm256_add_epi32(iw, _mm256_set1_epi32((int)(a->pad_w - s * a->dil_w)));
      __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), q),
                                       _mm256_cmpgt_epi32(_mm256_set1_epi32((int)Q), q));
      in = _mm256_and_si256(in, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)W), iw));
      mask[s][j] = _mm256_castsi256_ps(in);
    }
  __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(W - 8 * (nv - 1))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int64_t c = 0; c < a->c; ++c)
    for (int64_t ih = 0; ih < a->h; ++ih) {
      float *out = dx + (c * a->h + ih) * W;
      for (int64_t j = 0; j < nv; ++j) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t r = 0; r < a->r; ++r) {
          int64_t p = ih + a->pad_h - r * a->dil_h;
          if (p < 0 || p >= P) continue;
          const float *row = dcol + (c * rs + r * a->s) * ld + p * Q + a->pad_w + 8 * j;
          for (int64_t s = 0; s < a->s; ++s)
            acc = _mm256_add_ps(acc, _mm256_and_ps(_mm256_loadu_ps(row + s * (ld - a->dil_w)), mask[s][j]));
        }
        if (j < nv - 1) _mm256_storeu_ps(out + 8 * j, acc);
        else _mm256_maskstore_ps(out + 8 * j, tail, acc);
      }
    }
}

/* How the filter gradient walks the positions: `rows` rows of `nvec`
 * vectors, dy's rows drow apart and its filters' planes dplane apart, the
 * padded image's rows xrow apart. On the flat grid (dy copied there) that
 * is one row of every position; in place, dy's own rows, the last vector of
 * each masked to the row when q is not a multiple of 8. */
typedef struct dw_walk {
  const float *dy;
  int64_t dplane, drow, xrow, rows, nvec;
  int masked;
  __m256i tail; /* the lanes of a row's last vector inside the row */
} dw_walk_t;

/* KB filters from w->dy x TB taps (their offsets in the padded image xp)
 * over every position of the walk: acc[k][t] += dy x, acc's filters ks
 * apart. KB x TB <= 12 sums stay in registers; each x vector serves KB
 * filters and each dy vector TB taps. On AVX-512, TB counts pairs of taps:
 * a vector holds 8 positions of two taps (lanes 0-7, 8-15, dy's 8 values
 * broadcast to both halves), so every lane sums the same positions in the
 * same order as an AVX2 lane: dw is the same bit for bit on either ISA.
 * X(t, j): the x vector of the t-th tap (pair) at vector j of a row; D(d):
 * dy's 8 values as a vector. */
#define AQ_WIDE_DW(NAME, TARGET, V, N, LOADU, STOREU, FMADD, X, D)                                                 \
  TARGET static inline __attribute__((always_inline)) void NAME(int kb, int tb, int masked, const dw_walk_t *w,  \
                                                                const float *xp, const int64_t *off, float *acc, \
                                                                int64_t ks) {                                    \
    V s[12];                                                                                                     \
    _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k)                                                         \
      _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) s[k * tb + t] = LOADU(acc + k * ks + N * t);        \
    const int64_t nvec = w->nvec, dplane = w->dplane;                                                            \
    for (int64_t row = 0; row < w->rows; ++row) {                                                                \
      const float *dr = w->dy + row * w->drow, *xr = xp + row * w->xrow;                                         \
      for (int64_t j = 0; j < nvec; ++j) {                                                                       \
        V x[12];                                                                                                 \
        _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) x[t] = X(t, j);                                    \
        _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k) {                                                   \
          const float *dk = dr + k * dplane + 8 * j;                                                             \
          V d = D(masked && j == nvec - 1 ? _mm256_maskload_ps(dk, w->tail) : _mm256_loadu_ps(dk));              \
          _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) s[k * tb + t] = FMADD(d, x[t], s[k * tb + t]);   \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    _Pragma("GCC unroll 6") for (int k = 0; k < kb; ++k)                                                         \
      _Pragma("GCC unroll 12") for (int t = 0; t < tb; ++t) STOREU(acc + k * ks + N * t, s[k * tb + t]);        \
  }
#define AQ_X256(t, j) _mm256_loadu_ps(xr + off[t] + 8 * (j))
#define AQ_X512(t, j)                                                                                            \
  _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(xr + off[2 * (t)] + 8 * (j))),                       \
                     _mm256_loadu_ps(xr + off[2 * (t) + 1] + 8 * (j)), 1)
#define AQ_D256(d) (d)
AQ_WIDE_DW(wide_dw, AQ_TARGET_AVX2, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps, AQ_X256, AQ_D256)
AQ_WIDE_DW(wide_dw2, AQ_TARGET_AVX512, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps, AQ_X512,
           _mm512_broadcast_f32x8)
#undef AQ_WIDE_DW
#undef AQ_X256
#undef AQ_X512
#undef AQ_D256

/* Every KB x TB block with KB <= 6 and KB TB <= 12 has its own build, so
 * no part of a cut runs a narrower block than its filters and taps allow
 * (on AVX-512, TB counts pairs of taps, at most 6). */
#define AQ_DW_TB(F, KB, TB)                                       \
  case (KB) * 16 + (TB):                                          \
    if (w->masked) F(KB, TB, 1, w, xp, off, acc, ks);             \
    else F(KB, TB, 0, w, xp, off, acc, ks);                       \
    break;
#define AQ_DW_BLOCK(NAME, TARGET, F)                                                                              \
  TARGET static void NAME(int kb, int tb, const dw_walk_t *w, const float *xp, const int64_t *off, float *acc,   \
                          int64_t ks) {                                                                          \
    switch (kb * 16 + tb) {                                                                                      \
      AQ_DW_TB(F, 1, 1) AQ_DW_TB(F, 1, 2) AQ_DW_TB(F, 1, 3) AQ_DW_TB(F, 1, 4) AQ_DW_TB(F, 1, 5)                  \
      AQ_DW_TB(F, 1, 6) AQ_DW_TB(F, 1, 7) AQ_DW_TB(F, 1, 8) AQ_DW_TB(F, 1, 9) AQ_DW_TB(F, 1, 10)                 \
      AQ_DW_TB(F, 1, 11) AQ_DW_TB(F, 1, 12)                                                                      \
      AQ_DW_TB(F, 2, 1) AQ_DW_TB(F, 2, 2) AQ_DW_TB(F, 2, 3) AQ_DW_TB(F, 2, 4) AQ_DW_TB(F, 2, 5)                  \
      AQ_DW_TB(F, 2, 6)                                                                                          \
      AQ_DW_TB(F, 3, 1) AQ_DW_TB(F, 3, 2) AQ_DW_TB(F, 3, 3) AQ_DW_TB(F, 3, 4)                                    \
      AQ_DW_TB(F, 4, 1) AQ_DW_TB(F, 4, 2) AQ_DW_TB(F, 4, 3)                                                      \
      AQ_DW_TB(F, 5, 1) AQ_DW_TB(F, 5, 2)                                                                        \
      AQ_DW_TB(F, 6, 1) AQ_DW_TB(F, 6, 2)                                                                        \
      default: break;                                                                                            \
    }                                                                                                            \
  }
AQ_DW_BLOCK(wide_dw_block, AQ_TARGET_AVX2, wide_dw)
AQ_DW_BLOCK(wide_dw2_block, AQ_TARGET_AVX512, wide_dw2)
#undef AQ_DW_BLOCK
#undef AQ_DW_TB

/* Whether dy is read in place, row by row: where that computes no more
 * lanes than the flat grid (each row a whole number of vectors, or
 * nearly), it saves every part copying dy's planes. */
static int dw_in_place(const aq_conv2d_args_t *a) { return (a->q + 7) / 8 * 8 * a->p <= dy_plane(a); }

/* src's 8 rows (ss floats apart) x 8 columns into dst's 8 rows (ds
 * apart): dst[i][j] = src[j][i]. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void transpose8(const float *src, int64_t ss, float *dst,
                                                                            int64_t ds) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

/* The filter gradient with the filters in the lanes (K a multiple of 16,
 * where that costs fewer multiply-adds than the padded-width grid): dy of
 * an image turned to dyt[position][filter], then 16 filters (two vectors)
 * x TB <= 6 taps a pass over the image's positions, each broadcasting x
 * at the position shifted by the taps' offsets. Each weight is one sum
 * over the images' positions in order, whatever the cut. */
static int dw_kvec(const aq_conv2d_args_t *a) {
  int64_t flat = (a->k + WIDE_KB - 1) / WIDE_KB * WIDE_KB * (dw_in_place(a) ? a->p * ((a->q + 7) / 8) : dy_plane(a) / 8);
  return a->k % 16 == 0 && a->k / 8 * a->p * a->q < flat;
}

int64_t conv2d_dw_filter_unit(const aq_conv2d_args_t *a) { return dw_kvec(a) ? 16 : 1; }

AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void kvec_dw(int tb, const aq_conv2d_args_t *a,
                                                                         const float *dyt, int64_t kk,
                                                                         const float *xp, const int64_t *off,
                                                                         float *acc) {
  const int64_t wp = a->wd + 2 * a->pad_w, Q = a->q;
  __m256 s0[8], s1[8]; /* 8: the builds for 7 and 8 taps exist, for AVX-512's passes, but AVX2 runs up to 6 */
  int64_t o[8];
  _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) {
    s0[j] = _mm256_loadu_ps(acc + 16 * j), s1[j] = _mm256_loadu_ps(acc + 16 * j + 8), o[j] = off[j];
  }
  for (int64_t p = 0; p < a->p; ++p)
    for (int64_t q = 0; q < Q; ++q) {
      const float *xb = xp + p * wp + q, *d = dyt + (p * Q + q) * kk;
      __m256 d0 = _mm256_loadu_ps(d), d1 = _mm256_loadu_ps(d + 8);
      _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) {
        __m256 xv = _mm256_broadcast_ss(xb + o[j]);
        s0[j] = _mm256_fmadd_ps(d0, xv, s0[j]);
        s1[j] = _mm256_fmadd_ps(d1, xv, s1[j]);
      }
    }
  _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) {
    _mm256_storeu_ps(acc + 16 * j, s0[j]), _mm256_storeu_ps(acc + 16 * j + 8, s1[j]);
  }
}

/* The same, the 16 filters in one AVX-512 vector, TB <= 8 taps a pass:
 * each sum the same chain over the positions, so dw is the same bit for
 * bit on either ISA. */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void kvec_dw512(int tb, const aq_conv2d_args_t *a,
                                                                              const float *dyt, int64_t kk,
                                                                              const float *xp, const int64_t *off,
                                                                              float *acc) {
  const int64_t wp = a->wd + 2 * a->pad_w, Q = a->q;
  __m512 s[8];
  int64_t o[8];
  _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) s[j] = _mm512_loadu_ps(acc + 16 * j), o[j] = off[j];
  for (int64_t p = 0; p < a->p; ++p)
    for (int64_t q = 0; q < Q; ++q) {
      const float *xb = xp + p * wp + q;
      __m512 d = _mm512_loadu_ps(dyt + (p * Q + q) * kk);
      _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) s[j] = _mm512_fmadd_ps(d, _mm512_set1_ps(xb[o[j]]), s[j]);
    }
  _Pragma("GCC unroll 8") for (int j = 0; j < tb; ++j) _mm512_storeu_ps(acc + 16 * j, s[j]);
}

/* One image's pass for a block of 16 filters over taps [0, nl): sums
 * acc[tap][16], in blocks of TB taps. */
#define AQ_KVEC_TAPS(NAME, TARGET, BLOCK, TB)                                                                     \
  TARGET static void NAME(const aq_conv2d_args_t *a, const float *dyt, int64_t kk, const float *xp,              \
                          const int64_t *off, int64_t nl, float *acc) {                                          \
    for (int64_t t0 = 0; t0 < nl; t0 += TB) {                                                                    \
      const int64_t *ot = off + t0;                                                                              \
      float *at = acc + 16 * t0;                                                                                 \
      switch (nl - t0 < TB ? nl - t0 : TB) {                                                                     \
        case 8: BLOCK(8, a, dyt, kk, xp, ot, at); break;                                                         \
        case 7: BLOCK(7, a, dyt, kk, xp, ot, at); break;                                                         \
        case 6: BLOCK(6, a, dyt, kk, xp, ot, at); break;                                                         \
        case 5: BLOCK(5, a, dyt, kk, xp, ot, at); break;                                                         \
        case 4: BLOCK(4, a, dyt, kk, xp, ot, at); break;                                                         \
        case 3: BLOCK(3, a, dyt, kk, xp, ot, at); break;                                                         \
        case 2: BLOCK(2, a, dyt, kk, xp, ot, at); break;                                                         \
        default: BLOCK(1, a, dyt, kk, xp, ot, at); break;                                                        \
      }                                                                                                          \
    }                                                                                                            \
  }
AQ_KVEC_TAPS(kvec_taps256, AQ_TARGET_AVX2, kvec_dw, 6)
AQ_KVEC_TAPS(kvec_taps512, AQ_TARGET_AVX512, kvec_dw512, 8)
#undef AQ_KVEC_TAPS

AQ_TARGET_AVX2 static void bwd_filter_kvec(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, int64_t l0, int64_t l1,
                                           float *xp) {
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), pq = a->p * a->q, kk = k1 - k0;
  const int64_t rs = a->r * a->s, crs = a->c * rs, nl = l1 - l0, c0 = l0 / rs, c1 = (l1 - 1) / rs + 1;
  float *dyt = xp + padded_floats(a), *sums = dyt + pq * kk; /* sums: [16-filter block][tap][16] */
  int wide512 = aq_cpu_isa() >= AQ_CPU_ISA_AVX512;
  memset(xp, 0, (size_t)padded_floats(a) * sizeof(float));
  memset(sums, 0, (size_t)(kk * nl) * sizeof(float));
  int64_t off[GEMM_KC];
  for (int64_t l = l0; l < l1; ++l) off[l - l0] = (l / rs) * plane + ((l % rs) / a->s) * wp + l % a->s;
  for (int64_t n = 0; n < a->n; ++n) {
    copy_padded(a, n, c0, c1, xp);
    const float *dy = a->dy + (n * a->k + k0) * pq;
    for (int64_t kb = 0; kb < kk; kb += 8) {
      int64_t pos = 0;
      for (; pos + 8 <= pq; pos += 8) transpose8(dy + kb * pq + pos, pq, dyt + pos * kk + kb, kk);
      for (; pos < pq; ++pos)
        for (int64_t k = kb; k < kb + 8; ++k) dyt[pos * kk + k] = dy[k * pq + pos];
    }
    for (int64_t kb = 0; kb < kk; kb += 16) {
      if (wide512) kvec_taps512(a, dyt + kb, kk, xp, off, nl, sums + kb * nl);
      else kvec_taps256(a, dyt + kb, kk, xp, off, nl, sums + kb * nl);
    }
  }
  const float *acc = sums;
  for (int64_t kb = 0; kb < kk; kb += 16)
    for (int64_t t = 0; t < nl; ++t, acc += 16)
      for (int64_t k = 0; k < 16; ++k) a->dw[(k0 + kb + k) * crs + l0 + t] = acc[k];
}

/* dw for filters [k0, k1) x taps [l0, l1) of c r s. The part's sums live
 * in `sums` across the images, 8 lanes each; per image, x's channels
 * that the taps read are copied to the padded-width grid (and the part's
 * planes of dy, unless read in place), then each block of up to 6 filters
 * x 12 / KB taps makes one pass over the positions. */
AQ_TARGET_AVX2 void conv2d_bwd_filter_wide_avx2(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, int64_t l0,
                                               int64_t l1, float *xp) {
  if (dw_kvec(a)) {
    bwd_filter_kvec(a, k0, k1, l0, l1, xp);
    return;
  }
  const int64_t wp = a->wd + 2 * a->pad_w, plane = padded_plane(a), pq = a->p * a->q;
  const int64_t rs = a->r * a->s, crs = a->c * rs, dplane = dy_plane(a), nl = l1 - l0;
  const int64_t c0 = l0 / rs, c1 = (l1 - 1) / rs + 1;
  float *dyp = xp + padded_floats(a), *sums = dyp + a->k * dplane;
  memset(xp, 0, conv2d_wide_bwd_floats(a) * sizeof(float));
  int64_t off[GEMM_KC];
  for (int64_t l = l0; l < l1; ++l) off[l - l0] = (l / rs) * plane + ((l % rs) / a->s) * wp + l % a->s;
  dw_walk_t w = {.dy = dyp, .dplane = dplane, .rows = 1, .nvec = dplane / 8};
  int in_place = dw_in_place(a), wide512 = aq_cpu_isa() >= AQ_CPU_ISA_AVX512;
  if (in_place) {
    w.dplane = pq, w.drow = a->q, w.xrow = wp, w.rows = a->p, w.nvec = (a->q + 7) / 8, w.masked = a->q % 8 != 0;
    w.tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(a->q % 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  for (int64_t n = 0; n < a->n; ++n) {
    copy_padded(a, n, c0, c1, xp);
    if (!in_place)
      for (int64_t k = k0; k < k1; ++k)
        for (int64_t p = 0; p < a->p; ++p) copy_row(dyp + (k - k0) * dplane + p * wp, a->dy + (n * a->k + k) * pq + p * a->q, a->q);
    /* sums[k - k0][l - l0][8 lanes], whatever the blocks */
    for (int64_t kb0 = k0; kb0 < k1; kb0 += WIDE_KB) {
      int kb = (int)(k1 - kb0 < WIDE_KB ? k1 - kb0 : WIDE_KB), tb = 12 / kb;
      float *acc = sums + (kb0 - k0) * nl * 8;
      w.dy = in_place ? a->dy + (n * a->k + kb0) * pq : dyp + (kb0 - k0) * dplane;
      int64_t t0 = 0;
      for (int tp = 12 / kb < 6 ? 12 / kb : 6; wide512 && nl - t0 >= 2;) { /* pairs of taps; an odd last one below */
        int pn = (int)((nl - t0) / 2 < tp ? (nl - t0) / 2 : tp);
        wide_dw2_block(kb, pn, &w, xp, off + t0, acc + 8 * t0, nl * 8);
        t0 += 2 * pn;
      }
      for (; t0 < nl; t0 += tb) {
        int tn = (int)(nl - t0 < tb ? nl - t0 : tb);
        wide_dw_block(kb, tn, &w, xp, off + t0, acc + 8 * t0, nl * 8);
      }
    }
  }
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t l = l0; l < l1; ++l) {
      const float *v = sums + ((k - k0) * nl + l - l0) * 8;
      float t = 0.0f;
      for (int j = 0; j < 8; ++j) t += v[j];
      a->dw[k * crs + l] = t;
    }
}
#else
int64_t conv2d_cols_ld(const aq_conv2d_args_t *a) { return (a->p * a->q + 15) / 16 * 16; }
void conv2d_bwd_data_cols_avx2(const aq_conv2d_args_t *a, int64_t n, float *dyc, float *dcol) {
  (void)a, (void)n, (void)dyc, (void)dcol;
}
void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *xp) {
  (void)a, (void)n0, (void)n1, (void)xp;
}
void conv2d_col2im_avx2(const aq_conv2d_args_t *a, const float *dcol, int64_t ld, float *dx) {
  (void)a, (void)dcol, (void)ld, (void)dx;
}
int64_t conv2d_dw_filter_unit(const aq_conv2d_args_t *a) {
  (void)a;
  return 1;
}
void conv2d_bwd_filter_wide_avx2(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, int64_t l0, int64_t l1,
                                 float *xp) {
  (void)a, (void)k0, (void)k1, (void)l0, (void)l1, (void)xp;
}
#endif
