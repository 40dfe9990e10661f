/* What the GEMM driver (gemm.c) and its per-ISA engines (gemm_generic.c,
 * gemm_avx2.c, gemm_avx512.c) share: the micro-tile's write-back, the
 * zero-skipping lists, and the engine: the table of one ISA's packers and
 * kernels, picked once per process (gemm.c: engine_get). */
#ifndef AQ_KERNELS_CPU_GEMM_ENGINE_H_
#define AQ_KERNELS_CPU_GEMM_ENGINE_H_

#include "kernels/cpu/gemm.h"

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

/* The write-back through a fused consumer (gemm.c). */
void gemm_post_rows(const epi_t *e, float *x, int64_t ldx, int64_t rows, int64_t cols, float *c, int64_t ldc,
                    int64_t row, int64_t col);

/* ---- micro-kernels ------------------------------------------------------------
 * C[MR][NR] (leading dimension ldc) from an A panel (p[l * MR + r]) and a
 * B panel (p[l * NR + c]), kc deep (kc may be 0: C = beta C + bias). NR is
 * the engine's (engine_t.nr): as wide as its vectors and registers make a
 * tile whose sums never leave them. */
typedef void (*micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const epi_t *e);

/* ---- zero skipping -----------------------------------------------------------
 * A depth step whose values in a packed A panel are all zero adds nothing
 * to the micro-tile. ReLU activations and an image's dark background give
 * the MLP's Fashion-MNIST step such steps in 10-19% of the 12-row panels of
 * four of its five products (the first layer's and the second's, forward
 * and backward), and in 16-32% of their 6-row halves. skip_plan lists, for
 * each full panel of a packed A block, the steps that hold a nonzero: for
 * the whole panel (WHOLE), or for each half apart (HALVES: two 6-row
 * tiles, when that leaves fewer multiply-adds than WHOLE, by a margin that
 * pays for reading B twice where WHOLE reads it once). The skip
 * micro-kernel reads A and B through a list. Each sum runs in the same
 * order over the same nonzero terms, so C is what the dense kernel gives,
 * bit for bit, with one exception: an Inf or NaN of B that meets only
 * zeros of A no longer makes C NaN. Partial panels stay dense. The AVX2
 * engine and Zen 4's plan panels (gemm.c: pick); on AVX2 they pay where
 * zeros come in whole steps (a layer's dead units, an image's border),
 * random zeros leaving no step to skip in 12 or 6 rows.
 * AQ_GEMM_SKIP_ZEROS=0 turns it off. */
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
 * bit (the exception above included). The AVX2 engine's break-even lies
 * lower than Zen 4's (its panel kernel loses less to its loads). */
enum { SPARSE_SK = 32, SPARSE_NB = 4 * GEMM_NR, SPARSE_ZEN4_PCT = 75, SPARSE_OTHER_PCT = 30, SPARSE_AVX2_PCT = 70 };
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

/* One row of 32 sums t to C's row at c (row r of the tile): an engine's
 * vector write-back; gemm_sparse_store (gemm.c) writes a group's sums
 * through it. */
typedef void (*gemm_row32_fn)(const epi_t *e, const float *t, float *c, int64_t r);
void gemm_sparse_store(const gemm_part_t *p, float *sums, int64_t i0, int64_t mc, int64_t j0, int64_t cols,
                       const epi_t *e, gemm_row32_fn row32);

/* n steps of a panel listed in at (a: the panel, or its second half). */
typedef void (*micro_skip_fn)(int64_t n, const uint16_t *at, const float *a, const float *b, float *c, int64_t ldc,
                              const epi_t *e);

/* C's micro-tile is fetched (for writing) this many depth steps before the
 * write-back, so that the epilogue's reads and writes of rows ldc apart,
 * often 4 KB, find their lines in L1 (about 1% on the MLP's products on
 * the 2-core EPYC, close to the noise there, and never slower). */
#define AQ_PREFETCH_C_AHEAD 24
static inline __attribute__((always_inline)) void aq_prefetch_c(const float *c, int64_t ldc, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    __builtin_prefetch(c + r * ldc, 1);
    __builtin_prefetch(c + r * ldc + cols - 1, 1);
  }
}

/* HALVES when its steps, at 0.55 of a whole one each (B is read for each
 * half), are fewer than WHOLE's. On the MLP's step halves took 7% less of
 * the products' time than whole-panel lists alone (24.4 against 26.2 ms of
 * CPU time a step, medians of 8); weights 0.5 and 0.7 measured alike. */
static inline int halves_pay(int64_t whole, int64_t halves) { return halves * 11 < whole * 20; }

