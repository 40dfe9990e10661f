// aq_conv2d_f32_x3, aq_conv2d_bwd_data_f32_x3, aq_conv2d_bwd_filter_f32_x3(_thin, _split6):
// aq_conv2d_f32's three passes as implicit GEMMs (conv2d_gemm.cuh) on
// tensor cores at fp32 accuracy (3xTF32, mma_tf32.cuh), for the shapes the
// tiled passes of conv2d_tiled.cuh do not take: many channels, planes past
// a block's shared memory (a ResNet's), where the direct loops pay two
// global loads and an index division an FMA.
//
// A block of 256 threads takes a 64x64 tile of C as matmul_x3.cu does: 8
// warps, 2 x 2 of 32x32 pieces, each pair on the same piece taking
// alternate halves of every 32-deep slice, their sums meeting in shared
// memory at the end. Each thread gathers its share of the next slice (two
// 16-byte chunks of A, two of B: 4 consecutive depth values of a row or
// column) into registers while the warps multiply the current one, then
// stores them as rows of 32 depth padded to 36 floats (two stages, one
// barrier a slice). A's chunks are handed out row-fastest, so a warp
// gathers 32 neighbouring positions of one depth index (consecutive x or
// dy at stride 1); B's chunk-fastest, so a warp reads 4 runs of 128
// contiguous bytes. A thread's A chunks share one row, which it keeps in
// registers, and reach their elements through the slice's taps, which the
// block builds two slices ahead (conv2d_gemm_map.cuh: tap_of).
//
// The backward filter has few tiles (dw is c*r*s x k) and a long depth
// (n*p*q): a cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT blocks splits each
// tile's depth and sums the partial tiles through distributed shared memory
// in rank order (conv2d_gemm.cuh's depth_split), so results depend on the
// shape only. Its thin build, for dw of fewer tiles (launch.h:
// aq_conv2d_x3_filter), takes 32x64 tiles: four warp pairs, each on a
// quarter of every slice; its split6 build clusters of 6, more of them at
// once. The bias gradient's items follow the tiles.
// Where a pass does not apply (blocks of other than 256 threads, tensors
// past 32-bit indices, AMD GPUs) the kernels run the direct loops, which
// take any grid. launch.h (aq_conv2d_x3) says which shapes get these builds
// by rule; where tuning has timed them (scheduler/tune.h), its choice holds.
#include "conv2d_gemm.cuh"
#include "launch.h"
#include "mma_tf32.cuh"

