/* GPU-only op kernels of Aquila's CUDA code object (kernels-cuda.fatbin):
 * their names, kernarg conventions and launch contracts. Which build suits
 * which product, and each build's launch shape, are the op library's
 * choice: the scheduler asks its description (kernel.h's aq_op_build_t,
 * in kernels-cpu.so's aq_op_table); kernels/cuda/launch.h holds the rules.
 *
 * Same conventions as ops.h: a kernel takes its kernarg struct by value as
 * its one parameter; grids count work-items, work-groups are CUDA blocks. */
#ifndef AQUILA_OPS_GPU_H_
#define AQUILA_OPS_GPU_H_

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
 * slower. Grid: a 384-thread block per tile of C per batch entry (the op
 * library's launch rule; the kernel walks tiles grid-stride, so a
 * smaller grid is correct too); a block of another size traps. Its stages
 * live in dynamic shared memory: the packet's group_segment_size must be at
 * least AQ_GPU_MATMUL_BF16_GROUP_SEGMENT, or it traps. H100s run it on wgmma, A100s on mma.sync (kernels/cuda/
 * matmul_bf16.cu); a GPU offering a block less shared memory (sm_86 / sm_89:
 * 99 KB) fails the packet, saying so. */
#define AQ_KERNEL_MATMUL_BF16 "aq_matmul_bf16"
#define AQ_GPU_MATMUL_BF16_THREADS 384
#define AQ_GPU_MATMUL_BF16_GROUP_SEGMENT (3 * 48 * 1024 + 2048) /* 146 KB: 3 stages, barriers, alignment */

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
 *    a few columns and a deep k (a classifier's logits
 *    and their gradients), which tiles would leave mostly empty.
 * The grid's x must be a multiple of the cluster. The op library's launch
 * rules (kernels/cuda/launch.h) name the build for a product and its grid:
 * a block a tile, or a warp a row. */
/* ---- fp32 conv2d backward filter, split (sm_90) -------------------------------
 * aq_conv2d_bwd_filter_f32's build for small filters (a LeNet's): a cluster
 * of blocks splits each run of weights' sum over the batch's output
 * positions (kernels/cuda/launch.h picks it and its grid, whose x must be
 * a multiple of the cluster); the same kernarg struct and results. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT "aq_conv2d_bwd_filter_f32_split"
/* The staged build (sm_90 clusters, as the split one): where a filter row's
 * taps fit a thread's registers, a block sums a group of whole filters,
 * every channel, over its share of the batch, images staged in two
 * buffers (kernels/cuda/launch.h, aq_conv2d_filter_bytes). bf16 has its
 * own. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_STAGED "aq_conv2d_bwd_filter_f32_staged"
/* The same over clusters of 4 and of 16 (non-portable: sm_90's most): a
 * grid whose clusters of 8 would take a second wave, or leave SMs idle. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4 "aq_conv2d_bwd_filter_f32_staged4"
#define AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16 "aq_conv2d_bwd_filter_f32_staged16"
/* ---- fp32 conv2d on tensor cores (3xTF32) -----------------------------------
 * aq_conv2d_f32's three passes at AQ_MATMUL_PRECISION_DEFAULT for the shapes
 * the tiled and staged builds do not take (many channels, large planes): an
 * implicit GEMM on 64x64 tiles at fp32 accuracy, as aq_matmul_f32_x3; the
 * backward filter splits each tile's depth over a cluster (sm_90; the grid's
 * x a multiple of it). Same kernargs and results as the plain kernels;
 * kernels/cuda/launch.h picks them (aq_conv2d_x3) and their grids. */
#define AQ_KERNEL_CONV2D_X3 "aq_conv2d_f32_x3"
#define AQ_KERNEL_CONV2D_BWD_DATA_X3 "aq_conv2d_bwd_data_f32_x3"
#define AQ_KERNEL_CONV2D_BWD_FILTER_X3 "aq_conv2d_bwd_filter_f32_x3"
/* The same on 32x64 tiles: twice the clusters, for dw of fewer tiles; and
 * over clusters of 6, more of them at once, for dw whose 64x64 tiles take
 * two waves of clusters of 8. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN "aq_conv2d_bwd_filter_f32_x3_thin"
#define AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6 "aq_conv2d_bwd_filter_f32_x3_split6"
/* aq_conv2d_f32's three passes as implicit GEMMs in FFMA (exact fp32, as
 * cuDNN's fp32 passes) on 128x64 tiles, at any precision: an exact exec's
 * many-channel passes, and a tuning candidate beside the x3 builds. The
 * backward filter splits each tile's depth over a cluster (sm_90; the
 * grid's x a multiple of it). Same kernargs and results as the plain
 * kernels; kernels/cuda/launch.h picks them (aq_conv2d_ffma) and their
 * grids. */
