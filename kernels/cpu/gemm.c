/* GEMM: for each GEMM_NC-wide slice of the part's columns and each
 * GEMM_KC-deep slice of k, B is packed once into NR-column panels; every
 * GEMM_MC-row block of A is packed into MR-row panels and streamed against
 * it, one MR x NR micro-tile at a time (BLIS's loop order: the B micro-panel
 * stays in L1 while A micro-panels come from L2). Packing zero-pads partial
 * panels so the micro-kernel never branches on edges; only the write-back
 * of a partial micro-tile goes through a buffer. */
#include "kernels/cpu/gemm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/update.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* What the write-back of a micro-tile does: v = alpha * acc (+ beta * C when
 * beta != 0) (+ bias[j]) then relu when asked, or v through a fused
 * consumer (post, on the last depth slice only). */
typedef struct epi {
  float alpha, beta;
  const float *bias;     /* at the micro-tile's first column, or NULL */
  const float *bias_row; /* at the micro-tile's first row, or NULL */
  int relu;
  const gemm_post_t *post;
} epi_t;

/* One element's write-back from its product x, C's element at c (read
 * only when beta is not 0), row r and column j of the micro-tile: the
 * scalar form of what the vector micro-kernels do. */
static inline float epi_one(const epi_t *e, float x, const float *c, int64_t r, int64_t j) {
  float v = e->alpha * x;
  if (e->beta != 0.0f) v += e->beta * *c;
  if (e->bias) v += e->bias[j];
  if (e->bias_row) v += e->bias_row[r];
  if (e->relu && !(v > 0.0f)) v = 0.0f;
  return v;
}

/* The write-back through a fused consumer: x holds the raw product of
 * rows x cols elements (row stride ldx) and becomes v in place; C's part
 * starts at row `row`, column `col`. The epilogue's arithmetic is the
 * micro-kernels' (the + 0 too: it turns -0 into +0 as adding a zero bias
 * vector does there). */
static void post_rows(const epi_t *e, float *x, int64_t ldx, int64_t rows, int64_t cols, float *c, int64_t ldc,
                      int64_t row, int64_t col) {
  const gemm_post_t *q = e->post;
  for (int64_t r = 0; r < rows; ++r) {
    const float *cr = c + r * ldc;
    float *xr = x + r * ldx;
    for (int64_t j = 0; j < cols; ++j) {
      float t = e->alpha * xr[j];
      if (e->beta != 0.0f) t += e->beta * cr[j];
      t += e->bias ? e->bias[j] : 0.0f;
      if (e->bias_row) t += e->bias_row[r];
      xr[j] = t;
    }
  }
  if (q->kind == GEMM_POST_RELU_MASK)
    cpu_relu_mask(rows, cols, q->mask + row * q->ldmask + col, q->ldmask, x, ldx, c, ldc);
  else
    cpu_sgd_update(rows, cols, c, ldc, x, ldx, q->velocity + row * q->ldv + col, q->ldv, q->lr, q->momentum,
                   q->weight_decay);
}

/* ---- packing --------------------------------------------------------------- */

/* MR-row panels of op(A) rows [i0, i0 + mc), depth [l0, l0 + kc): the panel
 * starting at row r0 holds p[l * MR + r]. */
static void pack_a_generic(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst) {
  for (int64_t r0 = 0; r0 < mc; r0 += GEMM_MR, dst += kc * GEMM_MR) {
    int64_t rows = mc - r0 < GEMM_MR ? mc - r0 : GEMM_MR;
    if (rows < GEMM_MR) memset(dst, 0, (size_t)kc * GEMM_MR * sizeof(float));
    if (p->trans_a) {
      for (int64_t l = 0; l < kc; ++l) {
        const float *src = p->a + (l0 + l) * p->lda + i0 + r0;
        for (int64_t r = 0; r < rows; ++r) dst[l * GEMM_MR + r] = src[r];
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const float *src = p->a + (i0 + r0 + r) * p->lda + l0;
        for (int64_t l = 0; l < kc; ++l) dst[l * GEMM_MR + r] = src[l];
      }
    }
  }
}

/* NR-column panels of op(B) columns [j0, j0 + nc), depth [l0, l0 + kc):
 * p[l * NR + c]. */
static void pack_b(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, float *dst) {
  for (int64_t c0 = 0; c0 < nc; c0 += GEMM_NR, dst += kc * GEMM_NR) {
    int64_t cols = nc - c0 < GEMM_NR ? nc - c0 : GEMM_NR, j = j0 + c0;
    if (!p->trans_b) {
      const float *src = p->b + l0 * p->ldb + j;
      if (cols == GEMM_NR) {
        for (int64_t l = 0; l < kc; ++l, src += p->ldb) memcpy(dst + l * GEMM_NR, src, GEMM_NR * sizeof(float));
      } else {
        memset(dst, 0, (size_t)kc * GEMM_NR * sizeof(float));
        for (int64_t l = 0; l < kc; ++l, src += p->ldb) memcpy(dst + l * GEMM_NR, src, (size_t)cols * sizeof(float));
      }
    } else {
      if (cols < GEMM_NR) memset(dst, 0, (size_t)kc * GEMM_NR * sizeof(float));
      for (int64_t c = 0; c < cols; ++c) {
        const float *src = p->b + (j + c) * p->ldb + l0;
        for (int64_t l = 0; l < kc; ++l) dst[l * GEMM_NR + c] = src[l];
      }
    }
  }
}

