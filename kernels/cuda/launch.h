/* How Aquila's GPU builds are chosen and launched: the build heuristics
 * (tile sizes, k splits, the SM count they aim at) behind the names and
 * contracts of aquila/ops_gpu.h. Host and device code both read them: the
 * kernels pick their tiles with the AQ_GPU_HOST_DEVICE functions, and the
 * op library's description (kernels/cpu/op_table.c) hands the scheduler
 * aq_gpu_op_kernel, aq_gpu_op_shape and aq_gpu_op_group_segment. Private to
 * the op library (and the in-tree tests and benchmarks that dispatch the
 * builds directly). */
#ifndef AQ_KERNELS_CUDA_LAUNCH_H_
#define AQ_KERNELS_CUDA_LAUNCH_H_

#include <stdio.h>
#include <string.h>

#include "aquila/ops.h"
#include "aquila/ops_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GPU launch shapes -----------------------------------------------------
 * ops.h's shapes are the CPU kernels' (a work-group is a tile or a slice
 * one worker runs). GPU kernels count threads: matmul runs 64x64 tiles on
 * 16x16-thread blocks, the others at most 256 threads a block. */
#define AQ_GPU_MATMUL_TILE 64
/* Tiles of edge tile along n elements (at least one), without the
 * overflow of n + tile - 1; past 2^40 it stops counting, as a grid that
 * large saturates to AQ_GRID_TOO_LARGE anyway. */
static inline int64_t aq_gpu_tiles(int64_t n, int64_t tile) {
  const int64_t cap = (int64_t)1 << 40;
  return n < 1 ? 1 : n > cap * tile ? cap : (n - 1) / tile + 1;
}
static inline aq_dispatch_shape_t aq_gpu_shape(const char *kernel, const void *kernarg, aq_dispatch_shape_t cpu) {
  const char *m = AQ_KERNEL_MATMUL;
  int is_matmul = 1;
  for (int i = 0; m[i] || kernel[i]; ++i)
    if (m[i] != kernel[i]) { is_matmul = 0; break; }
  if (is_matmul) {
    const aq_matmul_args_t *a = (const aq_matmul_args_t *)kernarg;
    aq_dispatch_shape_t s = {{aq_grid_items(aq_gpu_tiles(a->n, AQ_GPU_MATMUL_TILE) * 16),
                              aq_grid_items(aq_gpu_tiles(a->m, AQ_GPU_MATMUL_TILE) * 16), aq_grid_items(a->batch)},
                             {16, 16, 1}};
    return s;
  }
  for (int d = 0; d < 3; ++d)
    if (cpu.workgroup[d] > 256) cpu.workgroup[d] = 256;
  if (cpu.grid[0] == 1 && cpu.grid[1] == 1 && cpu.grid[2] == 1) cpu.workgroup[0] = 256; /* a reduction block */
  return cpu;
}

/* bf16 matmul: one AQ_GPU_MATMUL_BF16_THREADS block per 128x256 tile of C
 * per batch entry (the kernel walks tiles grid-stride, so a smaller grid is
 * correct too). */
#define AQ_GPU_MATMUL_BF16_TILE_M 128
#define AQ_GPU_MATMUL_BF16_TILE_N 256

static inline aq_dispatch_shape_t aq_matmul_bf16_gpu_shape(const aq_matmul_args_t *a) {
  aq_dispatch_shape_t s = {{aq_grid_items(aq_gpu_tiles(a->n, AQ_GPU_MATMUL_BF16_TILE_N) * AQ_GPU_MATMUL_BF16_THREADS),
                            aq_grid_items(aq_gpu_tiles(a->m, AQ_GPU_MATMUL_BF16_TILE_M)), aq_grid_items(a->batch)},
                           {AQ_GPU_MATMUL_BF16_THREADS, 1, 1}};
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
 *  - conv2d backward filter: a 256-thread block (or a cluster of them) per
 *    item (below);
 *  - batch norm: a 256-thread block per channel, or per slice of a channel
 *    (the two-kernel passes);
 *  - sum over rows: a 256-thread block per AQ_GPU_SUM_ROWS_WIDTH columns. */
#define AQ_GPU_BLOCK 256
#define AQ_GPU_SUM_ROWS_WIDTH 8
static inline aq_dispatch_shape_t aq_gpu_threads_shape(int64_t threads) {
  const int64_t cap = (int64_t)1 << 30; /* past it, the grid-stride loops take over */
  int64_t t = threads < 1 ? 1 : threads > cap ? cap : threads;
  aq_dispatch_shape_t s = {{(uint32_t)t, 1, 1}, {AQ_GPU_BLOCK, 1, 1}};
  return s;
}


#define AQ_GPU_MATMUL_F32_BIG_TILES 132 /* an H100's SMs */
#define AQ_GPU_MATMUL_F32_SKINNY_N 16
#define AQ_GPU_MATMUL_F32_MIN_SLICE 64 /* the least k a split block takes */

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

/* ---- a strided backward data, one implicit GEMM a phase ----------------------
 * dy[p] feeds dx[h] through tap r where p stride = h + pad - r dil. The rows
 * h of one phase (h % stride) all take the same run of taps: first, first +
 * step, ... (step = stride / gcd(stride, dil)), tap i reading dy's row hh +
 * add - i dstep for dx's row hh stride + phase. One GEMM a phase (a phase of
 * rows x one of columns) skips the products that an undivided pass takes
 * with dy's zeros between its strides: three in four at stride 2. A phase
 * with no tap (count 0) has dx zero. */
typedef struct aq_conv2d_phase {
  int first, count, step, add, dstep, outs; /* outs: dx's rows of the phase */
} aq_conv2d_phase_t;

static inline AQ_GPU_HOST_DEVICE aq_conv2d_phase_t aq_conv2d_phase(int64_t extent, int64_t taps, int64_t stride,
                                                                   int64_t pad, int64_t dil, int64_t phase) {
  int64_t g = stride, d = dil;
  while (d) {
    const int64_t m = g % d;
    g = d, d = m;
  }
  aq_conv2d_phase_t t = {-1, 0, (int)(stride / g), 0, (int)(dil / g), (int)((extent - phase + stride - 1) / stride)};
  for (int64_t r = 0; r < t.step && r < taps; ++r) /* the taps' residue class: its least member is below step */
    if ((phase + pad - r * dil) % stride == 0) {
      t.first = (int)r, t.count = (int)((taps - r + t.step - 1) / t.step), t.add = (int)((phase + pad - r * dil) / stride);
      break;
    }
  return t;
}

/* Whether a backward data runs by phase: a stride (dx's every position is
 * some phase's). */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_phased(const aq_conv2d_args_t *a) {
  return a->stride_h > 1 || a->stride_w > 1;
}

/* The tiles of tm x tn that a pass's implicit GEMM has (the phases' at a
 * strided backward data; at least one). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_gemm_tiles(const aq_conv2d_args_t *a, int pass, int64_t tm,
                                                              int64_t tn) {
  int64_t rows = pass == 0 ? a->n * a->p * a->q : pass == 1 ? a->n * a->h * a->wd : a->c * a->r * a->s;
  int64_t cols = pass == 1 ? a->c : a->k, tiles = 0;
  cols = cols > 0 ? cols : 1;
  if (pass != 1 || !aq_conv2d_phased(a) || rows < 1) return ((rows > 0 ? rows : 1) + tm - 1) / tm * ((cols + tn - 1) / tn);
  for (int64_t ph = 0; ph < a->stride_h && ph < a->h; ++ph)
    for (int64_t pw = 0; pw < a->stride_w && pw < a->wd; ++pw) {
      const int64_t r = a->n * aq_conv2d_phase(a->h, a->r, a->stride_h, a->pad_h, a->dil_h, ph).outs *
                        aq_conv2d_phase(a->wd, a->s, a->stride_w, a->pad_w, a->dil_w, pw).outs;
      tiles += (r + tm - 1) / tm * ((cols + tn - 1) / tn);
    }
  return tiles > 0 ? tiles : 1;
}

/* The blocks of a cluster that split a backward filter's tile (or items)
 * over the depth (sm_90; every split build, fp32's below). */
#define AQ_GPU_CONV2D_BWD_FILTER_SPLIT 8
#define AQ_GPU_CONV2D_BF16_NARROW 64
#define AQ_GPU_CONV2D_BF16_FEW_TILES 132 /* an H100's SMs */
#define AQ_GPU_CONV2D_BF16_THIN 32        /* the rows of a backward filter's tiles where 64 leave SMs idle */
#define AQ_GPU_CONV2D_BF16_FLAT 128       /* the columns of the forward's flat split tiles (of THIN rows) */
#define AQ_GPU_CONV2D_BF16_SLOTS 264      /* an H100's SMs at two blocks each */
/* Clusters of AQ_GPU_CONV2D_BWD_FILTER_SPLIT that an H100 runs at once, two
 * blocks an SM (cuOccupancyMaxActiveClusters of the split builds), and of
 * clusters of AQ_GPU_CONV2D_SPLIT6 (the split6 builds). */
#define AQ_GPU_CONV2D_SPLIT_CLUSTERS 30
#define AQ_GPU_CONV2D_SPLIT6 6
#define AQ_GPU_CONV2D_SPLIT6_CLUSTERS 39
#define AQ_GPU_CONV2D_SPLIT16 16 /* bf16's tensor-core backward filter's most (non-portable) */
#define AQ_GPU_CONV2D_SPLIT16_CLUSTERS 14

/* The waves n blocks (or clusters) take, at_once of them at a time: the
 * tile rules below weigh a choice's waves times each one's length. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_gpu_waves(int64_t n, int64_t at_once) { return (n + at_once - 1) / at_once; }

/* Whether a backward filter split over clusters, a cluster a tile, takes
 * tiles of half the rows (wide and thin: how many tiles of each): its
 * clusters run in waves of AQ_GPU_CONV2D_SPLIT_CLUSTERS, each cluster's
 * time its tile's area, so 36 wide tiles (two waves, the second of 6)
 * take the time of four thin waves, and 72 thin tiles three. Ties keep
 * the wide tiles, which gather fewer bytes a product. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_thin(int64_t wide, int64_t thin) {
  return aq_gpu_waves(thin, AQ_GPU_CONV2D_SPLIT_CLUSTERS) < 2 * aq_gpu_waves(wide, AQ_GPU_CONV2D_SPLIT_CLUSTERS);
}

/* The kernels choose their tiles with AQ_GPU_HOST_DEVICE functions too. */

/* 0 forward, 1 backward data, 2 backward filter; -1: not a bf16 conv2d. */
static inline int aq_conv2d_bf16_pass(const char *kernel) {
  return !strcmp(kernel, AQ_KERNEL_CONV2D_BF16)              ? 0
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16)   ? 1
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_BF16) ? 2
                                                             : -1;
}

/* A pass's tile (rows x columns of its GEMM), and how many tiles it has.
 * At most AQ_GPU_CONV2D_BF16_NARROW columns take 256x64 tiles, or 128x64
 * where their waves of AQ_GPU_CONV2D_BF16_SLOTS end better: a ResNet's
 * 64 channels at 56x56 have 392 of 256 rows (a second wave half full)
 * and 784 of 128 (three full ones of half the time). A backward filter
 * whose 64x64 tiles, each split over a cluster, would leave most of an
 * H100's SMs idle takes tiles of half the rows (not by
 * aq_conv2d_filter_thin's waves: bf16's thin tiles gather too much more a
 * product, and a ResNet's 128 -> 128 on 72 of them ran slower than on 36
 * wide ones). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_gpu_tiles(const aq_conv2d_args_t *a, int pass, int *tm, int *tn) {
  const int64_t cols = pass == 1 ? a->c : a->k;
  *tm = cols <= AQ_GPU_CONV2D_BF16_NARROW ? 256 : 128, *tn = cols <= AQ_GPU_CONV2D_BF16_NARROW ? 64 : 128;
  int64_t tiles = aq_conv2d_gemm_tiles(a, pass, *tm, *tn);
  if (pass == 2 || tiles < AQ_GPU_CONV2D_BF16_FEW_TILES) {
    *tm = *tn = 64, tiles = aq_conv2d_gemm_tiles(a, pass, 64, 64);
  } else if (*tn == 64) {
    const int64_t mid = aq_conv2d_gemm_tiles(a, pass, 128, 64);
    if (aq_gpu_waves(mid, AQ_GPU_CONV2D_BF16_SLOTS) < 2 * aq_gpu_waves(tiles, AQ_GPU_CONV2D_BF16_SLOTS)) *tm = 128, tiles = mid;
  }
  if (pass == 2 && tiles * AQ_GPU_CONV2D_BWD_FILTER_SPLIT < AQ_GPU_CONV2D_BF16_FEW_TILES)
    *tm = AQ_GPU_CONV2D_BF16_THIN, tiles = aq_conv2d_gemm_tiles(a, 2, *tm, 64);
  return tiles;
}

static inline aq_dispatch_shape_t aq_conv2d_bf16_gpu_shape(const aq_conv2d_args_t *a, int pass) {
  int tm, tn;
  int64_t blocks = aq_conv2d_bf16_gpu_tiles(a, pass, &tm, &tn);
  if (pass == 2 && a->dbias && a->k > 0) blocks += (a->k + 7) / 8;
  return aq_gpu_threads_shape(blocks * AQ_GPU_CONV2D_BF16_THREADS);
}

/* ---- fp32 conv2d on planes a block's shared memory holds --------------------
 * Small-channel convolutions (a LeNet's 1 -> 6 and 6 -> 16) do too little
 * work an output for the direct loops' two global loads and index
 * arithmetic an FMA; where what a pass reads of one image (and the
 * filters) fits AQ_GPU_CONV2D_TILED_BYTES, a block stages it in shared
 * memory, zero-padded, and the passes run tiled (conv2d_tiled.cuh):
 *  - forward, backward data: a block an image, the filters staged once;
 *  - backward filter: a block (or a cluster splitting the batch) a filter;
 *    a thread sums a filter row's taps (at most AQ_GPU_CONV2D_TILED_TAPS)
 *    for one channel, or the bias, over a share of the staged rows (up to
 *    AQ_GPU_CONV2D_TILED_UPT such rows a thread); as many images staged at
 *    a time as fit.
 * The bf16 backward filter takes the tiled split build too
 * (AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT), its x and dy widened as staged.
 * The group segment the scheduler gives the packet is what the kernel
 * checks: launched without it (a CPU grid), the direct loops run. */
