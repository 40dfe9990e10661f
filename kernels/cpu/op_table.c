/* The op library's description of itself (kernel.h's aq_op_table_t): its
 * optimizers and products, the kernarg fields the scheduler may set, the
 * epilogue fusions its fused kernels run, and its builds for other agents
 * with their launch rules.
 * The kernarg layouts are the ops' own (ops.h), the same in every build,
 * so this one description serves the CUDA build too. */
#include <stddef.h>
#include <string.h>

#include "aquila/kernel.h"
#include "aquila/ops.h"
#include "aquila/runtime.h"
#include "kernels/cuda/launch.h"

#define NONE AQ_OP_FIELD_NONE

static const aq_op_desc_t ops[] = {
    {AQ_KERNEL_SGD, AQ_OP_OPTIMIZER, offsetof(aq_sgd_args_t, lr), NONE, 0},
    {AQ_KERNEL_ADAM, AQ_OP_OPTIMIZER, offsetof(aq_adam_args_t, lr), NONE, 0},
    {AQ_KERNEL_SUM_ROWS_SGD, AQ_OP_OPTIMIZER, offsetof(aq_sum_rows_sgd_args_t, lr), NONE, 0},
    {AQ_KERNEL_MATMUL, AQ_OP_MATMUL, NONE, offsetof(aq_matmul_args_t, precision), 0},
    {AQ_KERNEL_MATMUL_FUSED, AQ_OP_MATMUL, NONE, offsetof(aq_matmul_fused_args_t, mm.precision), 0},
    {AQ_KERNEL_CONV2D, AQ_OP_MATMUL, NONE, offsetof(aq_conv2d_args_t, precision), 0},
    {AQ_KERNEL_CONV2D_BWD_DATA, AQ_OP_MATMUL, NONE, offsetof(aq_conv2d_args_t, precision), 0},
    {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_OP_MATMUL, NONE, offsetof(aq_conv2d_args_t, precision), 0},
};

/* A plain product whose epilogue the fused kernel takes over as it is
 * (ops.h's rules for aq_matmul_fused_f32): no bias, activation or batch,
 * C dense and overwritten. */
static int plain_matmul(const aq_matmul_args_t *a) {
  return !a->bias && a->activation == AQ_ACTIVATION_NONE && a->batch <= 1 && a->ldc == a->n && a->beta == 0.0f;
}

static int matmul_sgd_accepts(const void *product, const void *consumer) {
  aq_matmul_args_t a;
  aq_sgd_args_t s;
  memcpy(&a, product, sizeof(a)), memcpy(&s, consumer, sizeof(s));
  return plain_matmul(&a) && a.k <= AQ_MATMUL_FUSE_SGD_MAX_K && s.n == a.m * a.n;
}

static int matmul_relu_accepts(const void *product, const void *consumer) {
  aq_matmul_args_t a;
  aq_relu_args_t r;
  memcpy(&a, product, sizeof(a)), memcpy(&r, consumer, sizeof(r));
  return plain_matmul(&a) && r.n == a.m * a.n;
}

/* A bias gradient that does not accumulate, as long as its weight. */
static int sum_rows_sgd_accepts(const void *product, const void *consumer) {
  aq_sum_rows_args_t a;
  aq_sgd_args_t s;
  memcpy(&a, product, sizeof(a)), memcpy(&s, consumer, sizeof(s));
  return a.beta == 0.0f && s.n == a.cols;
}

/* relu over the whole normalised tensor: its element count is x's. */
static int bn_relu_accepts(const void *product, const void *consumer) {
  aq_batch_norm_args_t a;
  aq_relu_args_t r;
  memcpy(&a, product, sizeof(a)), memcpy(&r, consumer, sizeof(r));
  return a.slices >= 1 && r.n == a.n * a.c * a.hw;
}

/* Max-pool's dx whole as relu's dy (avg-pool has no rule). */
static int pool_relu_bwd_accepts(const void *product, const void *consumer) {
  aq_pool_args_t a;
  aq_relu_args_t r;
  memcpy(&a, product, sizeof(a)), memcpy(&r, consumer, sizeof(r));
  return r.n == a.planes * a.h * a.w;
}

static void matmul_sgd_merge(const void *product, const void *consumer, void *out) {
  aq_sgd_args_t s;
  memcpy(&s, consumer, sizeof(s));
  aq_matmul_fused_args_t f = {.fuse = AQ_MATMUL_FUSE_SGD, .velocity = s.velocity, .lr = s.lr,
                              .momentum = s.momentum, .weight_decay = s.weight_decay};
  memcpy(&f.mm, product, sizeof(f.mm));
  f.mm.c = s.w; /* the product is w's gradient: w takes it in place */
  memcpy(out, &f, sizeof(f));
}

static void matmul_relu_merge(const void *product, const void *consumer, void *out) {
  aq_relu_args_t r;
  memcpy(&r, consumer, sizeof(r));
  aq_matmul_fused_args_t f = {.fuse = AQ_MATMUL_FUSE_RELU_MASK, .mask = r.x /* the forward output */};
  memcpy(&f.mm, product, sizeof(f.mm));
  f.mm.c = r.y; /* relu's dx */
  f.ldmask = f.mm.n;
  memcpy(out, &f, sizeof(f));
}