#if defined(__x86_64__)
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
AQ_TARGET_AVX2 static void pack_a_avx2(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                       float *dst) {
  for (int64_t r0 = 0; r0 < mc; r0 += GEMM_MR, dst += kc * GEMM_MR) {
    int64_t rows = mc - r0 < GEMM_MR ? mc - r0 : GEMM_MR;
    if (rows < GEMM_MR) {
      pack_a_generic(p, i0 + r0, rows, l0, kc, dst);
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
AQ_TARGET_AVX2 static void pack_b_avx2(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc,
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
    if (c0 < nc) pack_b(p, l0, kc, j0 + c0, nc - c0, dst);
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

/* 16 x 16 transpose in registers: x[r] holds row r on entry; on exit
 * x[j] holds column j. Unpack pairs of rows, then pairs of pairs, then
 * 128-bit lanes twice. */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void transpose16_avx512(__m512 x[16]) {
  __m512 t[16], u[16], v[16];
  for (int r = 0; r < 8; ++r) {
    t[2 * r] = _mm512_unpacklo_ps(x[2 * r], x[2 * r + 1]);
    t[2 * r + 1] = _mm512_unpackhi_ps(x[2 * r], x[2 * r + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  /* u[4g + j]: columns j, j+4, j+8, j+12 (one per lane) of rows 4g..4g+3. */
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      v[8 * h + j] = _mm512_shuffle_f32x4(u[8 * h + j], u[8 * h + 4 + j], 0x88);
      v[8 * h + 4 + j] = _mm512_shuffle_f32x4(u[8 * h + j], u[8 * h + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    x[j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88);
    x[j + 8] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0xdd);
  }
}

/* A row-major A (not transposed) packs as a transpose: 16 columns of k from
 * each of the panel's rows at a time, written k-major. The 16x16 transpose
 * runs in registers, so reads and writes are both full vectors. */
AQ_TARGET_AVX512 static void pack_a_avx512(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                           float *dst) {
  if (p->trans_a) {
    pack_a_avx2(p, i0, mc, l0, kc, dst); /* k-major already: plain copies */
    return;
  }
  for (int64_t r0 = 0; r0 < mc; r0 += GEMM_MR, dst += kc * GEMM_MR) {
    int64_t rows = mc - r0 < GEMM_MR ? mc - r0 : GEMM_MR;
    if (rows < GEMM_MR) {
      pack_a_generic(p, i0 + r0, rows, l0, kc, dst);
      continue;
    }
    const float *src = p->a + (i0 + r0) * p->lda + l0;
    int64_t l = 0;
    for (; l + 16 <= kc; l += 16) {
      /* The panel's rows by 16 columns of k, padded to 16 rows with zeros. */
      __m512 x[16];
      for (int r = 0; r < 16; ++r) x[r] = r < GEMM_MR ? _mm512_loadu_ps(src + r * p->lda + l) : _mm512_setzero_ps();
      transpose16_avx512(x);
      for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + (l + j) * GEMM_MR, (__mmask16)((1u << GEMM_MR) - 1), x[j]);
    }
    for (; l < kc; ++l)
      for (int r = 0; r < GEMM_MR; ++r) dst[l * GEMM_MR + r] = src[r * p->lda + l];
  }
}
#endif

/* ---- micro-kernels ------------------------------------------------------------
 * C[MR][NR] (leading dimension ldc) from an A panel (p[l * MR + r]) and a
 * B panel (p[l * NR + c]), kc deep (kc may be 0: C = beta C + bias). */
typedef void (*micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const epi_t *e);

/* ---- zero skipping -----------------------------------------------------------
 * A depth step whose values in a packed A panel are all zero adds nothing
 * to the micro-tile. ReLU activations and an image's dark background give
 * the MLP's Fashion-MNIST step such steps in 10-19% of the 12-row panels of
 * four of its five products (the first layer's and the second's, forward
 * and backward), and in 16-32% of their 6-row halves. skip_plan lists, for
 * each full panel of a packed A block, the steps that hold a nonzero: for
 * the whole panel (WHOLE), or for each half apart (HALVES: two 6 x 32
 * tiles, when that leaves fewer multiply-adds than WHOLE by a margin that
 * pays for reading B twice). The skip micro-kernel reads A and B through a
 * list. Each sum runs in the same order over the same nonzero terms, so C
 * is what the dense kernel gives, bit for bit, with one exception: an Inf
 * or NaN of B that meets only zeros of A no longer makes C NaN. Partial
 * panels stay dense. Zen 4 only (zen4()); AQ_GEMM_SKIP_ZEROS=0 turns it
 * off. */
enum { SKIP_DENSE = 0, SKIP_WHOLE = 1, SKIP_HALVES = 2 };
struct gemm_skip {
  uint8_t mode[GEMM_MC / GEMM_MR];
  int32_t n[GEMM_MC / GEMM_MR][2];              /* steps of each list (WHOLE: the first) */
  uint16_t at[GEMM_MC / GEMM_MR][2][GEMM_KC + 16]; /* the steps, in order (16 spare: lists grow 16 at a time) */
};
_Static_assert(sizeof(gemm_skip_t) <= GEMM_SKIP_BYTES, "GEMM_SKIP_BYTES must hold the skip lists");
_Static_assert(GEMM_KC <= 65536, "a skip list's steps are 16-bit");
/* ---- sparse rows ---------------------------------------------------------------
 * Skipping over panels finds only the steps where 12 (or 6) rows are zero
 * together: 10-30% of the MLP's steps, where about half of every activation
 * matrix is zero (its images' background, ReLU's zeros; more as training
 * goes on). The sparse path goes row by row instead. Each row of op(A)
 * keeps a list of its nonzeros (value and step) per SPARSE_SK-step
 * sub-slice; a row of C, SPARSE_NB columns wide, stays in registers while
 * each nonzero adds its value times a row of the packed B micro-panels,
 * whose sub-slice (16 KB) stays in L1 while every row passes. That is one B
 * load per multiply-add, against one per twelve in the panel kernel, so a
 * term costs more: on Zen 4 about 1.6 of the panel kernel's (the MLP's
 * products at half density run at 52% of the FMA peak, the panel kernel at
 * 85%). The path pays where fewer than a machine's share of A's values are
 * nonzero (engine_t.sparse_below_pct), which a part at least SPARSE_NB
 * columns wide decides from a sample of its first depth slice (a narrower
 * part would build its lists for too few columns); a part sampled all
 * nonzero skips neither way. Each row's sum runs over its nonzeros in order
 * and restarts per KC slice, as the dense kernels', so C is theirs bit for
 * bit (the exception above included). */
enum { SPARSE_SK = 32, SPARSE_NB = 4 * GEMM_NR, SPARSE_ZEN4_PCT = 75, SPARSE_OTHER_PCT = 30 };
typedef struct sparse {
  float *val;  /* [sub-slice][row][SPARSE_SK]: the nonzeros */
  uint8_t *at; /* the same: their steps within the sub-slice */
  uint8_t *n;  /* [sub-slice][row]: how many */
  float *sums; /* [row][SPARSE_NB]: a column group's running sums */
} sparse_t;
_Static_assert(GEMM_SPARSE_BYTES >= (size_t)GEMM_MC * GEMM_KC + (size_t)GEMM_MC * (GEMM_KC / SPARSE_SK) +
                                        (size_t)GEMM_MC * SPARSE_NB * sizeof(float) + 64,
               "GEMM_SPARSE_BYTES must hold the steps, counts and sums");
typedef void (*sparse_build_fn)(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                const sparse_t *sp);
typedef void (*sparse_block_fn)(const gemm_part_t *p, const sparse_t *sp, const float *pb, int64_t kc, int64_t i0,
                                int64_t mc, int64_t j0, int64_t nc, const epi_t *e);

/* n steps of a panel listed in at (a: the panel, or its second half). */
typedef void (*micro_skip_fn)(int64_t n, const uint16_t *at, const float *a, const float *b, float *c, int64_t ldc,
                              const epi_t *e);

static void micro_c(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const epi_t *e) {
  float acc[GEMM_MR][GEMM_NR];
  memset(acc, 0, sizeof(acc));
  for (int64_t l = 0; l < kc; ++l)
    for (int r = 0; r < GEMM_MR; ++r)
      for (int j = 0; j < GEMM_NR; ++j) acc[r][j] += a[l * GEMM_MR + r] * b[l * GEMM_NR + j];
  for (int r = 0; r < GEMM_MR; ++r)
    for (int j = 0; j < GEMM_NR; ++j) c[r * ldc + j] = epi_one(e, acc[r][j], &c[r * ldc + j], r, j);
}

/* C's micro-tile is fetched (for writing) this many depth steps before the
 * write-back, so that the epilogue's reads and writes of rows ldc apart,
 * often 4 KB, find their lines in L1 (about 1% on the MLP's products on
 * the 2-core EPYC, close to the noise there, and never slower). */
#define AQ_PREFETCH_C_AHEAD 24
static inline __attribute__((always_inline)) void aq_prefetch_c(const float *c, int64_t ldc, int rows) {
  for (int r = 0; r < rows; ++r) {
    __builtin_prefetch(c + r * ldc, 1);
    __builtin_prefetch(c + r * ldc + GEMM_NR - 1, 1);
  }
}

#if defined(__x86_64__)
/* ROWS x 32 from an MR-row A panel: 12 x 32 is 24 accumulators, two B
 * vectors and one broadcast in flight, of AVX-512's 32 registers. The
 * shorter variants serve the last micro-tile of a product whose rows are
 * not a multiple of 12 (a conv with 6 or 16 filters): they write C
 * directly and pay only for the rows there are. */
/* The write-back of row r of a micro-tile (its sums s0, s1) to p: the
 * epilogue of epi_t. */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void store512(const epi_t *e, __m512 s0, __m512 s1,
                                                                            float *p, int64_t r) {
  __m512 z = _mm512_setzero_ps(), v0 = _mm512_mul_ps(_mm512_set1_ps(e->alpha), s0),
         v1 = _mm512_mul_ps(_mm512_set1_ps(e->alpha), s1);
  if (e->beta != 0.0f) {
    v0 = _mm512_fmadd_ps(_mm512_set1_ps(e->beta), _mm512_loadu_ps(p), v0);
    v1 = _mm512_fmadd_ps(_mm512_set1_ps(e->beta), _mm512_loadu_ps(p + 16), v1);
  }
  v0 = _mm512_add_ps(v0, e->bias ? _mm512_loadu_ps(e->bias) : z);
  v1 = _mm512_add_ps(v1, e->bias ? _mm512_loadu_ps(e->bias + 16) : z);
  if (e->bias_row) {
    __m512 br = _mm512_set1_ps(e->bias_row[r]);
    v0 = _mm512_add_ps(v0, br);
    v1 = _mm512_add_ps(v1, br);
  }
  if (e->relu) v0 = _mm512_max_ps(v0, z), v1 = _mm512_max_ps(v1, z);
  _mm512_storeu_ps(p, v0);
  _mm512_storeu_ps(p + 16, v1);
}

/* The depth loop runs over every step (at NULL: a dense panel) or over the
 * n steps a skip list keeps (at[l]: the step). */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void micro512(int rows, int64_t n, const uint16_t *at,
                                                                            const float *a, const float *b, float *c,
                                                                            int64_t ldc, const epi_t *e) {
  __m512 c0[GEMM_MR], c1[GEMM_MR];
  _Pragma("GCC unroll 16") for (int r = 0; r < rows; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  for (int64_t l = 0; l < n; ++l) {
    if (l == n - AQ_PREFETCH_C_AHEAD) aq_prefetch_c(c, ldc, rows);
    const float *bl = at ? b + (int64_t)at[l] * GEMM_NR : b + l * GEMM_NR;
    const float *al = at ? a + (int64_t)at[l] * GEMM_MR : a + l * GEMM_MR;
    __m512 b0 = _mm512_load_ps(bl), b1 = _mm512_load_ps(bl + 16);
    __builtin_prefetch(bl + 8 * GEMM_NR);
    __builtin_prefetch(al + 8 * GEMM_MR);
    _Pragma("GCC unroll 16") for (int r = 0; r < rows; ++r) {
      __m512 ar = _mm512_set1_ps(al[r]);
      c0[r] = _mm512_fmadd_ps(ar, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(ar, b1, c1[r]);
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < rows; ++r) store512(e, c0[r], c1[r], c + r * ldc, r);
}
#define AQ_DEFINE_MICRO512(name, ROWS)                                                                  \
  AQ_TARGET_AVX512 static void name(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,  \
                                    const epi_t *e) {                                                   \
    micro512(ROWS, kc, NULL, a, b, c, ldc, e);                                                          \
  }
AQ_DEFINE_MICRO512(micro_avx512, GEMM_MR)
AQ_DEFINE_MICRO512(micro_avx512_1, 1)
AQ_DEFINE_MICRO512(micro_avx512_2, 2)
AQ_DEFINE_MICRO512(micro_avx512_3, 3)
AQ_DEFINE_MICRO512(micro_avx512_4, 4)
AQ_DEFINE_MICRO512(micro_avx512_5, 5)
AQ_DEFINE_MICRO512(micro_avx512_half, 6)
AQ_DEFINE_MICRO512(micro_avx512_7, 7)
AQ_DEFINE_MICRO512(micro_avx512_8, 8)
AQ_DEFINE_MICRO512(micro_avx512_9, 9)
AQ_DEFINE_MICRO512(micro_avx512_10, 10)
AQ_DEFINE_MICRO512(micro_avx512_11, 11)
AQ_TARGET_AVX512 static void micro_avx512_skip(int64_t n, const uint16_t *at, const float *a, const float *b, float *c,
                                               int64_t ldc, const epi_t *e) {
  micro512(GEMM_MR, n, at, a, b, c, ldc, e);
}
AQ_TARGET_AVX512 static void micro_avx512_skip_half(int64_t n, const uint16_t *at, const float *a, const float *b,
                                                    float *c, int64_t ldc, const epi_t *e) {
  micro512(GEMM_MR / 2, n, at, a, b, c, ldc, e);
}

/* HALVES when its steps, at 0.55 of a whole one each (B is read for each
 * half), are fewer than WHOLE's. On the MLP's step halves took 7% less of
 * the products' time than whole-panel lists alone (24.4 against 26.2 ms of
 * CPU time a step, medians of 8); weights 0.5 and 0.7 measured alike. */
static int halves_pay(int64_t whole, int64_t halves) { return halves * 11 < whole * 20; }

/* A mask of the first n of 16 lanes (none, some or all). */
static inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
}

/* skip_plan for AVX-512, 16 steps at a time. Four steps' 48 values are
 * three vectors, whose comparisons with zero give a 48-bit mask (step i's
 * row r at bit 12i + r); ORing it shifted by 0..5 gathers each 6-row half's
 * bits at the half's lowest, and pext collects those into one bit per step
 * and half. A list then grows by compressing the steps' indices under a
 * half's (or either half's) bits. NaN compares unequal to zero, so a step
 * holding one is kept. */
#define AQ_TARGET_SKIP __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2,bmi2,popcnt")))
AQ_TARGET_SKIP static inline __attribute__((always_inline)) int64_t skip_append(uint16_t *list, int64_t n,
                                                                                 unsigned bits, int64_t l0) {
  __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)l0),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm256_storeu_si256((__m256i *)(list + n), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32((__mmask16)bits, idx)));
  return n + __builtin_popcount(bits);
}

AQ_TARGET_SKIP static void skip_plan_avx512(const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk) {
  const __m512 zero = _mm512_setzero_ps();
  uint16_t top[GEMM_KC / 16], bottom[GEMM_KC / 16]; /* per 16 steps: bit i, step i's half holds a nonzero */
  for (int64_t q = 0; q * GEMM_MR < mc; ++q) {
    sk->mode[q] = SKIP_DENSE;
    if (mc - q * GEMM_MR < GEMM_MR) continue; /* a partial panel stays dense */
    const float *s = pa + q * GEMM_MR * kc;
    int64_t whole = 0, halves = 0, chunks = (kc + 15) / 16, floats = kc * GEMM_MR;
    for (int64_t c = 0; c < chunks; ++c) {
      uint64_t t4[4];
      for (int g = 0; g < 4; ++g) {
        uint64_t x = 0;
        for (int v = 0; v < 3; ++v) {
          int64_t off = (c * 16 + g * 4) * GEMM_MR + v * 16;
          __mmask16 m = first_lanes(floats - off);
          x |= (uint64_t)_mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, s + off), zero, _CMP_NEQ_UQ) << (16 * v);
        }
        t4[g] = x | x >> 1 | x >> 2 | x >> 3 | x >> 4 | x >> 5;
      }
      unsigned mt = 0, mb = 0;
      for (int g = 0; g < 4; ++g) {
        mt |= (unsigned)_pext_u64(t4[g], 0x001001001001ull) << (4 * g);
        mb |= (unsigned)_pext_u64(t4[g], 0x040040040040ull) << (4 * g);
      }
      top[c] = (uint16_t)mt, bottom[c] = (uint16_t)mb;
      whole += __builtin_popcount(mt | mb), halves += __builtin_popcount(mt) + __builtin_popcount(mb);
    }
    if (halves_pay(whole, halves)) {
      int64_t n0 = 0, n1 = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        n0 = skip_append(sk->at[q][0], n0, top[c], c * 16);
        n1 = skip_append(sk->at[q][1], n1, bottom[c], c * 16);
      }
      sk->n[q][0] = (int32_t)n0, sk->n[q][1] = (int32_t)n1, sk->mode[q] = SKIP_HALVES;
    } else if (whole < kc) {
      int64_t n = 0;
      for (int64_t c = 0; c < chunks; ++c) n = skip_append(sk->at[q][0], n, (unsigned)(top[c] | bottom[c]), c * 16);
      sk->n[q][0] = (int32_t)n, sk->mode[q] = SKIP_WHOLE;
    }
  }
}

/* Appends x's nonzeros (steps first .. first + 15; lanes past A's edge
 * hold zeros) to the list at o, which holds c; returns the new count. */
AQ_TARGET_SKIP static inline __attribute__((always_inline)) int sparse_put(const sparse_t *sp, size_t o, int c,
                                                                            __m512 x, int first) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 nz = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  _mm512_storeu_ps(sp->val + o + c, _mm512_maskz_compress_ps(nz, x));
  __m512i steps = _mm512_maskz_compress_epi32(nz, _mm512_add_epi32(iota, _mm512_set1_epi32(first)));
  _mm_storeu_si128((__m128i *)(sp->at + o + c), _mm512_cvtepi32_epi8(steps));
  return c + __builtin_popcount(nz);
}

/* The percentage of nonzeros among op(A)'s rows [i0, i0 + mc) x depth
 * [l0, l0 + kc), from every 8th row (of a transposed A, every 8th step,
 * whose rows lie contiguous): an eighth of what building the lists reads. */
AQ_TARGET_SKIP static int64_t nonzero_pct_avx512(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0,
                                                 int64_t kc) {
  int64_t outer = p->trans_a ? kc : mc, inner = p->trans_a ? mc : kc, seen = 0, nz = 0;
  for (int64_t o = 0; o < outer; o += 8, seen += inner) {
    const float *v = p->trans_a ? p->a + (l0 + o) * p->lda + i0 : p->a + (i0 + o) * p->lda + l0;
    for (int64_t x = 0; x < inner; x += 16) {
      __mmask16 m = first_lanes(inner - x);
      nz += __builtin_popcount(_mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, v + x), _mm512_setzero_ps(), _CMP_NEQ_UQ));
    }
  }
  return seen ? nz * 100 / seen : 100;
}