#define AQ_GPU_CONV2D_TILED_BYTES 40960 /* under the 48 KB a launch gets unasked, static shared memory beside */
/* The backward data's, where a block's image has many filters' dy planes
 * (LeNet-like 1 -> 32: 101 KB): two blocks an H100 SM still, the opt-in
 * size the CUDA driver raises a kernel's limit to (cuda_queue.c), where
 * the direct loops read each dy value from global memory for every tap.
 * Only for a batch of an image for each SM at least: a block an image
 * leaves a smaller batch's GPU mostly idle. */
#define AQ_GPU_CONV2D_TILED_DATA_BYTES 112640
#define AQ_GPU_CONV2D_TILED_DATA_IMAGES 132 /* an H100's SMs */
#define AQ_GPU_CONV2D_TILED_KB 8        /* forward: filters a thread; backward data: channels a thread */
#define AQ_GPU_CONV2D_TILED_TAPS 8      /* backward filter: a filter row's taps at most */
#define AQ_GPU_CONV2D_TILED_UPT 4       /* backward filter: filter rows a thread at most */
#define AQ_GPU_CONV2D_TILED_FILTER_BLOCK 512 /* backward filter: the most threads a block (few blocks: more warps each) */

/* The zero-padded input window the outputs read: rows (cols = 0) or cols. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_window(const aq_conv2d_args_t *a, int cols) {
  return cols ? (a->q - 1) * a->stride_w + (a->s - 1) * a->dil_w + 1 : (a->p - 1) * a->stride_h + (a->r - 1) * a->dil_h + 1;
}

/* The window's row stride in shared memory: one more where a multiple of
 * 8 would put the rows a warp reads in the same banks. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_stride(const aq_conv2d_args_t *a) {
  const int64_t cols = aq_conv2d_tiled_window(a, 1);
  return cols % 8 ? cols : cols + 1;
}

/* Backward filter: the units a block sums for a filter, a channel's row of
 * taps each (and one for its bias). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_filter_units(const aq_conv2d_args_t *a) {
  return a->c * a->r + (a->dbias ? 1 : 0);
}

/* Backward filter: the shared floats of one staged image, and how many
 * images a block stages at a time (0: the pass does not run tiled). The
 * block's partial sums reuse the stage once it is summed. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_image_floats(const aq_conv2d_args_t *a) {
  return a->c * aq_conv2d_tiled_window(a, 0) * aq_conv2d_tiled_stride(a) + a->p * a->q;
}
/* The partial sums: a row of taps for every unit and thread (at most a
 * block of AQ_GPU_CONV2D_TILED_FILTER_BLOCK), then the block's sum for
 * every unit. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_scratch(const aq_conv2d_args_t *a) {
  return (AQ_GPU_CONV2D_TILED_FILTER_BLOCK + aq_conv2d_tiled_filter_units(a)) * a->s;
}
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_images(const aq_conv2d_args_t *a) {
  const int64_t per = aq_conv2d_tiled_image_floats(a), room = AQ_GPU_CONV2D_TILED_BYTES / 4;
  if (a->s > AQ_GPU_CONV2D_TILED_TAPS || aq_conv2d_tiled_filter_units(a) > AQ_GPU_CONV2D_TILED_UPT * AQ_GPU_BLOCK ||
      per > room || aq_conv2d_tiled_scratch(a) > room)
    return 0;
  return room / per < a->n ? room / per : a->n;
}

/* Whether the tiled backward data runs a thread on a run of input columns
 * and two channels (conv2d_tiled.cuh, backward_data_runs): unit strides
 * and dilations, at most 5 taps a row. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_data_runs(const aq_conv2d_args_t *a) {
  return a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 && a->dil_w == 1 && a->s >= 1 && a->s <= 5;
}

/* Whether the extents are positive and under 2^24, as the tiled passes'
 * 32-bit index arithmetic needs. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_tiled_extents(const aq_conv2d_args_t *a) {
  const int64_t lim = (int64_t)1 << 24;
  return !(a->n < 1 || a->c < 1 || a->k < 1 || a->r < 1 || a->s < 1 || a->p < 1 || a->q < 1 || a->h < 1 ||
           a->wd < 1 || a->c > lim || a->k > lim || a->h > lim || a->wd > lim || a->r > lim || a->s > lim ||
           a->stride_h < 1 || a->stride_w < 1 || a->dil_h < 1 || a->dil_w < 1 || a->pad_h < 0 || a->pad_w < 0 ||
           a->pad_h > lim || a->pad_w > lim);
}

/* The group segment (bytes) pass 0 (forward), 1 (backward data) or 2
 * (backward filter) runs tiled with; 0 where it does not fit. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_tiled_bytes(const aq_conv2d_args_t *a, int pass) {
  if (!aq_conv2d_tiled_extents(a)) return 0;
  const int64_t weights = a->k * a->c * a->r * a->s;
  int64_t floats;
  if (pass == 2) {
    const int64_t images = aq_conv2d_tiled_images(a), staged = images * aq_conv2d_tiled_image_floats(a);
    floats = !images ? 0 : staged > aq_conv2d_tiled_scratch(a) ? staged : aq_conv2d_tiled_scratch(a);
  } else {
    floats = weights + (pass == 0 ? a->c * aq_conv2d_tiled_window(a, 0) * aq_conv2d_tiled_stride(a) : a->k * a->p * a->q);
  }
  const int64_t most = pass == 1 && a->n >= AQ_GPU_CONV2D_TILED_DATA_IMAGES ? AQ_GPU_CONV2D_TILED_DATA_BYTES
                                                                            : AQ_GPU_CONV2D_TILED_BYTES;
  return floats > 0 && floats * 4 <= most ? floats * 4 : 0;
}

/* ---- conv2d backward filter, staged (conv2d_filter.cuh) ------------------
 * Where a filter's taps fit a thread's registers (3 x 3 or 5 x 5 at most,
 * 3 or 5 rows, unit column stride and dilation) and one image's window
 * and dy plane fit a stage, the backward filter takes the staged build
 * (AQ_KERNEL_CONV2D_BWD_FILTER_STAGED, bf16's too, over clusters of 8;
 * _STAGED4 and _STAGED16 over 4 and 16; a cluster a group of filters): a
 * block takes the group, every channel, over its rank's share of the
 * batch. Its warps split the (filter, channel) units, then each unit's
 * staged output rows, cut into runs along q; a thread keeps the
 * whole r x T filter in registers and slides a window of x along the run,
 * so each dy value feeds r * T FMAs for r + 1 shared loads. Images are
 * staged in two buffers, the next copied (cp.async) while the current is
 * summed. A block's sums then go through shared memory in a fixed order
 * and a cluster's in rank order, as the tiled path's do. */
#define AQ_GPU_CONV2D_FILTER_WARPS 16      /* at most, a block */
#define AQ_GPU_CONV2D_FILTER_STAGE 12288   /* floats a stage buffer (two of them) */
#define AQ_GPU_CONV2D_FILTER_BYTES 114688  /* the group segment at most: two blocks an H100 SM */
/* A grid of no more blocks than an H100 has SMs (a LeNet's: 6 or 16
 * filters, 8 blocks each) has a block alone on its SM, with shared memory
 * left over: its stages hold that many more images, so fewer stages (each
 * a copy waited for and a barrier) sum the block's share of the batch. At
 * most an A100's opt-in group segment. */
#define AQ_GPU_CONV2D_FILTER_STAGE_ALONE 20480
#define AQ_GPU_CONV2D_FILTER_BYTES_ALONE 166912
#define AQ_GPU_CONV2D_FILTER_ALONE_BLOCKS 132 /* an H100's SMs */
/* The staged builds' clusters besides AQ_GPU_CONV2D_BWD_FILTER_SPLIT's. */
#define AQ_GPU_CONV2D_STAGED_FEW 4
#define AQ_GPU_CONV2D_STAGED_MANY 16

/* The taps a thread keeps a row, T (0: the path does not apply): filters
 * of T rows, so that the rows are known at compile time (each other
 * variant is code the others' registers must make room for). */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_taps(const aq_conv2d_args_t *a) {
  const int t = a->r == 3 && a->s <= 3 ? 3 : a->r == 5 && a->s <= 5 ? 5 : 0;
  return a->stride_w == 1 && a->dil_w == 1 ? t : 0;
}

/* Clusters of split staged blocks an H100 or H200 runs at once, a block an
 * SM (its 128 registers a thread; cuOccupancyMaxActiveClusters: clusters
 * keep to a GPC, whose SMs are not a multiple of 8 or 16). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_at_once(int split) {
  return split <= AQ_GPU_CONV2D_STAGED_FEW ? 30 : split <= AQ_GPU_CONV2D_BWD_FILTER_SPLIT ? 15 : 7;
}

/* A block takes `group` filters (a cluster the same ones over its share of
 * the batch), so that an image's window is staged once for them all; its
 * units are the (filter, channel) pairs, filter-major. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_units(const aq_conv2d_args_t *a, int64_t group) {
  return (a->c > 0 ? a->c : 1) * group;
}

/* Unit slots of the block's warps: warp w sums units w % slots, + slots,
 * ... */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_slots(const aq_conv2d_args_t *a, int64_t group) {
  const int64_t units = aq_conv2d_filter_units(a, group);
  return units < AQ_GPU_CONV2D_FILTER_WARPS ? (int)units : AQ_GPU_CONV2D_FILTER_WARPS;
}

/* Warps a block: as many for each slot as fit (so no warp sums two units'
 * rows where there are fewer units than warps). */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_warps(const aq_conv2d_args_t *a, int64_t group) {
  const int slots = aq_conv2d_filter_slots(a, group);
  return slots * (AQ_GPU_CONV2D_FILTER_WARPS / slots);
}

/* Floats of the sums after the stages: a warp's sums for each unit it took
 * (r x T taps and the bias), then the block's for each filter (c * r * s,
 * the bias). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_sums(const aq_conv2d_args_t *a, int64_t group) {
  const int64_t t = aq_conv2d_filter_taps(a), subs = aq_conv2d_filter_warps(a, group) / aq_conv2d_filter_slots(a, group);
  return subs * aq_conv2d_filter_units(a, group) * (t * t + 1) + group * (a->c * a->r * a->s + 1);
}

/* Floats an image takes in a stage: its window of every channel, then the
 * group's dy planes. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_image_floats(const aq_conv2d_args_t *a, int64_t group) {
  return aq_conv2d_tiled_image_floats(a) + (group - 1) * a->p * a->q;
}

/* Images a stage holds for a block taking 1 / split of the batch (0: the
 * path does not apply). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_images_in(const aq_conv2d_args_t *a, int split, int64_t group,
                                                                    int64_t stage) {
  if (!aq_conv2d_tiled_extents(a) || !aq_conv2d_filter_taps(a) || split < 1 || group < 1) return 0;
  const int64_t per = aq_conv2d_filter_image_floats(a, group), share = (a->n + split - 1) / split;
  const int64_t fit = per <= stage ? stage / per : 0;
  return fit < share ? fit : share;
}

static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_bytes_of(const aq_conv2d_args_t *a, int64_t group,
                                                                   int64_t images) {
  return (2 * images * aq_conv2d_filter_image_floats(a, group) + aq_conv2d_filter_sums(a, group)) * 4;
}

/* Whether each block of the staged build is alone on its SM. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_alone_in(const aq_conv2d_args_t *a, int split, int64_t group) {
  return group > 0 && (a->k + group - 1) / group * split <= AQ_GPU_CONV2D_FILTER_ALONE_BLOCKS;
}

static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_images_of(const aq_conv2d_args_t *a, int split, int64_t group) {
  if (aq_conv2d_filter_alone_in(a, split, group)) {
    const int64_t nb = aq_conv2d_filter_images_in(a, split, group, AQ_GPU_CONV2D_FILTER_STAGE_ALONE);
    if (nb && aq_conv2d_filter_bytes_of(a, group, nb) <= AQ_GPU_CONV2D_FILTER_BYTES_ALONE) return nb;
  }
  return aq_conv2d_filter_images_in(a, split, group, AQ_GPU_CONV2D_FILTER_STAGE);
}

/* The group segment the staged path runs with for a group (0: it does not
 * fit). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_bytes_in(const aq_conv2d_args_t *a, int split, int64_t group) {
  const int64_t nb = aq_conv2d_filter_images_of(a, split, group), bytes = aq_conv2d_filter_bytes_of(a, group, nb);
  const int64_t most =
      aq_conv2d_filter_alone_in(a, split, group) ? AQ_GPU_CONV2D_FILTER_BYTES_ALONE : AQ_GPU_CONV2D_FILTER_BYTES;
  return nb && bytes <= most ? bytes : 0;
}

/* The time a grid of groups of filters takes over clusters of split, in
 * the units of an image's work: its waves of clusters, each a block's
 * share of the batch, every image its window staged (weighed 15 a float)
 * and for each filter its dy plane (7 a value) and the sums (an FMA each),
 * plus a block's fixed cost, about 16 images of one filter (weights
 * fitted to the staged build's instruction counts and times on LeNet's
 * layers over clusters of 4, 8 and 16). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_cost(const aq_conv2d_args_t *a, int split, int64_t group) {
  const int64_t t = aq_conv2d_filter_taps(a), window = a->c * aq_conv2d_tiled_window(a, 0) * aq_conv2d_tiled_stride(a);
  const int64_t plane = a->p * a->q * (7 + a->c * a->r * t);
  const int64_t clusters = (a->k + group - 1) / group, share = (a->n + split - 1) / split;
  return aq_gpu_waves(clusters, aq_conv2d_filter_at_once(split)) * (share * (15 * window + group * plane) +
                                                                    16 * (15 * window + plane));
}

/* The filters a staged block takes over clusters of split: the group of
 * least cost whose stage fits (units at most a warp each), or 0 where none
 * does (the path does not apply). The least of those that make as many
 * clusters (it costs less), so a kernel reads it off its grid: k over the
 * clusters, rounded up. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_group(const aq_conv2d_args_t *a, int split) {
  int64_t best = 0, cost = 0;
  for (int64_t g = 1; g <= a->k && (g == 1 || aq_conv2d_filter_units(a, g) <= AQ_GPU_CONV2D_FILTER_WARPS); ++g) {
    if (!aq_conv2d_filter_bytes_in(a, split, g)) continue;
    const int64_t c = aq_conv2d_filter_cost(a, split, g);
    if (!best || c < cost) best = g, cost = c;
  }
  return best;
}

static inline AQ_GPU_HOST_DEVICE int aq_conv2d_filter_alone(const aq_conv2d_args_t *a, int split) {
  return aq_conv2d_filter_alone_in(a, split, aq_conv2d_filter_group(a, split));
}

static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_images(const aq_conv2d_args_t *a, int split) {
  return aq_conv2d_filter_images_of(a, split, aq_conv2d_filter_group(a, split));
}

/* The group segment the staged path runs with (0: it does not apply). */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_filter_bytes(const aq_conv2d_args_t *a, int split) {
  const int64_t g = aq_conv2d_filter_group(a, split);
  return g ? aq_conv2d_filter_bytes_in(a, split, g) : 0;
}

