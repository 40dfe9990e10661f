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
 * slower. Grid: aq_matmul_bf16_gpu_shape (one 256-thread block per 128x128
 * tile of C per batch entry; the kernel walks tiles grid-stride, so a
 * smaller grid is correct too); a block of another size traps. */
#define AQ_KERNEL_MATMUL_BF16 "aq_matmul_bf16"
#define AQ_GPU_MATMUL_BF16_TILE 128
#define AQ_GPU_MATMUL_BF16_THREADS 256

static inline aq_dispatch_shape_t aq_matmul_bf16_gpu_shape(const aq_matmul_args_t *a) {
  uint32_t tn = (uint32_t)((a->n + AQ_GPU_MATMUL_BF16_TILE - 1) / AQ_GPU_MATMUL_BF16_TILE);
  uint32_t tm = (uint32_t)((a->m + AQ_GPU_MATMUL_BF16_TILE - 1) / AQ_GPU_MATMUL_BF16_TILE);
  aq_dispatch_shape_t s = {{(tn ? tn : 1) * AQ_GPU_MATMUL_BF16_THREADS, tm ? tm : 1, (uint32_t)(a->batch > 0 ? a->batch : 1)},
                           {AQ_GPU_MATMUL_BF16_THREADS, 1, 1}};
  return s;
}

/* ---- fp32 matmul launch on GPUs ---------------------------------------------
 * aq_matmul_f32's GPU build computes 128x128 tiles with blocks of exactly 256
 * threads (any other block size traps) and walks the tiles with a grid-stride
 * loop, so any grid is correct. aq_gpu_shape's 16x16 blocks over 64x64 tiles
 * work (three blocks in four find no tile and return at once); this is the
 * exact grid. */
#define AQ_GPU_MATMUL_F32_TILE 128
static inline aq_dispatch_shape_t aq_matmul_f32_gpu_shape(const aq_matmul_args_t *a) {
  uint32_t tn = (uint32_t)((a->n + AQ_GPU_MATMUL_F32_TILE - 1) / AQ_GPU_MATMUL_F32_TILE);
  uint32_t tm = (uint32_t)((a->m + AQ_GPU_MATMUL_F32_TILE - 1) / AQ_GPU_MATMUL_F32_TILE);
  aq_dispatch_shape_t s = {{(tn ? tn : 1) * 16, (tm ? tm : 1) * 16, (uint32_t)(a->batch > 0 ? a->batch : 1)},
                           {16, 16, 1}};
  return s;
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
 *  - batch norm: a 256-thread block per channel. */
#define AQ_GPU_BLOCK 256
static inline aq_dispatch_shape_t aq_gpu_threads_shape(int64_t threads) {
  const int64_t cap = (int64_t)1 << 30; /* past it, the grid-stride loops take over */
  int64_t t = threads < 1 ? 1 : threads > cap ? cap : threads;
  aq_dispatch_shape_t s = {{(uint32_t)t, 1, 1}, {AQ_GPU_BLOCK, 1, 1}};
  return s;
}

static inline aq_dispatch_shape_t aq_gpu_op_shape(const char *kernel, const void *kernarg, aq_dispatch_shape_t cpu) {
  if (!strcmp(kernel, AQ_KERNEL_MATMUL)) return aq_matmul_f32_gpu_shape((const aq_matmul_args_t *)kernarg);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_BF16)) return aq_matmul_bf16_gpu_shape((const aq_matmul_args_t *)kernarg);
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
  return aq_gpu_shape(kernel, kernarg, cpu);
}

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_OPS_GPU_H_ */