/* The lists of op(A) rows [i0, i0 + mc), depth [l0, l0 + kc). A
 * transposed A is read 16 rows by 16 steps at a time and turned in
 * registers. */
AQ_TARGET_SKIP static void sparse_build_avx512(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc,
                                               const sparse_t *sp) {
  int64_t nsub = (kc + SPARSE_SK - 1) / SPARSE_SK;
  for (int64_t s = 0; s < nsub; ++s) {
    int64_t left = kc - s * SPARSE_SK;
    if (!p->trans_a) {
      for (int64_t r = 0; r < mc; ++r) {
        const float *src = p->a + (i0 + r) * p->lda + l0 + s * SPARSE_SK;
        size_t o = (size_t)(s * mc + r) * SPARSE_SK;
        int c = sparse_put(sp, o, 0, _mm512_maskz_loadu_ps(first_lanes(left), src), 0);
        c = sparse_put(sp, o, c, _mm512_maskz_loadu_ps(first_lanes(left - 16), src + 16), 16);
        sp->n[s * mc + r] = (uint8_t)c;
      }
      continue;
    }
    for (int64_t r0 = 0; r0 < mc; r0 += 16) {
      __mmask16 rows = first_lanes(mc - r0);
      __m512 x[2][16];
      for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 16; ++l) {
          int64_t step = s * SPARSE_SK + 16 * h + l;
          x[h][l] = step < kc ? _mm512_maskz_loadu_ps(rows, p->a + (l0 + step) * p->lda + i0 + r0) : _mm512_setzero_ps();
        }
        transpose16_avx512(x[h]);
      }
      for (int64_t r = 0; r < 16 && r0 + r < mc; ++r) {
        size_t o = (size_t)(s * mc + r0 + r) * SPARSE_SK;
        int c = sparse_put(sp, o, sparse_put(sp, o, 0, x[0][r], 0), x[1][r], 16);
        sp->n[s * mc + r0 + r] = (uint8_t)c;
      }
    }
  }
}

