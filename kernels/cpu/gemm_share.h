/* Packed B shared by the parts of one product.
 *
 * A product's parts share nothing by default: each packs every panel of B
 * it multiplies against, so a product cut into row bands packs all of B
 * once per band (OpenBLAS's threads share theirs). Cut into row bands only,
 * the parts of one dispatch can share one packed copy of B instead: a
 * buffer the first part takes from a pool and the last one gives back, in
 * chunks (a B block's columns over one KC slice) that whichever part comes
 * first packs. A part never waits for another (dispatch_shared's rule): a
 * chunk another part is packing right then is passed over and revisited,
 * and packed privately if it is not ready by then. The panels are the ones
 * a private pack makes, so the sums are unchanged, bit for bit. */
#ifndef AQ_KERNELS_CPU_GEMM_SHARE_H_
#define AQ_KERNELS_CPU_GEMM_SHARE_H_

#include <stdint.h>

typedef struct gemm_share gemm_share_t;

/* The layout of a shared B: op(B) is k x n, packed in KC slices `kc` deep
 * and NC blocks `nc` wide, each cut in chunks of `chunk` columns (a
 * multiple of nr, the panels' width). */
typedef struct gemm_share_shape {
  int64_t k, n, kc, nc, chunk, nr;
} gemm_share_shape_t;

/* Whether a B of this shape is small enough to share (the pool keeps what
 * it lends). */
int gemm_share_fits(const gemm_share_shape_t *shape);

/* The share in a dispatch's shared bytes for `parts` parts, or NULL where
 * the parts pack their own (no shared bytes, no memory, too large a B).
 * Every part of the dispatch calls it with the same shape, and calls
 * gemm_share_close after its product when it got one. */
gemm_share_t *gemm_share_open(void *shared, int64_t parts, const gemm_share_shape_t *shape);
void gemm_share_close(gemm_share_t *s);

/* Packs the B block of columns [j0, j0 + cols), depth [l0, l0 + kc), into
 * `dst` (a panel layout, as gemm_pack_fn's). */
typedef void (*gemm_share_pack_fn)(const void *ctx, int64_t j0, int64_t cols, int64_t l0, int64_t kc, float *dst);

/* The panels of block [jc0, jc0 + ncc) x [l0, l0 + kc): chunk i (columns
 * jc0 + i * chunk on) at out[i], from the shared copy, packed there by this
 * call where no part had, or packed into private + i * chunk * kc where
 * another part was still packing it. */
void gemm_share_block(gemm_share_t *s, int64_t jc0, int64_t ncc, int64_t l0, int64_t kc, gemm_share_pack_fn pack,
                      const void *ctx, float *private, const float **out);

#endif
