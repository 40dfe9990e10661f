/* aq_matmul_f32: one work-group per AQ_MATMUL_TILE_M x AQ_MATMUL_TILE_N tile
 * of C, so the dispatch grid spreads a GEMM over every worker of the agent;
 * each group packs its own panels into its group segment. The bias and
 * activation epilogue runs on the tile while it is still in cache. */
#include "aquila/ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/table.h"

static int valid(const aq_matmul_args_t *a) {
  if (!a->a || !a->b || !a->c || a->m < 0 || a->n < 0 || a->k < 0) return 0;
  if (a->ldc < a->n || a->lda < (a->trans_a ? a->m : a->k) || a->ldb < (a->trans_b ? a->k : a->n)) return 0;
  return a->activation == AQ_ACTIVATION_NONE || a->activation == AQ_ACTIVATION_RELU;
}

static int matmul(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_matmul_args_t *a = kernarg;
  if (!valid(a)) return 1;
  int64_t tile_m = a->tile_m > 0 ? a->tile_m : AQ_MATMUL_TILE_M;
  int64_t n0 = (int64_t)ctx->group_id[0] * AQ_MATMUL_TILE_N;
  int64_t m0 = (int64_t)ctx->group_id[1] * tile_m;
  int64_t b = ctx->group_id[2];
  if (m0 >= a->m || n0 >= a->n) return 0;
  gemm_tile_t t = {
      .a = a->a + b * a->stride_a, .b = a->b + b * a->stride_b, .c = a->c + b * a->stride_c,
      .lda = a->lda, .ldb = a->ldb, .ldc = a->ldc, .trans_a = a->trans_a, .trans_b = a->trans_b,
      .m0 = m0, .n0 = n0,
      .mc = a->m - m0 < tile_m ? a->m - m0 : tile_m,
      .nc = a->n - n0 < AQ_MATMUL_TILE_N ? a->n - n0 : AQ_MATMUL_TILE_N,
      .k = a->k, .alpha = a->alpha, .beta = a->beta};
  gemm_tile(&t, ctx->group_segment);
  if (a->bias || a->activation) {
    for (int64_t i = 0; i < t.mc; ++i) {
      float *c = t.c + (m0 + i) * a->ldc + n0;
      if (a->bias)
        for (int64_t j = 0; j < t.nc; ++j) c[j] += a->bias[n0 + j];
      if (a->activation == AQ_ACTIVATION_RELU)
        for (int64_t j = 0; j < t.nc; ++j) c[j] = c[j] > 0.0f ? c[j] : 0.0f;
    }
  }
  return 0;
}

/* Scratch for one packed A block and the tile's packed B panel. */
#define MATMUL_SCRATCH \
  ((GEMM_MC + (AQ_MATMUL_TILE_N + GEMM_NR - 1) / GEMM_NR * GEMM_NR) * GEMM_KC * 4 + 128)

const aq_kernel_desc_t aq_cpu_matmul_desc = {AQ_KERNEL_MATMUL, matmul, sizeof(aq_matmul_args_t), 8,
                                             MATMUL_SCRATCH, 0};