/* One sub-slice for rows [0, rows): sums[r] takes each nonzero times its
 * step's row of the group's micro-panels b[0 .. nq / 2) (NQ vectors). */
AQ_TARGET_AVX512 static inline __attribute__((always_inline)) void sparse_rows(int nq, int64_t rows, const float *val,
                                                                               const uint8_t *at, const uint8_t *n,
                                                                               const float *const *b, float *sums,
                                                                               int first) {
  for (int64_t r = 0; r < rows; ++r, val += SPARSE_SK, at += SPARSE_SK) {
    float *t = sums + r * SPARSE_NB;
    __m512 acc[SPARSE_NB / 16];
    _Pragma("GCC unroll 8") for (int q = 0; q < nq; ++q) acc[q] = first ? _mm512_setzero_ps() : _mm512_load_ps(t + 16 * q);
    for (int j = 0; j < n[r]; ++j) {
      __m512 v = _mm512_set1_ps(val[j]);
      int64_t off = (int64_t)at[j] * GEMM_NR;
      _Pragma("GCC unroll 8") for (int q = 0; q < nq; ++q)
        acc[q] = _mm512_fmadd_ps(v, _mm512_load_ps(b[q >> 1] + off + (q & 1) * 16), acc[q]);
    }
    _Pragma("GCC unroll 8") for (int q = 0; q < nq; ++q) _mm512_store_ps(t + 16 * q, acc[q]);
  }
}

/* The write-back of a column group's sums (rows [i0, i0 + mc), columns
 * [j0, j0 + cols)), as the dense kernels write a micro-tile: full 32-column
 * tiles through the vector epilogue; a partial one, or a fused consumer,
 * from the raw sum (+ 0, as a raw micro-tile holds it). */