/* ---- fp32 conv2d backward filter: two builds --------------------------------
 * aq_conv2d_bwd_filter_f32 sums over the batch's output positions for each
 * item: a run of at most AQ_GPU_CONV2D_BWD_FILTER_WIDTH of a filter's r * s
 * weights dw[k, c, ...], or a dbias entry. A block takes an item; the
 * _split build (sm_90) has a cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT
 * blocks split the positions and sum their partials through distributed
 * shared memory in rank order (deterministic, no workspace). Small filters
 * (a LeNet's 1 -> 6 and 6 -> 16) have too few items to fill a GPU, so the
 * runs get narrower and the split build takes them; aq_gpu_op_kernel picks
 * it where the weight items number fewer than 2 blocks an SM. The grid's x
 * of the split build must be a multiple of the cluster (as its shape's is);
 * the plain build takes any launch. */
#define AQ_GPU_CONV2D_BWD_FILTER_WIDTH 16
#define AQ_GPU_CONV2D_BWD_FILTER_FILL 264 /* 2 blocks for each of an H100's SMs */

/* The weights an item takes: up to the width, fewer where the (k, c)
 * filters split 8 ways would not fill the GPU. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_bwd_filter_width(const aq_conv2d_args_t *a) {
  const int64_t rs = a->r * a->s, pairs = a->k * a->c, w = AQ_GPU_CONV2D_BWD_FILTER_WIDTH;
  if (rs <= 1 || pairs <= 0) return 1;
  int64_t chunks = (rs + w - 1) / w, split = pairs * AQ_GPU_CONV2D_BWD_FILTER_SPLIT;
  const int64_t want = (AQ_GPU_CONV2D_BWD_FILTER_FILL + split - 1) / split;
  if (want > chunks) chunks = want < rs ? want : rs;
  return (int)((rs + chunks - 1) / chunks);
}

/* The items over weights (*weight_items) and in all, dbias included. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bwd_filter_items(const aq_conv2d_args_t *a, int64_t *weight_items) {
  const int64_t rs = a->r * a->s > 0 ? a->r * a->s : 1, width = aq_conv2d_bwd_filter_width(a);
  const int64_t pairs = a->k * a->c > 0 ? a->k * a->c : 0, w = pairs * ((rs + width - 1) / width);
  if (weight_items) *weight_items = w;
  return w + (a->dbias && a->k > 0 ? a->k : 0);
}

/* 1 (the plain build) or AQ_GPU_CONV2D_BWD_FILTER_SPLIT. */
static inline int aq_conv2d_bwd_filter_split(const aq_conv2d_args_t *a) {
  int64_t w = a->k * 2; /* tiled: a block a filter */
  if (!aq_conv2d_tiled_bytes(a, 2)) aq_conv2d_bwd_filter_items(a, &w);
  return w < AQ_GPU_CONV2D_BWD_FILTER_FILL ? AQ_GPU_CONV2D_BWD_FILTER_SPLIT : 1;
}

/* Whether a backward filter takes the staged build. */
static inline int aq_conv2d_filter_staged(const aq_conv2d_args_t *a) {
  return aq_conv2d_filter_bytes(a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT) > 0;
}
static inline int aq_conv2d_filter_staged4(const aq_conv2d_args_t *a) {
  return aq_conv2d_filter_bytes(a, AQ_GPU_CONV2D_STAGED_FEW) > 0;
}
static inline int aq_conv2d_filter_staged16(const aq_conv2d_args_t *a) {
  return aq_conv2d_filter_bytes(a, AQ_GPU_CONV2D_STAGED_MANY) > 0;
}
/* Whether the launch rule gives a backward filter to the tiled or the
 * staged builds (a block a filter or a group of them, every channel):
 * they fit, and dw's rows (c r s) number at most
 * AQ_GPU_CONV2D_FILTER_RULE_ROWS (a LeNet's 25 and 150), where the tensor
 * cores' tiles of dw would leave most of a GPU idle. Many channels on
 * small planes run an order of magnitude faster on the tiles (a block
 * of the staged build sums every channel); the tuner still times both. */
#define AQ_GPU_CONV2D_FILTER_RULE_ROWS 256
static inline int aq_conv2d_filter_staged_rule(const aq_conv2d_args_t *a) {
  return a->c * a->r * a->s <= AQ_GPU_CONV2D_FILTER_RULE_ROWS && aq_conv2d_filter_staged(a);
}
static inline int aq_conv2d_filter_tiled_rule(const aq_conv2d_args_t *a) {
  return a->c * a->r * a->s <= AQ_GPU_CONV2D_FILTER_RULE_ROWS && aq_conv2d_tiled_bytes(a, 2) > 0;
}

/* The cluster of build where it is names[i] (splits[i]), or 0. */
static inline int aq_gpu_build_split(const char *build, const char *const *names, const int *splits, int n) {
  for (int i = 0; i < n; ++i)
    if (!strcmp(build, names[i])) return splits[i];
  return 0;
}

/* A staged build's cluster (build: its name), or 0: not a staged build. */
static inline int aq_conv2d_staged_split(const char *build) {
  static const char *const names[] = {AQ_KERNEL_CONV2D_BWD_FILTER_STAGED,      AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4,
                                      AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16,    AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED,
                                      AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16};
  static const int splits[] = {AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_STAGED_FEW, AQ_GPU_CONV2D_STAGED_MANY,
                               AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_STAGED_FEW, AQ_GPU_CONV2D_STAGED_MANY};
  return aq_gpu_build_split(build, names, splits, 6);
}

/* The staged build the launch rule picks (fp32's or bf16's backward
 * filter), where aq_conv2d_filter_staged: the cluster whose grid costs
 * least (aq_conv2d_filter_cost), 8 on a tie. */
static inline const char *aq_conv2d_filter_staged_build(const aq_conv2d_args_t *a, int bf16) {
  static const char *const builds[2][3] = {
      {AQ_KERNEL_CONV2D_BWD_FILTER_STAGED, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4,
       AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16}};
  int best = 0;
  int64_t cost = 0;
  for (int i = 0; i < 3; ++i) {
    const int split = aq_conv2d_staged_split(builds[0][i]);
    const int64_t g = aq_conv2d_filter_group(a, split), c = g ? aq_conv2d_filter_cost(a, split, g) : 0;
    if (g && (!cost || c < cost)) best = i, cost = c;
  }
  return builds[bf16 ? 1 : 0][best];
}

/* A staged build's launch: a cluster of split blocks a group of filters
 * (one cluster at least: a grid of none would not be whole clusters). */
static inline aq_dispatch_shape_t aq_conv2d_filter_gpu_shape(const aq_conv2d_args_t *a, int split) {
  const int64_t found = aq_conv2d_filter_group(a, split), group = found > 0 ? found : 1;
  const int64_t clusters = a->k > 0 ? (a->k + group - 1) / group : 1;
  const uint16_t threads = (uint16_t)(aq_conv2d_filter_warps(a, group) * 32);
  aq_dispatch_shape_t s = aq_gpu_threads_shape(clusters * split * threads);
  s.workgroup[0] = threads;
  return s;
}

static inline aq_dispatch_shape_t aq_conv2d_bwd_filter_gpu_shape(const aq_conv2d_args_t *a, int split) {
  if (aq_conv2d_tiled_bytes(a, 2)) { /* blocks for fewer than half the SMs: twice the threads each */
    const int64_t blocks = a->k * split;
    const uint16_t threads = blocks * 2 < AQ_GPU_MATMUL_F32_BIG_TILES ? AQ_GPU_CONV2D_TILED_FILTER_BLOCK : AQ_GPU_BLOCK;
    aq_dispatch_shape_t s = aq_gpu_threads_shape(blocks * threads);
    s.workgroup[0] = threads;
    return s;
  }
  int64_t items = aq_conv2d_bwd_filter_items(a, NULL);
  return aq_gpu_threads_shape((items > 0 ? items : 1) * split * AQ_GPU_BLOCK);
}

/* ---- fp32 conv2d on tensor cores (conv2d_x3.cu) ------------------------------
 * At the default precision a pass that neither the tiled passes nor the
 * staged backward filter take runs as an implicit GEMM on 64x64 tiles
 * (3xTF32): a block a tile, or for the backward filter (few tiles, a long
 * depth) a cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT blocks a tile, then
 * the bias gradient's items (8 channels a block). The forward and
 * backward data of 3x3 filters at unit stride go to the Winograd builds
 * instead (aq_conv2d_wino). An exact exec's convs run in FFMA: the FFMA
 * builds (aq_conv2d_ffma) where they apply, else the plain loops. */
#define AQ_GPU_CONV2D_X3_TILE 64
#define AQ_GPU_CONV2D_X3_THIN 32 /* the thin backward filter's tile rows */

/* 0 forward, 1 backward data, 2 backward filter for aq_conv2d_f32's
 * kernels (*x3 = 0) and their x3 builds (*x3 = 1); -1 for the rest. (A
 * chain of literal compares, which the compiler folds where the kernel is
 * a literal too, as the matmul builds' callers' is.) */
static inline int aq_conv2d_f32_pass(const char *kernel, int *x3) {
  *x3 = 0;
  if (strncmp(kernel, "aq_conv2d_", 10)) return -1; /* most kernels: one compare a dispatch */
  const int filter = !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6);
  *x3 = !strcmp(kernel, AQ_KERNEL_CONV2D_X3) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_X3) ||
        !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_X3) || filter;
  return !strcmp(kernel, AQ_KERNEL_CONV2D) || !strcmp(kernel, AQ_KERNEL_CONV2D_X3)                             ? 0
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_X3)             ? 1
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_X3) || filter ? 2
                                                                                                                  : -1;
}

/* A pass's tiles of tm rows (and AQ_GPU_CONV2D_X3_TILE columns). */
static inline int64_t aq_conv2d_x3_tiles(const aq_conv2d_args_t *a, int pass, int tm) {
  return aq_conv2d_gemm_tiles(a, pass, tm, AQ_GPU_CONV2D_X3_TILE);
}
/* The launch rule's x3 backward filter by the waves of its clusters, a
 * wave's time its tiles' area over its cluster's blocks: in 24ths, 64x64
 * tiles over clusters of 8 take 6 a wave of 30, 32x64 ones 3, 64x64 ones
 * over clusters of 6 8 a wave of 39. The fewest wins; ties keep the wide
 * tiles over 8 (aq_conv2d_filter_thin), then 8 over 6. So 64 -> 64 (9
 * tiles) goes thin, 128 -> 128 (36) over 6, 256 -> 256 at stride 2 (144)
 * wide over 8. */
static inline const char *aq_conv2d_x3_filter(const aq_conv2d_args_t *a) {
  const int64_t wide = aq_conv2d_x3_tiles(a, 2, AQ_GPU_CONV2D_X3_TILE), thin = aq_conv2d_x3_tiles(a, 2, AQ_GPU_CONV2D_X3_THIN);
  const int by_thin = aq_conv2d_filter_thin(wide, thin);
  const int64_t best8 = by_thin ? aq_gpu_waves(thin, AQ_GPU_CONV2D_SPLIT_CLUSTERS) * 3
                                : aq_gpu_waves(wide, AQ_GPU_CONV2D_SPLIT_CLUSTERS) * 6;
  if (aq_gpu_waves(wide, AQ_GPU_CONV2D_SPLIT6_CLUSTERS) * 8 < best8) return AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6;
  return by_thin ? AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN : AQ_KERNEL_CONV2D_BWD_FILTER_X3;
}

