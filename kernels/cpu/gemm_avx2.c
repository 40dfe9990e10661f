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

/* pack_b with AVX2, nr columns a panel (16 for this engine, 32 for the
 * AVX-512 ones, which use it too): a row-major B is copied a row's run of
 * panels at a time; a transposed B (B[j * ldb + l], the data gradient of a matmul)
 * is transposed 8 x 8 at a time instead of one float per strided store. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void pack_b_rows_avx2(const gemm_part_t *p, int64_t l0,
                                                                                   int64_t kc, int64_t j0, int64_t nc,
                                                                                   int64_t nr, float *dst) {
  /* Up to PACK_B_COLS columns a pass over the rows, each row's run copied
   * whole into its panels (full lines read once, in order), the rows a
   * few ahead prefetched: they lie ldb apart, often a multiple of 4 KB,
   * which the hardware prefetcher does not follow. */
  enum { PACK_B_COLS = 128, AHEAD = 16 };
  int64_t full = nc / nr * nr;
  for (int64_t c0 = 0; c0 < full; c0 += PACK_B_COLS) {
    int64_t cols = full - c0 < PACK_B_COLS ? full - c0 : PACK_B_COLS;
    const float *src = p->b + l0 * p->ldb + j0 + c0;
    float *out = dst + c0 * kc; /* panel c0 / nr */
    for (int64_t l = 0; l < kc; ++l, src += p->ldb) {
      for (int64_t v = 0; v < cols; v += 16) __builtin_prefetch(src + AHEAD * p->ldb + v);
      for (int64_t v = 0; v < cols; v += 8)
        _mm256_store_ps(out + (v / nr) * kc * nr + l * nr + v % nr, _mm256_loadu_ps(src + v));
    }
  }
  if (full < nc) gemm_pack_b_generic(p, l0, kc, j0 + full, nc - full, nr, dst + full * kc);
}

AQ_TARGET_AVX2 void gemm_pack_b_avx2(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                                     float *dst) {
  if (!p->trans_b) {
    if (nr == 16) pack_b_rows_avx2(p, l0, kc, j0, nc, 16, dst);
    else if (nr == GEMM_NR) pack_b_rows_avx2(p, l0, kc, j0, nc, GEMM_NR, dst);
    else pack_b_rows_avx2(p, l0, kc, j0, nc, nr, dst);
    return;
  }
  for (int64_t c0 = 0; c0 < nc; c0 += nr, dst += kc * nr) {
    int64_t cols = nc - c0 < nr ? nc - c0 : nr, j = j0 + c0;
    if (cols < nr) memset(dst, 0, (size_t)(kc * nr) * sizeof(float));
    int64_t full = cols & ~(int64_t)7; /* columns packed 8 x 8 */
    for (int64_t g = 0; g < full; g += 8) {
      const float *src = p->b + (j + g) * p->ldb + l0;
      int64_t l = 0;
      for (; l + 8 <= kc; l += 8) {
        __m256 x[8];
        for (int c = 0; c < 8; ++c) x[c] = _mm256_loadu_ps(src + c * p->ldb + l);
        transpose8_avx2(x);
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + (l + t) * nr + g, x[t]);
      }
      for (; l < kc; ++l)
        for (int c = 0; c < 8; ++c) dst[l * nr + g + c] = src[c * p->ldb + l];
    }
    for (int64_t c = full; c < cols; ++c) {
      const float *src = p->b + (j + c) * p->ldb + l0;
      for (int64_t l = 0; l < kc; ++l) dst[l * nr + c] = src[l];
    }
  }
}

