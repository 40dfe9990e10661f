// aq_conv2d_f32_ffma, aq_conv2d_bwd_data_f32_ffma, aq_conv2d_bwd_filter_f32_ffma:
// aq_conv2d_f32's three passes as implicit GEMMs (conv2d_gemm.cuh) in FFMA,
// as cuDNN's fp32 convolutions run: exact fp32 products, for an exact
// exec's many-channel passes (which the plain kernels run as direct loops,
// a global load a product), and a candidate beside the 3xTF32 tiles of
// conv2d_x3.cu wherever tuning times them.
//
// A block of 256 threads takes a 128x64 tile of C, each thread 8x4 of it
// (two runs of 4 rows a half-tile apart, 4 columns), so that a depth index
// costs it three 16-byte shared loads for 32 FMAs, which a warp's threads
// share (4 distinct rows, 8 distinct columns). Smaller pieces a thread
// would load more a product; larger ones (8x8 on 128x128 or 256x64 tiles)
// held 128 registers, two blocks an SM and spills, and ran 0.8-0.9x of
// these. The depth goes 16 at a time through two stages, [depth][m] and
// [depth][n]: each element of the next slice is copied to its stage
// without waiting (cp.async, zero where it is out), its address from the
// slice's taps (one table a slice for A's and B's offsets, built by 16
// threads two slices ahead), the copies spread over the first half of the
// current slice's multiplies. A thread's A elements share its row, so a
// warp copies 32 neighbouring positions of one depth index. Sums run over
// the depth in order: results depend on the shape only.
// A strided backward data runs a GEMM a phase (conv_gemm::each_tile); the
// backward filter (few tiles, a long depth) splits each tile's depth over a
// cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT blocks, summed in rank order
// (conv_gemm::depth_split). Where a pass does not apply (blocks of other
// than 256 threads, tensors past 32-bit indices, AMD GPUs) the kernels run
// the direct loops, which take any grid. launch.h (aq_conv2d_ffma) says
// which shapes get these builds by rule; where tuning has timed them
// (scheduler/tune.h), its choice holds.
#include "conv2d_filter.cuh"
#include "conv2d_gemm.cuh"
#include "launch.h"

#ifndef AQ_HIP
namespace conv_ffma {

constexpr int THREADS = 256, BM = AQ_GPU_CONV2D_FFMA_ROWS, BN = AQ_GPU_CONV2D_FFMA_COLS, BK = 16;
constexpr int LDA = BM + 4, LDB = BN + 4, LDP = BM + 4, STAGE = BK * (LDA + LDB);
constexpr int NA = BM * BK / 4 / THREADS, NB = BN * BK / 4 / THREADS, NE = (NA + NB) * 4; /* a thread's copies a slice */
static_assert(THREADS == AQ_GPU_BLOCK && BM == 128 && BN == 64, "conv_gemm::emit's blocks; 16 x 16 threads of 8x4");
typedef conv_gemm::Gemm<float> Gemm;

// The stages, or the finished tile: part[col][row], so the write-back
// reads consecutive rows (consecutive outputs of a plane).
union Shared {
  float stage[2][STAGE]; /* [buffer][A's BK x LDA, then B's BK x LDB] */
  float part[BN * LDP];
};

// Depth index d as a tap: A's element offset from its row's (ARow.base)
// and its moves in y and z (conv_gemm::tap_of's; past the depth, out of
// every row), and B's offset from its column's (btap_of; -1 past the
// depth). A block builds a slice's taps once.
__device__ __forceinline__ int4 tap(const Gemm &g, int d) {
  const conv_gemm::Tap t = conv_gemm::tap_of(g, d);
  return make_int4(t.off, t.y, t.z, conv_gemm::btap_of(g, d));
}
struct Taps {
  int4 t[2][BK];
};

// The tile at (row0, col0) over depth d0..g.depth, its sums left in
// u.part. Every thread of the block must call it. Sums over a depth of
// thousands (a backward filter's n*p*q) drift from a fp32 dot product's
// accuracy as they grow, one rounding a term of a sum as large as the
// whole; PROMOTE sums each 64 of the depth afresh and adds them into
// totals, so that a term's rounding is against a 64-term sum.
constexpr int PROMOTE_SLICES = 4;
template <bool PROMOTE>
__device__ __forceinline__ void tile(const Gemm &g, Shared &u, Taps &ts, int row0, int col0, int d0) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int ty = (warp >> 1) * 4 + (lane >> 3), tx = (warp & 1) * 8 + (lane & 7); /* 16 x 16 threads */
  __syncthreads(); /* the previous tile is done with shared memory */
  if (tid < 2 * BK) ts.t[tid / BK][tid % BK] = tap(g, d0 + tid);
  const conv_gemm::ARow<float> ar = conv_gemm::a_row(g, conv_gemm::row_base(g, row0 + tid % BM));
  const float *arow = ar.a + ar.base, *bcol[NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) bcol[i] = conv_gemm::b_col(g, col0 + ((tid + i * THREADS) >> 2));
  __syncthreads();

  /* Copy e of a thread's share of a slice into stage as through its taps
   * t (where it is out, a zero, and the address it names is not read):
   * the first NA * 4 A's, of the thread's row, then B's, 4 to a column, a
   * column's 4 chunks neighbouring threads. */
  auto copy = [&](float *as, const int4 *t, int e) {
    if (e < NA * 4) {
      const int d = (tid + e / 4 * THREADS) / BM * 4 + e % 4;
      const int4 k = t[d];
      const bool in = ((unsigned)(ar.y + k.y) < (unsigned)ar.ah) & ((unsigned)(ar.z + k.z) < (unsigned)ar.aw);
      conv::stage_one(as + d * LDA + tid % BM, arow + k.x, in);
    } else {
      const int i = e / 4 - NA, q = tid + i * THREADS, d = (q & 3) * 4 + e % 4, b = t[d].w;
      conv::stage_one(as + BK * LDA + d * LDB + (q >> 2), bcol[i] + b, (bcol[i] != NULL) & (b >= 0));
    }
  };

