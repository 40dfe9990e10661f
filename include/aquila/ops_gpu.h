/* GPU-only op kernels of Aquila's CUDA code object (kernels-cuda.fatbin),
 * and the launch shapes of the GPU builds where they differ from the CPU
 * kernels' (see aq_gpu_shape in ops.h for the shared ones).
 *
 * Same conventions as ops.h: a kernel takes its kernarg struct by value as
 * its one parameter; grids count work-items, work-groups are CUDA blocks. */
#ifndef AQUILA_OPS_GPU_H_
#define AQUILA_OPS_GPU_H_

#include <string.h>

#include "aquila/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bf16 matmul on tensor cores --------------------------------------------
 * C = alpha * op(A) * op(B) + beta * C (+ bias, then activation), exactly as
 * aq_matmul_f32 and with its kernarg struct, except that a and b point at
 * bf16 values (uint16_t, see aq_f32_to_bf16); products accumulate in fp32
 * and C and bias are fp32. Fast path: a, b 16-byte aligned with lda, ldb
 * (and batch strides) multiples of 8; any other layout is still exact, just
 * slower. Grid: aq_matmul_bf16_gpu_shape (one 384-thread block per 128x256
 * tile of C per batch entry; the kernel walks tiles grid-stride, so a
 * smaller grid is correct too); a block of another size traps. Its stages
 * live in dynamic shared memory: the packet's group_segment_size must be at
 * least AQ_GPU_MATMUL_BF16_GROUP_SEGMENT (aq_gpu_op_group_segment), or it
 * traps. H100s run it on wgmma, A100s on mma.sync (kernels/cuda/
 * matmul_bf16.cu); a GPU offering a block less shared memory (sm_86 / sm_89:
 * 99 KB) fails the packet, saying so. */
#define AQ_KERNEL_MATMUL_BF16 "aq_matmul_bf16"
#define AQ_GPU_MATMUL_BF16_TILE_M 128
#define AQ_GPU_MATMUL_BF16_TILE_N 256
#define AQ_GPU_MATMUL_BF16_THREADS 384
#define AQ_GPU_MATMUL_BF16_GROUP_SEGMENT (3 * 48 * 1024 + 2048) /* 146 KB: 3 stages, barriers, alignment */

static inline aq_dispatch_shape_t aq_matmul_bf16_gpu_shape(const aq_matmul_args_t *a) {
  aq_dispatch_shape_t s = {{aq_grid_items(aq_gpu_tiles(a->n, AQ_GPU_MATMUL_BF16_TILE_N) * AQ_GPU_MATMUL_BF16_THREADS),
                            aq_grid_items(aq_gpu_tiles(a->m, AQ_GPU_MATMUL_BF16_TILE_M)), aq_grid_items(a->batch)},
                           {AQ_GPU_MATMUL_BF16_THREADS, 1, 1}};
  return s;
}

/* The group segment (dynamic shared memory, bytes) a GPU kernel's packet
 * must ask for: 0 for all but those that stage tiles beyond the 48 KB a
 * block gets by default. */
static inline uint32_t aq_gpu_op_group_segment(const char *kernel, const void *kernarg) {
  (void)kernarg;
  return !strcmp(kernel, AQ_KERNEL_MATMUL_BF16) ? AQ_GPU_MATMUL_BF16_GROUP_SEGMENT : 0;
}

/* ---- launch shapes of the other GPU op kernels ---------------------------------
 * The matmul, conv2d, pooling, batch norm, broadcasting binary and
 * reduce-over-axes kernels walk their work with grid-stride loops, so any
 * shape is correct, the CPU grids of ops.h included (through aq_gpu_shape);
 * the pointwise and row-wise kernels take a thread per element or row, as
 * aq_gpu_shape over their CPU grids gives. The CPU
 * grids of conv2d, pooling and batch norm give one work-item per plane,
 * though, which leaves a GPU nearly idle; aq_gpu_op_shape gives each kernel
 * the shape it runs best with, and falls back on aq_gpu_shape for the rest:
 *  - conv2d forward / backward data, pooling: 256-thread blocks, a thread
 *    per output (forward) or input element (backward data, pool backward);
 *  - conv2d backward filter: a warp per weight and per bias entry;
 *  - batch norm: a 256-thread block per channel;
 *  - sum over rows: a 256-thread block per AQ_GPU_SUM_ROWS_WIDTH columns. */
