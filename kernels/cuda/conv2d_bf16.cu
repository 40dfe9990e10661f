// aq_conv2d_bf16, aq_conv2d_bwd_data_bf16, aq_conv2d_bwd_filter_bf16:
// conv2d's three passes reading bf16 and writing fp32 (ops_gpu.h), as
// implicit GEMMs on tensor cores (mma.sync m16n8k16, fp32 accumulators;
// the passes' index maps and gathers are conv2d_gemm.cuh's).
//
// A block stages a slice of depth (32 per warp group) of both operands:
// each thread gathers whole 16-byte chunks (8 consecutive depth values of
// one row) into registers while the warps multiply the previous slice out
// of shared memory (two stages, one barrier a slice), then stores them
// k-major and swizzled (mma_bf16.cuh), so both operands take plain
// ldmatrix. A's chunks are handed out row-fastest (a warp gathers 32
// neighbouring positions of one depth index: consecutive x or dy for
// stride 1); B's chunk-fastest (a warp reads 8 rows of 64 contiguous
// bytes). Both go through the slice's taps, built by the block two slices
// ahead (conv2d_gemm_map.cuh: tap_of, btap_of), but where B's chunks are
// single aligned loads and in the backward filter's whole rows.
//
// Where there are few tiles (and always in the backward filter, whose depth
// n*p*q is long and whose dw is small), they are small (64x64, or 32x64
// where even those leave SMs idle) and two warp groups split each slice's
// depth, their partial tiles summed through shared memory in a fixed order.
// At stride 1 the backward filter's chunks are whole runs of a row of x or
// dy (conv2d_gemm_map.cuh's qrow), their loads held in flight across the
// slice's multiplies.
// Everything is deterministic. Indices are 32-bit: tensors of 2^31
// elements or more take the direct path (conv2d_direct.cuh), as do blocks
// of other than 256 threads and AMD GPUs.
//
// A strided backward data runs one GEMM a phase of dx (conv2d_gemm_map.cuh),
// so no tile multiplies the zeros between dy's strides; where dw has few
// tiles, the backward filter splits its depth over a cluster instead
// (aq_conv2d_bwd_filter_bf16_tc_split; _tc_split6 over clusters of 6,
// more of them at once, where clusters of 8 would take a second wave).
#include "launch.h"
#include "conv2d_filter.cuh"
#include "conv2d_gemm.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_bf16 {

constexpr int THREADS = AQ_GPU_CONV2D_BF16_THREADS;
static_assert(THREADS == AQ_GPU_BLOCK, "conv_gemm::emit's blocks");
typedef conv_gemm::Gemm<uint16_t> Gemm;
using conv_gemm::fits32;
using conv_gemm::row_base;

// BM x BN tiles of C; WM x WN warps of (16 MI) x (8 NI) each, times WK
// warp groups that split the depth of a slice (32 deep each).
template <int BM_, int BN_, int WM_, int WN_, int WK_, int MI_, int NI_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, WK = WK_, MI = MI_, NI = NI_;
  static constexpr int SLICE = 32 * WK;                            /* depth a stage holds */
  static constexpr int A_BYTES = BM * 64, B_BYTES = BN * 64;       /* one group's 32-deep tiles */
  static constexpr int STAGE = WK * (A_BYTES + B_BYTES);
  static constexpr int TAPS = 2 * SLICE * (16 + 4);               /* two slices' taps of A and B */
  static constexpr int SMEM = 2 * STAGE + BM * 16 + TAPS;          /* two stages, the rows' gather bases, the taps */
  static constexpr int NA = BM * 4 * WK / THREADS, NB = BN * 4 * WK / THREADS; /* chunks a thread stages */
  static_assert(32 * WM * WN * WK == THREADS, "256 threads");
  static_assert(BM == 16 * MI * WM && BN == 8 * NI * WN, "warp tiles cover the tile");
  static_assert(NA * THREADS == BM * 4 * WK && NB * THREADS == BN * 4 * WK, "whole chunks a thread");
  static_assert(SMEM <= 48 * 1024, "static shared memory");
  static_assert((WK - 1) * BM * BN * 4 <= 2 * STAGE, "the groups' partial tiles fit in the stages");
};
/* The tiles aq_conv2d_bf16_gpu_tiles (launch.h) chooses among. */
typedef Tile<128, 128, 2, 4, 1, 4, 4> Wide;   /* more than AQ_GPU_CONV2D_BF16_NARROW columns */
typedef Tile<256, 64, 4, 2, 1, 4, 4> Narrow;  /* at most that many: 64 columns, twice the rows */
typedef Tile<128, 64, 4, 2, 1, 2, 4> Mid;     /* the same where its waves end better (launch.h) */
typedef Tile<64, 64, 2, 2, 2, 2, 4> Small;    /* few tiles, and the backward filter: depth split in two */
typedef Tile<32, 64, 1, 4, 2, 2, 2> Thin;     /* a backward filter of fewer tiles still */
typedef Tile<32, 128, 1, 4, 2, 2, 4> Flat;    /* a forward split whose 64x64 tiles end in a part wave */
static_assert(Narrow::BN == AQ_GPU_CONV2D_BF16_NARROW && Mid::BM == 128 && Mid::BN == Narrow::BN,
              "launch.h's shape counts these tiles");