/* AVX2 has 16 registers: this engine's micro-tile is 12 x 16, two 6 x 16
 * halves of twelve accumulators each, with two B vectors and a broadcast
 * (BLIS's Haswell tile). Each half runs over the whole depth and writes C
 * from its registers. The AVX-512 engines' 12 x 32 tile went here as four
 * quarters that parked their sums between slices of the depth short
 * enough to stay in L1, and lost the time of those stores and reloads.
 * The B panel, 16 columns wide, is one 64-byte line a step. In BLIS's
 * order it stays near while the block's A panels stream past it; a dense
 * part runs the other way (gemm.c: the streaming order), its B panels
 * streaming past an A half, fetched ahead. */
enum { AVX2_NR = 16 };

/* The write-back of 8 sums s of row r, columns [j, j + 8) of a micro-tile,
 * to p: the epilogue of epi_t. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void store8_avx2(const epi_t *e, __m256 s, float *p,
                                                                             int64_t j, int64_t r) {
  __m256 z = _mm256_setzero_ps(), v = _mm256_mul_ps(_mm256_set1_ps(e->alpha), s);
  if (e->beta != 0.0f) v = _mm256_fmadd_ps(_mm256_set1_ps(e->beta), _mm256_loadu_ps(p), v);
  v = _mm256_add_ps(v, e->bias ? _mm256_loadu_ps(e->bias + j) : z);
  if (e->bias_row) v = _mm256_add_ps(v, _mm256_set1_ps(e->bias_row[r]));
  if (e->relu) v = _mm256_max_ps(v, z);
  _mm256_storeu_ps(p, v);
}

/* The accumulators are twelve named variables, not an array: GCC kept an
 * array on the stack and stored it back on every step (a third of the speed). */
#define AVX2_ROW(r)                                                                        \
  x = _mm256_broadcast_ss(in_place ? ((r) < 3 ? a : a3) + ((r) % 3) * lda + s : al + (r));  \
  c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                               \
  c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
