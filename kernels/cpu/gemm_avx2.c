/* The AVX2 + FMA GEMM engine (16 vector registers of 8 floats). */
#include "kernels/cpu/gemm_engine.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/isa.h"

/* 8 x 8 transpose in registers: r[i] holds row i on entry, column i on exit. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void transpose8_avx2(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    s[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
    r[j + 4] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
  }
}

/* pack_a with AVX2: a transposed A is already k-major (each depth step is
 * 12 consecutive floats: one 8-wide and one 4-wide copy); a row-major A is
 * transposed 8 columns of k at a time, rows 0-7 as an 8 x 8 block and rows
 * 8-11 as a 4 x 8 one, so loads and stores are full vectors (the scalar
 * packer was 7.5% of a 1024^3 product on AVX2). */
AQ_TARGET_AVX2 void gemm_pack_a_avx2(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                       float *dst) {
  for (int64_t r0 = 0; r0 < mc; r0 += GEMM_MR, dst += kc * GEMM_MR) {
    int64_t rows = mc - r0 < GEMM_MR ? mc - r0 : GEMM_MR;
    if (rows < GEMM_MR) {
      gemm_pack_a_generic(p, i0 + r0, rows, l0, kc, dst);
      continue;
    }
    if (p->trans_a) {
      const float *src = p->a + l0 * p->lda + i0 + r0;
      for (int64_t l = 0; l < kc; ++l, src += p->lda) {
        _mm256_storeu_ps(dst + l * GEMM_MR, _mm256_loadu_ps(src));
        _mm_storeu_ps(dst + l * GEMM_MR + 8, _mm_loadu_ps(src + 8));
      }
      continue;
    }
    const float *src = p->a + (i0 + r0) * p->lda + l0;
    int64_t l = 0;
    for (; l + 8 <= kc; l += 8) {
      __m256 x[8];
      for (int r = 0; r < 8; ++r) x[r] = _mm256_loadu_ps(src + r * p->lda + l);
      transpose8_avx2(x);
      __m256 x8 = _mm256_loadu_ps(src + 8 * p->lda + l), x9 = _mm256_loadu_ps(src + 9 * p->lda + l);
      __m256 x10 = _mm256_loadu_ps(src + 10 * p->lda + l), x11 = _mm256_loadu_ps(src + 11 * p->lda + l);
      __m256 t0 = _mm256_unpacklo_ps(x8, x9), t1 = _mm256_unpackhi_ps(x8, x9);
      __m256 t2 = _mm256_unpacklo_ps(x10, x11), t3 = _mm256_unpackhi_ps(x10, x11);
      /* u[j]: rows 8-11 of column j (low half) and of column j + 4 (high half). */
      __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee), _mm256_shuffle_ps(t1, t3, 0x44),
                     _mm256_shuffle_ps(t1, t3, 0xee)};
      for (int j = 0; j < 8; ++j) {
        _mm256_storeu_ps(dst + (l + j) * GEMM_MR, x[j]);
        _mm_storeu_ps(dst + (l + j) * GEMM_MR + 8,
                      j < 4 ? _mm256_castps256_ps128(u[j]) : _mm256_extractf128_ps(u[j - 4], 1));
      }
    }
    for (; l < kc; ++l)
      for (int r = 0; r < GEMM_MR; ++r) dst[l * GEMM_MR + r] = src[r * p->lda + l];
  }
}

/* pack_b with AVX2 (the AVX-512 engine uses it too): a row-major B is
 * copied as the portable packer copies it; a transposed B (B[j * ldb + l],
 * the data gradient of a matmul) is transposed 8 x 8 at a time instead of
 * one float per strided store. */