static_assert(Thin::BM == AQ_GPU_CONV2D_BF16_THIN && Thin::SMEM <= Small::SMEM, "launch.h counts these; Small's room");
static_assert(Flat::BM == AQ_GPU_CONV2D_BF16_THIN && Flat::BN == AQ_GPU_CONV2D_BF16_FLAT, "launch.h counts these");

__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }

// What a thread holds of a chunk between its loads and its store: the
// chunk, or where the backward filter's rows along q (RUNS: g.qrow) keep
// the loads in flight, their Run (conv2d_gemm_map.cuh), finished at the
// store, after the slice's multiplies.
template <bool RUNS>
struct Staged {
  typedef uint4 type;
};
template <>
struct Staged<true> {
  typedef conv_gemm::Run type;
};

// One tile of C over depth d0..g.depth: written to C, or with part (the
// pass split over a cluster: split) left there as
// part[col * (BM + 4) + row] for the cluster's sum.
template <class T, bool PH = false, bool RUNS = false>
__device__ __noinline__ void tile(const Gemm &g, uint8_t *smem, int row0, int col0, int d0 = 0, float *part = NULL) {
  constexpr int MI = T::MI, NI = T::NI, WARPS = T::WM * T::WN;
  int4 *bases = reinterpret_cast<int4 *>(smem + 2 * T::STAGE);
  /* Without RUNS, A's and B's chunks through the next two slices' taps
   * (conv2d_gemm_map.cuh: tap_of, btap_of), built once a slice. */
  conv_gemm::Tap *taps = reinterpret_cast<conv_gemm::Tap *>(smem + 2 * T::STAGE + T::BM * 16);
  int *btaps = reinterpret_cast<int *>(taps + 2 * T::SLICE);
  auto put_taps = [&](int buf, int at, int d) {
    taps[buf * T::SLICE + at] = conv_gemm::tap_of(g, d), btaps[buf * T::SLICE + at] = conv_gemm::btap_of(g, d);
  };
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = warp / WARPS, wmn = warp % WARPS, wm = (wmn / T::WN) * 16 * MI, wn = (wmn % T::WN) * 8 * NI;
  static_assert(THREADS % T::BM == 0 && 2 * T::SLICE <= THREADS, "a thread's A chunks share a row; a thread a tap");

  __syncthreads(); /* the previous tile is done with shared memory */
  for (int i = tid; i < T::BM; i += THREADS) bases[i] = row_base(g, row0 + i);
  if (!RUNS && tid < 2 * T::SLICE) put_taps(tid / T::SLICE, tid % T::SLICE, d0 + tid);
  __syncthreads();
  const conv_gemm::ARow<uint16_t> ar = conv_gemm::a_row(g, bases[tid % T::BM]);

  typename Staged<RUNS>::type ra[T::NA], rb[T::NB];
  auto fetch = [&](int kt) { /* slice kt's chunks */
    const int k0 = d0 + kt * T::SLICE;
    const conv_gemm::Tap *ta = taps + (kt & 1) * T::SLICE;
    const int *tb = btaps + (kt & 1) * T::SLICE;
#pragma unroll
    for (int i = 0; i < T::NA; ++i) {
      const int q = tid + i * THREADS, row = q % T::BM, rest = q / T::BM, at = (rest >> 2) * 32 + (rest & 3) * 8;
      if constexpr (RUNS) ra[i] = conv_gemm::start_a(g, bases[row], k0 + at);
      else ra[i] = conv_gemm::gather_taps(ar, ta + at);
    }
#pragma unroll
    for (int i = 0; i < T::NB; ++i) {
      const int q = tid + i * THREADS, col = (q >> 2) % T::BN, gr = (q >> 2) / T::BN, at = gr * 32 + (q & 3) * 8;
      if constexpr (RUNS) rb[i] = conv_gemm::start_b(g, col0 + col, k0 + at);
      else if (g.bvec) rb[i] = col0 + col < g.cols ? conv_gemm::gather_b<PH>(g, col0 + col, k0 + at) : make_uint4(0, 0, 0, 0);
      else rb[i] = conv_gemm::gather_b_taps(conv_gemm::b_col(g, col0 + col), tb + at);
    }
  };
  auto store = [&](uint8_t *stage) {
#pragma unroll
    for (int i = 0; i < T::NA; ++i) {
      const int q = tid + i * THREADS, row = q % T::BM, rest = q / T::BM;
      *reinterpret_cast<uint4 *>(stage + (rest >> 2) * T::A_BYTES + tc::off_kmajor(row, rest & 3)) =
          conv_gemm::finish(ra[i]);
    }
#pragma unroll
    for (int i = 0; i < T::NB; ++i) {
      const int q = tid + i * THREADS, col = (q >> 2) % T::BN, gr = (q >> 2) / T::BN;
      *reinterpret_cast<uint4 *>(stage + T::WK * T::A_BYTES + gr * T::B_BYTES + tc::off_kmajor(col, q & 3)) =
          conv_gemm::finish(rb[i]);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int nk = g.depth > d0 ? (g.depth - d0 + T::SLICE - 1) / T::SLICE : 0;
  fetch(0);
  store(smem);
  __syncthreads();
  for (int kt = 0; kt < nk; ++kt) {
    uint8_t *cur = smem + (kt & 1) * T::STAGE;
    /* The next slice's loads are in flight while this one multiplies; the
     * stage they go to was last read before the previous barrier. */
    if (kt + 1 < nk) fetch(kt + 1);
    const uint32_t ta = tc::smem_addr(cur + grp * T::A_BYTES),
                   tb = tc::smem_addr(cur + T::WK * T::A_BYTES + grp * T::B_BYTES);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) tc::warp_step<MI, NI>(acc, ta, tb, wm, wn, ks, lane);
    if (kt + 1 < nk) store(smem + ((kt + 1) & 1) * T::STAGE);
    /* slice kt + 2's taps where slice kt's were (read by fetch(kt), before the last barrier) */
    if (!RUNS && kt + 2 < nk && tid < T::SLICE) put_taps(kt & 1, tid, d0 + (kt + 2) * T::SLICE + tid);
    __syncthreads();
  }

  if (T::WK > 1) { /* groups 1.. hand their partial tiles to group 0, summed in group order */
    constexpr int REGS = MI * NI * 4;
    float *red = reinterpret_cast<float *>(smem); /* the stages are free: the loop ended with a barrier */
    if (grp > 0)
#pragma unroll
      for (int j = 0; j < REGS; ++j)
        red[(((grp - 1) * WARPS + wmn) * REGS + j) * 32 + lane] = acc[j / (NI * 4)][(j / 4) % NI][j % 4];
    __syncthreads();
    if (grp > 0) return;
    for (int gr = 1; gr < T::WK; ++gr)
#pragma unroll
      for (int j = 0; j < REGS; ++j) acc[j / (NI * 4)][(j / 4) % NI][j % 4] += red[(((gr - 1) * WARPS + wmn) * REGS + j) * 32 + lane];
  }

  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
  if (part) { /* past the groups' partial tiles in shared memory (PART_AT) */
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          part[(wn + ni * 8 + t2 + (j & 1)) * (T::BM + 4) + wm + mi * 16 + g8 + (j >> 1) * 8] = acc[mi][ni][j];
    return;
  }
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + wm + mi * 16 + g8 + h * 8;
      if (row >= g.rows) continue;
      float *o = g.out + conv_gemm::row_at<PH>(g, row);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = col0 + wn + ni * 8 + t2 + e;
          if (col < g.cols) o[(int64_t)col * g.plane] = acc[mi][ni][h * 2 + e] + (g.bias ? g.bias[col] : 0.0f);
        }
    }
}

