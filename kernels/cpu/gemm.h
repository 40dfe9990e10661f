/* The GEMM engine under matmul and convolution: BLIS-style blocking with
 * packed panels and a register-tiled micro-kernel chosen at run time
 * (AVX-512, AVX2+FMA, or portable C).
 *
 * One call computes one rectangular part of C over the whole depth k, with
 * the epilogue (alpha, beta, bias, activation) applied to each micro-tile
 * while it is still in registers or L1. Parts of one C never overlap, so the
 * work-groups of a dispatch run them with no synchronisation. A part at most
 * 16 columns wide (a classifier's logits and their weight gradient) takes a
 * narrow kernel instead, the vector running down a packed 12-row A panel
 * and B read in place. Where A is mostly zeros (ReLU activations), the
 * AVX2 and AVX-512 engines go row by row over A's nonzeros instead, or skip
 * the depth steps a panel has no nonzero in (gemm.c: zero skipping). */
#ifndef AQ_KERNELS_CPU_GEMM_H_
#define AQ_KERNELS_CPU_GEMM_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/gemm_share.h"

enum {
  GEMM_MR = 12,   /* rows of the micro-tile (broadcast from packed A) */
  GEMM_NR = 32,   /* columns of the widest micro-tile (two AVX-512 vectors of packed B); an engine's divide it */
  GEMM_KC = 512,  /* depth of one packed block (fewer passes over C) */
  GEMM_MC = 384,  /* rows of A packed at a time (the A block lives in L2) */
  GEMM_NC = 1024, /* columns of B packed at a time (the B panel lives in L2/L3) */
};

/* Activations the epilogue applies after bias (the values of aq_activation_t). */
enum { GEMM_ACT_NONE = 0, GEMM_ACT_RELU = 1 };

/* A packer: panels `width` wide of op(A) rows [first, first + count)
 * (pack_a: width is GEMM_MR), or of op(B) columns (pack_b: width is the
 * micro-tile's, at most GEMM_NR, which the ISA picks), depth [l0, l0 + kc);
 * a panel holds p[l * width + r] (p[l * width + c]), and a partial panel is
 * zero-padded. Convolution packs straight from the image this way (an
 * implicit im2col). */
typedef void (*gemm_pack_fn)(const void *ctx, int64_t first, int64_t count, int64_t l0, int64_t kc, int64_t width,
                             float *dst);

/* A consumer of the product fused into its write-back (aq_matmul_fused_f32):
 * after the epilogue, on the last depth slice, each row segment v of the
 * tile goes to C through it instead of being stored. */
typedef enum gemm_post_kind { GEMM_POST_RELU_MASK = 1, GEMM_POST_SGD = 2 } gemm_post_kind_t;
typedef struct gemm_post {
  gemm_post_kind_t kind;
  const float *mask; /* RELU_MASK: C = v where mask > 0, else 0 */
  int64_t ldmask;
  float *velocity; /* SGD: C is the weight, v its gradient (update.h) */
  int64_t ldv;
  float lr, momentum, weight_decay;
} gemm_post_t;

/* op(A) is m x k, op(B) k x n; the part is rows [m0, m0 + mc) and columns
 * [n0, n0 + nc) of C. A is read as A[i * lda + l] (A[l * lda + i] when
 * trans_a), B as B[l * ldb + j] (B[j * ldb + l] when trans_b), unless a
 * packer is given. bias (may be NULL) is indexed by the column of C,
 * bias_row by the row. */
typedef struct gemm_part {
  const float *a, *b;
  float *c;
  const float *bias, *bias_row;
  gemm_pack_fn pack_a, pack_b; /* NULL: pack from a / b */
  const void *pack_ctx;
  int64_t lda, ldb, ldc;
  int trans_a, trans_b;
  int act;
  const gemm_post_t *post; /* NULL: store C */
  int64_t m0, n0, mc, nc, k;
  float alpha, beta;
  /* A batch sharing A (a convolution's filters against each image): batch
   * > 1 multiplies A by `batch` B's into as many C's, item i's B read at
   * b + i * b_stride or packed through the context ctx_stride * i bytes
   * past pack_ctx, its C at c + i * c_stride. Each depth slice of A is
   * then packed once for the whole batch rather than once an item; the
   * sums are each item's alone would be. 0 or 1: one product. */
  int64_t batch, b_stride, c_stride;
  size_t ctx_stride;
  gemm_share_t *share; /* B packed once for the dispatch's parts, or NULL (gemm_share.h) */
} gemm_part_t;

/* The packed A block's lists of the depth steps it keeps (gemm.c: zero
 * skipping). */
typedef struct gemm_skip gemm_skip_t;
#define GEMM_SKIP_BYTES ((size_t)(GEMM_MC / GEMM_MR) * (2 * (GEMM_KC + 16) * sizeof(uint16_t) + 3 * sizeof(int32_t)))

/* The sparse path's lists' steps and counts and a column group's sums
 * (gemm.c: sparse rows; the values go where the packed A block would). */
#define GEMM_SPARSE_BYTES ((size_t)GEMM_MC * GEMM_KC + (size_t)GEMM_MC * (GEMM_KC / 32) + (size_t)GEMM_MC * 128 * 4 + 64)

/* Bytes of scratch gemm_part needs (one packed A block, one packed B panel,
 * the A block's skip lists, the sparse path's lists and sums). */
#define GEMM_SCRATCH_BYTES                                                                                   \
  (((size_t)GEMM_MC * GEMM_KC + (size_t)GEMM_KC * GEMM_NC) * sizeof(float) + GEMM_SKIP_BYTES + GEMM_SPARSE_BYTES + \
   128)

/* C_part = act(alpha * op(A) op(B) + beta * C_part + bias). beta == 0 means C
 * is not read (it may hold NaNs). */
void gemm_part(const gemm_part_t *p, void *scratch);

/* Splits an m x n product into parts for `parts` workers: *pm row blocks
 * by *pn column blocks, row blocks a multiple of GEMM_MR and column blocks a
 * multiple of GEMM_NR, chosen to balance the largest part against the
 * packing every part repeats. *pm * *pn <= parts. */
void gemm_split(int64_t m, int64_t n, int64_t parts, int64_t *pm, int64_t *pn);

/* Whether the parts of an m x n x k product (one of a batch, no fused
 * consumer, op(B) packed from memory) share their packed B: then *pm row
 * bands (*pn 1), up to twice `parts` and at most `most`, and the shape
 * to open the share with (gemm_share_open); else 0, and the caller cuts
 * `parts` by gemm_split. */
int gemm_split_shared(int64_t m, int64_t n, int64_t k, int64_t parts, int64_t most, int64_t *pm, int64_t *pn,
                      gemm_share_shape_t *shape);

/* [lo, hi) of block `index` when `count` items are cut into `blocks` blocks
 * on a `unit` boundary. */
static inline void gemm_range(int64_t count, int64_t blocks, int64_t index, int64_t unit, int64_t *lo,
                              int64_t *hi) {
  int64_t units = (count + unit - 1) / unit, per = units / blocks, extra = units % blocks;
  int64_t u0 = index * per + (index < extra ? index : extra), u1 = u0 + per + (index < extra ? 1 : 0);
  *lo = u0 * unit < count ? u0 * unit : count;
  *hi = u1 * unit < count ? u1 * unit : count;
}

#endif