#define AQ_KERNEL_CONV2D_FFMA "aq_conv2d_f32_ffma"
#define AQ_KERNEL_CONV2D_BWD_DATA_FFMA "aq_conv2d_bwd_data_f32_ffma"
#define AQ_KERNEL_CONV2D_BWD_FILTER_FFMA "aq_conv2d_bwd_filter_f32_ffma"
/* aq_conv2d_f32's forward and backward data for 3x3 filters at unit
 * stride and dilation as Winograd's F(2x2, 3x3): 16 multiplies a 2x2
 * output tile and channel pair for a direct convolution's 36, within a few
 * fp32 roundings of each term. Same kernargs as the plain kernels;
 * kernels/cuda/launch.h picks them (aq_conv2d_wino) and their grids. */
#define AQ_KERNEL_CONV2D_WINO "aq_conv2d_f32_wino"
#define AQ_KERNEL_CONV2D_BWD_DATA_WINO "aq_conv2d_bwd_data_f32_wino"
/* The backward data where dy's planes are small (at most 64 positions), a
 * block an image's 32 channels: the columns D = w^T dy in FFMA (exact
 * fp32), then dx from D in shared memory; bf16's build is
 * AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL (kernels/cuda/launch.h says where
 * they apply and picks their grids and group segments). */
#define AQ_KERNEL_CONV2D_BWD_DATA_COL "aq_conv2d_bwd_data_f32_col"
/* The backward filter as F(3x3, 2x2), each 32 x 32 tile of dw over a
 * cluster (sm_90; the grid's x a multiple of it). */
#define AQ_KERNEL_CONV2D_BWD_FILTER_WINO "aq_conv2d_bwd_filter_f32_wino"
#define AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN "aq_conv2d_bwd_filter_f32_wino_thin"
#define AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC "aq_conv2d_bwd_filter_f32_wino_tc"
#define AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP "aq_conv2d_bwd_filter_f32_wino_warp"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED "aq_conv2d_bwd_filter_bf16_staged"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4 "aq_conv2d_bwd_filter_bf16_staged4"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16 "aq_conv2d_bwd_filter_bf16_staged16"
/* bf16's tensor-core backward filter with each 64x64 tile's depth split
 * over a cluster (sm_90; the grid's x a multiple of it), for dw of few
 * tiles; launch.h picks it and its grid. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT "aq_conv2d_bwd_filter_bf16_tc_split"
/* The same over clusters of 6: more of them at once, for dw whose tiles
 * would take a second, near-empty wave of clusters of 8. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6 "aq_conv2d_bwd_filter_bf16_tc_split6"
/* And over clusters of 16 (non-portable, sm_90's most): as many blocks on
 * tiles of twice the rows, or twice the blocks, for dw of fewer tiles
 * still. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16 "aq_conv2d_bwd_filter_bf16_tc_split16"
/* bf16's backward filter of a filter three taps wide at unit stride, a
 * block a row of taps of a 64-filter x 32-channel tile over its share of
 * dy's rows, staged whole (sm_90: its cluster's blocks split the rows;
 * clusters of 16, or of 8 in the _rows8 build); launch.h says where it
 * applies and picks its grid. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS "aq_conv2d_bwd_filter_bf16_rows"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8 "aq_conv2d_bwd_filter_bf16_rows8"
/* The same over clusters of 16 for rows of dy past 64 positions, in chunks. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE "aq_conv2d_bwd_filter_bf16_rows_wide"

#define AQ_KERNEL_MATMUL_F32_TILE64 "aq_matmul_f32_tile64"
#define AQ_KERNEL_MATMUL_F32_ROWS "aq_matmul_f32_rows"
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
 * (kernels/cuda/launch.h): 128x128, or 256x64 where there are few
 * columns; 64x64 (two warp groups splitting the depth) where those would
 * leave SMs idle, and
 * always for the backward filter, which runs one block per tile of dw over
 * the whole depth (there is no workspace to split it across blocks
 * deterministically, so a dw of few tiles leaves most of a GPU idle).
 * Grid: a 256-thread block a tile (plus one per 8
 * dbias entries), walked grid-stride, so any grid is correct. Blocks of
 * another size, tensors of 2^31 elements or more, and AMD GPUs take an
 * exact direct path instead (a thread an output, as the fp32 kernels). */