#define AVX2_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5)
#define AVX2_ZERO(r) c##r##0 = c##r##1 = _mm256_setzero_ps();
#define AVX2_OUT(r)                                                                                \
  if ((r) < rows) {                                                                                \
    store8_avx2(e, c##r##0, c + (r) * ldc, 0, r0 + (r));                                           \
    store8_avx2(e, c##r##1, c + (r) * ldc + 8, 8, r0 + (r));                                       \
  }
/* Step l of the panels: A at a (stride GEMM_MR; in place, row r at a + r
 * lda, step l at its [l]), B at b (stride AVX2_NR); with fetch_b, B's line
 * AVX2_B_AHEAD floats on is fetched too. */
#define AVX2_STEP(l)                                                                       \
  {                                                                                        \
    const int64_t s = (l);                                                                 \
    const float *al = a + s * GEMM_MR, *bl = b + s * AVX2_NR;                              \
    if (fetch_b) _mm_prefetch((const char *)(bl + AVX2_B_AHEAD), _MM_HINT_T0);             \
    __m256 b0 = _mm256_load_ps(bl), b1 = _mm256_load_ps(bl + 8), x;                        \
    AVX2_EACH(AVX2_ROW)                                                                    \
  }
/* Eight steps of a B micro-panel: where B streams from L2 (gemm.c: the
 * streaming order) the hardware's prefetcher alone left the loads waiting. */
enum { AVX2_B_AHEAD = 8 * AVX2_NR };

/* A 6 x 16 half of the tile: rows [0, 6) of the A panel at a (the panel's
 * first or second half) over n steps, every step of the panels (at NULL)
 * or the steps listed at at, then through the epilogue to C's rows [0,
 * rows) at c (row r0 of the micro-tile). C is fetched AQ_PREFETCH_C_AHEAD
 * steps before the end, and B ahead of each step with fetch_b. in_place:
 * A's rows read where they lie, lda apart (gemm.c: the streaming order),
 * through two bases three rows apart, each broadcast one address off a
 * register. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void half_avx2(int64_t n, const uint16_t *at,
                                                                           const float *a, const float *b, float *c,
                                                                           int64_t ldc, const epi_t *e, int64_t r0,
                                                                           int rows, int fetch_b, int in_place,
                                                                           int64_t lda) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  AVX2_EACH(AVX2_ZERO)
  const float *a3 = a + 3 * lda;
  int64_t ahead = n - AQ_PREFETCH_C_AHEAD > 0 ? n - AQ_PREFETCH_C_AHEAD : 0;
  if (at) {
    for (int64_t l = 0; l < ahead; ++l) AVX2_STEP(at[l])
    aq_prefetch_c(c, ldc, rows, AVX2_NR);
    for (int64_t l = ahead; l < n; ++l) AVX2_STEP(at[l])
  } else {
    int64_t l = 0;
#pragma GCC unroll 8
    for (; l < ahead; ++l) AVX2_STEP(l)
    aq_prefetch_c(c, ldc, rows, AVX2_NR);
#pragma GCC unroll 4
    for (; l < n; ++l) AVX2_STEP(l)
  }
  AVX2_EACH(AVX2_OUT)
}

/* rows of the tile (1 to 12) over kc steps of the panels (at NULL), or over
 * the kc steps listed at at: the first half, then the second on the rows
 * past 6. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void micro_avx2_rows(int64_t kc, const uint16_t *at,
                                                                                  const float *a, const float *b,
                                                                                  float *c, int64_t ldc,
                                                                                  const epi_t *e, int rows) {
  const epi_t le = *e; /* a local copy: C's stores cannot change it, so its fields stay in registers */
  half_avx2(kc, at, a, b, c, ldc, &le, 0, rows < 6 ? rows : 6, 0, 0, 0);
  if (rows > 6) half_avx2(kc, at, a + 6, b, c + 6 * ldc, ldc, &le, 6, rows - 6, 0, 0, 0);
}
/* The streaming order's half tiles (gemm.c: part_stream), a B block's
 * panels in turn: from a packed panel (lda 0), or from A in place. */
AQ_TARGET_AVX2 static void micro_avx2_stream(int64_t kc, const float *a, int64_t lda, const float *b, int64_t panels,
                                             float *c, int64_t ldc, const epi_t *e) {
  epi_t le = *e;
  for (int64_t j = 0; j < panels; ++j, b += kc * AVX2_NR, c += AVX2_NR) {
    le.bias = e->bias ? e->bias + j * AVX2_NR : NULL;
    if (lda) half_avx2(kc, NULL, a, b, c, ldc, &le, 0, 6, 1, 1, lda);
    else half_avx2(kc, NULL, a, b, c, ldc, &le, 0, 6, 1, 0, 0);
  }
}
AQ_TARGET_AVX2 static void micro_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      const epi_t *e) {
  micro_avx2_rows(kc, NULL, a, b, c, ldc, e, GEMM_MR);
}
AQ_TARGET_AVX2 static void micro_avx2_half(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                           const epi_t *e) {
  micro_avx2_rows(kc, NULL, a, b, c, ldc, e, 6);
}
AQ_TARGET_AVX2 static void micro_avx2_skip(int64_t n, const uint16_t *at, const float *a, const float *b, float *c,
                                           int64_t ldc, const epi_t *e) {
  micro_avx2_rows(n, at, a, b, c, ldc, e, GEMM_MR);
}
AQ_TARGET_AVX2 static void micro_avx2_skip_half(int64_t n, const uint16_t *at, const float *a, const float *b,
                                                float *c, int64_t ldc, const epi_t *e) {
  micro_avx2_rows(n, at, a, b, c, ldc, e, 6);
}
/* Exactly r rows, written straight to C (the last micro-tile of a product
 * whose rows are not a multiple of 12): one or two 6-row halves' work. */
