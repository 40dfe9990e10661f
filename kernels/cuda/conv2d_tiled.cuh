// fp32 conv2d passes for planes a block's shared memory holds (launch.h:
// aq_conv2d_tiled_bytes says which, and the group segment they need). The
// direct loops of conv2d_direct.cuh pay two global loads, bounds checks and
// index divisions an FMA, which on a LeNet's few channels is nearly all
// they do; here a block stages what it reads once, zero-padded where the
// window leaves the image, and each thread keeps several outputs in
// registers, so an FMA costs about one shared load and no checks:
//  - forward: a block an image; a thread an output position and up to KB
//    filters (the filter's weights a warp reads are the same: broadcast),
//    or, for one input channel, one filter over a run of columns with its
//    taps in registers;
//  - backward data: a block an image; a thread an input position and up to
//    KB channels, gathering the outputs whose windows cover it, or, with
//    unit strides, a run of columns and two channels;
//  - backward filter (where the staged build of conv2d_filter.cuh does not
//    apply): a block a filter, or a cluster of S blocks splitting
//    the batch; a thread a channel's row of taps (or the bias) over a share
//    of the staged output rows; as many images staged at a time as fit. The
//    block's partials are summed in a fixed order, then the cluster's in
//    rank order (distributed shared memory), so results depend on the shape
//    and launch only.
// Every pass walks its items grid-stride, so any grid is correct; a launch
// without the group segment (or with larger blocks than launch.h's) takes
// the direct loops.
#pragma once
#include "conv2d_direct.cuh"

namespace conv {

constexpr int KB = AQ_GPU_CONV2D_TILED_KB, UPT = AQ_GPU_CONV2D_TILED_UPT;

__device__ __forceinline__ uint32_t dynamic_smem() {
#if defined(AQ_HIP)
  return 0;
#else
  uint32_t v;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
#endif
}

// Whether this launch runs `pass` tiled: the group segment launch.h sizes
// it with, and blocks no larger than its scratch is sized for.
__device__ inline bool tiled(const aq_conv2d_args_t &a, int pass) {
  const int64_t need = aq_conv2d_tiled_bytes(&a, pass);
  const int most = pass == 2 ? AQ_GPU_CONV2D_TILED_FILTER_BLOCK : AQ_GPU_BLOCK;
  return need > 0 && dynamic_smem() >= need && block_threads() <= most &&
         (pass != 2 || aq_conv2d_tiled_filter_units(&a) <= (int64_t)UPT * block_threads());
}

extern __shared__ float tiled_smem[];

// Index sizes of a tiled launch: every one under 2^31 (launch.h bounds the
// extents by 2^24 and the staged planes by AQ_GPU_CONV2D_TILED_BYTES).
struct dims {
  int c, k, r, s, h, w, p, q, sh, sw, ph, pw, dh, dw, hs, cols, ws, rs, crs; /* ws: the window's row stride */
  bool flat; /* the window is the image */
  __device__ explicit dims(const aq_conv2d_args_t &a)
      : c((int)a.c), k((int)a.k), r((int)a.r), s((int)a.s), h((int)a.h), w((int)a.wd), p((int)a.p), q((int)a.q),
        sh(a.stride_h), sw(a.stride_w), ph(a.pad_h), pw(a.pad_w), dh(a.dil_h), dw(a.dil_w),
        hs((int)aq_conv2d_tiled_window(&a, 0)), cols((int)aq_conv2d_tiled_window(&a, 1)),
        ws((int)aq_conv2d_tiled_stride(&a)), rs(r * s), crs(c * r * s), flat(hs == h && ws == w && !ph && !pw) {}
};

// Copies one float to shared memory, or a zero where !valid, without
// waiting for it (sm_80's cp.async): a thread's copies of a stage are all
// in flight at once, where loads and stores in turn would pay a global
// load's latency each. staged() waits for the thread's copies; a barrier
// after it makes everyone's visible.
__device__ __forceinline__ void stage_one(float *dst, const float *src, bool valid) {
#if defined(AQ_HIP) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
  *dst = valid ? __ldg(src) : 0.0f;
#else
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 4 : 0) : "memory");
#endif
}

// bf16 (uint16_t) elements widen to fp32 on the way: a plain load and store.
__device__ __forceinline__ void stage_one(float *dst, const uint16_t *src, bool valid) {
  *dst = valid ? ld(src) : 0.0f;
}