// Every tile of the pass (and the bias gradient's items after them),
// grid-stride; a tile's row tiles are consecutive blocks, which share its
// B tile in L2.
template <class T, int PASS>
__device__ void run(const aq_conv2d_args_t &a, Gemm &g, uint8_t *smem, int64_t extra) {
  if (PASS == 1 && aq_conv2d_phased(&a)) /* a strided backward data: a GEMM a phase of dx (conv2d_gemm_map.cuh) */
    return conv_gemm::phases<T::BM, T::BN>(a, g, grid_block(), grid_blocks(),
                                           [&](int row0, int col0) { tile<T, true>(g, smem, row0, col0); });
  const int64_t tiles_m = (g.rows + T::BM - 1) / T::BM, tiles = tiles_m * ((g.cols + T::BN - 1) / T::BN);
  for (int64_t id = grid_block(); id < tiles + extra; id += grid_blocks()) {
    const int row0 = (int)(id % tiles_m) * T::BM, col0 = (int)(id / tiles_m) * T::BN;
    if (id >= tiles) {
      conv_gemm::bias_grad<uint16_t>(a, id - tiles);
    } else if constexpr (PASS == 2) {
      if (g.qrow) tile<T, false, true>(g, smem, row0, col0);
      else tile<T>(g, smem, row0, col0);
    } else {
      tile<T>(g, smem, row0, col0);
    }
  }
}