#define AQ_DEFINE_MICRO2_ROWS(r)                                                                        \
  AQ_TARGET_AVX2 static void micro_avx2_##r(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, \
                                           const epi_t *e) {                                           \
    micro_avx2_rows(kc, NULL, a, b, c, ldc, e, r);                                                      \
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

/* ---- sparse rows (gemm_engine.h) -------------------------------------------
 * AVX2 has no compress: the lanes of a vector's nonzeros are gathered with
 * pext (BMI2) from the byte indices 0..7 and moved by a permute. */
#define AQ_TARGET_AVX2_BMI __attribute__((target("avx2,fma,bmi,bmi2,popcnt")))

/* This engine's sub-slices are AVX2_SK steps deep, twice SPARSE_SK: a row
 * parks its sums and leaves its loop (a mispredicted branch) half as often
 * per nonzero, and a pass's three panels of B over a sub-slice (24 KB)
 * still stay in Zen 3's 32 KB L1. */
enum { AVX2_SK = 64 };
_Static_assert((int)AVX2_SK >= (int)SPARSE_SK && AVX2_SK % 8 == 0 && AVX2_SK <= 256, "the lists' counts fit, steps are bytes");

/* The first n of 8 lanes, as a maskload's mask. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) __m256i first8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 0 ? 0 : n > 8 ? 8 : (int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- panel plans (gemm_engine.h: skip_plan_with) --------------------------
 * Four steps are six vectors; a list grows a set bit at a time. */
AQ_TARGET_AVX2_BMI static inline __attribute__((always_inline)) int64_t skip_append_avx2(uint16_t *list, int64_t n,
                                                                                         unsigned bits, int64_t l0) {
  for (; bits; bits &= bits - 1) list[n++] = (uint16_t)(l0 + __builtin_ctz(bits));
  return n;
}

AQ_TARGET_AVX2_BMI static inline __attribute__((always_inline)) uint64_t skip_mask4_avx2(const float *s, int64_t off,
                                                                                        int64_t floats) {
  uint64_t x = 0;
  for (int v = 0; v < 6; ++v, off += 8) {
    __m256 y = floats - off >= 8 ? _mm256_loadu_ps(s + off) : _mm256_maskload_ps(s + off, first8(floats - off));
    x |= (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_NEQ_UQ)) << (8 * v);
  }
  return x;
}

AQ_TARGET_AVX2_BMI static void skip_plan_avx2(const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk) {
  skip_plan_with(pa, mc, kc, sk, skip_mask4_avx2, skip_append_avx2);
}

/* The nonzeros of x (lanes past A's edge hold zeros), whose steps are
 * first .. first + 7, appended to the list at o, which holds c; returns
 * the new count. Writes stay within the row's AVX2_SK slots: c <= first. */
AQ_TARGET_AVX2_BMI static inline __attribute__((always_inline)) int sparse_put8(const sparse_t *sp, size_t o, int c,
                                                                                __m256 x, int first) {
  unsigned nz = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ));
  uint64_t lanes = _pext_u64(0x0706050403020100ull, _pdep_u64(nz, 0x0101010101010101ull) * 0xff);
  __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)lanes));
  _mm256_storeu_ps(sp->val + o + c, _mm256_permutevar8x32_ps(x, idx));
  uint64_t steps = lanes + (uint64_t)first * 0x0101010101010101ull; /* bytes < 32: no carries */
  memcpy(sp->at + o + c, &steps, sizeof(steps));
  return c + __builtin_popcount(nz);
}


/* The percentage of nonzeros among op(A)'s rows [i0, i0 + mc) x depth
 * [l0, l0 + kc), from every 8th row (of a transposed A, every 8th step). */
AQ_TARGET_AVX2_BMI static int64_t nonzero_pct_avx2(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0,
                                                   int64_t kc) {
  int64_t outer = p->trans_a ? kc : mc, inner = p->trans_a ? mc : kc, seen = 0, nz = 0;
  for (int64_t o = 0; o < outer; o += 8, seen += inner) {
    const float *v = p->trans_a ? p->a + (l0 + o) * p->lda + i0 : p->a + (i0 + o) * p->lda + l0;
    for (int64_t x = 0; x < inner; x += 8) {
      __m256 y = _mm256_maskload_ps(v + x, first8(inner - x));
      nz += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
    }
  }
  return seen ? nz * 100 / seen : 100;
}