__device__ __forceinline__ void staged() {
#if !defined(AQ_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// bf16 widens in registers, so its copies are loads then stores, not
// cp.async: a thread issues WIDEN loads before it stores any, where one
// at a time paid a global load's latency an element (a bf16 LeNet
// backward filter's stages took 1.5x fp32's).
constexpr int WIDEN = 4;

// Stages n elements from src to dst: floats 16 bytes a copy where both
// are aligned, bf16 WIDEN elements a thread at a time.
__device__ inline void stage_flat(float *dst, const uint16_t *src, int n) {
  const int t = block_thread(), nt = block_threads();
  for (int i0 = t; i0 < n; i0 += WIDEN * nt) {
    float v[WIDEN];
#pragma unroll
    for (int u = 0; u < WIDEN; ++u) v[u] = i0 + u * nt < n ? ld(src + i0 + u * nt) : 0.0f;
#pragma unroll
    for (int u = 0; u < WIDEN; ++u)
      if (i0 + u * nt < n) dst[i0 + u * nt] = v[u];
  }
}

__device__ inline void stage_flat(float *dst, const float *src, int n) {
  const int t = block_thread(), nt = block_threads();
#if !defined(AQ_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (((uintptr_t)dst | (uintptr_t)src) % 16 == 0) {
    for (int i = 4 * t; i + 3 < n; i += 4 * nt) {
      const unsigned to = (unsigned)__cvta_generic_to_shared(dst + i);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(src + i) : "memory");
    }
    for (int i = n / 4 * 4 + t; i < n; i += nt) stage_one(dst + i, src + i, true);
    return;
  }
#endif
  for (int i = t; i < n; i += nt) stage_one(dst + i, src + i, true);
}

// Stages the zero-padded input windows of nb consecutive images from x
// (c-major; row 0 is the input's row -pad_h), one after another in dst.
// Without padding the windows are the images: one flat copy. Otherwise a
// warp a row, so index arithmetic is paid a row, not an element (blocks of
// partial warps: a thread a row). Staged row r is window row r % hs of
// plane r / hs; the rows are stepped through without dividing, the
// source's offset carried from row to row (one recomputed a row, in 64
// bits, was most of a LeNet backward filter's instructions). Offsets are
// 32-bit: the nb windows fit a stage of shared memory.
template <typename E>
__device__ inline void stage_windows(const dims &d, const E *x, int nb, float *dst) {
  if (d.flat) return stage_flat(dst, x, nb * d.c * d.h * d.w);
  const int t = block_thread(), nt = block_threads(), width = nt % 32 ? 1 : 32;
  const int lane = t % width, step = nt / width, rows = nb * d.c * d.hs;
  int r = t / width, wr = r % d.hs;
  /* the offset of window row wr's source row (-pad_h .. h + pad_h) */
  int from = r / d.hs * d.h * d.w + (wr - d.ph) * d.w;
  const int next_plane = d.h * d.w - d.hs * d.w, advance = step * d.w;
  if (sizeof(E) == 2) { /* bf16: WIDEN rows' loads, then their stores */
    for (; r < rows; r += WIDEN * step) {
      int off[WIDEN], ih[WIDEN];
#pragma unroll
      for (int g = 0; g < WIDEN; ++g) {
        off[g] = from, ih[g] = wr - d.ph;
        from += advance;
        for (wr += step; wr >= d.hs; wr -= d.hs) from += next_plane;
      }
      for (int col = lane; col < d.cols; col += width) {
        const int iw = col - d.pw;
        float v[WIDEN];
#pragma unroll
        for (int g = 0; g < WIDEN; ++g)
          v[g] = r + g * step < rows && (unsigned)ih[g] < (unsigned)d.h && (unsigned)iw < (unsigned)d.w
                     ? ld(x + off[g] + iw)
                     : 0.0f;
#pragma unroll
        for (int g = 0; g < WIDEN; ++g)
          if (r + g * step < rows) dst[(r + g * step) * d.ws + col] = v[g];
      }
    }
    return;
  }
  for (; r < rows; r += step) {
    const int ih = wr - d.ph;
    const E *src = x + from;
    float *to = dst + r * d.ws;
    const bool row_in = (unsigned)ih < (unsigned)d.h;
    for (int col = lane; col < d.cols; col += width) {
      const int iw = col - d.pw;
      const bool in = row_in && (unsigned)iw < (unsigned)d.w;
      stage_one(to + col, in ? src + iw : x, in);
    }
    from += advance;
    for (wr += step; wr >= d.hs; wr -= d.hs) from += next_plane;
  }
}

