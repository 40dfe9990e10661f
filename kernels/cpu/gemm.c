/* GEMM: for each GEMM_NC-wide slice of the part's columns and each
 * GEMM_KC-deep slice of k, B is packed once into NR-column panels (NR the
 * engine's: gemm_engine.h); every
 * GEMM_MC-row block of A is packed into MR-row panels and streamed against
 * it, one MR x NR micro-tile at a time (BLIS's loop order: the B micro-panel
 * stays in L1 while A micro-panels come from L2). Packing zero-pads partial
 * panels so the micro-kernel never branches on edges; only the write-back
 * of a partial micro-tile goes through a buffer. An engine may run dense
 * parts in the streaming order instead (below). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/gemm_engine.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/update.h"

/* The write-back through a fused consumer: x holds the raw product of
 * rows x cols elements (row stride ldx) and becomes v in place; C's part
 * starts at row `row`, column `col`. The epilogue's arithmetic is the
 * micro-kernels' (the + 0 too: it turns -0 into +0 as adding a zero bias
 * vector does there). */
void gemm_post_rows(const epi_t *e, float *x, int64_t ldx, int64_t rows, int64_t cols, float *c, int64_t ldc,
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

/* The write-back of the sparse path's sums (rows [i0, i0 + mc), columns
 * [j0, j0 + cols), row stride SPARSE_NB), as the dense kernels write a
 * micro-tile: full 32-column rows through the engine's vector epilogue
 * (row32); a partial tile, or a fused consumer, from the raw sum (+ 0, as a
 * raw micro-tile holds it). */
void gemm_sparse_store(const gemm_part_t *p, float *sums, int64_t i0, int64_t mc, int64_t j0, int64_t cols,
                       const epi_t *e, gemm_row32_fn row32) {
  epi_t er = *e;
  er.bias = e->bias ? e->bias + j0 : NULL;
  er.bias_row = e->bias_row ? e->bias_row + i0 : NULL;
  float *c = p->c + i0 * p->ldc + j0;
  if (e->post || cols % GEMM_NR)
    for (int64_t r = 0; r < mc; ++r)
      for (int64_t j = 0; j < cols; ++j) sums[r * SPARSE_NB + j] += 0.0f;
  if (e->post) {
    gemm_post_rows(&er, sums, SPARSE_NB, mc, cols, c, p->ldc, i0, j0);
    return;
  }
  for (int64_t jr = 0; jr < cols; jr += GEMM_NR) {
    epi_t ej = er;
    ej.bias = er.bias ? er.bias + jr : NULL;
    for (int64_t r = 0; r < mc; ++r) {
      const float *t = sums + r * SPARSE_NB + jr;
      float *cr = c + r * p->ldc + jr;
      if (cols - jr >= GEMM_NR) {
        row32(&ej, t, cr, r);
        continue;
      }
      for (int64_t j = 0; j < cols - jr; ++j) cr[j] = epi_one(&ej, t[j], &cr[j], r, j);
    }
  }
}

/* The engine for this CPU's widest ISA. A Zen 4 core (AMD family 0x19
 * with AVX-512) issues its 512-bit multiply-adds as two halves: loads are
 * cheap next to them, and skipping zeros pays more than on cores with two
 * full-width FMA units (Sapphire Rapids). Sparse rows paid at 50% nonzeros
 * on the MLP's products there (2-core step 13.9 -> 10.4 ms) and lost on
 * Sapphire Rapids, B's loads being the limit; panels took the 2-core step
 * from 13.6 to 12.5 ms, while on the H100 machine's 16 Sapphire Rapids
 * cores their plans cost more than they saved (4.30 against 3.94 ms a step
 * with AQ_GEMM_SKIP_ZEROS=0, medians of 6). */
static const engine_t *pick(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return aq_cpu_amd_family() == 0x19 ? &gemm_engine_avx512_zen4 : &gemm_engine_avx512;
    case AQ_CPU_ISA_AVX2: return &gemm_engine_avx2;
    default: break;
  }
#endif
  return &gemm_engine_generic;
}

/* ---- the macro-kernel ------------------------------------------------------- */

