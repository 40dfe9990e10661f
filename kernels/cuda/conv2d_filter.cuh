// conv2d backward filter, staged (launch.h: aq_conv2d_filter_bytes says
// where it applies and the group segment it needs). The tiled path of
// conv2d_tiled.cuh sums a row of taps a thread, one shared load a tap, and
// stages a few images at a time with nothing in flight while it sums: on a
// LeNet's layers that is latency, not arithmetic. Here a block takes a
// group of filters (launch.h: aq_conv2d_filter_group; the images' windows
// staged once for them all) over its share of the batch, every channel:
//  - its warps split the (filter, channel) units (a whole number of warps
//    each, or a warp several units in turn), then each unit's staged
//    output rows, cut into runs along q, a run a lane;
//  - a thread keeps the filter's r x T taps in registers and slides a
//    window of T columns of x (a ring whose slots the unrolled loop names
//    at compile time) along its run, so each dy value feeds r * T FMAs for
//    r + 1 shared loads;
//  - images are staged in two buffers, the next copied (cp.async) while
//    the current is summed.
// A warp's sums go to shared memory by shuffles, the block's are added
// over warps in a fixed order, and a cluster's in rank order (as the tiled
// path's), so results depend on the shape and launch only.
#pragma once
#include "conv2d_tiled.cuh"