AQ_TARGET_AVX512 static void sparse_store(const gemm_part_t *p, float *sums, int64_t i0, int64_t mc, int64_t j0,
                                          int64_t cols, const epi_t *e) {
  epi_t er = *e;
  er.bias = e->bias ? e->bias + j0 : NULL;
  er.bias_row = e->bias_row ? e->bias_row + i0 : NULL;
  float *c = p->c + i0 * p->ldc + j0;
  if (e->post || cols % GEMM_NR)
    for (int64_t r = 0; r < mc; ++r)
      for (int64_t j = 0; j < cols; j += 16)
        _mm512_store_ps(sums + r * SPARSE_NB + j, _mm512_add_ps(_mm512_load_ps(sums + r * SPARSE_NB + j), _mm512_setzero_ps()));
  if (e->post) {
    post_rows(&er, sums, SPARSE_NB, mc, cols, c, p->ldc, i0, j0);
    return;
  }
  for (int64_t jr = 0; jr < cols; jr += GEMM_NR) {
    epi_t ej = er;
    ej.bias = er.bias ? er.bias + jr : NULL;
    for (int64_t r = 0; r < mc; ++r) {
      const float *t = sums + r * SPARSE_NB + jr;
      float *cr = c + r * p->ldc + jr;
      if (cols - jr >= GEMM_NR) {
        store512(&ej, _mm512_load_ps(t), _mm512_load_ps(t + 16), cr, r);
        continue;
      }
      for (int64_t j = 0; j < cols - jr; ++j) cr[j] = epi_one(&ej, t[j], &cr[j], r, j);
    }
  }
}

/* C's block rows [i0, i0 + mc) x columns [j0, j0 + nc) from the lists and
 * the packed B (pb: NR-column micro-panels, kc deep), one SPARSE_NB-column
 * group at a time. */
AQ_TARGET_AVX512 static void sparse_block_avx512(const gemm_part_t *p, const sparse_t *sp, const float *pb, int64_t kc,
                                                 int64_t i0, int64_t mc, int64_t j0, int64_t nc, const epi_t *e) {
  int64_t nsub = (kc + SPARSE_SK - 1) / SPARSE_SK;
  for (int64_t jg = 0; jg < nc; jg += SPARSE_NB) {
    int64_t cols = nc - jg < SPARSE_NB ? nc - jg : SPARSE_NB, panels = (cols + GEMM_NR - 1) / GEMM_NR;
    for (int64_t s = 0; s < nsub; ++s) {
      const float *b[4];
      for (int64_t k = 0; k < 4; ++k) b[k] = pb + ((jg / GEMM_NR + (k < panels ? k : 0)) * kc + s * SPARSE_SK) * GEMM_NR;
      const float *val = sp->val + (size_t)s * mc * SPARSE_SK;
      const uint8_t *at = sp->at + (size_t)s * mc * SPARSE_SK, *n = sp->n + s * mc;
      switch (panels) {
        case 4: sparse_rows(8, mc, val, at, n, b, sp->sums, s == 0); break;
        case 3: sparse_rows(6, mc, val, at, n, b, sp->sums, s == 0); break;
        case 2: sparse_rows(4, mc, val, at, n, b, sp->sums, s == 0); break;
        default: sparse_rows(2, mc, val, at, n, b, sp->sums, s == 0); break;
      }
    }
    sparse_store(p, sp->sums, i0, mc, j0 + jg, cols, e);
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
#endif

/* ---- narrow products ---------------------------------------------------------
 * A product only a few columns wide (a classifier's 10 logits, its weight
 * gradient) wastes most of a 32-column micro-tile. A narrow kernel turns the
 * tile around: the vector runs down one packed 12-row A panel (one
 * p[l * MR .. + 11] per depth step), and each of up to NARROW_J columns
 * keeps an accumulator fed by a broadcast of B[l][j]. B is read in place
 * (sl: its stride along the depth, sj: along the columns). out[j * 16 + r]
 * gets row r of column j; each sum runs over l in order, as in the
 * micro-kernels. */
enum { NARROW_N = 16 };
typedef void (*narrow_fn)(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj, int nj, float *out);

static void narrow_c(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj, int nj, float *out) {
  float acc[NARROW_N][GEMM_MR];
  memset(acc, 0, sizeof(acc));
  for (int64_t l = 0; l < k; ++l, a += GEMM_MR, b += sl)
    for (int j = 0; j < nj; ++j) {
      float bj = b[j * sj];
      for (int r = 0; r < GEMM_MR; ++r) acc[j][r] += a[r] * bj;
    }
  for (int j = 0; j < nj; ++j)
    for (int r = 0; r < GEMM_MR; ++r) out[j * 16 + r] = acc[j][r];
}

#if defined(__x86_64__)
/* Up to 8 columns a pass: 8 accumulators, the A vector and a broadcast. */
#define AQ_DEFINE_NARROW512(name, NJ)                                                                     \
  AQ_TARGET_AVX512 static void name(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj,   \
                                    float *out) {                                                         \
    __m512 acc[NJ];                                                                                       \
    _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) acc[j] = _mm512_setzero_ps();                   \
    for (int64_t l = 0; l < k; ++l, a += GEMM_MR, b += sl) {                                              \
      __m512 x = _mm512_maskz_loadu_ps((__mmask16)0x0fff, a);                                             \
      _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) acc[j] =                                       \
          _mm512_fmadd_ps(x, _mm512_set1_ps(b[j * sj]), acc[j]);                                          \
    }                                                                                                     \
    _Pragma("GCC unroll 8") for (int j = 0; j < NJ; ++j) _mm512_storeu_ps(out + j * 16, acc[j]);          \
  }
AQ_DEFINE_NARROW512(narrow512_1, 1)
AQ_DEFINE_NARROW512(narrow512_2, 2)
AQ_DEFINE_NARROW512(narrow512_3, 3)
AQ_DEFINE_NARROW512(narrow512_4, 4)
AQ_DEFINE_NARROW512(narrow512_5, 5)
AQ_DEFINE_NARROW512(narrow512_6, 6)
AQ_DEFINE_NARROW512(narrow512_7, 7)
AQ_DEFINE_NARROW512(narrow512_8, 8)

static void narrow_avx512(int64_t k, const float *a, const float *b, int64_t sl, int64_t sj, int nj, float *out) {
  static void (*const fn[9])(int64_t, const float *, const float *, int64_t, int64_t, float *) = {
      NULL, narrow512_1, narrow512_2, narrow512_3, narrow512_4, narrow512_5, narrow512_6, narrow512_7, narrow512_8};
  for (int j0 = 0; j0 < nj; j0 += 8) fn[nj - j0 < 8 ? nj - j0 : 8](k, a, b + j0 * sj, sl, sj, out + j0 * 16);
}

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
#endif

typedef void (*pack_a_fn)(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst);
typedef void (*skip_plan_fn)(const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk);
typedef void (*pack_b_fn)(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, float *dst);

typedef struct engine {
  micro_fn micro, micro_half; /* all MR rows; the first 6 only */
  micro_fn rows[GEMM_MR + 1]; /* exactly r rows, writing C directly; NULL: none */
  micro_skip_fn micro_skip, micro_skip_half; /* through a skip list: all MR rows; the first 6; NULL: none */
  skip_plan_fn skip_plan;      /* NULL: panels are not planned */
  int64_t (*nonzero_pct)(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc); /* NULL: no skipping */
  sparse_build_fn sparse_build; /* the sparse path; NULL: none */
  sparse_block_fn sparse_block;
  int64_t sparse_below_pct;     /* the sparse path where fewer of A's values are nonzero */
  pack_a_fn pack_a;
  pack_b_fn pack_b;
  narrow_fn narrow;
  int64_t kc, mc; /* depth of a packed slice and rows of an A block (<= GEMM_KC, GEMM_MC); mc 0: from L2 */
} engine_t;

static const engine_t generic_engine = {micro_c, micro_c, {NULL}, NULL, NULL, NULL, NULL, NULL, NULL, 0, pack_a_generic,
                                        pack_b, narrow_c, GEMM_KC, GEMM_MC};