__device__ inline void stage_weights(const aq_conv2d_args_t &a, float *ws, int n) {
  for (int i = block_thread(); i < n; i += block_threads()) stage_one(ws + i, a.w + i, true);
}

// off[j] = min(first + j, count - 1) * scale, acc[j] = 0: a thread's KB
// filters (forward) or channels (backward data), the ones past the last
// read in place of the last and never written.
__device__ __forceinline__ void clamped_offsets(int first, int count, int scale, int (&off)[KB], float (&acc)[KB]) {
#pragma unroll
  for (int j = 0; j < KB; ++j) off[j] = (first + j < count ? first + j : count - 1) * scale, acc[j] = 0.0f;
}

// A block an image, grid-stride: stage(n) stages what image n's items
// read (cp.async), then item(n, it) runs for each of its `items`.
template <typename Stage, typename Item>
__device__ inline void per_image(const aq_conv2d_args_t &a, int items, Stage stage, Item item) {
  for (int64_t n = grid_block(); n < a.n; n += grid_blocks()) {
    __syncthreads(); /* the last image's readers are done */
    stage(n);
    staged();
    __syncthreads();
    for (int it = block_thread(); it < items; it += block_threads()) item(n, it);
  }
}

__device__ void forward_tiled(const aq_conv2d_args_t &a) {
  const dims d(a);
  const int window = d.c * d.hs * d.ws, pq = d.p * d.q, groups = (d.k + KB - 1) / KB, items = pq * groups;
  float *xs = tiled_smem, *wsm = xs + window;
  stage_weights(a, wsm, d.k * d.crs);
  per_image(a, items, [&](int64_t n) { stage_windows(d, a.x + n * d.c * d.h * d.w, 1, xs); }, [&](int64_t n, int it) {
      const int g = it / pq, pos = it - g * pq, p = pos / d.q, q = pos - p * d.q, k0 = g * KB;
      int woff[KB];
      float acc[KB];
      clamped_offsets(k0, d.k, d.crs, woff, acc);
      const float *xb = xs + p * d.sh * d.ws + q * d.sw;
      int wi = 0;
      for (int c = 0; c < d.c; ++c, xb += d.hs * d.ws)
        for (int r = 0; r < d.r; ++r) {
          const float *xr = xb + r * d.dh * d.ws;
          for (int s = 0; s < d.s; ++s, ++wi) {
            const float v = xr[s * d.dw];
#pragma unroll
            for (int j = 0; j < KB; ++j) acc[j] = fmaf(wsm[woff[j] + wi], v, acc[j]);
          }
        }
      float *y = a.y + (n * d.k + k0) * pq + pos;
#pragma unroll
      for (int j = 0; j < KB; ++j)
        if (k0 + j < d.k) y[(int64_t)j * pq] = acc[j] + (a.bias ? a.bias[k0 + j] : 0.0f);
  });
}

