// conv2d's passes as implicit GEMMs, the part conv2d_bf16.cu's and
// conv2d_x3.cu's tensor-core tiles share beyond the index maps
// (conv2d_gemm_map.cuh): the write-back of a finished tile, the bias
// gradient, and a pass's depth split over a cluster.
#pragma once
#include "conv2d_direct.cuh"
#include "conv2d_gemm_map.cuh"

namespace conv_gemm {

// dbias[k] for 8 channels, a warp each (256-thread blocks), lanes striding
// over (n, p, q).
template <class E>
__device__ inline void bias_grad(const aq_conv2d_args_t &a, int64_t item) {
  const int64_t k = item * 8 + (threadIdx.x >> 5), pq = a.p * a.q;
  const int lane = threadIdx.x & 31;
  if (k >= a.k) return;
  const E *dy = (const E *)a.dy + k * pq;
  float acc = 0.0f;
  for (int64_t n = 0; n < a.n; ++n, dy += a.k * pq)
    for (int64_t j = lane; j < pq; j += 32) acc += conv::ld(dy + j);
  acc = warp_sum(acc);
  if (lane == 0) a.dbias[k] = acc;
}

// A cluster's share of the bias gradient's items, those past a split
// pass's tiles (id: the cluster's place past them): a block of the cluster
// an item (8 channels, to its first 256 threads), or all of them in one
// block without clusters (ranks 1).
template <int S, class E>
__device__ inline void bias_items(const aq_conv2d_args_t &a, int64_t id, int64_t items, int rank, int ranks) {
  for (int j = rank; rank >= 0 && j < S; j += ranks)
    if (id * S + j < items && threadIdx.x < AQ_GPU_BLOCK) bias_grad<E>(a, id * S + j);
}

// The tile at (row0, col0), its sums in part (part[col * ldp + row]), into
// C, with the bias where the pass has one. Blocks of AQ_GPU_BLOCK threads,
// as every tensor-core build runs.
template <int BM, int BN, bool PH = false, class E>
__device__ inline void emit(const Gemm<E> &g, const float *part, int ldp, int row0, int col0) {
  for (int e = threadIdx.x; e < BM * BN; e += AQ_GPU_BLOCK) {
    const int row = e % BM, col = e / BM;
    float *o = out_at<PH>(g, BM, row0, col0, row, col);
    if (o) *o = part[col * ldp + row] + (g.bias ? __ldg(g.bias + col0 + col) : 0.0f);
  }
}

// A pass of few tiles and a long depth split over clusters of S blocks
// (the backward filter's dw, c*r*s x k over n*p*q; a forward of small
// planes and many channels): a cluster a BM x BN tile, each rank a share
// of the depth in whole slices, gs.depth cut to the rank's end;
// tile(row0, col0, d0) leaves the rank's sums of the tile in part
// (part[col * ldp + row]), summed over the cluster in rank order
// (conv::cluster_sums), with the forward's bias. Then the backward
// filter's bias gradient items, S a cluster. Without clusters one block of
// each S takes the whole depth.
template <int S, int BM, int BN, int SLICE, int PASS = 2, class E, class Tile>
__device__ void depth_split(const aq_conv2d_args_t &a, Gemm<E> &gs, float *part, int ldp, Tile tile) {
  int ranks;
  const int rank = conv::split_rank<S>(&ranks);
  const int depth = gs.depth, share = ((depth + ranks - 1) / ranks + SLICE - 1) / SLICE * SLICE;
  const int64_t tiles_m = (gs.rows + BM - 1) / BM, tiles = tiles_m * ((gs.cols + BN - 1) / BN);
  const int64_t bias_count = PASS == 2 && a.dbias ? (a.k + 7) / 8 : 0, clusters = grid_blocks() / S;
  __syncthreads(); /* everyone has read gs.depth */
  if (threadIdx.x == 0 && rank >= 0) gs.depth = (int)((int64_t)rank * share + share < depth ? rank * share + share : depth);
  __syncthreads();
  for (int64_t id = grid_block() / S; id < tiles + (bias_count + S - 1) / S; id += clusters) {
    if (id >= tiles) {
      bias_items<S, E>(a, id - tiles, bias_count, rank, ranks);
      continue;
    }
    const int row0 = (int)(id % tiles_m) * BM, col0 = (int)(id / tiles_m) * BN;
    if (rank < 0) continue;
    tile(row0, col0, rank * share);
    if (ranks > 1) {
      conv::cluster_sums<S>(part, (int64_t)BN * ldp, rank, [&](int64_t i, float sum) {
        const int row = (int)(i % ldp), col = (int)(i / ldp);
        float *o = out_at<false>(gs, BM, row0, col0, row, col);
        if (o) *o = PASS == 0 && gs.bias ? sum + __ldg(gs.bias + col0 + col) : sum;
      });
      continue;
    }
    __syncthreads();
    emit<BM, BN>(gs, part, ldp, row0, col0);
  }
}

// Every tile of a forward or backward data pass, grid-stride, a column of
// tiles' row tiles consecutive blocks (which share its B tile in L2): a
// strided backward data's phase after phase, as phases() walks them, the
// others' as one GEMM. gs, in shared memory, holds the GEMM of the block's
// tiles. tile(row0, col0, phased) is called from one place, so that a
// kernel inlining it holds one copy of it: two spilled.
template <int PASS, int BM, int BN, class E, class Tile>
__device__ void each_tile(const aq_conv2d_args_t &a, Gemm<E> &gs, Tile tile) {
  /* 32-bit tile indices (fits32 holds the rows): fewer registers held
   * across tile(). */
  const bool phased = PASS == 1 && aq_conv2d_phased(&a);
  const int block = (int)grid_block(), blocks = (int)grid_blocks(), tiles_n = (int)(((PASS == 1 ? a.c : a.k) + BN - 1) / BN);
  int first = 0;
  for (int ph = 0; ph < (phased ? a.stride_h : 1) && ph < a.h; ++ph)
    for (int pw = 0; pw < (phased ? a.stride_w : 1) && pw < a.wd; ++pw) {
      const int rows = !phased    ? (int)(PASS == 0 ? a.n * a.p * a.q : a.n * a.h * a.wd)
                       : (int)a.n * aq_conv2d_phase(a.h, a.r, a.stride_h, a.pad_h, a.dil_h, ph).outs *
                             aq_conv2d_phase(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w, pw).outs;
      const int tiles_m = (rows + BM - 1) / BM, end = first + tiles_m * tiles_n;
      int id = first + ((block - first) % blocks + blocks) % blocks; /* the block's first of the phase */
      if (id < end) {
        __syncthreads(); /* the block is done with the previous phase */
        if (threadIdx.x == 0) gs = phased ? make_phase<E>(a, ph * (int)a.stride_w + pw) : make_gemm<E>(a, PASS);
        __syncthreads();
        for (; id < end; id += blocks) tile((id - first) % tiles_m * BM, (id - first) / tiles_m * BN, phased);
      }
      first = end;
    }
}

}  // namespace conv_gemm
