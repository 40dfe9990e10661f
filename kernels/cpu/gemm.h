/* The GEMM engine under matmul (and, later, convolution): BLIS-style
 * blocking with packed panels and a register-tiled micro-kernel chosen at run
 * time (AVX-512, AVX2+FMA, or portable C). */
#ifndef AQ_KERNELS_CPU_GEMM_H_
#define AQ_KERNELS_CPU_GEMM_H_

#include <stddef.h>
#include <stdint.h>

enum {
  GEMM_MR = 6,    /* rows of the micro-tile */
  GEMM_NR = 32,   /* columns of the micro-tile */
  GEMM_KC = 256,  /* depth of one packed block */
  GEMM_MC = 96,   /* rows of A packed at a time */
};

/* One block of C: rows [0, mc) x cols [0, nc) of the tile, computed from
 * op(A) rows and op(B) cols starting at the given origins. */
typedef struct gemm_tile {
  const float *a, *b;
  float *c;
  int64_t lda, ldb, ldc;
  int trans_a, trans_b;
  int64_t m0, n0, mc, nc, k;
  float alpha, beta;
} gemm_tile_t;

/* Scratch a tile needs: one GEMM_MC-row A block and an nc_max-wide B panel. */
size_t gemm_scratch_bytes(int64_t nc_max);

/* C_tile = alpha * op(A) op(B) + beta * C_tile. */
void gemm_tile(const gemm_tile_t *t, void *scratch);

#endif