static void sum_rows_sgd_merge(const void *product, const void *consumer, void *out) {
  aq_sgd_args_t s;
  memcpy(&s, consumer, sizeof(s));
  aq_sum_rows_sgd_args_t f = {.velocity = s.velocity, .lr = s.lr, .momentum = s.momentum,
                              .weight_decay = s.weight_decay};
  memcpy(&f.sr, product, sizeof(f.sr));
  f.sr.out = s.w; /* the sums are w's gradient: w takes them in place */
  memcpy(out, &f, sizeof(f));
}

/* The normalised values go straight to relu's output; the statistics
 * where the product's kernarg has them. */
static void bn_relu_merge(const void *product, const void *consumer, void *out) {
  aq_batch_norm_args_t f;
  aq_relu_args_t r;
  memcpy(&f, product, sizeof(f)), memcpy(&r, consumer, sizeof(r));
  f.y = r.y;
  memcpy(out, &f, sizeof(f));
}

static void pool_relu_bwd_merge(const void *product, const void *consumer, void *out) {
  aq_relu_args_t r;
  memcpy(&r, consumer, sizeof(r));
  aq_pool_relu_bwd_args_t f = {.mask = r.x /* the forward output: the pool's input */};
  memcpy(&f.pool, product, sizeof(f.pool));
  f.pool.dx = r.y; /* relu's dx */
  memcpy(out, &f, sizeof(f));
}

/* The fused layouts start with the product's arguments, as the table's
 * contract asks. */
_Static_assert(offsetof(aq_matmul_fused_args_t, mm) == 0, "matmul's offsets must hold in the fused kernarg");
_Static_assert(offsetof(aq_sum_rows_sgd_args_t, sr) == 0, "sum_rows' offsets must hold in the fused kernarg");
_Static_assert(offsetof(aq_pool_relu_bwd_args_t, pool) == 0, "pool's offsets must hold in the fused kernarg");

static const aq_op_fusion_t fusions[] = {
    {AQ_KERNEL_MATMUL, AQ_KERNEL_RELU_BWD, AQ_KERNEL_MATMUL_FUSED, offsetof(aq_relu_args_t, dy),
     sizeof(aq_matmul_fused_args_t), NONE, 0, matmul_relu_accepts, matmul_relu_merge},
    {AQ_KERNEL_MATMUL, AQ_KERNEL_SGD, AQ_KERNEL_MATMUL_FUSED, offsetof(aq_sgd_args_t, grad),
     sizeof(aq_matmul_fused_args_t), offsetof(aq_matmul_fused_args_t, lr), 0, matmul_sgd_accepts, matmul_sgd_merge},
    {AQ_KERNEL_SUM_ROWS, AQ_KERNEL_SGD, AQ_KERNEL_SUM_ROWS_SGD, offsetof(aq_sgd_args_t, grad),
     sizeof(aq_sum_rows_sgd_args_t), offsetof(aq_sum_rows_sgd_args_t, lr), 0, sum_rows_sgd_accepts,
     sum_rows_sgd_merge},
    /* the CNN's conv blocks: batch norm into relu (the statistics still
     * written), max-pool's backward into relu's; elementwise, so they pay
     * on CPUs too */
    {AQ_KERNEL_BATCH_NORM_APPLY, AQ_KERNEL_RELU, AQ_KERNEL_BATCH_NORM_APPLY_RELU, offsetof(aq_relu_args_t, x),
     sizeof(aq_batch_norm_args_t), NONE, AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS | AQ_OP_FUSE_ON_CPUS, bn_relu_accepts,
     bn_relu_merge},
    {AQ_KERNEL_MAX_POOL_BWD, AQ_KERNEL_RELU_BWD, AQ_KERNEL_MAX_POOL_BWD_RELU, offsetof(aq_relu_args_t, dy),
     sizeof(aq_pool_relu_bwd_args_t), NONE, AQ_OP_FUSE_ON_CPUS, pool_relu_bwd_accepts, pool_relu_bwd_merge},
};

/* The CUDA build's launch rules (kernels/cuda/launch.h), for the scheduler:
 * the fatbin carries device code only. */
static void cuda_shape(const char *kernel, const void *kernarg, uint32_t grid[3], uint32_t workgroup[3]) {
  aq_dispatch_shape_t s;
  for (int d = 0; d < 3; ++d) s.grid[d] = grid[d], s.workgroup[d] = (uint16_t)workgroup[d];
  s = aq_gpu_op_shape(kernel, kernarg, s);
  for (int d = 0; d < 3; ++d) grid[d] = s.grid[d], workgroup[d] = s.workgroup[d];
}

static void cuda_build_shape(const char *kernel, const char *build, const void *kernarg, uint32_t grid[3],
                             uint32_t workgroup[3]) {
  aq_dispatch_shape_t s;
  for (int d = 0; d < 3; ++d) s.grid[d] = grid[d], s.workgroup[d] = (uint16_t)workgroup[d];
  s = aq_gpu_op_build_shape(kernel, build, kernarg, s);
  for (int d = 0; d < 3; ++d) grid[d] = s.grid[d], workgroup[d] = s.workgroup[d];
}

static const aq_op_build_t builds[] = {{AQ_AGENT_KIND_GPU, 0, "kernels-cuda.fatbin", aq_gpu_op_kernel, cuda_shape,
                                        aq_gpu_op_group_segment, aq_gpu_op_builds, cuda_build_shape,
                                        aq_gpu_op_tune_key}};

AQ_DEFINE_OP_TABLE(ops, fusions, builds);