#define AQ_KERNEL_CONV2D_BF16 "aq_conv2d_bf16"
#define AQ_KERNEL_CONV2D_BWD_DATA_BF16 "aq_conv2d_bwd_data_bf16"
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16 "aq_conv2d_bwd_filter_bf16"
#define AQ_GPU_CONV2D_BF16_THREADS 256
/* The forward and backward data of 3x3 filters at unit stride and
 * dilation as the fp32 Winograd builds run them, on bf16 x, w and dy
 * widened as loaded (fp32 transforms and sums); the same kernargs and
 * grid rules as AQ_KERNEL_CONV2D_WINO. launch.h picks the backward
 * data's, whose tensor-core tiles gather the filters an element at a
 * time; the forward's is a tuning candidate. */
#define AQ_KERNEL_CONV2D_BF16_WINO "aq_conv2d_bf16_wino"
/* The forward of few 64x64 tiles (small planes, many channels) with each
 * tile's depth split over a cluster of 2 (sm_90; the grid's x a multiple
 * of it); launch.h picks it and its grid. */
#define AQ_KERNEL_CONV2D_BF16_SPLIT "aq_conv2d_bf16_split"
/* The same on flat tiles, 32 rows by 128 columns (half the gathers of x
 * a product), over clusters of 2, or of 4 where those of 2 would take
 * more than a wave (a ResNet's 512 -> 512 at 7x7); launch.h picks them
 * and their grids. */
#define AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT "aq_conv2d_bf16_split_flat"
#define AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4 "aq_conv2d_bf16_split_flat4"
/* bf16's forward of 3x3 filters where x's planes are small (at most 256
 * positions: a ResNet's last two stages), a block an image's tile of
 * positions by 64 filters: w's rows and x's planes copied whole, the
 * im2col built in shared memory (kernels/cuda/launch.h says where it
 * applies and picks its grid and group segment). */
#define AQ_KERNEL_CONV2D_BF16_PLANES "aq_conv2d_bf16_planes"
#define AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO "aq_conv2d_bwd_data_bf16_wino"
/* bf16's backward data where dy's planes are small (at most 64 positions:
 * a ResNet's last stages and the strided layers into them), a block an
 * image's 32 channels: the columns D = w^T dy as a dense product, then
 * dx from D in shared memory (kernels/cuda/launch.h says where it applies
 * and picks its grid and group segment). */
#define AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL "aq_conv2d_bwd_data_bf16_col"
/* bf16's backward filter where dy's planes are small, by columns: a
 * cluster a tile of dw (64 filters by 32 channels' taps) splitting the
 * batch, each image's columns read from its planes of x staged in shared
 * memory (sm_90; launch.h picks its grid and group segment). */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL "aq_conv2d_bwd_filter_bf16_col"
/* The same over clusters of 3 (launch.h: where they take fewer waves). */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3 "aq_conv2d_bwd_filter_bf16_col3"
/* The same over clusters of 2 (launch.h: where they take fewer waves). */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2 "aq_conv2d_bwd_filter_bf16_col2"
/* aq_conv2d_bwd_filter_bf16's build for filters whose planes fit a block's
 * shared memory (a LeNet's, whose dw has too few tiles for the tensor
 * cores): the fp32 split build's tiled sums on bf16 x and dy, a cluster of
 * blocks splitting the batch (kernels/cuda/launch.h picks it and its grid,
 * whose x must be a multiple of the cluster); the same kernarg struct. */
#define AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT "aq_conv2d_bwd_filter_bf16_split"

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_OPS_GPU_H_ */