/* The lists of op(A) rows [i0, i0 + mc), depth [l0, l0 + kc). A
 * transposed A is read 8 rows by 8 steps at a time and turned in
 * registers. */
AQ_TARGET_AVX2_BMI static void sparse_build_avx2(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                                 const sparse_t *sp) {
  int64_t nsub = (kc + AVX2_SK - 1) / AVX2_SK;
  for (int64_t s = 0; s < nsub; ++s) {
    int64_t left = kc - s * AVX2_SK;
    if (!p->trans_a) {
      for (int64_t r = 0; r < mc; ++r) {
        const float *src = p->a + (i0 + r) * p->lda + l0 + s * AVX2_SK;
        size_t o = (size_t)(s * mc + r) * AVX2_SK;
        int c = 0;
        for (int q = 0; q < AVX2_SK / 8; ++q)
          c = sparse_put8(sp, o, c, left >= AVX2_SK ? _mm256_loadu_ps(src + 8 * q)
                                                      : _mm256_maskload_ps(src + 8 * q, first8(left - 8 * q)), 8 * q);
        sp->n[s * mc + r] = (uint8_t)c;
      }
      continue;
    }
    for (int64_t r0 = 0; r0 < mc; r0 += 8) {
      __m256i rows = first8(mc - r0);
      __m256 x[AVX2_SK / 8][8];
      for (int q = 0; q < AVX2_SK / 8; ++q) {
        for (int l = 0; l < 8; ++l) {
          int64_t step = s * AVX2_SK + 8 * q + l;
          x[q][l] = step < kc ? _mm256_maskload_ps(p->a + (l0 + step) * p->lda + i0 + r0, rows) : _mm256_setzero_ps();
        }
        transpose8_avx2(x[q]);
      }
      for (int64_t r = 0; r < 8 && r0 + r < mc; ++r) {
        size_t o = (size_t)(s * mc + r0 + r) * AVX2_SK;
        int c = 0;
        for (int q = 0; q < AVX2_SK / 8; ++q) c = sparse_put8(sp, o, c, x[q][r], 8 * q);
        sp->n[s * mc + r0 + r] = (uint8_t)c;
      }
    }
  }
}

/* One sub-slice for rows [0, rows), 2 NP micro-panels b[0 .. 2 NP) of the
 * group (4 NP vectors of sums a row): each nonzero's value times its
 * step's row of the panels. */
AQ_TARGET_AVX2 static inline __attribute__((always_inline)) void sparse_rows_avx2(int np, int64_t rows,
                                                                                   const float *val, const uint8_t *at,
                                                                                   const uint8_t *n,
                                                                                   const float *const *b, float *sums,
                                                                                   int first) {
  for (int64_t r = 0; r < rows; ++r, val += AVX2_SK, at += AVX2_SK) {
    float *t = sums + r * SPARSE_NB;
    __m256 acc[12];
    _Pragma("GCC unroll 12") for (int q = 0; q < 4 * np; ++q) acc[q] = first ? _mm256_setzero_ps() : _mm256_load_ps(t + 8 * q);
    for (int j = 0; j < n[r]; ++j) {
      __m256 v = _mm256_broadcast_ss(val + j);
      int64_t off = (int64_t)at[j] * AVX2_NR;
      _Pragma("GCC unroll 12") for (int q = 0; q < 4 * np; ++q)
        acc[q] = _mm256_fmadd_ps(v, _mm256_load_ps(b[q >> 1] + off + (q & 1) * 8), acc[q]);
    }
    _Pragma("GCC unroll 12") for (int q = 0; q < 4 * np; ++q) _mm256_store_ps(t + 8 * q, acc[q]);
  }
}