#if defined(__x86_64__)
static const engine_t avx2_engine = {
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
    pack_a_avx2,
    pack_b_avx2,
    narrow_avx2,
    GEMM_KC,
    0 /* from the L2 size: a_block_rows */};
/* The AVX-512 engines differ in how they skip zeros (see zen4()): where
 * sparse rows pay, and whether panels are planned. */
#define AQ_AVX512_ENGINE(plan, sparse_pct)                                                                     \
  {micro_avx512,                                                                                           \
   micro_avx512_half,                                                                                      \
   {NULL, micro_avx512_1, micro_avx512_2, micro_avx512_3, micro_avx512_4, micro_avx512_5, micro_avx512_half, \
    micro_avx512_7, micro_avx512_8, micro_avx512_9, micro_avx512_10, micro_avx512_11, micro_avx512},       \
   micro_avx512_skip,                                                                                      \
   micro_avx512_skip_half,                                                                                 \
   plan,                                                                                                   \
   nonzero_pct_avx512,                                                                                     \
   sparse_build_avx512,                                                                                    \
   sparse_block_avx512,                                                                                    \
   sparse_pct,                                                                                             \
   pack_a_avx512,                                                                                          \
   pack_b_avx2,                                                                                            \
   narrow_avx512,                                                                                          \
   GEMM_KC,                                                                                                \
   GEMM_MC}
static const engine_t avx512_engine = AQ_AVX512_ENGINE(NULL, SPARSE_OTHER_PCT);
static const engine_t avx512_zen4_engine = AQ_AVX512_ENGINE(skip_plan_avx512, SPARSE_ZEN4_PCT);

/* Whether this is a Zen 4 core (AMD family 0x19 with AVX-512), whose
 * 512-bit multiply-adds issue as two halves: loads are cheap next to them,
 * and skipping zeros pays more than on cores with two full-width FMA units
 * (Sapphire Rapids). Sparse rows paid at 50% nonzeros on the MLP's products
 * there (2-core step 13.9 -> 10.4 ms) and lost on Sapphire Rapids, B's
 * loads being the limit; panels took the 2-core step from 13.6 to 12.5 ms,
 * while on the H100 machine's 16 Sapphire Rapids cores their plans cost
 * more than they saved (4.30 against 3.94 ms a step with
 * AQ_GEMM_SKIP_ZEROS=0, medians of 6). */
static int zen4(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth" enticAMD */ || !__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  return ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (a >> 20) & 0xff : 0) == 0x19;
}
#endif

static const engine_t *pick(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return zen4() ? &avx512_zen4_engine : &avx512_engine;
    case AQ_CPU_ISA_AVX2: return &avx2_engine;
    default: break;
  }
#endif
  return &generic_engine;
}

/* ---- the macro-kernel ------------------------------------------------------- */

/* Rows of a packed A block. The block is meant to live in L2 while every B
 * micro-panel streams past it; GEMM_MC x GEMM_KC (768 KB) fits the 1-2 MB
 * L2 of the AVX-512 machines, but the AVX2 ones here are Zen 1-3 EPYCs
 * with 512 KB, where it spilled to L3. An engine with mc 0 takes the rows
 * that fill 3/4 of this CPU's L2 (192 on those EPYCs, 384 with 1 MB): only
 * the blocking changes, not the order of any sum. */
static int64_t a_block_rows(const engine_t *en) {
  if (en->mc > 0) return en->mc;
  static int64_t cached; /* workers may race here; they compute the same value */
  int64_t rows = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (rows) return rows;
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  rows = l2 > 0 ? (int64_t)l2 * 3 / 4 / (en->kc * (int64_t)sizeof(float)) / GEMM_MR * GEMM_MR : GEMM_MC;
  if (rows > GEMM_MC) rows = GEMM_MC;
  if (rows < 4 * GEMM_MR) rows = 4 * GEMM_MR;
  __atomic_store_n(&cached, rows, __ATOMIC_RELAXED);
  return rows;
}

/* The engine for this CPU, picked on first use (workers may race to pick;
 * they pick the same one). */
static const engine_t *engine_ptr;

static const engine_t *engine_get(void) {
  const engine_t *e = __atomic_load_n(&engine_ptr, __ATOMIC_ACQUIRE);
  if (!e) e = pick(), __atomic_store_n(&engine_ptr, e, __ATOMIC_RELEASE);
  return e;
}

/* Zero skipping (above) is on unless AQ_GEMM_SKIP_ZEROS=0. */
static int skip_wanted(void) {
  static int cached = -1; /* workers may race here; they compute the same value */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    v = aq_cpu_settings()->gemm_skip_zeros != 0;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* Packs columns [j0, j0 + nc) of op(B), depth [l0, l0 + kc), into pb: by
 * the caller's packer if it gave one. */
static void pack_b_panels(const gemm_part_t *p, const engine_t *en, int64_t j0, int64_t nc, int64_t l0, int64_t kc,
                          float *pb) {
  if (p->pack_b) p->pack_b(p->pack_ctx, j0, nc, l0, kc, pb);
  else en->pack_b(p, l0, kc, j0, nc, pb);
}

/* Packs rows [i0, i0 + mc) of op(A), depth [l0, l0 + kc), into pa and,
 * given skip lists sk, plans its zero skipping: returns sk, or NULL where
 * every panel stays dense. */
static const gemm_skip_t *pack_a_block(const gemm_part_t *p, const engine_t *en, int64_t i0, int64_t mc, int64_t l0,
                                       int64_t kc, float *pa, gemm_skip_t *sk) {
  if (kc <= 0) return NULL;
  if (p->pack_a) p->pack_a(p->pack_ctx, i0, mc, l0, kc, pa);
  else en->pack_a(p, i0, mc, l0, kc, pa);
  if (!sk || !en->skip_plan) return NULL;
  en->skip_plan(pa, mc, kc, sk);
  return sk;
}

/* A full-height micro-tile from panel q of the packed A block, through the
 * panel's skip lists where skip_plan made them. */
static inline void micro_full(const engine_t *en, const gemm_skip_t *sk, int64_t q, int64_t kc, const float *a,
                              const float *b, float *c, int64_t ldc, const epi_t *e) {
  switch (sk ? sk->mode[q] : SKIP_DENSE) {
    case SKIP_WHOLE: en->micro_skip(sk->n[q][0], sk->at[q][0], a, b, c, ldc, e); return;
    case SKIP_HALVES: {
      const int h = GEMM_MR / 2;
      epi_t lower = *e;
      lower.bias_row = e->bias_row ? e->bias_row + h : NULL;
      en->micro_skip_half(sk->n[q][0], sk->at[q][0], a, b, c, ldc, e);
      en->micro_skip_half(sk->n[q][1], sk->at[q][1], a + h, b, c + h * ldc, ldc, &lower);
      return;
    }
    default: en->micro(kc, a, b, c, ldc, e);
  }
}

/* Fetches C and the fused consumer's other array over rows [row, row +
 * rows), columns [col, col + GEMM_NR). */
static inline void post_prefetch(const gemm_part_t *p, const gemm_post_t *q, int64_t rows, int64_t row, int64_t col) {
  const float *o = q->kind == GEMM_POST_RELU_MASK ? q->mask : q->velocity;
  int64_t ldo = q->kind == GEMM_POST_RELU_MASK ? q->ldmask : q->ldv;
  for (int64_t r = 0; r < rows; ++r) {
    const float *c = p->c + (row + r) * p->ldc + col, *x = o + (row + r) * ldo + col;
    __builtin_prefetch(c, 1), __builtin_prefetch(c + 16, 1);
    __builtin_prefetch(x), __builtin_prefetch(x + 16);
  }
}

/* macro with a fused consumer, over chunks of POST_NC columns: for each
 * chunk, MR-row strips across it (A's micro-panel stays in L1 over the
 * chunk's micro-panels of B, which stay in L2), then the consumer on the
 * strip. Its rows of C and of its own array are runs of POST_NC floats,
 * fetched while the strip before is computed; tile by tile (runs of 32
 * floats 4 KB apart) its loads missed, and strips across all of nc cost
 * the micro-kernels B's reuse. */
enum { POST_NC = 4 * GEMM_NR, POST_LD = POST_NC + 16 /* rows 4 KB apart would share L1 sets */ };
static void macro_post(const gemm_part_t *p, const engine_t *en, const float *pa, const gemm_skip_t *sk,
                       const float *pb, int64_t kc, int64_t i0, int64_t mc, int64_t j0, int64_t nc, const epi_t *e) {
  float strip[GEMM_MR * POST_LD] __attribute__((aligned(64)));
  const epi_t raw = {1.0f, 0.0f, NULL, NULL, 0, NULL};
  for (int64_t jb = 0; jb < nc; jb += POST_NC) {
    int64_t cols = nc - jb < POST_NC ? nc - jb : POST_NC;
    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
      int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
      int64_t next = mc - ir - GEMM_MR < GEMM_MR ? mc - ir - GEMM_MR : GEMM_MR;
      for (int64_t jr = 0; jr < cols; jr += GEMM_NR) {
        post_prefetch(p, e->post, next, i0 + ir + GEMM_MR, j0 + jb + jr);
        if (rows <= 6) en->micro_half(kc, pa + ir * kc, pb + (jb + jr) * kc, strip + jr, POST_LD, &raw);
        else micro_full(en, sk, ir / GEMM_MR, kc, pa + ir * kc, pb + (jb + jr) * kc, strip + jr, POST_LD, &raw);
      }
      epi_t er = *e;
      er.bias = e->bias ? e->bias + j0 + jb : NULL;
      er.bias_row = e->bias_row ? e->bias_row + i0 + ir : NULL;
      post_rows(&er, strip, POST_LD, rows, cols, p->c + (i0 + ir) * p->ldc + j0 + jb, p->ldc, i0 + ir, j0 + jb);
    }
  }
}