/* Whether the implicit GEMMs' 32-bit indices hold the tensors and windows
 * (conv2d_gemm.cuh): else the tensor-core builds take the direct loops. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_fits32(const aq_conv2d_args_t *a) {
  const int64_t lim = INT32_MAX;
  return a->n * a->c * a->h * a->wd < lim && a->k * a->c * a->r * a->s < lim && a->n * a->k * a->p * a->q < lim &&
         a->h + 2 * (int64_t)a->pad_h < lim && a->wd + 2 * (int64_t)a->pad_w < lim && a->p * a->stride_h < lim &&
         a->q * a->stride_w < lim && a->r * a->dil_h < lim && a->s * a->dil_w < lim;
}

/* Whether the x3 builds may take a pass (a tuning candidate): the default
 * precision, sane extents, 32-bit indices. */
static inline int aq_conv2d_x3_fits(const aq_conv2d_args_t *a) {
  return a->precision == AQ_MATMUL_PRECISION_DEFAULT && aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a);
}
/* Whether the launch rule gives pass to them: they fit, the GEMM has at
 * least half a tile of columns (a backward data into one channel would
 * multiply 63 columns of zeros for each it keeps), and no tiled or staged
 * build takes the pass. */
static inline int aq_conv2d_x3(const aq_conv2d_args_t *a, int pass) {
  if (!aq_conv2d_x3_fits(a) || (pass == 1 ? a->c : a->k) < AQ_GPU_CONV2D_X3_TILE / 2) return 0;
  return pass == 2 ? !aq_conv2d_filter_tiled_rule(a) && !aq_conv2d_filter_staged_rule(a) : !aq_conv2d_tiled_bytes(a, pass);
}

/* The plain forward and backward data kernels' own launches: a block an
 * image where the pass runs tiled, else a thread an output (input). */
static inline aq_dispatch_shape_t aq_conv2d_fwd_plain_shape(const aq_conv2d_args_t *a) {
  return aq_gpu_threads_shape(aq_conv2d_tiled_bytes(a, 0) ? a->n * AQ_GPU_BLOCK : a->n * a->k * a->p * a->q);
}
static inline aq_dispatch_shape_t aq_conv2d_bwd_data_plain_shape(const aq_conv2d_args_t *a) {
  return aq_gpu_threads_shape(aq_conv2d_tiled_bytes(a, 1) ? a->n * AQ_GPU_BLOCK : a->n * a->c * a->h * a->wd);
}

/* A backward filter split over clusters of split blocks (conv2d_gemm.cuh,
 * filter_split): a cluster a tile, then the bias gradient's 8-channel
 * items, a block each. */
static inline aq_dispatch_shape_t aq_conv2d_filter_split_by(const aq_conv2d_args_t *a, int64_t tiles, int64_t split) {
  const int64_t items = a->dbias && a->k > 0 ? (a->k + 7) / 8 : 0;
  return aq_gpu_threads_shape((tiles + (items + split - 1) / split) * split * AQ_GPU_BLOCK);
}
static inline aq_dispatch_shape_t aq_conv2d_filter_split_gpu_shape(const aq_conv2d_args_t *a, int64_t tiles) {
  return aq_conv2d_filter_split_by(a, tiles, AQ_GPU_CONV2D_BWD_FILTER_SPLIT);
}

/* An x3 build's launch (build: its name): tm-row tiles (the thin build's
 * AQ_GPU_CONV2D_X3_THIN, the others' AQ_GPU_CONV2D_X3_TILE), the backward
 * filter's over clusters of its size. */
static inline aq_dispatch_shape_t aq_conv2d_x3_gpu_shape(const aq_conv2d_args_t *a, int pass, const char *build) {
  const int tm = strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) ? AQ_GPU_CONV2D_X3_TILE : AQ_GPU_CONV2D_X3_THIN;
  if (pass == 2)
    return aq_conv2d_filter_split_by(a, aq_conv2d_x3_tiles(a, 2, tm),
                                     strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6) ? AQ_GPU_CONV2D_BWD_FILTER_SPLIT
                                                                                          : AQ_GPU_CONV2D_SPLIT6);
  return aq_gpu_threads_shape(aq_conv2d_x3_tiles(a, pass, tm) * AQ_GPU_BLOCK);
}

/* ---- fp32 conv2d in FFMA (conv2d_ffma.cu) -----------------------------------
 * The three passes as implicit GEMMs in FFMA, exact fp32: a block a 128x64
 * tile (a strided backward data's a GEMM a phase), the backward filter a
 * cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT a tile, then the bias
 * gradient's items. At any precision: the launch rule gives an exact
 * exec's passes that the x3 builds take at the default one to them;
 * tuning times them beside the x3 builds. */
#define AQ_GPU_CONV2D_FFMA_ROWS 128
#define AQ_GPU_CONV2D_FFMA_COLS 64
#define AQ_GPU_CONV2D_FFMA_MIN_COLS 32 /* fewer: most of a tile's columns would be zeros */

/* 0, 1 or 2, the pass of an FFMA build; -1 for the rest. */
static inline int aq_conv2d_ffma_pass(const char *kernel) {
  if (strncmp(kernel, "aq_conv2d_", 10) || !strstr(kernel, "_ffma")) return -1; /* most kernels: two compares */
  return !strcmp(kernel, AQ_KERNEL_CONV2D_FFMA)                ? 0
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_FFMA)   ? 1
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_FFMA) ? 2
                                                             : -1;
}
static inline aq_dispatch_shape_t aq_conv2d_ffma_gpu_shape(const aq_conv2d_args_t *a, int pass) {
  const int64_t tiles = aq_conv2d_gemm_tiles(a, pass, AQ_GPU_CONV2D_FFMA_ROWS, AQ_GPU_CONV2D_FFMA_COLS);
  return pass == 2 ? aq_conv2d_filter_split_gpu_shape(a, tiles) : aq_gpu_threads_shape(tiles * AQ_GPU_BLOCK);
}
/* Whether an FFMA build may take pass (a tuning candidate): sane extents,
 * 32-bit indices, columns enough. */
static inline int aq_conv2d_ffma_fits(const aq_conv2d_args_t *a, int pass) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) && (pass == 1 ? a->c : a->k) >= AQ_GPU_CONV2D_FFMA_MIN_COLS;
}
static inline int aq_conv2d_fwd_ffma_fits(const aq_conv2d_args_t *a) { return aq_conv2d_ffma_fits(a, 0); }
static inline int aq_conv2d_bwd_data_ffma_fits(const aq_conv2d_args_t *a) { return aq_conv2d_ffma_fits(a, 1); }
static inline int aq_conv2d_bwd_filter_ffma_fits(const aq_conv2d_args_t *a) { return aq_conv2d_ffma_fits(a, 2); }
/* The launch rule's FFMA build of pass, or NULL: an exact exec's passes
 * that no tiled or staged build takes; at the default precision, a
 * strided backward data that x3 would take, whose phases' GEMMs (a few
 * deep, most shallow: a stride-2 3x3 filter's take 1 to 4 taps) x3 ran no
 * faster and up to a third slower. */
static inline const char *aq_conv2d_ffma(const aq_conv2d_args_t *a, int pass) {
  static const char *const builds[] = {AQ_KERNEL_CONV2D_FFMA, AQ_KERNEL_CONV2D_BWD_DATA_FFMA, AQ_KERNEL_CONV2D_BWD_FILTER_FFMA};
  if (pass < 0 || pass > 2 || !aq_conv2d_ffma_fits(a, pass)) return NULL;
  if (a->precision == AQ_MATMUL_PRECISION_DEFAULT)
    return pass == 1 && aq_conv2d_phased(a) && aq_conv2d_x3(a, 1) ? builds[1] : NULL;
  if (a->precision != AQ_MATMUL_PRECISION_EXACT) return NULL;
  const int other = pass == 2 ? aq_conv2d_filter_tiled_rule(a) || aq_conv2d_filter_staged_rule(a) : aq_conv2d_tiled_bytes(a, pass) > 0;
  return other ? NULL : builds[pass];
}

/* ---- fp32 conv2d as Winograd's F(2x2, 3x3) (conv2d_winograd.cu) -----------
 * The forward and backward data of 3x3 filters at unit stride and
 * dilation: a block 32 output tiles of 2x2 by 32 output channels. */
#define AQ_GPU_CONV2D_WINO_TILES 32
#define AQ_GPU_CONV2D_WINO_COLS 32

/* The shapes the Winograd builds take: 3x3, unit strides and dilations, a
 * padding of 0 to 2 the same both ways. */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_wino_shape(const aq_conv2d_args_t *a) {
  return a->r == 3 && a->s == 3 && a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 && a->dil_w == 1 &&
         a->pad_h == a->pad_w && a->pad_h >= 0 && a->pad_h <= 2;
}
/* 0 or 1, the pass of a Winograd build; -1 for the rest. */
static inline int aq_conv2d_wino_pass(const char *kernel) {
  if (strncmp(kernel, "aq_conv2d_", 10) || !strstr(kernel, "_wino")) return -1;
  return !strcmp(kernel, AQ_KERNEL_CONV2D_WINO) || !strcmp(kernel, AQ_KERNEL_CONV2D_BF16_WINO) ? 0
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_WINO) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO) ? 1
         : !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN) ||
                 !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP)
             ? 2
             : -1;
}
/* The backward filter's tiles of dw, rows x 32 (filters by channels): its
 * build's 32, or the thin build's AQ_GPU_CONV2D_WINO_FILTER_THIN. */
#define AQ_GPU_CONV2D_WINO_FILTER_THIN 16
#define AQ_GPU_CONV2D_WINO_THIN_SPLIT 16 /* the thin build's cluster (past 8: non-portable, sm_90's most) */
/* The square build: the wide build's 32 x 32 tiles on tensor cores, its
 * two steps' operands in a group segment, over clusters of 12: at two
 * blocks an SM, an H100's GPCs hold fewer than 16 clusters of 16 (16
 * square tiles: a second wave, nearly empty) but 16 of 12. */
#define AQ_GPU_CONV2D_WINO_TC_SPLIT 12
#define AQ_GPU_CONV2D_WINO_TC_BYTES 65536
/* The warp build: the square tiles with a warp an element, blocks of 512
 * threads, one an SM, over clusters of 6: an H200's GPCs hold 16 such
 * clusters at once (16 tiles of dw in one wave), but not 16 of 7 or 8. */
#define AQ_GPU_CONV2D_WINO_WARP_SPLIT 6
#define AQ_GPU_CONV2D_WINO_WARP_THREADS 512
#define AQ_GPU_CONV2D_WINO_WARP_BYTES 133120
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_wino_filter_tiles(const aq_conv2d_args_t *a, int rows) {
  return ((a->k > 0 ? a->k : 1) + rows - 1) / rows *
         (((a->c > 0 ? a->c : 1) + AQ_GPU_CONV2D_WINO_COLS - 1) / AQ_GPU_CONV2D_WINO_COLS);
}
/* A Winograd build's launch (build: its name). */
static inline aq_dispatch_shape_t aq_conv2d_wino_gpu_shape(const aq_conv2d_args_t *a, const char *build) {
  const int pass = aq_conv2d_wino_pass(build);
  if (pass == 2 && !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP)) { /* its own blocks */
    aq_dispatch_shape_t s = aq_conv2d_filter_split_by(a, aq_conv2d_wino_filter_tiles(a, AQ_GPU_CONV2D_WINO_COLS),
                                                      AQ_GPU_CONV2D_WINO_WARP_SPLIT);
    s.grid[0] = s.grid[0] / AQ_GPU_BLOCK * AQ_GPU_CONV2D_WINO_WARP_THREADS, s.workgroup[0] = AQ_GPU_CONV2D_WINO_WARP_THREADS;
    return s;
  }
  if (pass == 2) /* a cluster a tile of dw */
    return !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN)
               ? aq_conv2d_filter_split_by(a, aq_conv2d_wino_filter_tiles(a, AQ_GPU_CONV2D_WINO_FILTER_THIN),
                                           AQ_GPU_CONV2D_WINO_THIN_SPLIT)
               : aq_conv2d_filter_split_by(a, aq_conv2d_wino_filter_tiles(a, AQ_GPU_CONV2D_WINO_COLS),
                                           strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC) ? AQ_GPU_CONV2D_BWD_FILTER_SPLIT
                                                                                              : AQ_GPU_CONV2D_WINO_TC_SPLIT);
  const int64_t ho = pass ? a->h : a->p, wo = pass ? a->wd : a->q, cols = pass ? a->c : a->k;
  const int64_t tiles = (a->n > 0 ? a->n : 1) * (((ho > 0 ? ho : 1) + 1) / 2) * (((wo > 0 ? wo : 1) + 1) / 2);
  return aq_gpu_threads_shape((tiles + AQ_GPU_CONV2D_WINO_TILES - 1) / AQ_GPU_CONV2D_WINO_TILES *
                              (((cols > 0 ? cols : 1) + AQ_GPU_CONV2D_WINO_COLS - 1) / AQ_GPU_CONV2D_WINO_COLS) * AQ_GPU_BLOCK);
}
/* Whether a bf16 Winograd build may take pass: its shapes, sane extents,
 * 32-bit indices, and channels enough on either side. */