/* This CPU's L2 in bytes, read once; 0 where the system does not say. */
static long l2_bytes(void) {
  static long cached; /* 0: not read yet, -1: unknown; workers may race here and read the same value */
  long v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (!v) {
    v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (v <= 0) v = -1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v > 0 ? v : 0;
}

/* Rows of a packed A block. The block is meant to live in L2 while every B
 * micro-panel streams past it; GEMM_MC x GEMM_KC (768 KB) fits the 1-2 MB
 * L2 of the AVX-512 machines, but the AVX2 ones here are Zen 1-3 EPYCs
 * with 512 KB, where it spilled to L3. An engine with mc 0 takes the rows
 * that fill 3/4 of this CPU's L2 (192 on those EPYCs, 384 with 1 MB): only
 * the blocking changes, not the order of any sum. */
static int64_t a_block_rows(const engine_t *en) {
  if (en->mc > 0) return en->mc;
  long l2 = l2_bytes();
  int64_t rows = l2 > 0 ? (int64_t)l2 * 3 / 4 / (en->kc * (int64_t)sizeof(float)) / GEMM_MR * GEMM_MR : GEMM_MC;
  if (rows > GEMM_MC) rows = GEMM_MC;
  if (rows < 4 * GEMM_MR) rows = 4 * GEMM_MR;
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
  if (p->pack_b) p->pack_b(p->pack_ctx, j0, nc, l0, kc, en->nr, pb);
  else en->pack_b(p, l0, kc, j0, nc, en->nr, pb);
}

/* Packs rows [i0, i0 + mc) of op(A), depth [l0, l0 + kc), into pa and,
 * given skip lists sk, plans its zero skipping: returns sk, or NULL where
 * every panel stays dense. */
static const gemm_skip_t *pack_a_block(const gemm_part_t *p, const engine_t *en, int64_t i0, int64_t mc, int64_t l0,
                                       int64_t kc, float *pa, gemm_skip_t *sk) {
  if (kc <= 0) return NULL;
  if (p->pack_a) p->pack_a(p->pack_ctx, i0, mc, l0, kc, GEMM_MR, pa);
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
 * rows), columns [col, col + cols) (16 or 32). */
static inline void post_prefetch(const gemm_part_t *p, const gemm_post_t *q, int64_t rows, int64_t row, int64_t col,
                                 int64_t cols) {
  const float *o = q->kind == GEMM_POST_RELU_MASK ? q->mask : q->velocity;
  int64_t ldo = q->kind == GEMM_POST_RELU_MASK ? q->ldmask : q->ldv;
  for (int64_t r = 0; r < rows; ++r) {
    const float *c = p->c + (row + r) * p->ldc + col, *x = o + (row + r) * ldo + col;
    __builtin_prefetch(c, 1), __builtin_prefetch(c + cols - 16, 1);
    __builtin_prefetch(x), __builtin_prefetch(x + cols - 16);
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
      for (int64_t jr = 0; jr < cols; jr += en->nr) {
        post_prefetch(p, e->post, next, i0 + ir + GEMM_MR, j0 + jb + jr, en->nr);
        if (rows <= 6) en->micro_half(kc, pa + ir * kc, pb + (jb + jr) * kc, strip + jr, POST_LD, &raw);
        else micro_full(en, sk, ir / GEMM_MR, kc, pa + ir * kc, pb + (jb + jr) * kc, strip + jr, POST_LD, &raw);
      }
      epi_t er = *e;
      er.bias = e->bias ? e->bias + j0 + jb : NULL;
      er.bias_row = e->bias_row ? e->bias_row + i0 + ir : NULL;
      gemm_post_rows(&er, strip, POST_LD, rows, cols, p->c + (i0 + ir) * p->ldc + j0 + jb, p->ldc, i0 + ir, j0 + jb);
    }
  }
}

/* One micro-tile of C, rows [i, i + rows) x columns [j, j + cols), from
 * the A panel at a (panel q of the block, for its skip lists) and the B
 * micro-panel at b; e's bias and bias_row already at column j and row i. */