#define AQ_GPU_BLOCK 256
#define AQ_GPU_SUM_ROWS_WIDTH 8
static inline aq_dispatch_shape_t aq_gpu_threads_shape(int64_t threads) {
  const int64_t cap = (int64_t)1 << 30; /* past it, the grid-stride loops take over */
  int64_t t = threads < 1 ? 1 : threads > cap ? cap : threads;
  aq_dispatch_shape_t s = {{(uint32_t)t, 1, 1}, {AQ_GPU_BLOCK, 1, 1}};
  return s;
}

/* ---- fp32 matmul on GPUs: nine builds --------------------------------------------
 * The GPU builds of aq_matmul_f32 take its kernarg struct and check it as
 * the CPU kernel does; each is correct for any shape and grid (grid-stride
 * loops) with blocks of exactly 256 threads (any other size traps), and each
 * suits a class of products. At AQ_MATMUL_PRECISION_DEFAULT, on tensor
 * cores (3xTF32, kernels/cuda/matmul_x3.cu; HIP builds run FFMA tiles under
 * the same names):
 *  - aq_matmul_f32_x3: 64x64 tiles, for products with a tile for every SM
 *    (a training step's weight gradients: 208-256), or too shallow to split;
 *  - aq_matmul_f32_x3_split2, _split4: the same with k split over a cluster
 *    of 2 or 4 blocks (sm_90) for products with fewer tiles (a training
 *    step's 256 x 1024 activations: 64, split 2).
 * At AQ_MATMUL_PRECISION_EXACT, on FFMA (kernels/cuda/matmul.cu):
 *  - aq_matmul_f32: 128x128 tiles, for products with at least a tile for
 *    every SM of a large GPU;
 *  - aq_matmul_f32_tile64: 64x64 tiles, four times the blocks, for smaller
 *    ones whose k is too shallow to split;
 *  - aq_matmul_f32_split2: 128x128 tiles with k split over a cluster of 2
 *    blocks (sm_90), for products with fewer big tiles than SMs but enough
 *    for 3 SMs in 4 when split (a training step's weight gradients: 64);
 *  - aq_matmul_f32_tile64_split2, _split4: 64x64 tiles with k split over a
 *    cluster of 2 or 4 (a training step's 256 x 1024 activations: 16 big
 *    tiles, 64 small ones, split 2). Clusters stay small: a block of the
 *    128x128 build takes a whole SM, and 16 clusters of 8 did not fit on an
 *    H100 at once (256 x 1024 x 1024 split 8: 47 us, where 128 x 1024 x
 *    1024 took 25), at 0.58-0.69x the speed of 64x64 tiles split 2.
 * At either precision:
 *  - aq_matmul_f32_rows: a few rows of C a block, warps and lanes splitting k, for at most
 *    AQ_GPU_MATMUL_F32_SKINNY_N columns and a deep k (a classifier's logits
 *    and their gradients), which tiles would leave mostly empty.
 * The grid's x must be a multiple of the cluster, as the grid below is.
 * aq_gpu_op_kernel names the build for a product, aq_gpu_op_shape its grid:
 * a block a tile, or a warp a row. */
#define AQ_KERNEL_MATMUL_F32_TILE64 "aq_matmul_f32_tile64"
#define AQ_KERNEL_MATMUL_F32_ROWS "aq_matmul_f32_rows"
#define AQ_GPU_MATMUL_F32_BIG_TILES 132 /* an H100's SMs */
#define AQ_GPU_MATMUL_F32_SKINNY_N 16
#define AQ_GPU_MATMUL_F32_MIN_SLICE 64 /* the least k a split block takes */
#define AQ_KERNEL_MATMUL_F32_SPLIT2 "aq_matmul_f32_split2"
#define AQ_KERNEL_MATMUL_F32_TILE64_SPLIT2 "aq_matmul_f32_tile64_split2"
#define AQ_KERNEL_MATMUL_F32_TILE64_SPLIT4 "aq_matmul_f32_tile64_split4"
#define AQ_KERNEL_MATMUL_F32_X3 "aq_matmul_f32_x3"
#define AQ_KERNEL_MATMUL_F32_X3_SPLIT2 "aq_matmul_f32_x3_split2"
#define AQ_KERNEL_MATMUL_F32_X3_SPLIT4 "aq_matmul_f32_x3_split4"
/* aq_matmul_fused_f32's builds: the same, by the same rule on its mm. */
#define AQ_KERNEL_MATMUL_FUSED_TILE64 "aq_matmul_fused_f32_tile64"
#define AQ_KERNEL_MATMUL_FUSED_ROWS "aq_matmul_fused_f32_rows"
#define AQ_KERNEL_MATMUL_FUSED_SPLIT2 "aq_matmul_fused_f32_split2"
#define AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT2 "aq_matmul_fused_f32_tile64_split2"
#define AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT4 "aq_matmul_fused_f32_tile64_split4"
#define AQ_KERNEL_MATMUL_FUSED_X3 "aq_matmul_fused_f32_x3"
#define AQ_KERNEL_MATMUL_FUSED_X3_SPLIT2 "aq_matmul_fused_f32_x3_split2"
#define AQ_KERNEL_MATMUL_FUSED_X3_SPLIT4 "aq_matmul_fused_f32_x3_split4"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define AQ_GPU_HOST_DEVICE __host__ __device__
#else
#define AQ_GPU_HOST_DEVICE
#endif

