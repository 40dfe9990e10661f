/* The AVX-512 GEMM engines (32 vector registers of 16 floats), with the
 * zero skipping: panel plans and sparse rows (gemm_engine.h). */
#include "kernels/cpu/gemm_engine.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/isa.h"


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
    gemm_pack_a_avx2(p, i0, mc, l0, kc, dst); /* k-major already: plain copies */
    return;
  }
  for (int64_t r0 = 0; r0 < mc; r0 += GEMM_MR, dst += kc * GEMM_MR) {
    int64_t rows = mc - r0 < GEMM_MR ? mc - r0 : GEMM_MR;
    if (rows < GEMM_MR) {
      gemm_pack_a_generic(p, i0 + r0, rows, l0, kc, dst);
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
    if (l == n - AQ_PREFETCH_C_AHEAD) aq_prefetch_c(c, ldc, rows, GEMM_NR);
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


/* A mask of the first n of 16 lanes (none, some or all). */
static inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
}

/* skip_plan for AVX-512 (gemm_engine.h: skip_plan_with): four steps are
 * three vectors; a list grows by compressing the steps' indices under a
 * half's (or either half's) bits. */
#define AQ_TARGET_SKIP __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2,bmi2,popcnt")))
AQ_TARGET_SKIP static inline __attribute__((always_inline)) int64_t skip_append(uint16_t *list, int64_t n,
                                                                                 unsigned bits, int64_t l0) {
  __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)l0),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm256_storeu_si256((__m256i *)(list + n), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32((__mmask16)bits, idx)));
  return n + __builtin_popcount(bits);
}

AQ_TARGET_SKIP static inline __attribute__((always_inline)) uint64_t skip_mask4_avx512(const float *s, int64_t off,
                                                                                      int64_t floats) {
  uint64_t x = 0;
  for (int v = 0; v < 3; ++v, off += 16) {
    __mmask16 m = first_lanes(floats - off);
    x |= (uint64_t)_mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, s + off), _mm512_setzero_ps(), _CMP_NEQ_UQ)
         << (16 * v);
  }
  return x;
}

AQ_TARGET_SKIP static void skip_plan_avx512(const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk) {
  skip_plan_with(pa, mc, kc, sk, skip_mask4_avx512, skip_append);
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

/* A full row of a sparse group's sums through the vector write-back. */
AQ_TARGET_AVX512 static void row32_avx512(const epi_t *e, const float *t, float *c, int64_t r) {
  store512(e, _mm512_load_ps(t), _mm512_load_ps(t + 16), c, r);
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
    gemm_sparse_store(p, sp->sums, i0, mc, j0 + jg, cols, e, row32_avx512);
  }
}

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

/* The AVX-512 engines differ in how they skip zeros (gemm.c: pick): where
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
   gemm_pack_b_avx2,                                                                                            \
   narrow_avx512,                                                                                          \
   GEMM_KC,                                                                                                \
   GEMM_MC,                                                                                                \
   GEMM_NR,                                                                                                \
   NULL /* BLIS's order: two full-width FMA units, or Zen 4's 1 MB L2, keep its B micro-panel in L1 */}
const engine_t gemm_engine_avx512 = AQ_AVX512_ENGINE(NULL, SPARSE_OTHER_PCT);
const engine_t gemm_engine_avx512_zen4 = AQ_AVX512_ENGINE(skip_plan_avx512, SPARSE_ZEN4_PCT);
#endif