/* Every micro-tile of a packed A block (rows [i0, i0 + mc)) against a packed
 * B panel (columns [j0, j0 + nc)). */
static void macro(const gemm_part_t *p, const engine_t *en, const float *pa, const gemm_skip_t *sk, const float *pb,
                  int64_t kc, int64_t i0, int64_t mc, int64_t j0, int64_t nc, const epi_t *e) {
  if (e->post) {
    macro_post(p, en, pa, sk, pb, kc, i0, mc, j0, nc, e);
    return;
  }
  float buf[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
  const epi_t raw = {1.0f, 0.0f, NULL, NULL, 0, NULL};
  for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
    int64_t cols = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
    epi_t ej = *e;
    if (e->bias) ej.bias = e->bias + j0 + jr;
    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
      int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
      float *c = p->c + (i0 + ir) * p->ldc + j0 + jr;
      ej.bias_row = e->bias_row ? e->bias_row + i0 + ir : NULL;
      const float *a = pa + ir * kc, *b = pb + jr * kc;
      if (rows == GEMM_MR && cols == GEMM_NR) {
        micro_full(en, sk, ir / GEMM_MR, kc, a, b, c, p->ldc, &ej);
        continue;
      }
      if (cols == GEMM_NR && en->rows[rows]) {
        en->rows[rows](kc, a, b, c, p->ldc, &ej);
        continue;
      }
      /* A partial micro-tile: the product into a full-size buffer, then the
       * epilogue on the part of it that lies inside C. */
      if (rows <= 6) en->micro_half(kc, a, b, buf, GEMM_NR, &raw);
      else micro_full(en, sk, ir / GEMM_MR, kc, a, b, buf, GEMM_NR, &raw);
      for (int64_t r = 0; r < rows; ++r) {
        float *cr = c + r * p->ldc;
        for (int64_t j = 0; j < cols; ++j) cr[j] = epi_one(&ej, buf[r * GEMM_NR + j], &cr[j], r, j);
      }
    }
  }
}

/* The write-back of depth slice [pc, ...): beta applies once, on the first
 * slice (later ones add to C); bias, activation and a fused consumer on
 * the last. */
static epi_t slice_epi(const gemm_part_t *p, int64_t pc, int last) {
  epi_t e = {p->alpha, pc == 0 ? p->beta : 1.0f, last ? p->bias : NULL, last ? p->bias_row : NULL,
             last && p->act == GEMM_ACT_RELU, last ? p->post : NULL};
  return e;
}

/* Rows of each A block when a part's mc rows are cut into blocks of at
 * most MC: equal blocks (a multiple of MR rows each) rather than full ones
 * and a sliver. */
static int64_t a_block_cut(int64_t mc, int64_t MC) {
  int64_t blocks = (mc + MC - 1) / MC;
  return ((mc + blocks - 1) / blocks + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
}

/* A part whose rows fit one A block (small M: a convolution's filters, a
 * batch of activations) packs A once per KC slice and then each NR-column
 * B micro-panel right before the micro-kernels use it, so B goes through
 * L1 / L2 once instead of being written to a large panel and read back. */
static void part_fused(const gemm_part_t *p, const engine_t *en, float *pa, float *pb, gemm_skip_t *skip) {
  const int64_t KC = en->kc;
  for (int64_t pc = 0; pc < p->k || pc == 0; pc += KC) {
    int64_t kc = p->k - pc < KC ? p->k - pc : KC;
    int last = pc + KC >= p->k;
    epi_t e = slice_epi(p, pc, last);
    const gemm_skip_t *sk = pack_a_block(p, en, p->m0, p->mc, pc, kc, pa, skip);
    /* A fused consumer's slice: B packed whole (macro_post walks rows). */
    for (int64_t jc = 0; e.post && jc < p->nc; jc += GEMM_NC) {
      int64_t nc = p->nc - jc < GEMM_NC ? p->nc - jc : GEMM_NC;
      if (kc > 0) {
        pack_b_panels(p, en, p->n0 + jc, nc, pc, kc, pb);
      }
      macro(p, en, pa, sk, pb, kc, p->m0, p->mc, p->n0 + jc, nc, &e);
    }
    for (int64_t jr = 0; !e.post && jr < p->nc; jr += GEMM_NR) {
      int64_t cols = p->nc - jr < GEMM_NR ? p->nc - jr : GEMM_NR;
      if (kc > 0) {
        pack_b_panels(p, en, p->n0 + jr, cols, pc, kc, pb);
      }
      macro(p, en, pa, sk, pb, kc, p->m0, p->mc, p->n0 + jr, cols, &e);
    }
    if (kc <= 0) break;
  }
}

/* A part at most NARROW_N columns wide: each 12-row panel of A is packed
 * over the whole depth, then the narrow kernel runs down it once and the
 * epilogue writes the panel's rows. */
static void part_narrow(const gemm_part_t *p, const engine_t *en, float *pa) {
  float out[NARROW_N * 16] __attribute__((aligned(64)));
  int64_t sl = p->trans_b ? 1 : p->ldb, sj = p->trans_b ? p->ldb : 1;
  const float *b = p->b + (p->trans_b ? p->n0 * p->ldb : p->n0);
  int nj = (int)p->nc;
  for (int64_t i0 = 0; i0 < p->mc; i0 += GEMM_MR) {
    int64_t rows = p->mc - i0 < GEMM_MR ? p->mc - i0 : GEMM_MR;
    if (p->k > 0) en->pack_a(p, p->m0 + i0, rows, 0, p->k, pa);
    en->narrow(p->k, pa, b, sl, sj, nj, out);
    epi_t e = {p->alpha, p->beta, p->bias ? p->bias + p->n0 : NULL, p->bias_row ? p->bias_row + p->m0 + i0 : NULL,
               p->act == GEMM_ACT_RELU, p->post};
    if (p->post) {
      float x[GEMM_MR * NARROW_N];
      for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < nj; ++j) x[r * NARROW_N + j] = out[j * 16 + r];
      post_rows(&e, x, NARROW_N, rows, nj, p->c + (p->m0 + i0) * p->ldc + p->n0, p->ldc, p->m0 + i0, p->n0);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      float *cr = p->c + (p->m0 + i0 + r) * p->ldc + p->n0;
      for (int j = 0; j < nj; ++j) cr[j] = epi_one(&e, out[j * 16 + r], &cr[j], r, j);
    }
  }
}