#ifndef AQ_HIP
namespace conv_x3 {

constexpr int THREADS = 256, BM = 64, BN = 64, BK = 32, LDK = tf32x3::LDK, LDP = BM + 4, THIN = AQ_GPU_CONV2D_X3_THIN;
constexpr int SPLIT = AQ_GPU_CONV2D_BWD_FILTER_SPLIT;
static_assert(THREADS == AQ_GPU_BLOCK, "conv_gemm::emit's blocks");
static_assert(BM == AQ_GPU_CONV2D_X3_TILE && BN == AQ_GPU_CONV2D_X3_TILE, "launch.h counts these tiles");
typedef conv_gemm::Gemm<float> Gemm;

// The stages, or the finished tile: part[col][row], so the write-back reads
// consecutive rows (consecutive outputs of a plane) and the fragments'
// stores fall in distinct banks.
union Shared {
  float stage[2][2][BM * LDK]; /* [buffer][A, B] */
  float part[BN * LDP];
};

// A tile's rows (row_base) and its next two slices' taps (A's gather,
// conv_gemm::tap_of), built by the block once a tile and once a slice.
// B keeps gather_b: through taps (btap_of) where its chunks cross runs,
// the backward data ran 0.92x, and the forward, whose chunks are single
// loads, 0.89x beside it.
struct Rows {
  int4 base[BM];
  conv_gemm::Tap tap[2][BK];
};

// The TM x BN tile at (row0, col0) over depth d0..g.depth, its sums left
// in u.part (leading dimension TM + 4). Every thread of the block must
// call it. Its 8 warps are GROUPS groups of 32x32 pieces covering the
// tile, each group on 32 / GROUPS of every slice's depth. The tensor cores' fp32
// accumulation does not round to nearest, so over a depth of thousands (a
// backward filter's n*p*q) the sums drift past fp32 accuracy; PROMOTE
// starts the accumulators afresh every PROMOTE_SLICES slices and adds them
// into fp32 totals with FADD, which does.
constexpr int PROMOTE_SLICES = 2;
template <bool PROMOTE, bool PH, int TM = BM, int S = SPLIT>
__device__ __noinline__ void tile(const Gemm &g, Shared &u, Rows &rs, int row0, int col0, int d0) {
  constexpr int PIECES = TM / 32 * BN / 32, GROUPS = 8 / PIECES, STEPS = BK / 8 / GROUPS, NA = TM * BK / 4 / THREADS,
                LDT = TM + 4;
  static_assert(8 % PIECES == 0 && STEPS >= 1 && NA <= 2 && NA * THREADS * 4 == TM * BK, "whole groups, steps and chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = (unsigned)warp / PIECES, wm = ((unsigned)warp % PIECES >> 1) * 32, wn = (warp & 1) * 32;
  __syncthreads(); /* the previous tile is done with shared memory */
  if (tid < TM) rs.base[tid] = conv_gemm::row_base(g, row0 + tid);
  if (tid < 2 * BK) rs.tap[tid / BK][tid % BK] = conv_gemm::tap_of(g, d0 + tid);
  __syncthreads();
  const conv_gemm::ARow<float> ar = conv_gemm::a_row(g, rs.base[tid % TM]); /* a thread's A chunks share a row */

  uint4 ra[NA], rb[2];
  auto fetch = [&](int kt) { /* slice kt's chunks */
    const int k0 = d0 + kt * BK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = tid + i * THREADS;
      if (i < NA) ra[i] = conv_gemm::gather_taps(ar, rs.tap[kt & 1] + (q / TM) * 4);
      rb[i] = conv_gemm::gather_b<PH>(g, col0 + (q >> 3), k0 + (q & 7) * 4);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = tid + i * THREADS;
      if (i < NA) *reinterpret_cast<uint4 *>(&u.stage[buf][0][(q % TM) * LDK + (q / TM) * 4]) = ra[i];
      *reinterpret_cast<uint4 *>(&u.stage[buf][1][(q >> 3) * LDK + (q & 7) * 4]) = rb[i];
    }
  };

  float acc[2][4][4], tot[PROMOTE ? 2 : 1][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = tot[PROMOTE ? mi : 0][ni][j] = 0.0f;
  auto promote = [&]() {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int j = 0; j < 4; ++j) tot[PROMOTE ? mi : 0][ni][j] += acc[mi][ni][j], acc[mi][ni][j] = 0.0f;
  };

  const int nk = g.depth > d0 ? (g.depth - d0 + BK - 1) / BK : 0;
  if (nk > 0) {
    fetch(0);
    store(0);
  }
  __syncthreads();
  for (int kt = 0; kt < nk; ++kt) {
    const int buf = kt & 1;
    /* The next slice's loads are in flight while this one multiplies; the
     * stage they go to was last read before the previous barrier. */
    if (kt + 1 < nk) fetch(kt + 1);
#pragma unroll
    for (int s = 0; s < STEPS; ++s)
      tf32x3::warp_step(acc, u.stage[buf][0], u.stage[buf][1], false, true, wm, wn, (grp * STEPS + s) * 8, lane);
    if (PROMOTE && (kt % PROMOTE_SLICES == PROMOTE_SLICES - 1 || kt + 1 == nk)) promote();
    if (kt + 1 < nk) store(buf ^ 1);
    /* slice kt + 2's taps where slice kt's were (read by fetch(kt), before the last barrier) */
    if (kt + 2 < nk && tid < BK) rs.tap[buf][tid] = conv_gemm::tap_of(g, d0 + (kt + 2) * BK + tid);
    __syncthreads();
  }
  if (PROMOTE) /* the totals are the sums */
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[mi][ni][j] = tot[PROMOTE ? mi : 0][ni][j];

  /* The groups meet, the last first: C fragment element j of tile (mi,
   * ni) is at row g (+8 for j >= 2), column 2t (+1 for odd j). */
  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
  for (int h = GROUPS - 1; h >= 0; --h) {
    if (grp == h)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float *pp = &u.part[(wn + ni * 8 + t2 + (j & 1)) * LDT + wm + mi * 16 + g8 + (j >> 1) * 8];
            *pp = h < GROUPS - 1 ? *pp + acc[mi][ni][j] : acc[mi][ni][j];
          }
    __syncthreads();
  }
}