#if defined(__x86_64__)
#include <immintrin.h>
/* The zero-skipping plan of a packed A block (skip_plan_fn), 16 steps of a
 * panel at a time, its ISA-specific steps given: mask4 compares the 48
 * values of four steps at s + off with zero (floats of them at s; those
 * past count as zeros) into a 48-bit mask, step i's row r at bit 12i + r
 * (NaN compares unequal, so a step holding one is kept); append adds the
 * steps l0 + i of a mask's bits i to a list of n and returns the new n.
 * ORing the mask shifted by 0..5 gathers each 6-row half's bits at the
 * half's lowest, and pext collects those into one bit per step and half.
 * A panel's lists are as halves_pay decides: halves, whole or none. */
typedef uint64_t (*skip_mask4_fn)(const float *s, int64_t off, int64_t floats);
typedef int64_t (*skip_append_fn)(uint16_t *list, int64_t n, unsigned bits, int64_t l0);
__attribute__((target("bmi2,popcnt"))) static inline __attribute__((always_inline)) void skip_plan_with(
    const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk, skip_mask4_fn mask4, skip_append_fn append) {
  uint16_t top[GEMM_KC / 16], bottom[GEMM_KC / 16]; /* per 16 steps: bit i, step i's half holds a nonzero */
  for (int64_t q = 0; q * GEMM_MR < mc; ++q) {
    sk->mode[q] = SKIP_DENSE;
    if (mc - q * GEMM_MR < GEMM_MR) continue; /* a partial panel stays dense */
    int64_t whole = 0, halves = 0, chunks = (kc + 15) / 16;
    for (int64_t c = 0; c < chunks; ++c) {
      unsigned mt = 0, mb = 0;
      for (int g = 0; g < 4; ++g) {
        uint64_t x = mask4(pa + q * GEMM_MR * kc, (c * 16 + g * 4) * GEMM_MR, kc * GEMM_MR);
        x |= x >> 1 | x >> 2 | x >> 3 | x >> 4 | x >> 5;
        mt |= (unsigned)_pext_u64(x, 0x001001001001ull) << (4 * g);
        mb |= (unsigned)_pext_u64(x, 0x040040040040ull) << (4 * g);
      }
      top[c] = (uint16_t)mt, bottom[c] = (uint16_t)mb;
      whole += __builtin_popcount(mt | mb), halves += __builtin_popcount(mt) + __builtin_popcount(mb);
    }
    if (halves_pay(whole, halves)) {
      int64_t n0 = 0, n1 = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        n0 = append(sk->at[q][0], n0, top[c], c * 16);
        n1 = append(sk->at[q][1], n1, bottom[c], c * 16);
      }
      sk->n[q][0] = (int32_t)n0, sk->n[q][1] = (int32_t)n1, sk->mode[q] = SKIP_HALVES;
    } else if (whole < kc) {
      int64_t n = 0;
      for (int64_t c = 0; c < chunks; ++c) n = append(sk->at[q][0], n, (unsigned)(top[c] | bottom[c]), c * 16);
      sk->n[q][0] = (int32_t)n, sk->mode[q] = SKIP_WHOLE;
    }
  }
}
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

typedef void (*pack_a_fn)(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst);
typedef void (*skip_plan_fn)(const float *pa, int64_t mc, int64_t kc, gemm_skip_t *sk);
typedef void (*pack_b_fn)(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float *dst);

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
  int64_t nr;     /* columns of the micro-tile and of a packed B panel (divides GEMM_NR) */
  /* Dense parts in the streaming order (gemm.c), NULL: none. 6 rows of A,
   * a packed panel's half (lda 0) or read in place lda apart, against
   * `panels` packed B panels kc * nr apart, C's columns nr apart, B
   * fetched ahead: the loop over a B block inside the engine, so that a
   * call spans many micro-tiles. */
  void (*stream)(int64_t kc, const float *a, int64_t lda, const float *b, int64_t panels, float *c, int64_t ldc,
                 const epi_t *e);
} engine_t;

/* Packers the engines share (p[l * MR + r] and p[l * nr + c] panels; the
 * vector B packer takes nr a multiple of 8). */
void gemm_pack_a_generic(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst);
void gemm_pack_b_generic(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float *dst);
void gemm_pack_a_avx2(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst);
void gemm_pack_b_avx2(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float *dst);

extern const engine_t gemm_engine_generic;
#if defined(__x86_64__)
extern const engine_t gemm_engine_avx2;
extern const engine_t gemm_engine_avx512;      /* cores with full-width FMA units (Sapphire Rapids) */
extern const engine_t gemm_engine_avx512_zen4; /* Zen 4: skips zeros more eagerly (gemm_avx512.c) */
#endif

#endif