// PASS (the backward filter, or the forward) split over a cluster of S on
// T's tiles, its partial tile past the groups' partials in T's shared
// memory.
template <int S, int PASS, class T>
__device__ void split(const aq_conv2d_args_t &a, Gemm &gs, uint8_t *smem) {
  constexpr int PART_AT = (T::WK - 1) * T::BM * T::BN * 4;
  static_assert(PART_AT + T::BN * (T::BM + 4) * 4 <= T::SMEM, "the partial tile fits");
  float *part = reinterpret_cast<float *>(smem + PART_AT);
  conv_gemm::depth_split<S, T::BM, T::BN, T::SLICE, PASS>(
      a, gs, part, T::BM + 4, [&](int row0, int col0, int d0) {
        if constexpr (PASS == 2)
          if (gs.qrow) return tile<T, false, true>(gs, smem, row0, col0, d0, part);
        tile<T>(gs, smem, row0, col0, d0, part);
      });
}

// The split builds' tiles: the backward filter's thin ones where
// aq_conv2d_bf16_split_tiles takes them, else T (64x64, or the forward's
// flat ones).
template <int S, int PASS, class T = Small>
__device__ void split(const aq_conv2d_args_t &a) {
  __shared__ __align__(128) uint8_t smem[max_int(T::SMEM, Small::SMEM)];
  __shared__ Gemm gs;
  if (threadIdx.x == 0) gs = conv_gemm::make_gemm<uint16_t>(a, PASS);
  __syncthreads();
  int tm = 64;
  if (PASS == 2) aq_conv2d_bf16_split_tiles(&a, S, &tm);
  if (PASS == 2 && tm == Thin::BM) split<S, PASS, Thin>(a, gs, smem);
  else split<S, PASS, T>(a, gs, smem);
}

template <int PASS>
__device__ __forceinline__ void convolve(const aq_conv2d_args_t &a) {
  constexpr int SMEM = PASS == 2 ? Small::SMEM : max_int(max_int(Wide::SMEM, Narrow::SMEM), Small::SMEM);
  __shared__ __align__(128) uint8_t smem[SMEM];
  /* In shared memory rather than registers, which the accumulators, the
   * staged chunks and the fragments need more. */
  __shared__ Gemm gs;
  if (threadIdx.x == 0) gs = conv_gemm::make_gemm<uint16_t>(a, PASS);
  __syncthreads();
  int tm, tn;
  aq_conv2d_bf16_gpu_tiles(&a, PASS, &tm, &tn);
  if (PASS == 2 && tm == Thin::BM) return run<Thin, 2>(a, gs, smem, a.dbias ? (a.k + 7) / 8 : 0);
  if (PASS == 2) return run<Small, 2>(a, gs, smem, a.dbias ? (a.k + 7) / 8 : 0);
  if (tm == Small::BM) return run<Small, PASS>(a, gs, smem, 0);
  if (tm == Narrow::BM) return run<Narrow, PASS>(a, gs, smem, 0);
  if (tn == Mid::BN) return run<Mid, PASS>(a, gs, smem, 0);
  run<Wide, PASS>(a, gs, smem, 0);
}