// The forward or backward data pass: every tile, grid-stride; a column of
// tiles' row tiles are consecutive blocks, which share its B tile in L2.
__device__ void run(const Gemm &g, Shared &u, Rows &rs) {
  const int64_t tiles_m = (g.rows + BM - 1) / BM, tiles = tiles_m * ((g.cols + BN - 1) / BN);
  for (int64_t id = grid_block(); id < tiles; id += grid_blocks()) {
    const int row0 = (int)(id % tiles_m) * BM, col0 = (int)(id / tiles_m) * BN;
    tile<false, false>(g, u, rs, row0, col0, 0);
    conv_gemm::emit<BM, BN>(g, u.part, LDP, row0, col0);
  }
}

// PASS on TM-row tiles (the backward filter's thin build: THIN; the
// others BM), the backward filter over clusters of S. A kernel takes one
// TM: ptxas spilled ten times the bytes in a wide tile that shared its
// kernel with a thin one.
template <int PASS, int TM = BM, int S = SPLIT>
__device__ __forceinline__ void convolve(const aq_conv2d_args_t &a) {
  __shared__ __align__(16) Shared u;
  __shared__ Rows rs;
  /* In shared memory rather than registers, which the accumulators, the
   * staged chunks and the fragments need more. */
  __shared__ Gemm gs;
  if (threadIdx.x == 0) gs = conv_gemm::make_gemm<float>(a, PASS);
  __syncthreads();
  if (PASS == 2) /* a cluster a tile (conv2d_gemm.cuh) */
    return conv_gemm::depth_split<S, TM, BN, BK>(a, gs, u.part, TM + 4, [&](int row0, int col0, int d0) {
      tile<true, false, TM, S>(gs, u, rs, row0, col0, d0);
    });
  if (PASS == 1 && aq_conv2d_phased(&a)) /* a GEMM a phase of dx (conv2d_gemm_map.cuh) */
    return conv_gemm::phases<BM, BN>(a, gs, grid_block(), grid_blocks(), [&](int row0, int col0) {
      tile<false, true>(gs, u, rs, row0, col0, 0);
      conv_gemm::emit<BM, BN, true>(gs, u.part, LDP, row0, col0);
    });
  run(gs, u, rs);
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return block_threads() == THREADS && conv_gemm::fits32(a);
}

}  // namespace conv_x3
#endif  // !AQ_HIP

// Two blocks an SM: at most 128 registers a thread.
// PASS on tiles of TM rows over clusters of S (the backward filter's),
// else the direct loops.
template <int PASS, int TM = AQ_GPU_CONV2D_X3_TILE, int S = AQ_GPU_CONV2D_BWD_FILTER_SPLIT>
__device__ __forceinline__ void x3_pass(const aq_conv2d_args_t &a) {
  conv::pass_entry<PASS>(a, [&] {
#ifndef AQ_HIP
    if (conv_x3::applies(a)) return conv_x3::convolve<PASS, TM, S>(a), true;
#endif
    return false;
  });
}

AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_f32_x3(aq_conv2d_args_t a) { x3_pass<0>(a); }
AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_bwd_data_f32_x3(aq_conv2d_args_t a) { x3_pass<1>(a); }

// The backward filter's builds, a kernel each: a cluster of S a TM-row
// tile (ops_gpu.h: the grid's x a multiple of the cluster); two blocks an
// SM as the others, the promoted totals spilling a few bytes.
/* 64x64 tiles over clusters of 8 */
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_x3(aq_conv2d_args_t a) {
  x3_pass<2>(a);
}
/* over clusters of 6 (AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6) */
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_SPLIT6) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_x3_split6(aq_conv2d_args_t a) {
  x3_pass<2, AQ_GPU_CONV2D_X3_TILE, AQ_GPU_CONV2D_SPLIT6>(a);
}
/* 32x64 tiles over clusters of 8 (AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) */
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_x3_thin(aq_conv2d_args_t a) {
  x3_pass<2, AQ_GPU_CONV2D_X3_THIN>(a);
}