AQ_TARGET_AVX2 void gemm_pack_b_avx2(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc,
                                       float *dst) {
  if (!p->trans_b) {
    /* Full panels: four vector copies a row, the rows a few ahead
     * prefetched (they lie ldb apart, often 4 KB: the hardware prefetcher
     * does not follow them across a panel's 32 columns). */
    int64_t c0 = 0;
    for (; c0 + GEMM_NR <= nc; c0 += GEMM_NR, dst += kc * GEMM_NR) {
      const float *src = p->b + l0 * p->ldb + j0 + c0;
      for (int64_t l = 0; l < kc; ++l, src += p->ldb) {
        __builtin_prefetch(src + 8 * p->ldb);
        __builtin_prefetch(src + 8 * p->ldb + 16);
        __m256 x0 = _mm256_loadu_ps(src), x1 = _mm256_loadu_ps(src + 8), x2 = _mm256_loadu_ps(src + 16),
               x3 = _mm256_loadu_ps(src + 24);
        _mm256_store_ps(dst + l * GEMM_NR, x0);
        _mm256_store_ps(dst + l * GEMM_NR + 8, x1);
        _mm256_store_ps(dst + l * GEMM_NR + 16, x2);
        _mm256_store_ps(dst + l * GEMM_NR + 24, x3);
      }
    }
    if (c0 < nc) gemm_pack_b_generic(p, l0, kc, j0 + c0, nc - c0, dst);
    return;
  }
  for (int64_t c0 = 0; c0 < nc; c0 += GEMM_NR, dst += kc * GEMM_NR) {
    int64_t cols = nc - c0 < GEMM_NR ? nc - c0 : GEMM_NR, j = j0 + c0;
    if (cols < GEMM_NR) memset(dst, 0, (size_t)kc * GEMM_NR * sizeof(float));
    int64_t full = cols & ~(int64_t)7; /* columns packed 8 x 8 */
    for (int64_t g = 0; g < full; g += 8) {
      const float *src = p->b + (j + g) * p->ldb + l0;
      int64_t l = 0;
      for (; l + 8 <= kc; l += 8) {
        __m256 x[8];
        for (int c = 0; c < 8; ++c) x[c] = _mm256_loadu_ps(src + c * p->ldb + l);
        transpose8_avx2(x);
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + (l + t) * GEMM_NR + g, x[t]);
      }
      for (; l < kc; ++l)
        for (int c = 0; c < 8; ++c) dst[l * GEMM_NR + g + c] = src[c * p->ldb + l];
    }
    for (int64_t c = full; c < cols; ++c) {
      const float *src = p->b + (j + c) * p->ldb + l0;
      for (int64_t l = 0; l < kc; ++l) dst[l * GEMM_NR + c] = src[l];
    }
  }
}

/* AVX2 has 16 registers: the 12 x 32 tile goes as four 6 x 16 quarters of
 * twelve accumulators each. The depth is walked in slices short enough that
 * a slice of both panels (AVX2_KS x (12 + 32) floats, 22 KB) stays in L1
 * across the four quarters; between slices the quarters park their sums in
 * a tile-sized buffer, itself in L1. */
enum { AVX2_KS = 128 };

/* The accumulators are twelve named variables, not an array: GCC kept an
 * array on the stack and stored it back on every step (a third of the speed). */
#define AVX2_ROW(r)                                                                        \
  x = _mm256_broadcast_ss(a + (r));                                                        \
  c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                               \
  c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
#define AVX2_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5)
#define AVX2_ZERO(r) c##r##0 = c##r##1 = _mm256_setzero_ps();
#define AVX2_LOAD(r) c##r##0 = _mm256_load_ps(t + (r) * GEMM_NR), c##r##1 = _mm256_load_ps(t + (r) * GEMM_NR + 8);
#define AVX2_STORE(r) _mm256_store_ps(t + (r) * GEMM_NR, c##r##0), _mm256_store_ps(t + (r) * GEMM_NR + 8, c##r##1);

AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void quarter_avx2(int64_t ks, const float *a,
                                                                              const float *b, float *t, int first) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, x;
  if (first) {
    AVX2_EACH(AVX2_ZERO)
  } else {
    AVX2_EACH(AVX2_LOAD)
  }
  for (int64_t l = 0; l < ks; ++l, a += GEMM_MR, b += GEMM_NR) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    AVX2_EACH(AVX2_ROW)
  }
  AVX2_EACH(AVX2_STORE)
}

AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void micro_avx2_rows(int64_t kc, const float *a,
                                                                                  const float *b, float *c,
                                                                                  int64_t ldc, const epi_t *e,
                                                                                  int rows) {
  float t[GEMM_MR * GEMM_NR] __attribute__((aligned(32)));
  int64_t k0 = 0;
  do {
    int64_t ks = kc - k0 < AVX2_KS ? kc - k0 : AVX2_KS;
    for (int rh = 0; rh < rows; rh += 6)
      for (int half = 0; half < 2; ++half)
        quarter_avx2(ks, a + k0 * GEMM_MR + rh, b + k0 * GEMM_NR + 16 * half, t + rh * GEMM_NR + 16 * half, k0 == 0);
    k0 += AVX2_KS;
  } while (k0 < kc);
  __m256 va = _mm256_set1_ps(e->alpha), vb = _mm256_set1_ps(e->beta), z = _mm256_setzero_ps();
  for (int h = 0; h < GEMM_NR / 8; ++h) {
    __m256 bias = e->bias ? _mm256_loadu_ps(e->bias + 8 * h) : z;
    for (int r = 0; r < rows; ++r) {
      float *p = c + r * ldc + 8 * h;
      __m256 v = _mm256_mul_ps(va, _mm256_load_ps(t + r * GEMM_NR + 8 * h));
      if (e->beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), v);
      v = _mm256_add_ps(v, bias);
      if (e->bias_row) v = _mm256_add_ps(v, _mm256_set1_ps(e->bias_row[r]));
      if (e->relu) v = _mm256_max_ps(v, z);
      _mm256_storeu_ps(p, v);
    }
  }
}
AQ_TARGET_AVX2 static void micro_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      const epi_t *e) {
  micro_avx2_rows(kc, a, b, c, ldc, e, GEMM_MR);
}
AQ_TARGET_AVX2 static void micro_avx2_half(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                           const epi_t *e) {
  micro_avx2_rows(kc, a, b, c, ldc, e, 6);
}
/* Exactly r rows, written straight to C (the last micro-tile of a product
 * whose rows are not a multiple of 12): one or two 6-row halves' work. */