static inline int aq_conv2d_bf16_wino_fits(const aq_conv2d_args_t *a, int pass) {
  return aq_conv2d_wino_shape(a) && aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) &&
         (pass ? a->c : a->k) >= AQ_GPU_CONV2D_FFMA_MIN_COLS && (pass ? a->k : a->c) >= AQ_GPU_CONV2D_FFMA_MIN_COLS;
}
static inline int aq_conv2d_fwd_bf16_wino_fits(const aq_conv2d_args_t *a) { return aq_conv2d_bf16_wino_fits(a, 0); }
static inline int aq_conv2d_bwd_data_bf16_wino_fits(const aq_conv2d_args_t *a) { return aq_conv2d_bf16_wino_fits(a, 1); }
/* Whether an fp32 Winograd build may take pass (a tuning candidate): the
 * default precision (its transforms' additions round) and the bf16
 * builds' conditions. */
static inline int aq_conv2d_wino_fits(const aq_conv2d_args_t *a, int pass) {
  return a->precision == AQ_MATMUL_PRECISION_DEFAULT && aq_conv2d_bf16_wino_fits(a, pass);
}
/* The launch rule's Winograd build of pass, or NULL: where it fits and
 * the x3 builds would take the pass. The backward filter's clusters split
 * the tiles of dy, so dw's few tiles decide how many blocks run: where dw
 * has AQ_GPU_CONV2D_WINO_WIDE_TILES tiles of 32 x 32 (two blocks an SM
 * over clusters of 8), the wide build; where it has
 * AQ_GPU_CONV2D_WINO_TC_TILES, the warp one (the same tiles on tensor
 * cores, a warp an element, over clusters of 6: one wave at one block an
 * SM; the square one, a tuning candidate, runs them over clusters of 12 at
 * two blocks an SM); else the thin one (16 x 32 tiles, each patch
 * transformed twice, but four times the blocks, over clusters of 16,
 * which cost more where the wide tiles fill the GPU already). */
#define AQ_GPU_CONV2D_WINO_WIDE_TILES 32
#define AQ_GPU_CONV2D_WINO_TC_TILES 16
static inline const char *aq_conv2d_wino(const aq_conv2d_args_t *a, int pass) {
  static const char *const builds[] = {AQ_KERNEL_CONV2D_WINO, AQ_KERNEL_CONV2D_BWD_DATA_WINO, AQ_KERNEL_CONV2D_BWD_FILTER_WINO};
  if (pass < 0 || pass > 2 || !aq_conv2d_wino_fits(a, pass) || !aq_conv2d_x3(a, pass)) return NULL;
  const int64_t tiles = aq_conv2d_wino_filter_tiles(a, AQ_GPU_CONV2D_WINO_COLS);
  if (pass < 2 || tiles >= AQ_GPU_CONV2D_WINO_WIDE_TILES) return builds[pass];
  return tiles >= AQ_GPU_CONV2D_WINO_TC_TILES ? AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP : AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN;
}
static inline int aq_conv2d_fwd_wino_fits(const aq_conv2d_args_t *a) { return aq_conv2d_wino_fits(a, 0); }
static inline int aq_conv2d_bwd_data_wino_fits(const aq_conv2d_args_t *a) { return aq_conv2d_wino_fits(a, 1); }
static inline int aq_conv2d_bwd_filter_wino_fits(const aq_conv2d_args_t *a) { return aq_conv2d_wino_fits(a, 2); }

/* Whether bf16's tensor-core backward filter splits its tiles' depth over
 * clusters: sane arguments and too few tiles to fill an H100. */
static inline int aq_conv2d_bf16_filter_split(const aq_conv2d_args_t *a) {
  int tm, tn;
  return aq_conv2d_tiled_extents(a) && aq_conv2d_bf16_gpu_tiles(a, 2, &tm, &tn) < AQ_GPU_CONV2D_BF16_FEW_TILES;
}
/* Whether bf16's forward splits its tiles' depth over clusters of
 * AQ_GPU_CONV2D_BF16_FWD_SPLIT (aq_conv2d_bf16_split): its tiles are the
 * 64x64 ones (too few larger ones), which leave SMs idle, and the split
 * tiles still run in one wave. */
#define AQ_GPU_CONV2D_BF16_FWD_SPLIT 2
static inline int aq_conv2d_bf16_fwd_split(const aq_conv2d_args_t *a) {
  int tm, tn;
  const int64_t tiles = aq_conv2d_bf16_gpu_tiles(a, 0, &tm, &tn);
  return aq_conv2d_tiled_extents(a) && tm == 64 && tiles < AQ_GPU_CONV2D_BF16_FEW_TILES &&
         tiles * AQ_GPU_CONV2D_BF16_FWD_SPLIT <= AQ_GPU_CONV2D_BF16_SLOTS;
}
/* Its launch: a cluster a 64x64 tile. */
static inline aq_dispatch_shape_t aq_conv2d_bf16_fwd_split_shape(const aq_conv2d_args_t *a) {
  return aq_gpu_threads_shape(aq_conv2d_gemm_tiles(a, 0, 64, 64) * AQ_GPU_CONV2D_BF16_FWD_SPLIT * AQ_GPU_BLOCK);
}
static inline aq_dispatch_shape_t aq_conv2d_fwd_bf16_tiles_shape(const aq_conv2d_args_t *a) {
  return aq_conv2d_bf16_gpu_shape(a, 0);
}
/* bf16's forward on flat tiles, AQ_GPU_CONV2D_BF16_THIN rows by
 * AQ_GPU_CONV2D_BF16_FLAT columns, each tile's depth split over a cluster
 * (aq_conv2d_bf16_split_flat over AQ_GPU_CONV2D_BF16_FWD_SPLIT,
 * _flat4 over AQ_GPU_CONV2D_BF16_FLAT_SPLIT4): where the pass's tiles are
 * the 64x64 ones (too few larger ones) and the split builds take them,
 * with filters enough to fill a flat tile's columns. A flat tile gathers
 * half the x a product that a 64x64 one does, and its blocks, of half the
 * rows, even out the SMs' loads where the 64x64 tiles end in a part wave
 * (a ResNet's 512 -> 512 from 14x14 at stride 2). Clusters of 4 where
 * their blocks fit a wave of two blocks an SM (twice the blocks of few
 * tiles), or where those of 2 would take more than a wave (the blocks of
 * 4 keep both of an SM's slots busy to the end); else clusters of 2. The
 * cluster's blocks, or 0 where the flat tiles do not apply. */
#define AQ_GPU_CONV2D_BF16_FLAT_SPLIT4 4
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_flat_tiles(const aq_conv2d_args_t *a) {
  return aq_conv2d_gemm_tiles(a, 0, AQ_GPU_CONV2D_BF16_THIN, AQ_GPU_CONV2D_BF16_FLAT);
}
static inline int aq_conv2d_bf16_fwd_flat(const aq_conv2d_args_t *a) {
  int tm, tn;
  const int64_t tiles = aq_conv2d_bf16_gpu_tiles(a, 0, &tm, &tn);
  if (!aq_conv2d_tiled_extents(a) || tm != 64 || tiles >= AQ_GPU_CONV2D_BF16_SLOTS || a->k < AQ_GPU_CONV2D_BF16_FLAT)
    return 0;
  const int64_t flat = aq_conv2d_bf16_flat_tiles(a);
  return flat * AQ_GPU_CONV2D_BF16_FWD_SPLIT <= AQ_GPU_CONV2D_BF16_SLOTS &&
                 flat * AQ_GPU_CONV2D_BF16_FLAT_SPLIT4 > AQ_GPU_CONV2D_BF16_SLOTS
             ? AQ_GPU_CONV2D_BF16_FWD_SPLIT
             : AQ_GPU_CONV2D_BF16_FLAT_SPLIT4;
}
/* A flat build's launch over clusters of split: a cluster a flat tile. */
static inline aq_dispatch_shape_t aq_conv2d_bf16_fwd_flat_shape(const aq_conv2d_args_t *a, int split) {
  return aq_gpu_threads_shape(aq_conv2d_bf16_flat_tiles(a) * split * AQ_GPU_BLOCK);
}
/* A split build's tiles of dw (*tm: their rows) over clusters of split:
 * the thin ones where 64x64 tiles split over clusters of split (of 8 at
 * least) would leave an H100's SMs idle. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_split_tiles(const aq_conv2d_args_t *a, int split, int *tm) {
  const int64_t small = aq_conv2d_gemm_tiles(a, 2, 64, 64);
  *tm = small * (split < AQ_GPU_CONV2D_BWD_FILTER_SPLIT ? AQ_GPU_CONV2D_BWD_FILTER_SPLIT : split) <
                AQ_GPU_CONV2D_BF16_FEW_TILES
            ? AQ_GPU_CONV2D_BF16_THIN
            : 64;
  return *tm == 64 ? small : aq_conv2d_gemm_tiles(a, 2, *tm, 64);
}
/* The tensor-core backward filter's split builds' clusters (build: its
 * name), or 0 for another build. */
static inline int aq_conv2d_bf16_tc_split(const char *build) {
  static const char *const names[] = {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6,
                                      AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16};
  static const int splits[] = {AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_SPLIT6, AQ_GPU_CONV2D_SPLIT16};
  return aq_gpu_build_split(build, names, splits, 3);
}
/* The split build of least time: its clusters' waves (clusters of 6, 8
 * and 16 at once: 39, 30 and 14, two blocks an SM), each a block's share
 * of a tile's depth, its tile's rows over its cluster. Ties go to the
 * taller tiles (fewer bytes gathered a product), then to 8, 6, 16 in
 * turn. So 128 -> 128's 36 tiles of 64x64 go to 6 (one wave), 64 -> 64's
 * 9 to 16 (144 blocks on 64x64 tiles, where 8 took 18 of 32 rows), and
 * 18 of 32 rows stay with 8 (the same tiles over 16 take two waves). */
static inline const char *aq_conv2d_bf16_split_build(const aq_conv2d_args_t *a) {
  static const char *const builds[] = {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6,
                                       AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16};
  static const int64_t at_once[] = {AQ_GPU_CONV2D_SPLIT_CLUSTERS, AQ_GPU_CONV2D_SPLIT6_CLUSTERS,
                                    AQ_GPU_CONV2D_SPLIT16_CLUSTERS};
  int best = 0, best_tm = 0;
  int64_t cost = 0;
  for (int i = 0; i < 3; ++i) {
    const int split = aq_conv2d_bf16_tc_split(builds[i]);
    int tm;
    const int64_t tiles = aq_conv2d_bf16_split_tiles(a, split, &tm);
    const int64_t c = aq_gpu_waves(tiles, at_once[i]) * tm * 48 / split; /* 48: whole for 6, 8, 16 */
    if (!i || c < cost || (c == cost && tm > best_tm)) best = i, cost = c, best_tm = tm;
  }
  return builds[best];
}
/* The launch of a split build (split: its cluster's blocks). */
static inline aq_dispatch_shape_t aq_conv2d_bf16_filter_split_shape(const aq_conv2d_args_t *a, int split) {
  int tm;
  return aq_conv2d_filter_split_by(a, aq_conv2d_bf16_split_tiles(a, split, &tm), split);
}

/* ---- bf16's backward filter by rows (conv2d_bf16_rows.cu) -------------------
 * A cluster a tile of dw: 64 filters x 32 channels x one filter row r of
 * three taps, its blocks a share of dy's rows (n, p), each staged whole
 * with the row of x it meets (cp.async). So it takes unit stride and
 * dilation, filters three taps wide, padding within XOFF, rows of an even
 * number of elements (4-byte copies) and 32-bit indices; a row of dy within
 * QCHUNK (the products' 16-wide steps) and of x within XROW - XOFF, or for
 * the _rows_wide build any, in chunks of QCHUNK positions, each staged
 * with the stretch of x's row from XOFF columns before it. */
#define AQ_GPU_CONV2D_ROWS_FILTERS 64
#define AQ_GPU_CONV2D_ROWS_CHANNELS 32
#define AQ_GPU_CONV2D_ROWS_QCHUNK 64
#define AQ_GPU_CONV2D_ROWS_XOFF 8
#define AQ_GPU_CONV2D_ROWS_XROW 88
#define AQ_GPU_CONV2D_ROWS_DROW 72
/* A rows build's block (split: its cluster): four warp groups of a row of
 * dy each over clusters of 16 (a block an SM: few tiles), two over
 * clusters of 8 (two blocks an SM); and its group segment, three stages of
 * a row a group. */
#define AQ_GPU_CONV2D_ROWS_THREADS(split) ((split) == 16 ? 512 : 256)
#define AQ_GPU_CONV2D_ROWS_BYTES(threads)                                                                            \
  (3 * ((threads) / 128) *                                                                                              \
   (AQ_GPU_CONV2D_ROWS_FILTERS * AQ_GPU_CONV2D_ROWS_DROW + AQ_GPU_CONV2D_ROWS_CHANNELS * AQ_GPU_CONV2D_ROWS_XROW) * 2)
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_bf16_rows_wide_fits(const aq_conv2d_args_t *a) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) && a->s == 3 && a->stride_h == 1 && a->stride_w == 1 &&
         a->dil_h == 1 && a->dil_w == 1 && a->pad_w <= AQ_GPU_CONV2D_ROWS_XOFF && a->q % 2 == 0 && a->wd % 2 == 0;
}
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_bf16_rows_fits(const aq_conv2d_args_t *a) {
  return aq_conv2d_bf16_rows_wide_fits(a) && a->q <= AQ_GPU_CONV2D_ROWS_QCHUNK &&
         a->wd <= AQ_GPU_CONV2D_ROWS_XROW - AQ_GPU_CONV2D_ROWS_XOFF;
}
/* Its tiles: filter tiles x channel tiles x filter rows. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_rows_tiles(const aq_conv2d_args_t *a) {
  return (a->k + AQ_GPU_CONV2D_ROWS_FILTERS - 1) / AQ_GPU_CONV2D_ROWS_FILTERS *
         ((a->c + AQ_GPU_CONV2D_ROWS_CHANNELS - 1) / AQ_GPU_CONV2D_ROWS_CHANNELS) * a->r;
}
/* A rows build's cluster (build: its name), or 0: not a rows build. */
static inline int aq_conv2d_bf16_rows_split(const char *build) {
  static const char *const names[] = {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8,
                                      AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE};
  static const int splits[] = {AQ_GPU_CONV2D_SPLIT16, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_SPLIT16};
  return aq_gpu_build_split(build, names, splits, 3);
}
/* Its launch: a cluster a tile, then the bias gradient's items; whole
 * clusters for kernargs of no tiles too (the kernel refuses them). */