/* aq_matmul_f32_rows: the rows of C a 256-thread block takes. A warp a
 * row when A is stored k x m (trans_a); otherwise its 8 warps split k and a
 * block takes 1, 2 or 4 rows, enough blocks to fill a GPU. */
static inline AQ_GPU_HOST_DEVICE int aq_matmul_f32_rows_per_block(const aq_matmul_args_t *a) {
  return a->trans_a ? 8 : a->m >= 1024 ? 4 : a->m >= 256 ? 2 : 1;
}

/* The build for a product: tile edge (128 or 64; 0: the rows build), how
 * many blocks split k (1: none), and whether on tensor cores. Splits are
 * taken when the unsplit tiles leave SMs idle and the split ones fill 3 in
 * 4, with every slice AQ_GPU_MATMUL_F32_MIN_SLICE deep. */
typedef struct {
  int tile, split, x3; /* x3: the 64x64 tensor-core (3xTF32) tiles */
} aq_matmul_f32_gpu_build_t;

static inline aq_matmul_f32_gpu_build_t aq_matmul_f32_gpu_build(const aq_matmul_args_t *a) {
  const int64_t batch = a->batch > 1 ? a->batch : 1, fill = AQ_GPU_MATMUL_F32_BIG_TILES * 3 / 4;
  const int64_t big = (a->m + 127) / 128 * ((a->n + 127) / 128) * batch, small = (a->m + 63) / 64 * ((a->n + 63) / 64) * batch;
  const aq_matmul_f32_gpu_build_t rows = {0, 1, 0}, t128 = {128, 1, 0}, t64 = {64, 1, 0};
  if (a->n <= AQ_GPU_MATMUL_F32_SKINNY_N && a->k >= 64) return rows;
  if (a->precision != AQ_MATMUL_PRECISION_EXACT) {
    const int split = small >= AQ_GPU_MATMUL_F32_BIG_TILES || a->k < 2 * AQ_GPU_MATMUL_F32_MIN_SLICE ? 1
                      : small * 2 >= fill || a->k < 4 * AQ_GPU_MATMUL_F32_MIN_SLICE                      ? 2
                                                                                                         : 4;
    return (aq_matmul_f32_gpu_build_t){64, split, 1};
  }
  if (big >= AQ_GPU_MATMUL_F32_BIG_TILES) return t128;
  if (a->k < 2 * AQ_GPU_MATMUL_F32_MIN_SLICE) return t64;
  if (big * 2 >= fill) return (aq_matmul_f32_gpu_build_t){128, 2, 0};
  if (small >= AQ_GPU_MATMUL_F32_BIG_TILES) return t64;
  if (small * 2 >= fill || a->k < 4 * AQ_GPU_MATMUL_F32_MIN_SLICE) return (aq_matmul_f32_gpu_build_t){64, 2, 0};
  return (aq_matmul_f32_gpu_build_t){64, 4, 0};
}

static inline aq_dispatch_shape_t aq_matmul_f32_gpu_shape(const aq_matmul_args_t *a) {
  const aq_matmul_f32_gpu_build_t b = aq_matmul_f32_gpu_build(a);
  const int64_t batch = a->batch > 0 ? a->batch : 1;
  if (!b.tile) {
    int64_t rows = aq_matmul_f32_rows_per_block(a), m = a->m > 0 ? a->m : 1;
    return aq_gpu_threads_shape((m + rows - 1) / rows * batch * 256);
  }
  aq_dispatch_shape_t s = {{aq_grid_items(aq_gpu_tiles(a->n, b.tile) * 16 * b.split),
                            aq_grid_items(aq_gpu_tiles(a->m, b.tile) * 16), aq_grid_items(batch)},
                           {16, 16, 1}};
  return s;
}