static inline void tile(const gemm_part_t *p, const engine_t *en, const gemm_skip_t *sk, int64_t q, const float *a,
                        const float *b, int64_t kc, int64_t i, int64_t j, int64_t rows, int64_t cols,
                        const epi_t *e) {
  const int64_t NR = en->nr;
  float *c = p->c + i * p->ldc + j;
  if (rows == GEMM_MR && cols == NR) {
    micro_full(en, sk, q, kc, a, b, c, p->ldc, e);
    return;
  }
  if (cols == NR && en->rows[rows]) {
    en->rows[rows](kc, a, b, c, p->ldc, e);
    return;
  }
  /* A partial micro-tile: the product into a full-size buffer, then the
   * epilogue on the part of it that lies inside C. */
  float buf[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
  const epi_t raw = {1.0f, 0.0f, NULL, NULL, 0, NULL};
  if (rows <= 6) en->micro_half(kc, a, b, buf, NR, &raw);
  else micro_full(en, sk, q, kc, a, b, buf, NR, &raw);
  for (int64_t r = 0; r < rows; ++r) {
    float *cr = c + r * p->ldc;
    for (int64_t jj = 0; jj < cols; ++jj) cr[jj] = epi_one(e, buf[r * NR + jj], &cr[jj], r, jj);
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
  const int64_t NR = en->nr;
  for (int64_t jr = 0; jr < nc; jr += NR) {
    int64_t cols = nc - jr < NR ? nc - jr : NR;
    epi_t ej = *e;
    if (e->bias) ej.bias = e->bias + j0 + jr;
    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
      int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
      ej.bias_row = e->bias_row ? e->bias_row + i0 + ir : NULL;
      tile(p, en, sk, ir / GEMM_MR, pa + ir * kc, pb + jr * kc, kc, i0 + ir, j0 + jr, rows, cols, &ej);
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
 * batch of activations) packs A once per KC slice and then GEMM_NR columns
 * of B (one micro-panel, or two of an engine with NR 16: the packer reads
 * whole 128-byte runs of B's rows) right before the micro-kernels use
 * them, so B goes through L1 / L2 once instead of being written to a
 * large panel and read back. */
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
      gemm_post_rows(&e, x, NARROW_N, rows, nj, p->c + (p->m0 + i0) * p->ldc + p->n0, p->ldc, p->m0 + i0, p->n0);
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

/* ---- the streaming order -------------------------------------------------
 * An engine with stream (AVX2) runs a dense part the other way round,
 * as OpenBLAS's kernels for Zen do. For each KC slice, B is packed whole
 * (up to GEMM_NC columns), A is taken a slice of a_slice_rows rows at a
 * time, and each 6-row half of the slice's panels meets every micro-panel
 * of a block of b_block_cols columns in turn, B streaming past it from L2,
 * fetched a few steps ahead: the A slice and the B block share L2. A is
 * read in place where it can be (a_in_place), else packed a slice at a
 * time. In BLIS's order (macro) the B micro-panel meant to stay in L1, 16
 * columns by KC, fills Zen 3's L1 alone, so both operands came from L2,
 * and each part packed its rows of A. Each sum runs over the same terms in
 * the same order and KC slices: C is BLIS's order's, bit for bit. Parts
 * with a zero-skipping plan, a fused consumer or a caller's packer keep
 * BLIS's order. */

/* 3/8 of the L2 (512 KB where the system does not say) in KC-deep rows
 * (or columns), rounded down to a multiple of unit, within [unit, most]. */
static int64_t l2_share(const engine_t *en, int64_t unit, int64_t most) {
  int64_t l2 = l2_bytes();
  if (!l2) l2 = 512 * 1024;
  int64_t n = l2 * 3 / 8 / (en->kc * (int64_t)sizeof(float)) / unit * unit;
  return n > most ? most : n < unit ? unit : n;
}

/* Columns of a B block (96 on a 512 KB L2): whole GEMM_NR runs. */
static int64_t b_block_cols(const engine_t *en) { return l2_share(en, GEMM_NR, GEMM_NC); }

/* Rows of an A slice (96 on a 512 KB L2), within the smaller buffer. */
static int64_t a_slice_rows(const engine_t *en) {
  return l2_share(en, GEMM_MR, (int64_t)GEMM_MC * GEMM_KC / en->kc / GEMM_MR * GEMM_MR);
}

/* Every micro-tile of A's rows [i0, i0 + mc), depth [l0, l0 + kc), packed
 * at pa or (pa NULL) read in place, against a packed B block (columns [j0,
 * j0 + nc)): panel by panel, each half meeting the block's full
 * micro-panels in one call. A partial tile goes whole through tile(), its
 * A panel packed into spare when A is read in place. */
static void macro_stream(const gemm_part_t *p, const engine_t *en, const float *pa, const float *pb, int64_t kc,
                         int64_t l0, int64_t i0, int64_t mc, int64_t j0, int64_t nc, const epi_t *e, float *spare) {
  const int64_t NR = en->nr, H = GEMM_MR / 2, full = nc / NR * NR;
  for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
    int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
    const float *a = pa ? pa + ir * kc : NULL;
    epi_t ej = *e;
    ej.bias = e->bias ? e->bias + j0 : NULL;
    for (int64_t h = 0; rows == GEMM_MR && full && h < GEMM_MR; h += H) {
      ej.bias_row = e->bias_row ? e->bias_row + i0 + ir + h : NULL;
      float *c = p->c + (i0 + ir + h) * p->ldc + j0;
      if (a) en->stream(kc, a + h, 0, pb, full / NR, c, p->ldc, &ej);
      else en->stream(kc, p->a + (i0 + ir + h) * p->lda + l0, p->lda, pb, full / NR, c, p->ldc, &ej);
    }
    ej.bias_row = e->bias_row ? e->bias_row + i0 + ir : NULL;
    for (int64_t jr = rows == GEMM_MR ? full : 0; jr < nc; jr += NR) {
      int64_t cols = nc - jr < NR ? nc - jr : NR;
      ej.bias = e->bias ? e->bias + j0 + jr : NULL;
      if (!a) pack_a_block(p, en, i0 + ir, rows, l0, kc, spare, NULL), a = spare;
      tile(p, en, NULL, 0, a, pb + jr * kc, kc, i0 + ir, j0 + jr, rows, cols, &ej);
    }
  }
}

/* A row-major op(A) is read in place: each half's rows are runs of the
 * depth, as a packed panel's would be, and the parts of a column split
 * no longer each pack all of A. Not where its rows lie a multiple of 4 KB
 * apart: the six rows' lines would then share one set of the 8-way L1
 * with the streaming B; nor a transposed A. Those are packed. */
static int a_in_place(const gemm_part_t *p, const engine_t *en) {
  return en->stream && !p->trans_a && (p->lda * (int64_t)sizeof(float)) % 4096 != 0;
}

/* pack_b_panels as a gemm_share_pack_fn. */
typedef struct stream_pack {
  const gemm_part_t *p;
  const engine_t *en;
} stream_pack_t;

static void stream_pack(const void *ctx, int64_t j0, int64_t cols, int64_t l0, int64_t kc, float *dst) {
  const stream_pack_t *s = ctx;
  pack_b_panels(s->p, s->en, j0, cols, l0, kc, dst);
}

/* The B blocks of columns [jc0, jc0 + ncc) (of C), depth [l0, l0 + kc):
 * block i (columns jc0 + i * nb on) at out[i], packed into pb or taken
 * from the dispatch's shared copy. */
static void stream_b(const gemm_part_t *p, const engine_t *en, int64_t jc0, int64_t ncc, int64_t l0, int64_t kc,
                     int64_t nb, float *pb, const float **out) {
  if (p->share && kc > 0) {
    stream_pack_t ctx = {p, en};
    gemm_share_block(p->share, jc0, ncc, l0, kc, stream_pack, &ctx, pb, out);
    return;
  }
  if (kc > 0) pack_b_panels(p, en, jc0, ncc, l0, kc, pb);
  for (int64_t jb = 0, i = 0; jb < ncc; jb += nb, ++i) out[i] = pb + jb * kc;
}

static void part_stream(const gemm_part_t *p, const engine_t *en, float *pa, float *pb) {
  const int64_t KC = en->kc, NB = b_block_cols(en);
  const int64_t MS = a_slice_rows(en);
  const int in_place = a_in_place(p, en);
  const float *blocks[GEMM_NC / GEMM_NR];
  for (int64_t jc0 = 0; jc0 < p->nc; jc0 += GEMM_NC) {
    int64_t ncc = p->nc - jc0 < GEMM_NC ? p->nc - jc0 : GEMM_NC;
    for (int64_t pc = 0; pc < p->k || pc == 0; pc += KC) {
      int64_t kc = p->k - pc < KC ? p->k - pc : KC;
      epi_t e = slice_epi(p, pc, pc + KC >= p->k);
      stream_b(p, en, p->n0 + jc0, ncc, pc, kc, NB, pb, blocks);
      for (int64_t ic = 0; ic < p->mc; ic += MS) {
        int64_t mc = p->mc - ic < MS ? p->mc - ic : MS;
        if (!in_place) pack_a_block(p, en, p->m0 + ic, mc, pc, kc, pa, NULL);
        for (int64_t jb = 0; jb < ncc; jb += NB) {
          int64_t nb = ncc - jb < NB ? ncc - jb : NB;
          macro_stream(p, en, in_place ? NULL : pa, blocks[jb / NB], kc, pc, p->m0 + ic, mc, p->n0 + jc0 + jb, nb,
                       &e, pa);
        }
      }
      if (kc <= 0) break;
    }
  }
}

/* Parts share B where they would all stream (an engine with stream, none
 * narrow), each row band holds an A slice or more, and B is not too large
 * to keep whole (gemm_share_fits). With B packed once, more parts cost no
 * packing: twice the parts asked for (at most `most`), so that the first
 * parts, which pack B while the rest find it packed, weigh less on the
 * balance. */
int gemm_split_shared(int64_t m, int64_t n, int64_t k, int64_t parts, int64_t most, int64_t *pm, int64_t *pn,
                      gemm_share_shape_t *shape) {
  const engine_t *en = engine_get();
  parts = 2 * parts < most ? 2 * parts : most;
  if (!en->stream || parts < 2 || m < parts * a_slice_rows(en) || n <= NARROW_N || k <= 0) return 0;
  *shape = (gemm_share_shape_t){.k = k, .n = n, .kc = en->kc, .nc = GEMM_NC, .chunk = b_block_cols(en), .nr = en->nr};
  if (!gemm_share_fits(shape)) return 0;
  *pm = parts, *pn = 1;
  return 1;
}

/* Item i of a batch, as a product of its own. */
static gemm_part_t batch_item(const gemm_part_t *p, int64_t i) {
  gemm_part_t q = *p;
  q.batch = 0;
  q.c = p->c + i * p->c_stride;
  if (p->b) q.b = p->b + i * p->b_stride;
  if (p->pack_ctx) q.pack_ctx = (const char *)p->pack_ctx + (size_t)i * p->ctx_stride;
  return q;
}

/* A batch whose rows fit one packed block (at most GEMM_MC): each KC slice
 * of A is packed once, with its skip plan, and every item's B slice is
 * packed and streamed against it in turn. The blocking of each item's sums
 * is gemm_part's (the same KC slices), so C is what a product an item
 * gives, bit for bit. */
static void part_batch(const gemm_part_t *p, const engine_t *en, float *pa, float *pb, gemm_skip_t *skip) {
  const int64_t KC = en->kc;
  for (int64_t pc = 0; pc < p->k || pc == 0; pc += KC) {
    int64_t kc = p->k - pc < KC ? p->k - pc : KC;
    epi_t e = slice_epi(p, pc, pc + KC >= p->k);
    const gemm_skip_t *sk = pack_a_block(p, en, p->m0, p->mc, pc, kc, pa, skip);
    for (int64_t i = 0; i < p->batch; ++i) {
      gemm_part_t q = batch_item(p, i);
      for (int64_t jc = 0; jc < q.nc; jc += GEMM_NC) {
        int64_t nc = q.nc - jc < GEMM_NC ? q.nc - jc : GEMM_NC;
        if (kc > 0) pack_b_panels(&q, en, q.n0 + jc, nc, pc, kc, pb);
        macro(&q, en, pa, sk, pb, kc, q.m0, q.mc, q.n0 + jc, nc, &e);
      }
    }
    if (kc <= 0) break;
  }
}

void gemm_part(const gemm_part_t *p, void *scratch) {
  /* A batch too tall for one packed block, or narrow (B read in place),
   * goes an item at a time. */
  if (p->batch > 1 && (p->mc > GEMM_MC || p->nc <= NARROW_N)) {
    for (int64_t i = 0; i < p->batch; ++i) {
      gemm_part_t q = batch_item(p, i);
      gemm_part(&q, scratch);
    }
    return;
  }
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
    for (int64_t i = 0; i < (p->batch > 1 ? p->batch : 1); ++i) {
      gemm_part_t q = batch_item(p, i); /* item 0 of one product: the product */
      part_sparse(&q, en, pb, &sp);
    }
    return;
  }
  if (pct >= 100) skip = NULL; /* nothing to skip: no plan */
  if (p->batch > 1) {
    part_batch(p, en, pa, pb, skip);
    return;
  }
  if (en->stream && !skip && !p->post && !p->pack_a && !p->pack_b) {
    part_stream(p, en, pa, pb);
    return;
  }
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
