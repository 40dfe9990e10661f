/* aq_matmul_f32: C = act(alpha op(A) op(B) + beta C + bias), batched.
 *
 * The grid has AQ_MATMUL_MAX_GROUPS (or fewer) work-groups per batch entry;
 * the kernel cuts each product into AQ_MATMUL_PARTS_PER_WORKER parts per
 * worker of the agent (fewer when the batch already gives every worker a
 * product, or when C is small) and the groups past the last part return at
 * once. Few, large parts are what make the CPU GEMM fast: every part packs
 * its own panels of A and B, so finer cuts repeat the packing; the agent's
 * workers take groups dynamically, which balances the parts when a core is
 * shared. A product tall enough is cut into row bands instead, which pack
 * their own rows of A and share one packed B (gemm_share.h) through the
 * dispatch's shared bytes.
 * The epilogue (beta, bias, activation) runs on each micro-tile while it is
 * in registers; aq_matmul_fused_f32 also passes the tile through a fused
 * consumer there (relu's backward mask, or the SGD update of the weight
 * whose gradient the product is). */
#include "aquila/ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/table.h"

static int valid(const aq_matmul_args_t *a) {
  if (!a->a || !a->b || !a->c || a->m < 0 || a->n < 0 || a->k < 0) return 0;
  if (a->ldc < a->n || a->lda < (a->trans_a ? a->m : a->k) || a->ldb < (a->trans_b ? a->k : a->n)) return 0;
  if (a->batch > 1 && (a->stride_a < 0 || a->stride_b < 0 || a->stride_c < 0)) return 0;
  if (a->precision != AQ_MATMUL_PRECISION_DEFAULT && a->precision != AQ_MATMUL_PRECISION_EXACT) return 0;
  return a->activation == AQ_ACTIVATION_NONE || a->activation == AQ_ACTIVATION_RELU;
}

/* Group g's part of the product (a fused consumer or none). */
static int matmul_part(const aq_matmul_args_t *a, const aq_dispatch_ctx_t *ctx, const gemm_post_t *post) {
  int64_t workers = ctx->worker_count > 0 ? ctx->worker_count : 1;
  /* Groups past any part's index leave at once (group 0 always checks);
   * parts that share B may be twice as many. */
  if ((int64_t)ctx->group_id[1] * ctx->group_count[0] + ctx->group_id[0] >= 2 * workers * AQ_MATMUL_PARTS_PER_WORKER)
    return 0;
  if (!valid(a)) return 1;
  int64_t batch = a->batch > 0 ? a->batch : 1, z = ctx->group_id[2];
  if (z >= batch || a->m == 0 || a->n == 0) return 0;
  /* Parts per product: the workers' share of this batch entry, at most the
   * groups the grid gives it. */
  int64_t parts = (workers * AQ_MATMUL_PARTS_PER_WORKER + batch - 1) / batch;
  int64_t groups = (int64_t)ctx->group_count[0] * ctx->group_count[1];
  if (parts > groups) parts = groups;
  int64_t pm, pn;
  gemm_share_shape_t shape;
  int shares = batch == 1 && !post && ctx->dispatch_shared &&
               gemm_split_shared(a->m, a->n, a->k, parts, groups, &pm, &pn, &shape);
  if (!shares) gemm_split(a->m, a->n, parts, &pm, &pn);
  int64_t g = (int64_t)ctx->group_id[1] * ctx->group_count[0] + ctx->group_id[0];
  if (g >= pm * pn) return 0;
  int64_t m0, m1, n0, n1;
  gemm_range(a->m, pm, g / pn, GEMM_MR, &m0, &m1);
  gemm_range(a->n, pn, g % pn, GEMM_NR, &n0, &n1);
  if (m0 >= m1 || n0 >= n1) return 0;
  gemm_part_t p = {.a = a->a + z * a->stride_a, .b = a->b + z * a->stride_b, .c = a->c + z * a->stride_c,
                   .bias = a->bias, .lda = a->lda, .ldb = a->ldb, .ldc = a->ldc, .trans_a = a->trans_a,
                   .trans_b = a->trans_b, .act = a->activation == AQ_ACTIVATION_RELU ? GEMM_ACT_RELU : GEMM_ACT_NONE,
                   .post = post, .m0 = m0, .n0 = n0, .mc = m1 - m0, .nc = n1 - n0, .k = a->k, .alpha = a->alpha,
                   .beta = a->beta};
  p.share = shares ? gemm_share_open(ctx->dispatch_shared, pm * pn, &shape) : NULL;
  gemm_part(&p, ctx->group_segment);
  if (p.share) gemm_share_close(p.share);
  return 0;
}

static int matmul(const void *kernarg, const aq_dispatch_ctx_t *ctx) { return matmul_part(kernarg, ctx, NULL); }

/* The fused forms' own rules (ops.h): the consumer sees the finished
 * product, so nothing may follow it in the epilogue, and SGD's weight must
 * take the sum in one depth slice. */
static int fused_valid(const aq_matmul_fused_args_t *f) {
  const aq_matmul_args_t *a = &f->mm;
  if (a->bias || a->activation != AQ_ACTIVATION_NONE || a->batch > 1) return 0;
  if (f->fuse == AQ_MATMUL_FUSE_RELU_MASK) return f->mask && f->ldmask >= a->n;
  return f->fuse == AQ_MATMUL_FUSE_SGD && f->velocity && a->beta == 0.0f && a->k <= AQ_MATMUL_FUSE_SGD_MAX_K;
}

_Static_assert(AQ_MATMUL_FUSE_SGD_MAX_K <= GEMM_KC, "SGD's fused product must fit one depth slice");

static int matmul_fused(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_matmul_fused_args_t *f = kernarg;
  if (!fused_valid(f)) return 1;
  gemm_post_t post = {.kind = f->fuse == AQ_MATMUL_FUSE_SGD ? GEMM_POST_SGD : GEMM_POST_RELU_MASK,
                      .mask = f->mask, .ldmask = f->ldmask, .velocity = f->velocity, .ldv = f->mm.ldc,
                      .lr = f->lr, .momentum = f->momentum, .weight_decay = f->weight_decay};
  return matmul_part(&f->mm, ctx, &post);
}

const aq_kernel_desc_t aq_cpu_matmul_desc = {AQ_KERNEL_MATMUL, matmul, sizeof(aq_matmul_args_t), 8,
                                             (uint32_t)GEMM_SCRATCH_BYTES, 0};
const aq_kernel_desc_t aq_cpu_matmul_fused_desc = {AQ_KERNEL_MATMUL_FUSED, matmul_fused,
                                                   sizeof(aq_matmul_fused_args_t), 8, (uint32_t)GEMM_SCRATCH_BYTES, 0};