static inline aq_dispatch_shape_t aq_conv2d_bf16_rows_shape(const aq_conv2d_args_t *a, int split) {
  const int64_t tiles = aq_conv2d_bf16_rows_tiles(a), items = a->dbias && a->k > 0 ? (a->k + 7) / 8 : 0;
  aq_dispatch_shape_t s = aq_gpu_threads_shape(((tiles > 0 ? tiles : 1) + (items + split - 1) / split) * split *
                                               AQ_GPU_CONV2D_ROWS_THREADS(split));
  s.workgroup[0] = (uint16_t)AQ_GPU_CONV2D_ROWS_THREADS(split);
  return s;
}
/* The rows build the launch rule gives a (its name), or NULL. Each build's
 * time: its clusters' waves (AQ_GPU_CONV2D_ROWS16_CLUSTERS of 16 at once,
 * AQ_GPU_CONV2D_ROWS8_CLUSTERS of 8: cuOccupancyMaxActiveClusters on an
 * H200), each a block's share of dy's rows (chunks) times their 16-wide steps
 * along q (3 a row-step for 16's blocks of four groups, 4 for 8's of two),
 * plus 200 for the tile's fixed costs (in 50 ns: 16's times within 5% of
 * the tuner's; 8's two blocks an SM run slower than counted, but the
 * cheaper was the faster in each of thirteen shapes timed). The cheaper,
 * where it takes at most two waves; more tiles, each of fewer rows, run
 * faster as the implicit GEMM's (256 -> 256 at 14x14). */
#define AQ_GPU_CONV2D_ROWS16_CLUSTERS 7
#define AQ_GPU_CONV2D_ROWS8_CLUSTERS 30
static inline int64_t aq_conv2d_bf16_rows_cost(const aq_conv2d_args_t *a, int split, int64_t *waves) {
  const int64_t rows = a->n * a->p * ((a->q + AQ_GPU_CONV2D_ROWS_QCHUNK - 1) / AQ_GPU_CONV2D_ROWS_QCHUNK),
                steps = ((a->q < AQ_GPU_CONV2D_ROWS_QCHUNK ? a->q : AQ_GPU_CONV2D_ROWS_QCHUNK) + 15) / 16;
  *waves = aq_gpu_waves(aq_conv2d_bf16_rows_tiles(a),
                        split == AQ_GPU_CONV2D_SPLIT16 ? AQ_GPU_CONV2D_ROWS16_CLUSTERS : AQ_GPU_CONV2D_ROWS8_CLUSTERS);
  return *waves * ((rows + split - 1) / split * steps * (split == AQ_GPU_CONV2D_SPLIT16 ? 3 : 4) + 200);
}
static inline const char *aq_conv2d_bf16_rows_build(const aq_conv2d_args_t *a) {
  int64_t w16, w8;
  if (a->q > AQ_GPU_CONV2D_ROWS_QCHUNK) { /* in chunks of q, over clusters of 16 */
    if (!aq_conv2d_bf16_rows_wide_fits(a)) return NULL;
    aq_conv2d_bf16_rows_cost(a, AQ_GPU_CONV2D_SPLIT16, &w16);
    return w16 <= 2 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE : NULL;
  }
  if (!aq_conv2d_bf16_rows_fits(a)) return NULL;
  const int64_t c16 = aq_conv2d_bf16_rows_cost(a, AQ_GPU_CONV2D_SPLIT16, &w16),
                c8 = aq_conv2d_bf16_rows_cost(a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, &w8);
  if (c16 < c8) return w16 <= 2 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS : NULL;
  return w8 <= 2 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8 : NULL;
}

/* ---- the backward data by columns (conv2d_col.cuh) --------------------------
 * A block one image's dx for 32 channels: first D, the channels' taps
 * (rows) by dy's positions (columns) summed over k, then each element of dx
 * the sum of the entries its taps reach (col2im in shared memory). So dy's
 * plane within AQ_GPU_CONV2D_COL_POSITIONS, filters of at most
 * AQ_GPU_CONV2D_COL_TAPS taps, x's plane within AQ_GPU_CONV2D_COL_PLANE
 * (a list of taps a position), a row of w (c r s elements of `size`
 * bytes) of whole 16-byte chunks; 32-bit indices. Any stride, padding and
 * dilation. Builds: bf16's on tensor cores (conv2d_bf16_col.cu), fp32's
 * in FFMA (conv2d_ffma_col.cu); their group segments hold D (over the
 * stages of w and dy) and the lists. */
#define AQ_GPU_CONV2D_COL_CHANNELS 32
#define AQ_GPU_CONV2D_COL_TAPS 9
#define AQ_GPU_CONV2D_COL_POSITIONS 64
#define AQ_GPU_CONV2D_COL_PLANE 256
#define AQ_GPU_CONV2D_COL_BF16_THREADS 192
#define AQ_GPU_CONV2D_COL_BF16_BYTES 105280
#define AQ_GPU_CONV2D_COL_F32_THREADS 256
#define AQ_GPU_CONV2D_COL_F32_BYTES 94976
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_col_fits(const aq_conv2d_args_t *a, int size) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) && a->p * a->q <= AQ_GPU_CONV2D_COL_POSITIONS &&
         a->r * a->s <= AQ_GPU_CONV2D_COL_TAPS && a->h * a->wd <= AQ_GPU_CONV2D_COL_PLANE &&
         (a->c * a->r * a->s * size) % 16 == 0;
}
static inline int aq_conv2d_bf16_col_fits(const aq_conv2d_args_t *a) { return aq_conv2d_col_fits(a, 2); }
static inline int aq_conv2d_f32_col_fits(const aq_conv2d_args_t *a) { return aq_conv2d_col_fits(a, 4); }
/* The rule gives a build the shapes it fits whose filters have 6 taps or
 * more (3x3, 2x3: at most a third of D's rows idle in bf16's six warps'
 * tiles), fp32's where its Winograd build does not apply; the tuner times
 * it for the rest (1x1, 2x2). */
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_col_build(const aq_conv2d_args_t *a, int size) {
  return aq_conv2d_col_fits(a, size) && a->r * a->s >= 6;
}
/* bf16's backward filter by columns (conv2d_bf16_col_filter.cu): a
 * cluster a tile of dw, 64 filters by 32 channels' taps, its blocks
 * splitting the batch (a block an SM, for its registers); where the
 * backward data's builds fit, but for dy's plane: up to
 * AQ_GPU_CONV2D_COL_FILTER_CHUNKS chunks of AQ_GPU_CONV2D_COL_POSITIONS
 * positions (all of an image's chunk, then the next chunk's images). */
#define AQ_GPU_CONV2D_COL_FILTERS 64
#define AQ_GPU_CONV2D_COL_FILTER_THREADS 384
#define AQ_GPU_CONV2D_COL_FILTER_SPLIT 4
#define AQ_GPU_CONV2D_COL_FILTER_CHUNKS 4
#define AQ_GPU_CONV2D_COL_FILTER_BYTES 123520
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_bf16_col_filter_fits(const aq_conv2d_args_t *a) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) &&
         a->p * a->q <= AQ_GPU_CONV2D_COL_FILTER_CHUNKS * AQ_GPU_CONV2D_COL_POSITIONS &&
         a->r * a->s <= AQ_GPU_CONV2D_COL_TAPS && a->h * a->wd <= AQ_GPU_CONV2D_COL_PLANE && (a->c * a->r * a->s * 2) % 16 == 0;
}
#define AQ_GPU_CONV2D_COL_FILTER_SPLIT3 3
#define AQ_GPU_CONV2D_COL_FILTER_SPLIT2 2
/* Its tiles of dw: filters by channels. */
static inline int64_t aq_conv2d_bf16_col_filter_tiles(const aq_conv2d_args_t *a) {
  return (a->c + AQ_GPU_CONV2D_COL_CHANNELS - 1) / AQ_GPU_CONV2D_COL_CHANNELS *
         ((a->k + AQ_GPU_CONV2D_COL_FILTERS - 1) / AQ_GPU_CONV2D_COL_FILTERS);
}
/* Its launch over clusters of split (4, or 3 and 2 for the _col3 and
 * _col2 builds). */
static inline aq_dispatch_shape_t aq_conv2d_bf16_col_filter_shape_by(const aq_conv2d_args_t *a, int split) {
  const int64_t s = split, tiles = a->c > 0 && a->k > 0 ? aq_conv2d_bf16_col_filter_tiles(a) : 1,
                items = a->dbias && a->k > 0 ? (a->k + 7) / 8 : 0;
  aq_dispatch_shape_t sh = aq_gpu_threads_shape((tiles + (items + s - 1) / s) * s * AQ_GPU_CONV2D_COL_FILTER_THREADS);
  sh.workgroup[0] = AQ_GPU_CONV2D_COL_FILTER_THREADS;
  return sh;
}
/* The rule gives it the shapes it fits whose filters have 6 taps or more
 * and of at least AQ_GPU_CONV2D_COL_FILTER_TILES tiles (clusters of 4 for
 * half of an H200's SMs and more): fewer leave most SMs idle, and run
 * faster as the GEMM's tiles split over larger clusters. Planes of dy in
 * more than one chunk (rows: whether a rows build takes the shape) only
 * where no rows build does. */
#define AQ_GPU_CONV2D_COL_FILTER_TILES 16
static inline int aq_conv2d_bf16_col_filter_build(const aq_conv2d_args_t *a, int rows) {
  return aq_conv2d_bf16_col_filter_fits(a) && a->r * a->s >= 6 &&
         (a->p * a->q <= AQ_GPU_CONV2D_COL_POSITIONS || !rows) &&
         aq_conv2d_bf16_col_filter_tiles(a) >= AQ_GPU_CONV2D_COL_FILTER_TILES;
}
/* Its cluster: 4, or 3 or 2 where those take less time, each a wave of
 * tiles (AQ_GPU_CONV2D_COL_FILTER{4,3,2}_CLUSTERS at once, a block an SM)
 * times a block's images: 32 tiles take two waves over clusters of 4 (8
 * images a block) and one over 3 (11); 128 five over 4 (8), four over 3
 * (11), two over 2 (16). The counts are inferred, not asked of
 * cuOccupancyMaxActiveClusters: 32 tiles over clusters of 4 ran as two
 * waves (under 32 at once), and 3's and 2's from the same GPCs' SMs. */
#define AQ_GPU_CONV2D_COL_FILTER4_CLUSTERS 30
#define AQ_GPU_CONV2D_COL_FILTER3_CLUSTERS 42
#define AQ_GPU_CONV2D_COL_FILTER2_CLUSTERS 66
/* Build i of the columns backward filter (clusters of 4, 3, 2): its name
 * and the clusters of it at once; returns its cluster, 0 past the last. */
static inline int aq_conv2d_bf16_col_filter_build_at(int i, const char **name, int64_t *at_once) {
  static const char *const names[] = {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3,
                                      AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2};
  static const int splits[] = {AQ_GPU_CONV2D_COL_FILTER_SPLIT, AQ_GPU_CONV2D_COL_FILTER_SPLIT3,
                               AQ_GPU_CONV2D_COL_FILTER_SPLIT2},
                   once[] = {AQ_GPU_CONV2D_COL_FILTER4_CLUSTERS, AQ_GPU_CONV2D_COL_FILTER3_CLUSTERS,
                             AQ_GPU_CONV2D_COL_FILTER2_CLUSTERS};
  if (i < 0 || i >= (int)(sizeof(splits) / sizeof(splits[0]))) return 0;
  *name = names[i], *at_once = once[i];
  return splits[i];
}
/* A columns backward filter build's cluster (build: its name), or 0: not
 * one of them. */
static inline int aq_conv2d_bf16_col_filter_split(const char *build) {
  const char *name;
  int64_t once;
  for (int i = 0, s; (s = aq_conv2d_bf16_col_filter_build_at(i, &name, &once)); ++i)
    if (!strcmp(build, name)) return s;
  return 0;
}
/* The build of least cost; the first of equal ones. */
static inline const char *aq_conv2d_bf16_col_filter_kernel(const aq_conv2d_args_t *a) {
  const int64_t tiles = aq_conv2d_bf16_col_filter_tiles(a);
  const char *best = NULL, *name;
  int64_t best_cost = 0, once;
  for (int i = 0, s; (s = aq_conv2d_bf16_col_filter_build_at(i, &name, &once)); ++i) {
    const int64_t cost = aq_gpu_waves(tiles, once) * ((a->n + s - 1) / s);
    if (!best || cost < best_cost) best = name, best_cost = cost;
  }
  return best;
}
/* A build's launch (threads: its block): a block an item (an image's 32
 * channels), walked grid-stride. */