namespace conv {

__device__ __forceinline__ void stage_commit() {
#if !defined(AQ_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits for this thread's copies but the last `pending` groups committed.
template <int pending>
__device__ __forceinline__ void stage_wait() {
#if !defined(AQ_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

// Whether this launch runs the staged path: the group segment and block
// size launch.h gives it (a CPU grid takes the other paths).
// The group of filters a block takes, read off the grid (a cluster a
// group: launch.h's search for it, its 64-bit divisions run by every
// thread, cost a LeNet layer's blocks a third of their time), or 0 where
// the grid is not a staged build's.
template <int S>
__device__ inline int filter_group(const aq_conv2d_args_t &a) {
  const int64_t clusters = grid_blocks() / S, group = clusters > 0 ? (a.k + clusters - 1) / clusters : 0;
  return group > 0 && (group == 1 || aq_conv2d_filter_units(&a, group) <= AQ_GPU_CONV2D_FILTER_WARPS) ? (int)group : 0;
}

template <int S>
__device__ inline bool filter_staged(const aq_conv2d_args_t &a, int group) {
  const int64_t need = group > 0 ? aq_conv2d_filter_bytes_in(&a, S, group) : 0;
  return need > 0 && dynamic_smem() >= need && block_threads() == aq_conv2d_filter_warps(&a, group) * 32;
}

// The shapes of a block's stages: the filters it takes, images a stage,
// floats an image's window of every channel, and a dy plane.
struct staged_dims {
  int group, images, window, pq;
  __device__ staged_dims(const aq_conv2d_args_t &a, const dims &d, int split, int group)
      : group(group), images((int)aq_conv2d_filter_images_of(&a, split, group)),
        window(d.c * d.hs * d.ws), pq(d.p * d.q) {}
  __device__ int per() const { return window + group * pq; }
};

// Stages images [b0, b0 + nb) into buf: their windows, then after
// `images` windows the dy planes of filters k0 .. k0 + nf, image-major.
template <typename E>
__device__ inline void stage_filter(const aq_conv2d_args_t &a, const dims &d, const staged_dims &sd, int64_t k0, int nf,
                                    int64_t b0, int nb, float *buf) {
  stage_windows(d, (const E *)a.x + b0 * d.c * d.h * d.w, nb, buf);
  float *dys = buf + sd.images * sd.window;
  for (int img = 0; img < nb; ++img) /* a plane a filter: contiguous in dy, so one copy */
    stage_flat(dys + img * sd.group * sd.pq, (const E *)a.dy + ((b0 + img) * d.k + k0) * sd.pq, nf * sd.pq);
  stage_commit();
}

// The run length (a multiple of T) that spreads rows x runs over `lanes`
// lanes with the least work for the busiest: cost = its runs x (run + T - 1
// columns, the window's fill).
template <int T>
__device__ inline int run_length(int rows, int q, int lanes) {
  int best = (q + T - 1) / T * T, cost = 0x7fffffff;
  for (int segs = 1; segs <= (q + T - 1) / T; ++segs) {
    const int len = ((q + segs - 1) / segs + T - 1) / T * T, runs = (q + len - 1) / len;
    const int c = (rows * runs + lanes - 1) / lanes * (len + T - 1);
    if (c < cost) cost = c, best = len;
  }
  return best;
}

// One run: output row p's columns [q0, q1) of one image and channel. x: the
// window's row p * stride_h; dy: dy's row p. Column q + s of row r is in
// ring slot (q - q0 + s) % T; past the window's last column the last one is
// read (its product with a zero dy, or a tap past the filter's, is unused).
// R: the filter's rows where fixed at compile time (0: d.r, each row's
// work behind a test).
template <int T, int R>
__device__ __forceinline__ void filter_run(const dims &d, const float *x, const float *dy, int q0, int q1, bool bias,
                                           float (&acc)[T][T], float &dbias) {
  float ring[T][T];
  const int last = d.cols - 1, rstep = d.dh * d.ws, rows = R ? R : d.r;
#pragma unroll
  for (int r = 0; r < T; ++r)
#pragma unroll
    for (int j = 0; j < T - 1; ++j)
      if (r < rows) ring[r][j] = x[r * rstep + min(q0 + j, last)];
  for (int qb = q0; qb < q1; qb += T) {
#pragma unroll
    for (int u = 0; u < T; ++u) {
      const int q = qb + u, col = min(q + T - 1, last);
      const float v = q < q1 ? dy[q] : 0.0f;
#pragma unroll
      for (int r = 0; r < T; ++r)
        if (r < rows) ring[r][(u + T - 1) % T] = x[r * rstep + col];
#pragma unroll
      for (int r = 0; r < T; ++r)
#pragma unroll
        for (int s = 0; s < T; ++s)
          if (r < rows) acc[r][s] = fmaf(v, ring[r][(u + s) % T], acc[r][s]);
      if (bias) dbias += v;
    }
  }
}

// A warp's sums into its row of red (r x T taps, then the bias), added;
// the accumulators restart at zero. Every lane of the warp calls it.
template <int T>
__device__ __forceinline__ void flush_sums(float (&acc)[T][T], float &dbias, float *red) {
  const bool first = (block_thread() & 31) == 0;
#pragma unroll
  for (int r = 0; r < T; ++r)
#pragma unroll
    for (int s = 0; s < T; ++s) {
      const float v = warp_sum(acc[r][s]);
      if (first) red[r * T + s] += v;
      acc[r][s] = 0.0f;
    }
  const float b = warp_sum(dbias);
  if (first) red[T * T] += b;
  dbias = 0.0f;
}

// Sums unit u's runs (of len columns) of the staged images in buf into
// acc (and dbias where its channel is 0 and the bias is wanted): lane `me`
// of `lanes` takes runs me, me + lanes, ..., output rows varying fastest
// (rows a window row apart are in different banks).
template <int T, int R>
__device__ __forceinline__ void filter_stage(const aq_conv2d_args_t &a, const dims &d, const staged_dims &sd, const float *buf,
                                    int nb, int u, int me, int lanes, int len, float (&acc)[T][T], float &dbias) {
  const int runs = (d.q + len - 1) / len, items = nb * d.p * runs, f = u / d.c, c = u - f * d.c;
  const bool bias = c == 0 && a.dbias;
  const float *dys = buf + sd.images * sd.window + f * sd.pq, *xc = buf + c * d.hs * d.ws;
  for (int it = me; it < items; it += lanes) {
    const int p = it % d.p, rest = it / d.p, run = rest % runs, img = rest / runs, q0 = run * len;
    filter_run<T, R>(d, xc + img * sd.window + p * d.sh * d.ws, dys + img * sd.group * sd.pq + p * d.q, q0,
                     min(q0 + len, d.q), bias, acc, dbias);
  }
}

template <typename E, int S, int T, int R>
__device__ void backward_filter_staged_taps(const aq_conv2d_args_t &a, int group) {
  const dims d(a);
  const staged_dims sd(a, d, S, group);
  const int t = block_thread(), nt = block_threads(), warp = t >> 5, lane = t & 31;
  const int units = (int)aq_conv2d_filter_units(&a, sd.group), slots = aq_conv2d_filter_slots(&a, sd.group);
  const int subs = aq_conv2d_filter_warps(&a, sd.group) / slots, slot = warp % slots, sub = warp / slots;
  const int U = T * T + 1, outs = d.c * d.r * d.s;
  const bool one = units <= slots; /* a warp sums one unit throughout: a flush at the end */
  const int half = sd.images * sd.per(); /* buffer b at tiled_smem + b * half */
  float *const red = tiled_smem + 2 * half, *const part = red + subs * units * U;
  int ranks;
  const int rank = split_rank<S>(&ranks);
  if (rank < 0) return;
  const int64_t n0 = a.n * rank / ranks, n1 = a.n * (rank + 1) / ranks;
  const int64_t clusters = grid_blocks() / S > 0 ? grid_blocks() / S : 1;
  const int stages = (int)((n1 - n0 + sd.images - 1) / sd.images);
  const int len = run_length<T>(sd.images * d.p, d.q, subs * 32); /* a full stage's (the last may hold fewer) */
  for (int64_t k0 = grid_block() / S * sd.group; k0 < a.k; k0 += clusters * sd.group) {
    const int nf = (int)min((int64_t)sd.group, a.k - k0), live = nf * d.c; /* units past live: no filter */
    __syncthreads(); /* the last group's sums are read */
    for (int i = t; i < subs * units * U; i += nt) red[i] = 0.0f;
    float acc[T][T], dbias = 0.0f;
#pragma unroll
    for (int r = 0; r < T; ++r)
#pragma unroll
      for (int s = 0; s < T; ++s) acc[r][s] = 0.0f;
    if (stages > 0) stage_filter<E>(a, d, sd, k0, nf, n0, (int)min((int64_t)sd.images, n1 - n0), tiled_smem);
    for (int st = 0; st < stages; ++st) {
      const int64_t b0 = n0 + (int64_t)st * sd.images;
      if (st + 1 < stages) {
        const int64_t next = b0 + sd.images;
        stage_filter<E>(a, d, sd, k0, nf, next, (int)min((int64_t)sd.images, n1 - next),
                        tiled_smem + ((st + 1) & 1) * half);
        stage_wait<1>();
      } else {
        stage_wait<0>();
      }
      __syncthreads();
      const int nb = (int)min((int64_t)sd.images, n1 - b0);
      for (int u = slot; u < live; u += slots) {
        filter_stage<T, R>(a, d, sd, tiled_smem + (st & 1) * half, nb, u, sub * 32 + lane, subs * 32, len, acc, dbias);
        if (!one) flush_sums<T>(acc, dbias, red + (sub * units + u) * U);
      }
      __syncthreads(); /* this buffer is staged again at st + 2 */
    }
    if (one) flush_sums<T>(acc, dbias, red + (sub * units + slot) * U);
    __syncthreads();
    const int each = outs + 1; /* a filter's sums in part: its weights, then its bias */
    for (int i = t; i < nf * each; i += nt) { /* the block's sums, warps added in order */
      const int f = i / each, o = i - f * each, c = o < outs ? o / (d.r * d.s) : 0, tap = o < outs ? o - c * d.r * d.s : 0;
      const int at = o < outs ? tap / d.s * T + tap % d.s : T * T;
      float sum = 0.0f;
      for (int sb = 0; sb < subs; ++sb) sum += red[(sb * units + f * d.c + c) * U + at];
      part[i] = sum;
    }
    float *const dw = a.dw + k0 * outs;
    auto out = [&](int64_t i, float sum) {
      const int64_t f = i / each, o = i - f * each;
      if (o < outs) dw[f * outs + o] = sum;
      else if (a.dbias) a.dbias[k0 + f] = sum;
    };
#ifdef AQ_CONV_CLUSTERS
    if (S > 1) {
      cluster_sums<S>(part, nf * each, rank, out);
      continue;
    }
#endif
    __syncthreads();
    for (int i = t; i < nf * each; i += nt) out(i, part[i]);
  }
}

// E: the element type of x and dy (float, or uint16_t holding bf16).
template <int S, typename E = float>
__device__ void backward_filter_staged(const aq_conv2d_args_t &a, int group) {
  if (aq_conv2d_filter_taps(&a) == 3) backward_filter_staged_taps<E, S, 3, 3>(a, group);
  else backward_filter_staged_taps<E, S, 5, 5>(a, group);
}

// A staged build's kernel body over clusters of S: launched otherwise than
// launch.h says, it takes the direct loops.
template <int S, typename E>
__device__ __forceinline__ void staged_build(const aq_conv2d_args_t &a) {
  if (!a.x || !a.dy || !a.dw || !valid(a)) return;
  const int group = filter_group<S>(a);
  if (filter_staged<S>(a, group)) backward_filter_staged<S, E>(a, group);
  else backward_filter(a, (const E *)a.x, (const E *)a.dy);
}

}  // namespace conv

// A staged build's kernel, a cluster of S (a kernel each, so the other
// paths' registers do not crowd its accumulators).
#define AQ_CONV2D_STAGED_KERNEL(name, S, E)                                                     \
  AQ_KERNEL void AQ_CONV_CLUSTER(S) __launch_bounds__(AQ_GPU_CONV2D_FILTER_WARPS * 32) name(aq_conv2d_args_t a) { \
    conv::staged_build<S, E>(a);                                                                \
  }