// A filter of one channel and at most T x T taps, unit column stride and
// dilation (a network's first layer on grayscale images): a thread takes
// filter k at output row p, QB columns from q0, the filter's taps in
// registers, so a window row of QB + T - 1 values feeds QB * s FMAs, where
// forward_tiled loads KB weights and a value for KB FMAs (and, for fewer
// filters than KB, sums dummies). The sums are added in forward_tiled's
// order: the same results.
constexpr int QB = 4;
template <int T>
__device__ void forward_one_channel(const aq_conv2d_args_t &a) {
  const dims d(a);
  const int runs = (d.q + QB - 1) / QB, items = d.k * d.p * runs, last = d.cols - 1;
  float *xs = tiled_smem, *wsm = xs + d.hs * d.ws;
  stage_weights(a, wsm, d.k * d.crs);
  per_image(a, items, [&](int64_t n) { stage_windows(d, a.x + n * d.h * d.w, 1, xs); }, [&](int64_t n, int it) {
      const int run = it % runs, rest = it / runs, p = rest % d.p, k = rest / d.p, q0 = run * QB;
      float w[T][T], acc[QB];
#pragma unroll
      for (int r = 0; r < T; ++r)
#pragma unroll
        for (int s = 0; s < T; ++s) w[r][s] = r < d.r && s < d.s ? wsm[k * d.crs + r * d.s + s] : 0.0f;
#pragma unroll
      for (int j = 0; j < QB; ++j) acc[j] = 0.0f;
#pragma unroll
      for (int r = 0; r < T; ++r) {
        if (r >= d.r) break;
        const float *xr = xs + (p * d.sh + r * d.dh) * d.ws;
        float v[QB + T - 1];
#pragma unroll
        for (int i = 0; i < QB + T - 1; ++i) v[i] = xr[min(q0 + i, last)];
#pragma unroll
        for (int s = 0; s < T; ++s)
#pragma unroll
          for (int j = 0; j < QB; ++j)
            if (s < d.s) acc[j] = fmaf(w[r][s], v[j + s], acc[j]);
      }
      float *y = a.y + ((n * d.k + k) * d.p + p) * d.q;
      const float b = a.bias ? a.bias[k] : 0.0f;
#pragma unroll
      for (int j = 0; j < QB; ++j)
        if (q0 + j < d.q) y[q0 + j] = acc[j] + b;
  });
}

// Whether forward_one_channel<3> (3) or <5> (5) takes the forward.
__device__ inline int one_channel_taps(const aq_conv2d_args_t &a) {
  if (a.c != 1 || a.stride_w != 1 || a.dil_w != 1 || a.r > 5 || a.s > 5) return 0;
  return a.r <= 3 && a.s <= 3 ? 3 : 5;
}

// The output index o (row or column) whose window reaches input index i
// through tap t, or -1.
__device__ __forceinline__ int tap_source(int i, int pad, int t, int dil, int stride, int limit) {
  const int at = i + pad - t * dil;
  if (at < 0) return -1;
  const int o = stride == 1 ? at : at / stride;
  return o * stride == at && o < limit ? o : -1;
}

__device__ void backward_data_tiled(const aq_conv2d_args_t &a) {
  const dims d(a);
  const int pq = d.p * d.q, hw = d.h * d.w, groups = (d.c + KB - 1) / KB, items = hw * groups;
  float *dys = tiled_smem, *wsm = dys + d.k * pq;
  stage_weights(a, wsm, d.k * d.crs);
  per_image(a, items, [&](int64_t n) { stage_flat(dys, a.dy + n * d.k * pq, d.k * pq); }, [&](int64_t n, int it) {
      const int g = it / hw, pos = it - g * hw, ih = pos / d.w, iw = pos - ih * d.w, c0 = g * KB;
      int coff[KB];
      float acc[KB];
      clamped_offsets(c0, d.c, d.rs, coff, acc);
      for (int r = 0; r < d.r; ++r) {
        const int p = tap_source(ih, d.ph, r, d.dh, d.sh, d.p);
        if (p < 0) continue;
        for (int s = 0; s < d.s; ++s) {
          const int q = tap_source(iw, d.pw, s, d.dw, d.sw, d.q);
          if (q < 0) continue;
          const float *g0 = dys + p * d.q + q, *w0 = wsm + r * d.s + s;
          for (int k = 0; k < d.k; ++k) {
            const float v = g0[k * pq];
            const float *wk = w0 + k * d.crs;
#pragma unroll
            for (int j = 0; j < KB; ++j) acc[j] = fmaf(wk[coff[j]], v, acc[j]);
          }
        }
      }
      float *dx = a.dx + (n * d.c + c0) * hw + pos;
#pragma unroll
      for (int j = 0; j < KB; ++j)
        if (c0 + j < d.c) dx[(int64_t)j * hw] = acc[j];
  });
}