static inline aq_dispatch_shape_t aq_conv2d_col_shape(const aq_conv2d_args_t *a, int threads) {
  const int64_t items = a->n > 0 && a->c > 0 ? a->n * ((a->c + AQ_GPU_CONV2D_COL_CHANNELS - 1) / AQ_GPU_CONV2D_COL_CHANNELS) : 1,
                most = ((int64_t)1 << 30) / threads;
  aq_dispatch_shape_t s = aq_gpu_threads_shape((items < most ? items : most) * threads);
  s.workgroup[0] = (uint16_t)threads;
  return s;
}

/* bf16's forward of 3x3 filters by planes (conv2d_bf16_planes.cu): a
 * block an item, an image's tile of positions by
 * AQ_GPU_CONV2D_PLANES_FILTERS filters, w's rows and x's planes staged
 * whole, the im2col built in shared memory. So x's plane within
 * AQ_GPU_CONV2D_PLANES_PLANE, rows of w of whole 16-byte chunks, 32-bit
 * indices; any stride, padding and dilation. y's plane is cut into tiles
 * of at most AQ_GPU_CONV2D_COL_POSITIONS positions, as even as they go
 * (196: four of 49). */
#define AQ_GPU_CONV2D_PLANES_FILTERS 64
#define AQ_GPU_CONV2D_PLANES_PLANE 256
#define AQ_GPU_CONV2D_PLANES_BYTES 114848
static inline AQ_GPU_HOST_DEVICE int aq_conv2d_bf16_planes_fits(const aq_conv2d_args_t *a) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_fits32(a) && a->r == 3 && a->s == 3 &&
         a->h * a->wd <= AQ_GPU_CONV2D_PLANES_PLANE && a->c % 8 == 0;
}
/* The tiles of y's plane, and (*np) the positions of each but the last. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_planes_tiles(const aq_conv2d_args_t *a, int64_t *np) {
  const int64_t pq = a->p * a->q, tiles = pq > 0 ? (pq + AQ_GPU_CONV2D_COL_POSITIONS - 1) / AQ_GPU_CONV2D_COL_POSITIONS : 1;
  *np = (pq + tiles - 1) / tiles;
  return tiles;
}
/* Its items: images by tiles of positions by tiles of filters. */
static inline AQ_GPU_HOST_DEVICE int64_t aq_conv2d_bf16_planes_items(const aq_conv2d_args_t *a) {
  int64_t np;
  return a->n * aq_conv2d_bf16_planes_tiles(a, &np) * ((a->k + AQ_GPU_CONV2D_PLANES_FILTERS - 1) / AQ_GPU_CONV2D_PLANES_FILTERS);
}
/* The rule takes it where it fits: its operands are copied once a block
 * rather than gathered an element at a time for every tile. Where x's
 * plane is over 64 positions (its copies four times larger), only where
 * its items load the SMs with more than one block each (two run an SM):
 * fewer leave half an H100's slots idle, and the flat tiles over clusters
 * take them (256 -> 256 from 14x14 at stride 2). */
static inline int aq_conv2d_bf16_planes_rule(const aq_conv2d_args_t *a) {
  return aq_conv2d_bf16_planes_fits(a) &&
         (a->h * a->wd <= 64 || aq_conv2d_bf16_planes_items(a) > AQ_GPU_CONV2D_BF16_SLOTS / 2);
}
/* Its launch: a block an item, walked grid-stride. */
static inline aq_dispatch_shape_t aq_conv2d_bf16_planes_shape(const aq_conv2d_args_t *a) {
  const int64_t items = a->n > 0 && a->k > 0 ? aq_conv2d_bf16_planes_items(a) : 1, most = ((int64_t)1 << 30) / AQ_GPU_BLOCK;
  return aq_gpu_threads_shape((items < most ? items : most) * AQ_GPU_BLOCK);
}

/* Whether pooling windows tile their planes (stride the window, no
 * padding, a whole number of windows): the backward pass then runs a thread
 * an output, writing its window whole, rather than a thread an input
 * gathering the windows that cover it. */
static inline AQ_GPU_HOST_DEVICE int aq_pool_tiles(const aq_pool_args_t *a) {
  return a->kh > 0 && a->kw > 0 && a->stride_h == a->kh && a->stride_w == a->kw && !a->pad_h && !a->pad_w &&
         a->h == a->p * a->kh && a->w == a->q * a->kw;
}

/* The GPU build of an op kernel that suits these kernargs: one of a GPU's
 * variants, or the op's own name. */
static inline const char *aq_gpu_op_kernel(const char *kernel, const void *kernarg) {
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16) && aq_conv2d_col_build((const aq_conv2d_args_t *)kernarg, 2))
    return AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA) && aq_conv2d_col_build((const aq_conv2d_args_t *)kernarg, 4) &&
      !aq_conv2d_wino((const aq_conv2d_args_t *)kernarg, 1)) /* fp32's Winograd multiplies less */
    return AQ_KERNEL_CONV2D_BWD_DATA_COL;
  int x3 = 0;
  const int pass = aq_conv2d_f32_pass(kernel, &x3);
  if (pass >= 0 && !x3 && aq_conv2d_wino((const aq_conv2d_args_t *)kernarg, pass))
    return aq_conv2d_wino((const aq_conv2d_args_t *)kernarg, pass);
  if (pass >= 0 && !x3 && aq_conv2d_ffma((const aq_conv2d_args_t *)kernarg, pass))
    return aq_conv2d_ffma((const aq_conv2d_args_t *)kernarg, pass);
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16) && aq_conv2d_bwd_data_bf16_wino_fits((const aq_conv2d_args_t *)kernarg))
    return AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16) && aq_conv2d_bf16_planes_rule((const aq_conv2d_args_t *)kernarg))
    return AQ_KERNEL_CONV2D_BF16_PLANES;
  const int flat = !strcmp(kernel, AQ_KERNEL_CONV2D_BF16) ? aq_conv2d_bf16_fwd_flat((const aq_conv2d_args_t *)kernarg) : 0;
  if (flat) return flat == AQ_GPU_CONV2D_BF16_FWD_SPLIT ? AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT : AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16) && aq_conv2d_bf16_fwd_split((const aq_conv2d_args_t *)kernarg))
    return AQ_KERNEL_CONV2D_BF16_SPLIT;
  if (pass >= 0 && !x3 && aq_conv2d_x3((const aq_conv2d_args_t *)kernarg, pass))
    return pass == 0   ? AQ_KERNEL_CONV2D_X3
           : pass == 1 ? AQ_KERNEL_CONV2D_BWD_DATA_X3
                       : aq_conv2d_x3_filter((const aq_conv2d_args_t *)kernarg);
  const int bf16_filter = !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_BF16);
  if ((bf16_filter || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER)) && aq_conv2d_filter_staged_rule((const aq_conv2d_args_t *)kernarg))
    return aq_conv2d_filter_staged_build((const aq_conv2d_args_t *)kernarg, bf16_filter);
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER) && aq_conv2d_bwd_filter_split((const aq_conv2d_args_t *)kernarg) > 1)
    return AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT;
  if (bf16_filter) { /* tiled, by rows, or the tensor cores' tiles split over clusters */
    const aq_conv2d_args_t *a = (const aq_conv2d_args_t *)kernarg;
    if (aq_conv2d_filter_tiled_rule(a)) return AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT;
    const char *rows = aq_conv2d_bf16_rows_build(a); /* asked once: a cost of two builds */
    if (aq_conv2d_bf16_col_filter_build(a, rows != NULL)) return aq_conv2d_bf16_col_filter_kernel(a);
    if (rows) return rows;
    if (aq_conv2d_bf16_filter_split(a)) return aq_conv2d_bf16_split_build(a);
  }
  if (!strcmp(kernel, AQ_KERNEL_MATMUL))
    return aq_matmul_f32_gpu_kernel(aq_matmul_f32_gpu_build((const aq_matmul_args_t *)kernarg), 0);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_FUSED)) /* the fused args start with the product's */
    return aq_matmul_f32_gpu_kernel(aq_matmul_f32_gpu_build(&((const aq_matmul_fused_args_t *)kernarg)->mm), 1);
  return kernel;
}

/* The group segment (dynamic shared memory, bytes) a GPU kernel's packet
 * must ask for: the bf16 matmul's tiles (past the 48 KB a block gets by
 * default) and the tiled conv2d passes' planes; 0 for the rest. Not
 * inlined: a caller's kernarg of another op would have GCC warn of the
 * conv2d reads it cannot tell are never made. */
static __attribute__((noinline, unused)) uint32_t aq_gpu_op_group_segment(const char *kernel, const void *kernarg) {
  static const char *const conv[] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER,
                                     AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT};
  const aq_conv2d_args_t *a = (const aq_conv2d_args_t *)kernarg;
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_BF16)) return AQ_GPU_MATMUL_BF16_GROUP_SEGMENT;
  if (aq_conv2d_staged_split(kernel)) return (uint32_t)aq_conv2d_filter_bytes(a, aq_conv2d_staged_split(kernel));
  if (aq_conv2d_bf16_rows_split(kernel)) return AQ_GPU_CONV2D_ROWS_BYTES(AQ_GPU_CONV2D_ROWS_THREADS(aq_conv2d_bf16_rows_split(kernel)));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL)) return AQ_GPU_CONV2D_COL_BF16_BYTES;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_COL)) return AQ_GPU_CONV2D_COL_F32_BYTES;
  if (aq_conv2d_bf16_col_filter_split(kernel)) return AQ_GPU_CONV2D_COL_FILTER_BYTES;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16_PLANES)) return AQ_GPU_CONV2D_PLANES_BYTES;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC)) return AQ_GPU_CONV2D_WINO_TC_BYTES;
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP)) return AQ_GPU_CONV2D_WINO_WARP_BYTES;
  for (int i = 0; i < 5; ++i) /* the tiled passes */
    if (!strcmp(kernel, conv[i])) return (uint32_t)aq_conv2d_tiled_bytes(a, i < 2 ? i : 2);
  return 0;
}

/* The launch shape of an op kernel's build: the one aq_gpu_op_kernel picks
 * for these kernargs (a backward filter's split build needs its grid). */