/* The kernel of a build, of aq_matmul_f32 or (fused) aq_matmul_fused_f32. */
static inline const char *aq_matmul_f32_gpu_kernel(aq_matmul_f32_gpu_build_t b, int fused) {
  static const char *const names[2][9] = {
      {AQ_KERNEL_MATMUL, AQ_KERNEL_MATMUL_F32_SPLIT2, AQ_KERNEL_MATMUL_F32_TILE64, AQ_KERNEL_MATMUL_F32_TILE64_SPLIT2,
       AQ_KERNEL_MATMUL_F32_TILE64_SPLIT4, AQ_KERNEL_MATMUL_F32_ROWS, AQ_KERNEL_MATMUL_F32_X3,
       AQ_KERNEL_MATMUL_F32_X3_SPLIT2, AQ_KERNEL_MATMUL_F32_X3_SPLIT4},
      {AQ_KERNEL_MATMUL_FUSED, AQ_KERNEL_MATMUL_FUSED_SPLIT2, AQ_KERNEL_MATMUL_FUSED_TILE64,
       AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT2, AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT4, AQ_KERNEL_MATMUL_FUSED_ROWS,
       AQ_KERNEL_MATMUL_FUSED_X3, AQ_KERNEL_MATMUL_FUSED_X3_SPLIT2, AQ_KERNEL_MATMUL_FUSED_X3_SPLIT4}};
  const int split = b.split > 2 ? 2 : b.split > 1 ? 1 : 0;
  const int i = !b.tile ? 5 : b.x3 ? 6 + split : b.tile == 128 ? (split ? 1 : 0) : 2 + split;
  return names[fused != 0][i];
}

/* ---- bf16 conv2d on tensor cores --------------------------------------------
 * aq_conv2d_f32's three passes with its kernarg struct (same checks, same
 * index conventions), except that the tensors a pass reads are bf16
 * (uint16_t, see aq_f32_to_bf16): x and w forward, w and dy backward data,
 * x and dy backward filter. What a pass writes is fp32 (y, dx, dw, dbias),
 * as is bias, and products accumulate in fp32: bf16 in, fp32 out, like bf16
 * matmul's fp32 C. So the backward's gradients, and the optimizer's updates
 * from them, keep fp32 precision; a bf16 y for the next layer is one cast
 * (aq_cast_f32_bf16) away.
 * Each pass is an implicit GEMM on mma.sync tiles, rows x columns over a
 * depth: forward (n,p,q) x k over (c,r,s); backward data (n,h,w) x c over
 * (k,r,s); backward filter (c,r,s) x k over (n,p,q). Tiles
 * (aq_conv2d_bf16_gpu_tiles): 128x128, or 256x64 where there are at most
 * AQ_GPU_CONV2D_BF16_NARROW columns; 64x64 (two warp groups splitting the
 * depth) where those would be fewer than AQ_GPU_CONV2D_BF16_FEW_TILES, and
 * always for the backward filter, which runs one block per tile of dw over
 * the whole depth (there is no workspace to split it across blocks
 * deterministically, so a dw of few tiles leaves most of a GPU idle).
 * Grid: aq_conv2d_bf16_gpu_shape, a 256-thread block a tile (plus one per 8
 * dbias entries), walked grid-stride, so any grid is correct. Blocks of
 * another size, tensors of 2^31 elements or more, and AMD GPUs take an
 * exact direct path instead (a thread an output, as the fp32 kernels). */
#define AQ_KERNEL_CONV2D_BF16 "aq_conv2d_bf16"
#define AQ_KERNEL_CONV2D_BWD_DATA_BF16 "aq_conv2d_bwd_data_bf16"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16 "aq_conv2d_bwd_filter_bf16"
#define AQ_GPU_CONV2D_BF16_THREADS 256
#define AQ_GPU_CONV2D_BF16_NARROW 64
#define AQ_GPU_CONV2D_BF16_FEW_TILES 132 /* an H100's SMs */

/* The kernels choose their tiles with AQ_GPU_HOST_DEVICE functions too. */

/* 0 forward, 1 backward data, 2 backward filter; -1: not a bf16 conv2d. */
static inline int aq_conv2d_bf16_pass(const char *kernel) {
  return !strcmp(kernel, AQ_KERNEL_CONV2D_BF16)              ? 0
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16)   ? 1
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_BF16) ? 2
                                                             : -1;
}

