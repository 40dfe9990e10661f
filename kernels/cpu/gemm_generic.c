/* The portable GEMM engine: plain C loops, for CPUs without AVX2 (and
 * the packers the vector engines fall back on for partial panels). */
#include <string.h>

#include "kernels/cpu/gemm_engine.h"

/* ---- packing --------------------------------------------------------------- */

/* MR-row panels of op(A) rows [i0, i0 + mc), depth [l0, l0 + kc): the panel
 * starting at row r0 holds p[l * MR + r]. */
void gemm_pack_a_generic(const gemm_part_t *p, int64_t i0, int64_t mc, int64_t l0, int64_t kc, float *dst) {
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

/* nr-column panels of op(B) columns [j0, j0 + nc), depth [l0, l0 + kc):
 * p[l * nr + c]. */
void gemm_pack_b_generic(const gemm_part_t *p, int64_t l0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                         float *dst) {
  for (int64_t c0 = 0; c0 < nc; c0 += nr, dst += kc * nr) {
    int64_t cols = nc - c0 < nr ? nc - c0 : nr, j = j0 + c0;
    if (!p->trans_b) {
      const float *src = p->b + l0 * p->ldb + j;
      if (cols < nr) memset(dst, 0, (size_t)(kc * nr) * sizeof(float));
      for (int64_t l = 0; l < kc; ++l, src += p->ldb) memcpy(dst + l * nr, src, (size_t)cols * sizeof(float));
    } else {
      if (cols < nr) memset(dst, 0, (size_t)(kc * nr) * sizeof(float));
      for (int64_t c = 0; c < cols; ++c) {
        const float *src = p->b + (j + c) * p->ldb + l0;
        for (int64_t l = 0; l < kc; ++l) dst[l * nr + c] = src[l];
      }
    }
  }
}

static void micro_c(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, const epi_t *e) {
  float acc[GEMM_MR][GEMM_NR];
  memset(acc, 0, sizeof(acc));
  for (int64_t l = 0; l < kc; ++l)
    for (int r = 0; r < GEMM_MR; ++r)
      for (int j = 0; j < GEMM_NR; ++j) acc[r][j] += a[l * GEMM_MR + r] * b[l * GEMM_NR + j];
  for (int r = 0; r < GEMM_MR; ++r)
    for (int j = 0; j < GEMM_NR; ++j) c[r * ldc + j] = epi_one(e, acc[r][j], &c[r * ldc + j], r, j);
}

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

const engine_t gemm_engine_generic = {micro_c, micro_c, {NULL}, NULL, NULL, NULL, NULL, NULL, NULL, 0, gemm_pack_a_generic,
                                        gemm_pack_b_generic, narrow_c, GEMM_KC, GEMM_MC, GEMM_NR, NULL};