__device__ inline bool tensor_cores(const aq_conv2d_args_t &a) { return block_threads() == THREADS && fits32(a); }

}  // namespace conv_bf16
#endif  // !AQ_HIP

// Two blocks an SM: at most 128 registers a thread.
AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bf16(aq_conv2d_args_t a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<0>(a);
#endif
  conv::forward(a, (const uint16_t *)a.x, (const uint16_t *)a.w);
}

AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bwd_data_bf16(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<1>(a);
#endif
  conv::backward_data(a, (const uint16_t *)a.w, (const uint16_t *)a.dy);
}

AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bwd_filter_bf16(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<2>(a);
#endif
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// The tensor cores' backward filter with each tile's depth split over a
// cluster of S (conv2d_gemm.cuh's depth_split; ops_gpu.h: the grid's x a
// multiple of the cluster): dw has few tiles and a long depth. A kernel
// for each S: 8, or 6 where clusters of 8 would take a second wave
// (launch.h: aq_conv2d_bf16_split_build); 16 for dw of fewer tiles still.
template <int S>
__device__ __forceinline__ void bwd_filter_tc_split(const aq_conv2d_args_t &a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::split<S, 2>(a);
#endif
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bwd_filter_bf16_tc_split(aq_conv2d_args_t a) {
  bwd_filter_tc_split<AQ_GPU_CONV2D_BWD_FILTER_SPLIT>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_SPLIT6) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bwd_filter_bf16_tc_split6(aq_conv2d_args_t a) {
  bwd_filter_tc_split<AQ_GPU_CONV2D_SPLIT6>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_SPLIT16) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bwd_filter_bf16_tc_split16(aq_conv2d_args_t a) {
  bwd_filter_tc_split<AQ_GPU_CONV2D_SPLIT16>(a);
}

// The forward of few tiles (small planes, many channels: a ResNet's last
// layers), each tile's depth split over a cluster of S (ops_gpu.h: the
// grid's x a multiple of it): 64x64 tiles (launch.h:
// aq_conv2d_bf16_fwd_split), or flat ones, 32 rows by 128 columns, where
// there are filters enough (aq_conv2d_bf16_fwd_flat: half the gathers of
// A a product, and blocks of half the rows to even out the SMs' loads).
template <int S, bool FLAT>
__device__ __forceinline__ void fwd_split(const aq_conv2d_args_t &a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) {
    if constexpr (FLAT) return conv_bf16::split<S, 0, conv_bf16::Flat>(a);
    else return conv_bf16::split<S, 0>(a);
  }
#endif
  conv::forward(a, (const uint16_t *)a.x, (const uint16_t *)a.w);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BF16_FWD_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bf16_split(aq_conv2d_args_t a) {
  fwd_split<AQ_GPU_CONV2D_BF16_FWD_SPLIT, false>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BF16_FWD_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bf16_split_flat(aq_conv2d_args_t a) {
  fwd_split<AQ_GPU_CONV2D_BF16_FWD_SPLIT, true>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BF16_FLAT_SPLIT4) __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2)
    aq_conv2d_bf16_split_flat4(aq_conv2d_args_t a) {
  fwd_split<AQ_GPU_CONV2D_BF16_FLAT_SPLIT4, true>(a);
}

// Where a filter's planes fit shared memory (a LeNet's: dw has too few
// tiles for the tensor cores to fill a GPU), fp32's tiled backward filter
// on bf16 x and dy, the batch split over a cluster (launch.h; ops_gpu.h:
// the grid's x a multiple of the cluster).
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_TILED_FILTER_BLOCK)
    aq_conv2d_bwd_filter_bf16_split(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  if (conv::tiled(a, 2)) return conv::backward_filter_tiled<AQ_GPU_CONV2D_BWD_FILTER_SPLIT, uint16_t>(a);
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// The staged builds on bf16 x and dy (conv2d_filter.cuh; ops_gpu.h).
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_bf16_staged, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, uint16_t)
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_bf16_staged4, AQ_GPU_CONV2D_STAGED_FEW, uint16_t)
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_bf16_staged16, AQ_GPU_CONV2D_STAGED_MANY, uint16_t)