// Backward data with unit strides and dilations (launch.h,
// aq_conv2d_data_runs): a thread takes a run of QB input columns of a row
// and CB channels. For each tap row and filter, QB + T - 1 dy values (a
// ring the unrolled loops name at compile time, taps read mirrored) and CB
// weights a tap feed CB * QB * s FMAs, where backward_data_tiled loads a dy
// value and KB weights for KB FMAs; and with fewer channels a thread, a
// small plane still gives the block's threads work.
template <int T, int CB>
__device__ void backward_data_runs(const aq_conv2d_args_t &a) {
  const dims d(a);
  const int pq = d.p * d.q, hw = d.h * d.w, groups = (d.c + CB - 1) / CB, runs = (d.w + QB - 1) / QB;
  float *dys = tiled_smem, *wsm = dys + d.k * pq;
  stage_weights(a, wsm, d.k * d.crs);
  per_image(a, groups * d.h * runs, [&](int64_t n) { stage_flat(dys, a.dy + n * d.k * pq, d.k * pq); }, [&](int64_t n, int it) {
      const int run = it % runs, r1 = it / runs, ih = r1 % d.h, g = r1 / d.h;
      const int iw0 = run * QB, c0 = g * CB, qb = iw0 + d.pw - (d.s - 1);
      int coff[CB];
      float acc[CB][QB];
#pragma unroll
      for (int j = 0; j < CB; ++j) {
        coff[j] = (c0 + j < d.c ? c0 + j : d.c - 1) * d.rs;
#pragma unroll
        for (int u = 0; u < QB; ++u) acc[j][u] = 0.0f;
      }
      for (int r = 0; r < d.r; ++r) {
        const int p = ih + d.ph - r;
        if (p < 0 || p >= d.p) continue;
        for (int k = 0; k < d.k; ++k) {
          const float *dyr = dys + k * pq + p * d.q;
          float v[QB + T - 1]; /* v[i]: dy at column qb + i, 0 off the plane */
#pragma unroll
          for (int i = 0; i < QB + T - 1; ++i) v[i] = (unsigned)(qb + i) < (unsigned)d.q ? dyr[qb + i] : 0.0f;
          const float *wk = wsm + k * d.crs + r * d.s + d.s - 1; /* tap s - 1 - m at wk[-m] */
#pragma unroll
          for (int m = 0; m < T; ++m) {
            if (m >= d.s) break;
#pragma unroll
            for (int j = 0; j < CB; ++j) {
              const float w = wk[coff[j] - m];
#pragma unroll
              for (int u = 0; u < QB; ++u) acc[j][u] = fmaf(w, v[u + m], acc[j][u]);
            }
          }
        }
      }
      float *dx = a.dx + (n * d.c + c0) * hw + ih * d.w + iw0;
#pragma unroll
      for (int j = 0; j < CB; ++j)
#pragma unroll
        for (int u = 0; u < QB; ++u)
          if (c0 + j < d.c && iw0 + u < d.w) dx[(int64_t)j * hw + u] = acc[j][u];
  });
}

// Backward filter: filter k's sums over images [n0, n1), staged `batch`
// at a time. A unit is a channel's row of taps (c * r_count + r) or, last,
// the bias. Where the filter has no more units than threads, thread t sums
// unit t % units over every groups-th staged output row from t / units;
// otherwise it sums units t, t + nt, ... over all of them. A thread keeps
// a row's T taps in registers: a row of dy read once feeds T FMAs. The
// window's row stride, kept off multiples of 8 (launch.h), puts the rows a
// warp reads in different banks.
template <typename E, int T>
__device__ inline void filter_sums(const aq_conv2d_args_t &a, const dims &d, int64_t k, int64_t n0, int64_t n1,
                                   int batch, float *stage, float (&acc)[UPT][T]) {
  const E *xs = (const E *)a.x, *dy = (const E *)a.dy;
  const int t = block_thread(), nt = block_threads(), units = (int)aq_conv2d_tiled_filter_units(&a);
  const int groups = units <= nt ? nt / units : 1, window = d.c * d.hs * d.ws, pq = d.p * d.q;
  const int mine = units <= nt ? (t < groups * units ? 1 : 0) : (units - t + nt - 1) / nt;
  const int grp = units <= nt ? t / units : 0;
  float *const dys = stage + batch * window; /* the windows, then the dy planes */
#pragma unroll
  for (int j = 0; j < UPT; ++j)
#pragma unroll
    for (int s = 0; s < T; ++s) acc[j][s] = 0.0f;
  for (int64_t b0 = n0; b0 < n1; b0 += batch) {
    const int nb = (int)(n1 - b0 < batch ? n1 - b0 : batch);
    __syncthreads();
    stage_windows(d, xs + b0 * d.c * d.h * d.w, nb, stage);
    for (int img = 0; img < nb; ++img) stage_flat(dys + img * pq, dy + ((b0 + img) * d.k + k) * pq, pq);
    staged();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < UPT; ++j) {
      if (j >= mine) break;
      const int unit = units <= nt ? t % units : t + j * nt, c = unit / d.r, r = unit - c * d.r;
      const bool bias = unit == d.c * d.r;
      const int xoff = bias ? 0 : c * d.hs * d.ws + r * d.dh * d.ws, first = units <= nt ? grp : 0;
      int img = first / d.p, p = first - img * d.p;
      for (; img < nb; img += (p += groups) / d.p, p %= d.p) {
        const float *g = dys + img * pq + p * d.q, *x = stage + img * window + xoff + p * d.sh * d.ws;
        if (bias) {
          for (int q = 0; q < d.q; ++q) acc[j][0] += g[q];
          continue;
        }
        for (int q = 0; q < d.q; ++q, x += d.sw) {
          const float v = g[q];
#pragma unroll
          for (int s = 0; s < T; ++s)
            if (s < d.s) acc[j][s] = fmaf(v, x[s * d.dw], acc[j][s]);
        }
      }
    }
  }
}

