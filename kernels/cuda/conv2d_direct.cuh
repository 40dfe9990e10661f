// conv2d's direct loops (NCHW; stride, padding, dilation), with the kernarg
// struct and index conventions of ops.h, templated on the element type of
// the tensors a pass reads (float, or uint16_t holding bf16); outputs and
// accumulation are fp32. They are aq_conv2d_*_f32 (conv2d.cu), and the exact
// path of the bf16 kernels (conv2d_bf16.cu) for launches their tensor-core
// tiles do not take.
//
// Every loop walks its outputs with a grid-stride loop, so any launch shape
// is correct (aq_gpu_op_shape in launch.h gives the efficient one):
//  - forward: a thread per output element y[n,k,p,q] (consecutive threads
//    along q read consecutive x; w is the same across a warp);
//  - backward data: a thread per input element dx[n,c,h,w], gathering the
//    outputs whose windows cover it (no atomics, deterministic);
//  - backward filter (aq_conv2d_f32's builds): a block, or a cluster of
//    blocks splitting the batch, per run of a filter's weights (items,
//    below); the bf16 kernels' exact path: a warp per weight dw[k,c,r,s]
//    (and per dbias[k]), lanes striding over n, p, q, summed by shuffles in
//    a fixed order.
#pragma once
#include "common.cuh"
#include "launch.h"
#if !defined(AQ_HIP)
#include <cooperative_groups.h>
#endif