#define AQ_DEFINE_MICRO2_ROWS(r)                                                                        \
  AQ_TARGET_AVX2 static void micro_avx2_##r(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, \
                                           const epi_t *e) {                                           \
    micro_avx2_rows(kc, a, b, c, ldc, e, r);                                                            \
  }
AQ_DEFINE_MICRO2_ROWS(1)
AQ_DEFINE_MICRO2_ROWS(2)
AQ_DEFINE_MICRO2_ROWS(3)
AQ_DEFINE_MICRO2_ROWS(4)
AQ_DEFINE_MICRO2_ROWS(5)
AQ_DEFINE_MICRO2_ROWS(7)
AQ_DEFINE_MICRO2_ROWS(8)
AQ_DEFINE_MICRO2_ROWS(9)
AQ_DEFINE_MICRO2_ROWS(10)
AQ_DEFINE_MICRO2_ROWS(11)

/* AVX2: rows 0-7 in a ymm and rows 8-11 in an xmm per column, up to 6
 * columns a pass (12 accumulators of 16 registers). */
#define AQ_DEFINE_NARROW2(name, NJ)                                                                       \
  AQ_TARGET_AVX2 static void name(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj,     \
                                  float *out) {                                                           \
    __m256 lo[NJ];                                                                                        \
    __m128 hi[NJ];                                                                                        \
    _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) lo[j] = _mm256_setzero_ps(), hi[j] = _mm_setzero_ps(); \
    for (int64_t l = 0; l < k; ++l, a += GEMM_MR, b += sl) {                                              \
      __m256 x0 = _mm256_loadu_ps(a);                                                                     \
      __m128 x1 = _mm_loadu_ps(a + 8);                                                                    \
      _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) {                                              \
        __m256 y = _mm256_broadcast_ss(b + j * sj);                                                       \
        lo[j] = _mm256_fmadd_ps(x0, y, lo[j]);                                                            \
        hi[j] = _mm_fmadd_ps(x1, _mm256_castps256_ps128(y), hi[j]);                                       \
      }                                                                                                   \
    }                                                                                                     \
    _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) {                                                \
      _mm256_storeu_ps(out + j * 16, lo[j]);                                                              \
      _mm_storeu_ps(out + j * 16 + 8, hi[j]);                                                             \
    }                                                                                                     \
  }
AQ_DEFINE_NARROW2(narrow2_1, 1)
AQ_DEFINE_NARROW2(narrow2_2, 2)
AQ_DEFINE_NARROW2(narrow2_3, 3)
AQ_DEFINE_NARROW2(narrow2_4, 4)
AQ_DEFINE_NARROW2(narrow2_5, 5)
AQ_DEFINE_NARROW2(narrow2_6, 6)

static void narrow_avx2(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj, int nj, float *out) {
  static void (*const fn[7])(int64_t, const float *, const float *, int64_t, int64_t, float *) = {
      NULL, narrow2_1, narrow2_2, narrow2_3, narrow2_4, narrow2_5, narrow2_6};
  for (int j0 = 0; j0 < nj; j0 += 6) fn[nj - j0 < 6 ? nj - j0 : 6](k, a, b + j0 * sj, sl, sj, out + j0 * 16);
}

const engine_t gemm_engine_avx2 = {
    micro_avx2,
    micro_avx2_half,
    {NULL, micro_avx2_1, micro_avx2_2, micro_avx2_3, micro_avx2_4, micro_avx2_5, micro_avx2_half, micro_avx2_7,
     micro_avx2_8, micro_avx2_9, micro_avx2_10, micro_avx2_11, micro_avx2},
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    0,
    gemm_pack_a_avx2,
    gemm_pack_b_avx2,
    narrow_avx2,
    GEMM_KC,
    0 /* from the L2 size: a_block_rows */};
#endif