  float acc[8][4], tot[PROMOTE ? 8 : 1][4];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = tot[PROMOTE ? i : 0][j] = 0.0f;

  const int nk = g.depth > d0 ? (g.depth - d0 + BK - 1) / BK : 0;
  if (nk > 0) {
#pragma unroll
    for (int e = 0; e < NE; ++e) copy(u.stage[0], ts.t[0], e);
    conv::stage_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    /* Slice kt has landed and everyone is done with slice kt - 1's stage,
     * which slice kt + 1 then takes, its copies spread over the first half
     * of this slice's multiplies (the second half covers their latency);
     * slice kt + 2's taps go where slice kt's were (read by its copies). */
    conv::stage_wait<0>();
    __syncthreads();
    const bool next = kt + 1 < nk;
    if (kt + 2 < nk && tid < BK) ts.t[kt & 1][tid] = tap(g, d0 + (kt + 2) * BK + tid);
    const float *as = u.stage[kt & 1], *bs = as + BK * LDA;
    float *as_next = u.stage[(kt + 1) & 1];
    const int4 *t_next = ts.t[(kt + 1) & 1];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      if (next && k < BK / 2)
#pragma unroll
        for (int e = k * NE / (BK / 2); e < (k + 1) * NE / (BK / 2); ++e) copy(as_next, t_next, e);
      const float4 a0 = *reinterpret_cast<const float4 *>(as + k * LDA + ty * 4),
                   a1 = *reinterpret_cast<const float4 *>(as + k * LDA + BM / 2 + ty * 4),
                   b0 = *reinterpret_cast<const float4 *>(bs + k * LDB + tx * 4);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, b[4] = {b0.x, b0.y, b0.z, b0.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (next) conv::stage_commit();
    if (PROMOTE && (kt % PROMOTE_SLICES == PROMOTE_SLICES - 1 || !next))
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) tot[PROMOTE ? i : 0][j] += acc[i][j], acc[i][j] = 0.0f;
  }
  if (PROMOTE)
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = tot[PROMOTE ? i : 0][j];

  __syncthreads(); /* the stages are done with: the sums over them, as runs of 4 rows */
#pragma unroll
  for (int i = 0; i < 8; i += 4)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      *reinterpret_cast<float4 *>(&u.part[(tx * 4 + j) * LDP + (i ? BM / 2 : 0) + ty * 4]) =
          make_float4(acc[i][j], acc[i + 1][j], acc[i + 2][j], acc[i + 3][j]);
  __syncthreads();
}

// The forward or backward data pass: every tile, written out (with the
// bias), a strided backward data's through its phase's map. One copy of
// the write-back for either map: a second copy of the tile spilled.
__device__ __forceinline__ void emit(const Gemm &g, const float *part, int row0, int col0, bool phased) {
  for (int e = threadIdx.x; e < BM * BN; e += THREADS) {
    const int row = e % BM, col = e / BM;
    float *o = phased ? conv_gemm::out_at<true>(g, BM, row0, col0, row, col) : conv_gemm::out_at<false>(g, BM, row0, col0, row, col);
    if (o) *o = part[col * LDP + row] + (g.bias ? __ldg(g.bias + col0 + col) : 0.0f);
  }
}

template <int PASS>
__device__ __forceinline__ void convolve(const aq_conv2d_args_t &a) {
  __shared__ __align__(16) Shared u;
  __shared__ Taps ts;
  __shared__ Gemm gs; /* in shared memory: the accumulators want the registers */
  if (PASS == 2) { /* a cluster a tile (conv2d_gemm.cuh) */
    if (threadIdx.x == 0) gs = conv_gemm::make_gemm<float>(a, 2);
    __syncthreads();
    return conv_gemm::depth_split<AQ_GPU_CONV2D_BWD_FILTER_SPLIT, BM, BN, BK>(
        a, gs, u.part, LDP, [&](int row0, int col0, int d0) { tile<true>(gs, u, ts, row0, col0, d0); });
  }
  conv_gemm::each_tile<PASS, BM, BN>(a, gs, [&](int row0, int col0, bool phased) {
    tile<false>(gs, u, ts, row0, col0, 0);
    emit(gs, u.part, row0, col0, phased);
  });
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return block_threads() == THREADS && conv_gemm::fits32(a);
}

}  // namespace conv_ffma
#endif  // !AQ_HIP

// PASS's kernel: the direct loops where the GEMM does not apply.
template <int PASS>
__device__ __forceinline__ void ffma_pass(const aq_conv2d_args_t &a) {
  conv::pass_entry<PASS>(a, [&] {
#ifndef AQ_HIP
    if (conv_ffma::applies(a)) return conv_ffma::convolve<PASS>(a), true;
#endif
    return false;
  });
}

// Three blocks an SM: at most 85 registers a thread.
AQ_KERNEL void __launch_bounds__(256, 3) aq_conv2d_f32_ffma(aq_conv2d_args_t a) { ffma_pass<0>(a); }
AQ_KERNEL void __launch_bounds__(256, 3) aq_conv2d_bwd_data_f32_ffma(aq_conv2d_args_t a) { ffma_pass<1>(a); }
// A cluster of AQ_GPU_CONV2D_BWD_FILTER_SPLIT a tile (ops_gpu.h: the grid's
// x a multiple of the cluster); two blocks an SM, the totals' registers.
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_ffma(aq_conv2d_args_t a) {
  ffma_pass<2>(a);
}