namespace conv {

__device__ inline bool valid(const aq_conv2d_args_t &a) {
  return a.n > 0 && a.c > 0 && a.h > 0 && a.wd > 0 && a.k > 0 && a.r > 0 && a.s > 0 && a.p > 0 && a.q > 0 &&
         a.stride_h > 0 && a.stride_w > 0 && a.dil_h > 0 && a.dil_w > 0 && a.pad_h >= 0 && a.pad_w >= 0 &&
         (uint32_t)a.precision <= (uint32_t)AQ_MATMUL_PRECISION_EXACT; /* default or exact */
}

__device__ __forceinline__ float ld(const float *p) { return __ldg(p); }
__device__ __forceinline__ float ld(const uint16_t *p) { return __uint_as_float((uint32_t)__ldg(p) << 16); }

template <typename T>
__device__ void forward(const aq_conv2d_args_t &a, const T *xs, const T *ws) {
  const int64_t total = a.n * a.k * a.p * a.q, plane = a.h * a.wd;
  const bool nr = narrow_items(total);
  for (int64_t o = grid_thread(); o < total; o += grid_threads()) {
    int64_t nk, p, q, n;
    plane_coords(o, a.p, a.q, nr, nk, p, q);
    const int64_t k = div_mod(nk, a.k, nr, n);
    const int64_t h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
    float acc = a.bias ? a.bias[k] : 0.0f;
    const T *x = xs + n * a.c * plane, *w = ws + k * a.c * a.r * a.s;
    for (int64_t c = 0; c < a.c; ++c, x += plane, w += a.r * a.s)
      for (int64_t r = 0; r < a.r; ++r) {
        const int64_t ih = h0 + r * a.dil_h;
        if (ih < 0 || ih >= a.h) continue;
        for (int64_t s = 0; s < a.s; ++s) {
          const int64_t iw = w0 + s * a.dil_w;
          if (iw >= 0 && iw < a.wd) acc = fmaf(ld(w + r * a.s + s), ld(x + ih * a.wd + iw), acc);
        }
      }
    a.y[o] = acc;
  }
}

template <typename T>
__device__ void backward_data(const aq_conv2d_args_t &a, const T *ws, const T *dys) {
  const int64_t total = a.n * a.c * a.h * a.wd, oplane = a.p * a.q;
  const bool nr = narrow_items(total + a.pad_h + a.pad_w); /* ih + pad_h, iw + pad_w too */
  for (int64_t i = grid_thread(); i < total; i += grid_threads()) {
    int64_t nc, ih, iw, n;
    plane_coords(i, a.h, a.wd, nr, nc, ih, iw);
    const int64_t c = div_mod(nc, a.c, nr, n);
    float acc = 0.0f;
    for (int64_t r = 0; r < a.r; ++r) {
      /* p * stride_h = ih + pad_h - r * dil_h */
      const int64_t ph = ih + a.pad_h - r * a.dil_h;
      int64_t p;
      if (ph < 0 || div_mod(ph, a.stride_h, nr, p) || p >= a.p) continue;
      for (int64_t s = 0; s < a.s; ++s) {
        const int64_t qw = iw + a.pad_w - s * a.dil_w;
        int64_t q;
        if (qw < 0 || div_mod(qw, a.stride_w, nr, q) || q >= a.q) continue;
        const T *dy = dys + n * a.k * oplane + p * a.q + q, *w = ws + (c * a.r + r) * a.s + s;
        for (int64_t k = 0; k < a.k; ++k) acc = fmaf(ld(w + k * a.c * a.r * a.s), ld(dy + k * oplane), acc);
      }
    }
    a.dx[i] = acc;
  }
}

template <typename T>
__device__ void backward_filter(const aq_conv2d_args_t &a, const T *xs, const T *dys) {
  const int lane = (int)(grid_thread() & 31);
  const int64_t weights = a.k * a.c * a.r * a.s, items = weights + (a.dbias ? a.k : 0);
  const int64_t warps = grid_threads() / 32, oplane = a.p * a.q, iplane = a.h * a.wd;
  if (block_threads() % 32) { /* blocks of partial warps: a thread per item, no shuffles */
    for (int64_t it = grid_thread(); it < items; it += grid_threads()) {
      double acc = 0;
      if (it < weights) {
        const int64_t s = it % a.s, r = (it / a.s) % a.r, c = (it / (a.s * a.r)) % a.c, k = it / (a.s * a.r * a.c);
        for (int64_t j = 0; j < a.n * oplane; ++j) {
          const int64_t n = j / oplane, p = (j / a.q) % a.p, q = j % a.q;
          const int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h, iw = q * a.stride_w - a.pad_w + s * a.dil_w;
          if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.wd)
            acc += (double)ld(dys + (n * a.k + k) * oplane + p * a.q + q) * ld(xs + (n * a.c + c) * iplane + ih * a.wd + iw);
        }
        a.dw[it] = (float)acc;
      } else {
        const int64_t k = it - weights;
        for (int64_t j = 0; j < a.n * oplane; ++j) acc += ld(dys + ((j / oplane) * a.k + k) * oplane + j % oplane);
        a.dbias[k] = (float)acc;
      }
    }
    return;
  }
  for (int64_t it = grid_thread() / 32; it < items; it += warps) {
    float acc = 0.0f;
    if (it < weights) {
      const int64_t s = it % a.s, r = (it / a.s) % a.r, c = (it / (a.s * a.r)) % a.c, k = it / (a.s * a.r * a.c);
      for (int64_t j = lane; j < a.n * oplane; j += 32) {
        const int64_t n = j / oplane, p = (j / a.q) % a.p, q = j % a.q;
        const int64_t ih = p * a.stride_h - a.pad_h + r * a.dil_h, iw = q * a.stride_w - a.pad_w + s * a.dil_w;
        if (ih >= 0 && ih < a.h && iw >= 0 && iw < a.wd)
          acc = fmaf(ld(dys + (n * a.k + k) * oplane + p * a.q + q), ld(xs + (n * a.c + c) * iplane + ih * a.wd + iw), acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) a.dw[it] = acc;
    } else {
      const int64_t k = it - weights;
      for (int64_t j = lane; j < a.n * oplane; j += 32) acc += ld(dys + ((j / oplane) * a.k + k) * oplane + j % oplane);
      acc = warp_sum(acc);
      if (lane == 0) a.dbias[k] = acc;
    }
  }
}

// Backward filter in items (launch.h, aq_conv2d_bwd_filter_width): an item
// is a run of at most AQ_GPU_CONV2D_BWD_FILTER_WIDTH of one filter's r * s
// weights dw[k, c, ...] (or one dbias[k]), taken by a block, or by a
// cluster of S blocks (sm_90) each summing an S-th of the batch's output
// positions. A thread keeps a register accumulator per weight of the run:
// it reads dy[n, k, p, q] once and the input under each weight, with one
// division per position. The block sums its threads' accumulators in a
// fixed order; a cluster's blocks leave theirs in shared memory and the
// first block adds them in rank order after a cluster barrier, so results
// depend on the shape and launch, never on timing, and no workspace is
// needed. Without clusters (sm_80, HIP) the first block of each cluster's
// worth takes the whole batch. Planes of 2^30 elements or more take the
// warp-per-weight loop above.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(AQ_HIP)
#define AQ_CONV_CLUSTERS 1
#define AQ_CONV_CLUSTER(S) __cluster_dims__(S, 1, 1)
#else
#define AQ_CONV_CLUSTER(S)
#endif

constexpr int BWD_W = AQ_GPU_CONV2D_BWD_FILTER_WIDTH;

// The split builds' share of the batch: this block's rank among the *ranks
// blocks of its cluster of S; without clusters, the first block of each
// cluster's worth takes the whole batch (rank 0 of 1) and the others -1.
template <int S>
__device__ inline int split_rank(int *ranks) {
#ifdef AQ_CONV_CLUSTERS
  *ranks = S;
  return S > 1 ? (int)cooperative_groups::this_cluster().block_rank() : 0;
#else
  *ranks = 1;
  return S > 1 && grid_block() % S ? -1 : 0;
#endif
}

// The sums over a cluster's S blocks of part[i] for i < n, added in rank
// order: rank j hands out(i, sum) for slice j of them, so the cluster's
// blocks share the reads (out must not depend on the rank). Every block of
// the cluster must call it.
template <int S, typename Out>
__device__ inline void cluster_sums(const float *part, int64_t n, int rank, Out out) {
#ifdef AQ_CONV_CLUSTERS
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  const int64_t per = (n + S - 1) / S, end = (rank + 1) * per < n ? (rank + 1) * per : n;
  for (int64_t i = rank * per + block_thread(); i < end; i += block_threads()) {
    float s = 0.0f;
#pragma unroll 4
    for (int r = 0; r < S; ++r) s += cluster.map_shared_rank(part, r)[i];
    out(i, s);
  }
  cluster.sync(); /* no rank rewrites its part before the others have read it */
#else
  (void)part, (void)n, (void)rank, (void)out;
#endif
}

// out[0..nw) = the block's sums of acc[0..nw), in part (shared); every
// thread of the block must call it.
__device__ __forceinline__ void block_sums(const float (&acc)[BWD_W], int nw, float (*red)[BWD_W + 1], float *scratch,
                                  float *part) {
  const int t = block_thread(), nt = block_threads();
  if (nt % 32 == 0) {
#pragma unroll
    for (int j = 0; j < BWD_W; ++j)
      if (j < nw) {
        const float v = warp_sum(acc[j]);
        if ((t & 31) == 0) red[t >> 5][j] = v;
      }
    __syncthreads();
    for (int j = t; j < nw; j += nt) {
      float s = 0.0f;
      for (int w = 0; w < nt / 32; ++w) s += red[w][j];
      part[j] = s;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < BWD_W; ++j)
    if (j < nw) {
      const float v = block_sum(acc[j], scratch);
      if (t == 0) part[j] = v;
    }
}

// One item's sums over output positions j0..j1 of the flattened (n, p, q):
// weights w0..w0+nw of filter (k, c), or (bias) dy's sum for k.
template <typename T>
__device__ __forceinline__ void item_sums(const aq_conv2d_args_t &a, const T *xs, const T *dys, int64_t k, int64_t c, int w0,
                                 int nw, bool bias, int64_t j0, int64_t j1, float (&acc)[BWD_W]) {
  const int t = block_thread(), nt = block_threads();
  const int h = (int)a.h, wd = (int)a.wd, q = (int)a.q, oplane = (int)(a.p * a.q);
  int dh[BWD_W], dw[BWD_W];
#pragma unroll
  for (int j = 0; j < BWD_W; ++j) {
    const int wi = w0 + (j < nw ? j : 0);
    dh[j] = wi / (int)a.s * a.dil_h - a.pad_h, dw[j] = wi % (int)a.s * a.dil_w - a.pad_w;
    acc[j] = 0.0f;
  }
  for (int64_t n = j0 / oplane; n * oplane < j1; ++n) {
    const int lo = (int)(j0 > n * oplane ? j0 - n * oplane : 0);
    const int hi = (int)(j1 - n * oplane < oplane ? j1 - n * oplane : oplane);
    const T *dy = dys + (n * a.k + k) * oplane, *x = xs + (n * a.c + c) * a.h * a.wd;
    for (int pq = lo + t; pq < hi; pq += nt) {
      const float g = ld(dy + pq);
      if (bias) {
        acc[0] += g;
        continue;
      }
      const int p = pq / q, ih0 = p * a.stride_h, iw0 = (pq - p * q) * a.stride_w;
#pragma unroll
      for (int j = 0; j < BWD_W; ++j) {
        const int ih = ih0 + dh[j], iw = iw0 + dw[j];
        if (j < nw && (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)wd)
          acc[j] = fmaf(g, ld(x + ih * wd + iw), acc[j]);
      }
    }
  }
}

// The items over the grid: clusters of S blocks (S = 1: blocks) walk them
// grid-stride. Any grid and block size are correct with S = 1; with S > 1
// the grid's x must be a multiple of S (a cluster launch needs it anyway).
template <typename T, int S>
__device__ void backward_filter_items(const aq_conv2d_args_t &a, const T *xs, const T *dys) {
  __shared__ float red[32][BWD_W + 1], scratch[32], part[BWD_W];
  const int width = aq_conv2d_bwd_filter_width(&a);
  const int64_t rs = a.r * a.s, chunks = (rs + width - 1) / width, witems = a.k * a.c * chunks;
  const int64_t items = witems + (a.dbias ? a.k : 0), positions = a.n * a.p * a.q;
  int ranks;
  const int rank = split_rank<S>(&ranks);
  if (rank < 0) return;
  const int64_t j0 = positions * rank / ranks, j1 = positions * (rank + 1) / ranks;
  const int64_t clusters = grid_blocks() / S > 0 ? grid_blocks() / S : 1;
  for (int64_t it = grid_block() / S; it < items; it += clusters) {
    const bool bias = it >= witems;
    const int64_t pair = bias ? 0 : it / chunks, k = bias ? it - witems : pair / a.c, c = bias ? 0 : pair % a.c;
    const int w0 = bias ? 0 : (int)(it % chunks) * width;
    const int nw = bias ? 1 : (int)(rs - w0 < width ? rs - w0 : width);
    float acc[BWD_W];
    item_sums(a, xs, dys, k, c, w0, nw, bias, j0, j1, acc);
    block_sums(acc, nw, red, scratch, part);
    float *out = bias ? a.dbias + k : a.dw + pair * rs + w0;
    const int t = block_thread();
#ifdef AQ_CONV_CLUSTERS
    if (S > 1) {
      cluster_sums<S>(part, nw, rank, [&](int64_t j, float s) { out[j] = s; });
      continue;
    }
#endif
    __syncthreads();
    for (int j = t; j < nw; j += block_threads()) out[j] = part[j]; /* a block may have fewer threads than weights */
    __syncthreads();
  }
}

// Whether the items' 32-bit plane arithmetic holds for these shapes.
__device__ inline bool items_fit(const aq_conv2d_args_t &a) {
  const int64_t lim = (int64_t)1 << 30;
  return a.h * a.wd < lim && a.p * a.q < lim && a.r * a.s < lim && a.pad_h < lim && a.pad_w < lim &&
         a.p * a.stride_h + a.r * a.dil_h < lim && a.q * a.stride_w + a.s * a.dil_w < lim;
}

// The backward filter: items where the planes allow, else a warp a weight.
template <typename T, int S>
__device__ inline void backward_filter_fast(const aq_conv2d_args_t &a, const T *xs, const T *dys) {
  if (items_fit(a)) backward_filter_items<T, S>(a, xs, dys);
  else backward_filter(a, xs, dys);
}

// A build's kernel entry for PASS (0 forward, 1 backward data, 2 backward
// filter) on inputs of E (float, or uint16_t holding bf16): nothing
// without the pass's tensors or with bad kernargs; else build(), which
// runs the build and returns true where it applies; else the direct
// loops, which take any launch.
template <int PASS, typename E = float, class Build>
__device__ __forceinline__ void pass_entry(const aq_conv2d_args_t &a, Build build) {
  const bool tensors = PASS == 0 ? a.x && a.w && a.y : PASS == 1 ? a.w && a.dy && a.dx : a.x && a.dy && a.dw;
  if (!tensors || !valid(a) || build()) return;
  const E *x = (const E *)a.x, *w = (const E *)a.w, *dy = (const E *)a.dy;
  if (PASS == 0) forward(a, x, w);
  if (PASS == 1) backward_data(a, w, dy);
  if (PASS == 2) backward_filter(a, x, dy);
}

}  // namespace conv