/* The part through the sparse path. The blocking is the dense path's (A
 * blocks of at most MC rows, KC-deep slices, NC columns of packed B), so
 * the sums restart where theirs do. */
static void part_sparse(const gemm_part_t *p, const engine_t *en, float *pb, const sparse_t *sp) {
  const int64_t KC = en->kc, MC = a_block_rows(en);
  int64_t mcb = a_block_cut(p->mc, MC);
  for (int64_t jc = 0; jc < p->nc; jc += GEMM_NC) {
    int64_t nc = p->nc - jc < GEMM_NC ? p->nc - jc : GEMM_NC;
    for (int64_t pc = 0; pc < p->k; pc += KC) {
      int64_t kc = p->k - pc < KC ? p->k - pc : KC;
      epi_t e = slice_epi(p, pc, pc + KC >= p->k);
      pack_b_panels(p, en, p->n0 + jc, nc, pc, kc, pb);
      for (int64_t ic = 0; ic < p->mc; ic += mcb) {
        int64_t mc = p->mc - ic < mcb ? p->mc - ic : mcb;
        en->sparse_build(p, p->m0 + ic, mc, pc, kc, sp);
        en->sparse_block(p, sp, pb, kc, p->m0 + ic, mc, p->n0 + jc, nc, &e);
      }
    }
  }
}

void gemm_part(const gemm_part_t *p, void *scratch) {
  const engine_t *en = engine_get();
  float *pa = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  float *pb = pa + (size_t)GEMM_MC * GEMM_KC;
  gemm_skip_t *skip = (gemm_skip_t *)(pb + (size_t)GEMM_KC * GEMM_NC);
  uint8_t *extra = (uint8_t *)skip + GEMM_SKIP_BYTES;
  float *sums = (float *)(((uintptr_t)extra + 63) & ~(uintptr_t)63);
  uint8_t *at = (uint8_t *)(sums + (size_t)GEMM_MC * SPARSE_NB);
  const sparse_t sp = {pa, at, at + (size_t)GEMM_MC * GEMM_KC, sums};
  /* Narrow parts read B in place and pack an A panel over the whole depth
   * (it must fit the scratch; packers of the caller's, which may assume
   * kc <= GEMM_KC, keep the blocked path). */
  if (p->nc <= NARROW_N && !p->pack_a && !p->pack_b &&
      p->k * GEMM_MR <= (int64_t)GEMM_MC * GEMM_KC + (int64_t)GEMM_KC * GEMM_NC) {
    part_narrow(p, en, pa);
    return;
  }
  const int64_t KC = en->kc, MC = a_block_rows(en);
  /* A's zeros pick the path (zero skipping, sparse rows); A is sampled only
   * where a path could use them (on Sapphire Rapids, whose engine plans no
   * panels, the 16-core MLP's 64-column parts take neither). A caller's
   * packer (a convolution's image) cannot be sampled: its panels are
   * planned. */
  int sparse_fits = en->sparse_build && !p->pack_a && p->k > 0 && p->nc >= SPARSE_NB;
  int64_t pct = 100;
  if ((sparse_fits || en->skip_plan) && skip_wanted())
    pct = p->pack_a ? 0 : p->k ? en->nonzero_pct(p, p->m0, p->mc, 0, p->k < KC ? p->k : KC) : 100;
  if (sparse_fits && pct < en->sparse_below_pct) {
    part_sparse(p, en, pb, &sp);
    return;
  }
  if (pct >= 100) skip = NULL; /* nothing to skip: no plan */
  if (p->mc <= MC) {
    part_fused(p, en, pa, pb, skip);
    return;
  }
  for (int64_t jc = 0; jc < p->nc; jc += GEMM_NC) {
    int64_t nc = p->nc - jc < GEMM_NC ? p->nc - jc : GEMM_NC;
    for (int64_t pc = 0; pc < p->k || pc == 0; pc += KC) {
      int64_t kc = p->k - pc < KC ? p->k - pc : KC;
      int last = pc + KC >= p->k;
      epi_t e = slice_epi(p, pc, last);
      if (kc > 0) {
        pack_b_panels(p, en, p->n0 + jc, nc, pc, kc, pb);
      }
      int64_t mcb = a_block_cut(p->mc, MC);
      for (int64_t ic = 0; ic < p->mc; ic += mcb) {
        int64_t mc = p->mc - ic < mcb ? p->mc - ic : mcb;
        const gemm_skip_t *sk = pack_a_block(p, en, p->m0 + ic, mc, pc, kc, pa, skip);
        macro(p, en, pa, sk, pb, kc, p->m0 + ic, mc, p->n0 + jc, nc, &e);
      }
      if (kc <= 0) break;
    }
  }
}

/* The time of the largest part, in units of one multiply-add, plus what a
 * part spends packing (each packed float costs about as much as a dozen
 * multiply-adds against it at full speed). */
void gemm_split(int64_t m, int64_t n, int64_t parts, int64_t *pm, int64_t *pn) {
  int64_t mb = (m + GEMM_MR - 1) / GEMM_MR, nb = (n + GEMM_NR - 1) / GEMM_NR;
  if (mb < 1) mb = 1;
  if (nb < 1) nb = 1;
  if (parts < 1) parts = 1;
  double best = -1.0;
  *pm = *pn = 1;
  for (int64_t p = parts; p >= 1; --p) {
    for (int64_t a = 1; a <= p; ++a) {
      if (p % a) continue;
      int64_t b = p / a;
      if (a > mb || b > nb) continue;
      double rows = (double)((mb + a - 1) / a * GEMM_MR), cols = (double)((nb + b - 1) / b * GEMM_NR);
      if (rows > m) rows = (double)m;
      if (cols > n) cols = (double)n;
      double cost = rows * cols + 12.0 * (rows + cols);
      if (best < 0 || cost < best * 0.999) best = cost, *pm = a, *pn = b;
    }
    if (best >= 0) break; /* the most parts that fit */
  }
}