static inline aq_dispatch_shape_t aq_gpu_op_shape(const char *kernel, const void *kernarg, aq_dispatch_shape_t cpu) {
  if (!strcmp(kernel, AQ_KERNEL_MATMUL)) return aq_matmul_f32_gpu_shape((const aq_matmul_args_t *)kernarg);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_FUSED))
    return aq_matmul_f32_gpu_shape(&((const aq_matmul_fused_args_t *)kernarg)->mm);
  if (!strcmp(kernel, AQ_KERNEL_MATMUL_BF16)) return aq_matmul_bf16_gpu_shape((const aq_matmul_args_t *)kernarg);
  int x3 = 0;
  const int pass = aq_conv2d_f32_pass(kernel, &x3), wino = aq_conv2d_wino_pass(kernel);
  const char *pick = aq_gpu_op_kernel(kernel, kernarg);
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL) || !strcmp(pick, AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL))
    return aq_conv2d_col_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_COL_BF16_THREADS); /* named, or picked */
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA_COL) || !strcmp(pick, AQ_KERNEL_CONV2D_BWD_DATA_COL))
    return aq_conv2d_col_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_COL_F32_THREADS);
  if (aq_conv2d_bf16_col_filter_split(kernel) || aq_conv2d_bf16_col_filter_split(pick)) /* named, or picked */
    return aq_conv2d_bf16_col_filter_shape_by(
        (const aq_conv2d_args_t *)kernarg,
        aq_conv2d_bf16_col_filter_split(aq_conv2d_bf16_col_filter_split(kernel) ? kernel : pick));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16_PLANES) || !strcmp(pick, AQ_KERNEL_CONV2D_BF16_PLANES))
    return aq_conv2d_bf16_planes_shape((const aq_conv2d_args_t *)kernarg);
  if (wino >= 0 || aq_conv2d_wino_pass(pick) >= 0) /* named, or picked */
    return aq_conv2d_wino_gpu_shape((const aq_conv2d_args_t *)kernarg, wino >= 0 ? kernel : pick);
  const int ffma = aq_conv2d_ffma_pass(kernel);
  if (ffma >= 0 || (pass >= 0 && !x3 && aq_conv2d_ffma((const aq_conv2d_args_t *)kernarg, pass))) /* named, or the op's pick */
    return aq_conv2d_ffma_gpu_shape((const aq_conv2d_args_t *)kernarg, ffma >= 0 ? ffma : pass);
  if (pass >= 0 && (x3 || aq_conv2d_x3((const aq_conv2d_args_t *)kernarg, pass))) { /* the x3 build's, named or picked */
    return aq_conv2d_x3_gpu_shape((const aq_conv2d_args_t *)kernarg, pass, x3 ? kernel : pick);
  }
  if (aq_conv2d_staged_split(kernel) || aq_conv2d_staged_split(pick)) /* named, or picked */
    return aq_conv2d_filter_gpu_shape((const aq_conv2d_args_t *)kernarg,
                                      aq_conv2d_staged_split(aq_conv2d_staged_split(kernel) ? kernel : pick));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_BF16) && !strcmp(pick, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT))
    return aq_conv2d_bwd_filter_gpu_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_BWD_FILTER_SPLIT); /* its split build's */
  if (aq_conv2d_bf16_tc_split(kernel) || aq_conv2d_bf16_tc_split(pick)) /* named, or picked */
    return aq_conv2d_bf16_filter_split_shape((const aq_conv2d_args_t *)kernarg,
                                             aq_conv2d_bf16_tc_split(aq_conv2d_bf16_tc_split(kernel) ? kernel : pick));
  if (aq_conv2d_bf16_rows_split(kernel) || aq_conv2d_bf16_rows_split(pick)) /* named, or picked */
    return aq_conv2d_bf16_rows_shape((const aq_conv2d_args_t *)kernarg,
                                     aq_conv2d_bf16_rows_split(aq_conv2d_bf16_rows_split(kernel) ? kernel : pick));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16_SPLIT) || !strcmp(pick, AQ_KERNEL_CONV2D_BF16_SPLIT)) /* named, or picked */
    return aq_conv2d_bf16_fwd_split_shape((const aq_conv2d_args_t *)kernarg);
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT) || !strcmp(pick, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT))
    return aq_conv2d_bf16_fwd_flat_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_BF16_FWD_SPLIT);
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4) || !strcmp(pick, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4))
    return aq_conv2d_bf16_fwd_flat_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_BF16_FLAT_SPLIT4);
  if (aq_conv2d_bf16_pass(kernel) >= 0) return aq_conv2d_bf16_gpu_shape((const aq_conv2d_args_t *)kernarg, aq_conv2d_bf16_pass(kernel));
  if (!strcmp(kernel, AQ_KERNEL_CONV2D) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA) ||
      !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER)) {
    const aq_conv2d_args_t *a = (const aq_conv2d_args_t *)kernarg;
    if (!strcmp(kernel, AQ_KERNEL_CONV2D)) return aq_conv2d_fwd_plain_shape(a);
    if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_DATA)) return aq_conv2d_bwd_data_plain_shape(a);
    return aq_conv2d_bwd_filter_gpu_shape(a, aq_conv2d_bwd_filter_split(a));
  }
  if (!strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT) || !strcmp(kernel, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT))
    return aq_conv2d_bwd_filter_gpu_shape((const aq_conv2d_args_t *)kernarg, AQ_GPU_CONV2D_BWD_FILTER_SPLIT);
  if (!strcmp(kernel, AQ_KERNEL_MAX_POOL) || !strcmp(kernel, AQ_KERNEL_AVG_POOL))
    return aq_gpu_threads_shape(((const aq_pool_args_t *)kernarg)->planes * ((const aq_pool_args_t *)kernarg)->p *
                                ((const aq_pool_args_t *)kernarg)->q);
  if (!strcmp(kernel, AQ_KERNEL_MAX_POOL_BWD) || !strcmp(kernel, AQ_KERNEL_AVG_POOL_BWD) ||
      !strcmp(kernel, AQ_KERNEL_MAX_POOL_BWD_RELU)) { /* the fused args start with the pool's */
    const aq_pool_args_t *a = (const aq_pool_args_t *)kernarg;
    return aq_gpu_threads_shape(a->planes * (aq_pool_tiles(a) ? a->p * a->q : a->h * a->w));
  }
  if (!strcmp(kernel, AQ_KERNEL_BATCH_NORM) || !strcmp(kernel, AQ_KERNEL_BATCH_NORM_BWD))
    return aq_gpu_threads_shape(((const aq_batch_norm_args_t *)kernarg)->c * AQ_GPU_BLOCK);
  if (!strcmp(kernel, AQ_KERNEL_BATCH_NORM_STATS) || !strcmp(kernel, AQ_KERNEL_BATCH_NORM_APPLY) ||
      !strcmp(kernel, AQ_KERNEL_BATCH_NORM_APPLY_RELU) || !strcmp(kernel, AQ_KERNEL_BATCH_NORM_BWD_STATS) ||
      !strcmp(kernel, AQ_KERNEL_BATCH_NORM_BWD_APPLY)) {
    const aq_batch_norm_args_t *a = (const aq_batch_norm_args_t *)kernarg;
    return aq_gpu_threads_shape(a->c * (a->slices > 1 ? a->slices : 1) * AQ_GPU_BLOCK);
  }
  if (!strcmp(kernel, AQ_KERNEL_SGD_MULTI)) { /* each entry's blocks, in turn (ops.h) */
    const aq_sgd_multi_args_t *a = (const aq_sgd_multi_args_t *)kernarg;
    int64_t threads = 0;
    for (int32_t k = 0; k < a->count && k < AQ_SGD_MULTI_MAX; ++k)
      threads += (a->t[k].n + AQ_GPU_BLOCK - 1) / AQ_GPU_BLOCK * AQ_GPU_BLOCK;
    return aq_gpu_threads_shape(threads);
  }
  if (!strcmp(kernel, AQ_KERNEL_SUM_ROWS) || !strcmp(kernel, AQ_KERNEL_SUM_ROWS_SGD)) /* 8 columns x 32 row slices a block */
    return aq_gpu_threads_shape((((const aq_sum_rows_args_t *)kernarg)->cols + AQ_GPU_SUM_ROWS_WIDTH - 1) /
                                AQ_GPU_SUM_ROWS_WIDTH * AQ_GPU_BLOCK);
  return aq_gpu_shape(kernel, kernarg, cpu);
}

/* ---- candidate builds, for auto-tuning --------------------------------------
 * The builds of an op worth timing against each other for these kernargs:
 * each is correct for any (every conv build falls back on correct loops),
 * but a build is listed only where its launch rule applies (the staged
 * build only where aq_conv2d_filter_staged, ...). The scheduler times each
 * once per shape on a GPU model and keeps the fastest (scheduler/tune.h);
 * without a tuned choice, aq_gpu_op_kernel's pick runs. A new build is one
 * line of the table: the op, the build, where it applies (NULL: always),
 * and its own launch shape where the build is named as the op is
 * (aq_gpu_op_shape(op) gives the shape of the rule's pick, which for such
 * a build is another's where the rule picks another; NULL: aq_gpu_op_shape
 * of the build's name). Its group segment is aq_gpu_op_group_segment of its
 * name. */
static inline int aq_conv2d_filter_tiled(const aq_conv2d_args_t *a) { return aq_conv2d_tiled_bytes(a, 2) > 0; }
static inline aq_dispatch_shape_t aq_conv2d_bwd_filter_plain_shape(const aq_conv2d_args_t *a) {
  return aq_conv2d_bwd_filter_gpu_shape(a, 1);
}
/* The forward's split builds where its 64x64 tiles are few (candidates
 * even where they would not all run at once). */
static inline int aq_conv2d_fwd_bf16_split_fits(const aq_conv2d_args_t *a) {
  return aq_conv2d_tiled_extents(a) && aq_conv2d_gemm_tiles(a, 0, 64, 64) < AQ_GPU_CONV2D_BF16_SLOTS;
}
static inline aq_dispatch_shape_t aq_conv2d_bwd_data_bf16_gemm_shape(const aq_conv2d_args_t *a) {
  return aq_conv2d_bf16_gpu_shape(a, 1);
}
static inline aq_dispatch_shape_t aq_conv2d_bwd_filter_bf16_gemm_shape(const aq_conv2d_args_t *a) {
  return aq_conv2d_bf16_gpu_shape(a, 2);
}
enum { AQ_GPU_OP_BUILDS_MAX = 16, AQ_GPU_OP_BUILD_RULES_MAX = 64 }; /* a list, the table */
typedef struct aq_gpu_op_build_rule {
  const char *op, *build;
  int (*applies)(const aq_conv2d_args_t *a);
  aq_dispatch_shape_t (*own_shape)(const aq_conv2d_args_t *a);
} aq_gpu_op_build_rule_t;

/* The table's entry of op's build, or NULL. */
static inline const aq_gpu_op_build_rule_t *aq_gpu_op_build_rule(const char *op, const char *build, int index) {
  static const aq_gpu_op_build_rule_t rules[] = {
      {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D, NULL, aq_conv2d_fwd_plain_shape},
      {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_X3, aq_conv2d_x3_fits, NULL},
      {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_FFMA, aq_conv2d_fwd_ffma_fits, NULL},
      {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_WINO, aq_conv2d_fwd_wino_fits, NULL},

      {AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_DATA, NULL, aq_conv2d_bwd_data_plain_shape},
      {AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_DATA_X3, aq_conv2d_x3_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_DATA_FFMA, aq_conv2d_bwd_data_ffma_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_DATA_WINO, aq_conv2d_bwd_data_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_DATA_COL, aq_conv2d_f32_col_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_X3, aq_conv2d_x3_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN, aq_conv2d_x3_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6, aq_conv2d_x3_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_FFMA, aq_conv2d_bwd_filter_ffma_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_WINO, aq_conv2d_bwd_filter_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN, aq_conv2d_bwd_filter_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC, aq_conv2d_bwd_filter_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP, aq_conv2d_bwd_filter_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER, NULL, aq_conv2d_bwd_filter_plain_shape},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT, NULL, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED, aq_conv2d_filter_staged, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4, aq_conv2d_filter_staged4, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16, aq_conv2d_filter_staged16, NULL},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16, NULL, aq_conv2d_fwd_bf16_tiles_shape},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16_SPLIT, aq_conv2d_fwd_bf16_split_fits, NULL},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT, aq_conv2d_fwd_bf16_split_fits, NULL},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4, aq_conv2d_fwd_bf16_split_fits, NULL},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16_PLANES, aq_conv2d_bf16_planes_fits, NULL},
      {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BF16_WINO, aq_conv2d_fwd_bf16_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_DATA_BF16, AQ_KERNEL_CONV2D_BWD_DATA_BF16, NULL, aq_conv2d_bwd_data_bf16_gemm_shape},
      {AQ_KERNEL_CONV2D_BWD_DATA_BF16, AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO, aq_conv2d_bwd_data_bf16_wino_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_DATA_BF16, AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, aq_conv2d_bf16_col_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16, NULL, aq_conv2d_bwd_filter_bf16_gemm_shape},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT, aq_conv2d_filter_tiled, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED, aq_conv2d_filter_staged, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4, aq_conv2d_filter_staged4, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16, aq_conv2d_filter_staged16, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, aq_conv2d_tiled_extents, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6, aq_conv2d_tiled_extents, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16, aq_conv2d_bf16_filter_split, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS, aq_conv2d_bf16_rows_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8, aq_conv2d_bf16_rows_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE, aq_conv2d_bf16_rows_wide_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, aq_conv2d_bf16_col_filter_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3, aq_conv2d_bf16_col_filter_fits, NULL},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2, aq_conv2d_bf16_col_filter_fits, NULL},
  };
  const int n = (int)(sizeof(rules) / sizeof(rules[0]));
  if (!build) return index >= 0 && index < n && !strcmp(rules[index].op, op) ? &rules[index] : NULL;
  for (int i = 0; i < n; ++i)
    if (!strcmp(rules[i].op, op) && !strcmp(rules[i].build, build)) return &rules[i];
  return NULL;
}

/* op's candidate builds for these kernargs into names (at most max), the
 * rule's pick (aq_gpu_op_kernel) first; how many (1 for an op with one
 * build: nothing to tune). */
static inline uint32_t aq_gpu_op_builds(const char *op, const void *kernarg, const char **names, uint32_t max) {
  const char *pick = aq_gpu_op_kernel(op, kernarg);
  uint32_t n = 0;
  if (max) names[n++] = pick;
  for (int i = 0; i < AQ_GPU_OP_BUILD_RULES_MAX && n < max; ++i) {
    const aq_gpu_op_build_rule_t *r = aq_gpu_op_build_rule(op, NULL, i);
    if (r && strcmp(r->build, pick) && (!r->applies || r->applies((const aq_conv2d_args_t *)kernarg))) names[n++] = r->build;
  }
  return n;
}

/* The launch shape of build, one of op's builds, as that build runs: the
 * rule's pick's is aq_gpu_op_shape(op)'s. */
static inline aq_dispatch_shape_t aq_gpu_op_build_shape(const char *op, const char *build, const void *kernarg,
                                                        aq_dispatch_shape_t cpu) {
  if (!strcmp(build, aq_gpu_op_kernel(op, kernarg))) return aq_gpu_op_shape(op, kernarg, cpu);
  const aq_gpu_op_build_rule_t *r = aq_gpu_op_build_rule(op, build, 0);
  if (r && r->own_shape) return r->own_shape((const aq_conv2d_args_t *)kernarg);
  return aq_gpu_op_shape(build, kernarg, cpu);
}

/* The shape fields that tell op's kernargs apart for tuning, as text
 * without spaces, into buf; 0 for an op the table does not list. */
static inline int aq_gpu_op_tune_key(const char *op, const void *kernarg, char *buf, size_t size) {
  const aq_conv2d_args_t *a = (const aq_conv2d_args_t *)kernarg;
  int listed = 0;
  for (int i = 0; i < AQ_GPU_OP_BUILD_RULES_MAX && !listed; ++i) listed = aq_gpu_op_build_rule(op, NULL, i) != NULL;
  if (!listed) return 0;
  int n = snprintf(buf, size,
                   "n%lld,c%lld,h%lld,w%lld,k%lld,r%lld,s%lld,p%lld,q%lld,stride%dx%d,pad%dx%d,dil%dx%d,dbias%d,prec%d",
                   (long long)a->n, (long long)a->c, (long long)a->h, (long long)a->wd, (long long)a->k,
                   (long long)a->r, (long long)a->s, (long long)a->p, (long long)a->q, a->stride_h, a->stride_w,
                   a->pad_h, a->pad_w, a->dil_h, a->dil_w, a->dbias != NULL, a->precision);
  return n > 0 && (size_t)n < size;
}

#ifdef __cplusplus
}
#endif
#endif /* AQ_KERNELS_CUDA_LAUNCH_H_ */