/* A full row of a sparse group's sums through the vector write-back. */
AQ_TARGET_AVX2 static void row32_avx2(const epi_t *e, const float *t, float *c, int64_t r) {
  for (int h = 0; h < GEMM_NR / 8; ++h) store8_avx2(e, _mm256_load_ps(t + 8 * h), c + 8 * h, 8 * h, r);
}

/* C's block rows [i0, i0 + mc) x columns [j0, j0 + nc) from the lists and
 * the packed B (16-column micro-panels), 96 columns a pass (12
 * accumulators of 16 registers; the last 128 go as 64 + 64, 32 or 64 left
 * as they are), the pass's sub-slice of B (24 KB) staying in L1 while
 * every row goes by. 64 columns a pass give each accumulator one
 * multiply-add per nonzero in 8: at the FMA's latency of 4 cycles the
 * chains, not the units, set the pace. A pass's columns come in whole
 * 32-column rows, which the write-back takes as vectors. */
AQ_TARGET_AVX2 static void sparse_block_avx2(const gemm_part_t *p, const sparse_t *sp, const float *pb, int64_t kc,
                                             int64_t i0, int64_t mc, int64_t j0, int64_t nc, const epi_t *e) {
  int64_t nsub = (kc + AVX2_SK - 1) / AVX2_SK, panels = (nc + GEMM_NR - 1) / GEMM_NR;
  int64_t narrow = (nc + AVX2_NR - 1) / AVX2_NR; /* micro-panels of B */
  for (int64_t k0 = 0; k0 < panels;) {
    int64_t np = panels - k0 == 4 ? 2 : panels - k0 < 3 ? panels - k0 : 3;
    for (int64_t s = 0; s < nsub; ++s) {
      /* A pass's 2 np micro-panels; one past B's last column reads the first. */
      const float *b[6];
      for (int64_t k = 0; k < 6; ++k) {
        int64_t q = 2 * k0 + k;
        b[k] = pb + ((k < 2 * np && q < narrow ? q : 2 * k0) * kc + s * AVX2_SK) * AVX2_NR;
      }
      const float *val = sp->val + (size_t)s * mc * AVX2_SK;
      const uint8_t *at = sp->at + (size_t)s * mc * AVX2_SK, *n = sp->n + s * mc;
      switch (np) {
        case 3: sparse_rows_avx2(3, mc, val, at, n, b, sp->sums, s == 0); break;
        case 2: sparse_rows_avx2(2, mc, val, at, n, b, sp->sums, s == 0); break;
        default: sparse_rows_avx2(1, mc, val, at, n, b, sp->sums, s == 0); break;
      }
    }
    int64_t cols = nc - k0 * GEMM_NR < np * GEMM_NR ? nc - k0 * GEMM_NR : np * GEMM_NR;
    gemm_sparse_store(p, sp->sums, i0, mc, j0 + k0 * GEMM_NR, cols, e, row32_avx2);
    k0 += np;
  }
}

const engine_t gemm_engine_avx2 = {
    micro_avx2,
    micro_avx2_half,
    {NULL, micro_avx2_1, micro_avx2_2, micro_avx2_3, micro_avx2_4, micro_avx2_5, micro_avx2_half, micro_avx2_7,
     micro_avx2_8, micro_avx2_9, micro_avx2_10, micro_avx2_11, micro_avx2},
    micro_avx2_skip,
    micro_avx2_skip_half,
    skip_plan_avx2,
    nonzero_pct_avx2,
    sparse_build_avx2,
    sparse_block_avx2,
    SPARSE_AVX2_PCT,
    gemm_pack_a_avx2,
    gemm_pack_b_avx2,
    narrow_avx2,
    GEMM_KC,
    0 /* from the L2 size: a_block_rows */,
    AVX2_NR,
    micro_avx2_stream};
#endif