/* A pass's tile (rows x columns of its GEMM), and how many tiles it has. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_gpu_tiles(const aq_conv2d_args_t *a, int pass, int *tm, int *tn) {
  int64_t rows = pass == 0 ? a->n * a->p * a->q : pass == 1 ? a->n * a->h * a->wd : a->c * a->r * a->s;
  int64_t cols = pass == 1 ? a->c : a->k;
  rows = rows > 0 ? rows : 1, cols = cols > 0 ? cols : 1;
  *tm = cols <= AQ_GPU_CONV2D_BF16_NARROW ? 256 : 128, *tn = cols <= AQ_GPU_CONV2D_BF16_NARROW ? 64 : 128;
  int64_t tiles = (rows + *tm - 1) / *tm * ((cols + *tn - 1) / *tn);
  if (pass == 2 || tiles < AQ_GPU_CONV2D_BF16_FEW_TILES) *tm = *tn = 64, tiles = (rows + 63) / 64 * ((cols + 63) / 64);
  return tiles;
}

static inline aq_dispatch_shape_t aq_conv2d_bf16_gpu_shape(const aq_conv2d_args_t *a, int pass) {
  int tm, tn;
  int64_t blocks = aq_conv2d_bf16_gpu_tiles(a, pass, &tm, &tn);
  if (pass == 2 && a->dbias && a->k > 0) blocks += (a->k + 7) / 8;
  return aq_gpu_threads_shape(blocks * AQ_GPU_CONV2D_BF16_THREADS);
}

/* The GPU build of an op kernel that suits these kernargs: one of a GPU's
 * variants, or the op's own name. */
static inline const char *aq_gpu_op_kernel(const char *kernel, const void *kernarg) {
  if (!strcmp(kernel, AQ_KERNEL_MATMUL))
    return aq_matmul_f32_gpu_kernel(aq_matmul_f32_gpu_build((const aq_matmul_args_t *)kernarg), 0);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_FUSED)) /* the fused args start with the product's */
    return aq_matmul_f32_gpu_kernel(aq_matmul_f32_gpu_build(&((const aq_matmul_fused_args_t *)kernarg)->mm), 1);
  return kernel;
}

static inline aq_dispatch_shape_t aq_gpu_op_shape(const char *kernel, const void *kernarg, aq_dispatch_shape_t cpu) {
  if (!strcmp(kernel, AQ_KERNEL_MATMUL)) return aq_matmul_f32_gpu_shape((const aq_matmul_args_t *)kernarg);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_FUSED))
    return aq_matmul_f32_gpu_shape(&((const aq_matmul_fused_args_t *)kernarg)->mm);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_BF16)) return aq_matmul_bf16_gpu_shape((const aq_matmul_args_t *)kernarg);
  if (aq_conv2d_bf16_pass(kernel) >= 0) return aq_conv2d_bf16_gpu_shape((const aq_conv2d_args_t *)kernarg, aq_conv2d_bf16_pass(kernel));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA) ||
      !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER)) {
    const aq_conv2d_args_t *a = (const aq_conv2d_args_t *)kernarg;
    if (!strcmp(kernel, AQ_KERNEL_CONV2D)) return aq_gpu_threads_shape(a->n * a->k * a->p * a->q);
    if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA)) return aq_gpu_threads_shape(a->n * a->c * a->h * a->wd);
    return aq_gpu_threads_shape(32 * (a->k * a->c * a->r * a->s + (a->dbias ? a->k : 0)));
  }
  if (!strcmp(kernel, AQ_KERNEL_MAX_POOL) || !strcmp(kernel, AQ_KERNEL_AVG_POOL))
    return aq_gpu_threads_shape(((const aq_pool_args_t *)kernarg)->planes * ((const aq_pool_args_t *)kernarg)->p *
                                ((const aq_pool_args_t *)kernarg)->q);
  if (!strcmp(kernel, AQ_KERNEL_MAX_POOL_BWD) || !strcmp(kernel, AQ_KERNEL_AVG_POOL_BWD))
    return aq_gpu_threads_shape(((const aq_pool_args_t *)kernarg)->planes * ((const aq_pool_args_t *)kernarg)->h *
                                ((const aq_pool_args_t *)kernarg)->w);
  if (!strcmp(kernel, AQ_KERNEL_BATCH_NORM) || !strcmp(kernel, AQ_KERNEL_BATCH_NORM_BWD))
    return aq_gpu_threads_shape(((const aq_batch_norm_args_t *)kernarg)->c * AQ_GPU_BLOCK);
  if (!strcmp(kernel, AQ_KERNEL_SUM_ROWS) || !strcmp(kernel, AQ_KERNEL_SUM_ROWS_SGD)) /* 8 columns x 32 row slices a block */
    return aq_gpu_threads_shape((((const aq_sum_rows_args_t *)kernarg)->cols + AQ_GPU_SUM_ROWS_WIDTH - 1) /
                                AQ_GPU_SUM_ROWS_WIDTH * AQ_GPU_BLOCK);
  return aq_gpu_shape(kernel, kernarg, cpu);
}

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_OPS_GPU_H_ */