template <typename E, int S, int T>
__device__ void backward_filter_tiled_taps(const aq_conv2d_args_t &a) {
  const dims d(a);
  const int t = block_thread(), nt = block_threads(), units = (int)aq_conv2d_tiled_filter_units(&a);
  const int groups = units <= nt ? nt / units : 1, batch = (int)aq_conv2d_tiled_images(&a), rows = d.c * d.r;
  /* red and part take the stage's place once it is summed */
  float *stage = tiled_smem, *red = tiled_smem, *part = tiled_smem + AQ_GPU_CONV2D_TILED_FILTER_BLOCK * d.s;
  int ranks;
  const int rank = split_rank<S>(&ranks);
  if (rank < 0) return;
  const int64_t n0 = a.n * rank / ranks, n1 = a.n * (rank + 1) / ranks;
  const int64_t clusters = grid_blocks() / S > 0 ? grid_blocks() / S : 1;
  for (int64_t k = grid_block() / S; k < a.k; k += clusters) {
    float acc[UPT][T];
    filter_sums<E, T>(a, d, k, n0, n1, batch, stage, acc);
    __syncthreads(); /* the stage is summed: red and part take its place */
    if (units <= nt) {
      if (t < groups * units)
#pragma unroll
        for (int s = 0; s < T; ++s)
          if (s < d.s) red[t * d.s + s] = acc[0][s];
      __syncthreads();
      for (int i = t; i < units * d.s; i += nt) {
        float sum = 0.0f;
        for (int g = 0; g < groups; ++g) sum += red[g * units * d.s + i];
        part[i] = sum;
      }
    } else {
#pragma unroll
      for (int j = 0; j < UPT; ++j)
        if (t + j * nt < units)
#pragma unroll
          for (int s = 0; s < T; ++s)
            if (s < d.s) part[(t + j * nt) * d.s + s] = acc[j][s];
    }
    float *const dw = a.dw + k * d.crs;
#ifdef AQ_CONV_CLUSTERS
    if (S > 1) { /* the bias unit's first tap holds its sum */
      cluster_sums<S>(part, rows * d.s + (a.dbias ? 1 : 0), rank, [&](int64_t i, float sum) {
        if (i < rows * d.s) dw[i] = sum;
        else a.dbias[k] = sum;
      });
      continue;
    }
#endif
    __syncthreads();
    for (int i = t; i < rows * d.s; i += nt) dw[i] = part[i];
    if (a.dbias && t == 0) a.dbias[k] = part[rows * d.s];
  }
}

// The taps a thread keeps in registers: the fewest of 3, 5, 8 that hold a
// filter row (launch.h caps rows at AQ_GPU_CONV2D_TILED_TAPS). E: the
// element type of x and dy (float, or uint16_t holding bf16).
template <int S, typename E = float>
__device__ void backward_filter_tiled(const aq_conv2d_args_t &a) {
  if (a.s <= 3) backward_filter_tiled_taps<E, S, 3>(a);
  else if (a.s <= 5) backward_filter_tiled_taps<E, S, 5>(a);
  else backward_filter_tiled_taps<E, S, AQ_GPU_CONV2D_TILED_TAPS>(a);
}

}  // namespace conv
