// Batch norm per channel over (n, h, w), NCHW, as the CPU kernels define it
// (statistics in double, biased variance for normalising, unbiased for the
// running variance). Whole passes (aq_batch_norm_f32, _bwd_f32): a block
// per channel, the block's threads striding over the channel's n * hw
// values and reducing through block_sum. The two-kernel passes the graph
// runs (ops.h): a block per slice of a channel, so a CNN's 6 or 16 channels
// still fill a GPU; the _stats kernels leave each slice's sums (in double)
// in the partial buffer, the _apply kernels add a channel's in slice order,
// the same way in every block, and finish their slice (the forward one
// also with relu in its write-back: the fused _apply_relu). Blocks walk
// their items grid-stride, so any launch shape is correct.
#include "common.cuh"

namespace bn {

__device__ inline double channel_sum(const aq_batch_norm_args_t &a, const float *v, int64_t c, double shift,
                                     bool square, double *scratch) {
  double s = 0;
  for (int64_t i = block_thread(); i < a.n * a.hw; i += block_threads()) {
    const double d = (double)v[((i / a.hw) * a.c + c) * a.hw + i % a.hw] - shift;
    s += square ? d * d : d;
  }
  return block_sum(s, scratch);
}

// Training: the batch's statistics of channel c saved, the running ones
// updated (the running variance unbiased).
__device__ inline void store_stats(const aq_batch_norm_args_t &a, int64_t c, double mean, double var) {
  const double m = (double)(a.n * a.hw);
  a.mean[c] = (float)mean, a.rstd[c] = (float)(1.0 / sqrt(var + a.eps));
  a.running_mean[c] = (1.0f - a.momentum) * a.running_mean[c] + a.momentum * (float)mean;
  a.running_var[c] = (1.0f - a.momentum) * a.running_var[c] + a.momentum * (float)(var * m / (m > 1 ? m - 1 : 1));
}

}  // namespace bn

AQ_KERNEL void aq_batch_norm_f32(aq_batch_norm_args_t a) {
  if (!a.x || !a.y || !a.running_mean || !a.running_var || a.n <= 0 || a.c <= 0 || a.hw <= 0) return;
  if (a.training && (!a.mean || !a.rstd)) return;
  __shared__ double scratch[32];
  const double m = (double)(a.n * a.hw);
  for (int64_t c = grid_block(); c < a.c; c += grid_blocks()) {
    double mean, var;
    if (a.training) {
      mean = bn::channel_sum(a, a.x, c, 0.0, false, scratch) / m;
      var = bn::channel_sum(a, a.x, c, mean, true, scratch) / m;
      if (block_thread() == 0) bn::store_stats(a, c, mean, var);
    } else {
      mean = a.running_mean[c], var = a.running_var[c];
    }
    const float rstd = (float)(1.0 / sqrt(var + a.eps)), g = a.gamma ? a.gamma[c] : 1.0f,
                b = a.beta ? a.beta[c] : 0.0f, fm = (float)mean;
    for (int64_t i = block_thread(); i < a.n * a.hw; i += block_threads()) {
      const int64_t o = ((i / a.hw) * a.c + c) * a.hw + i % a.hw;
      a.y[o] = ((a.x[o] - fm) * rstd) * g + b;
    }
  }
}

AQ_KERNEL void aq_batch_norm_bwd_f32(aq_batch_norm_args_t a) {
  if (!a.x || !a.dy || !a.dx || !a.mean || !a.rstd || !a.dgamma || !a.dbeta || a.n <= 0 || a.c <= 0 || a.hw <= 0)
    return;
  __shared__ double scratch[32];
  const double m = (double)(a.n * a.hw);
  for (int64_t c = grid_block(); c < a.c; c += grid_blocks()) {
    const float mean = a.mean[c], rstd = a.rstd[c], g = a.gamma ? a.gamma[c] : 1.0f;
    double sdy = 0, sdyx = 0;
    for (int64_t i = block_thread(); i < a.n * a.hw; i += block_threads()) {
      const int64_t o = ((i / a.hw) * a.c + c) * a.hw + i % a.hw;
      sdy += a.dy[o], sdyx += (double)(a.dy[o] * (a.x[o] - mean) * rstd);
    }
    sdy = block_sum(sdy, scratch);
    sdyx = block_sum(sdyx, scratch);
    if (block_thread() == 0) a.dgamma[c] = (float)sdyx, a.dbeta[c] = (float)sdy;
    for (int64_t i = block_thread(); i < a.n * a.hw; i += block_threads()) {
      const int64_t o = ((i / a.hw) * a.c + c) * a.hw + i % a.hw;
      const float xh = (a.x[o] - mean) * rstd;
      a.dx[o] = (float)(g * rstd / m * (m * a.dy[o] - sdy - xh * sdyx));
    }
  }
}

// ---- the two-kernel passes: an item (a block's) is slice s of channel c ----

namespace bn {

__device__ inline bool sliced(const aq_batch_norm_args_t &a) {
  return a.n > 0 && a.c > 0 && a.hw > 0 && a.slices >= 1 && a.partial;
}

// Item it: its channel, and its slice's [lo, hi) of the channel's values.
__device__ inline int64_t slice_of(const aq_batch_norm_args_t &a, int64_t it, int64_t &lo, int64_t &hi) {
  const int64_t m = a.n * a.hw, s = it % a.slices;
  lo = s * m / a.slices, hi = (s + 1) * m / a.slices;
  return it / a.slices;
}

// Calls f(it, c, lo, hi) for each item of this block: item it is slice
// [lo, hi) of channel c's values.
template <typename F>
__device__ inline void each_slice(const aq_batch_norm_args_t &a, F f) {
  for (int64_t it = grid_block(); it < a.c * a.slices; it += grid_blocks()) {
    int64_t lo, hi;
    const int64_t c = slice_of(a, it, lo, hi);
    f(it, c, lo, hi);
  }
}

// The offset of channel c's value i (its (n, h, w) order); `narrow`: the
// channel's values fit 32-bit division.
__device__ __forceinline__ int64_t at(const aq_batch_norm_args_t &a, int64_t c, int64_t i, bool narrow) {
  int64_t n, j;
  if (narrow) {
    const uint32_t u = (uint32_t)i, hw = (uint32_t)a.hw, q = u / hw;
    n = q, j = u - q * hw;
  } else {
    n = i / a.hw, j = i - n * a.hw;
  }
  return (n * a.c + c) * a.hw + j;
}

__device__ inline bool narrow(const aq_batch_norm_args_t &a) { return a.n * a.hw < ((int64_t)1 << 31); }

// A thread's share of channel c's values [lo, hi), UNROLL at a time: f(o,
// n) gets their offsets, the first n valid (the rest repeat the last
// valid one, so loading them is safe). A slice is a few values a thread;
// one at a time, each load waited for the last (an apply's stores may
// alias its loads), so f loads all of o before it uses any.
constexpr int UNROLL = 4;
template <typename F>
__device__ __forceinline__ void by_unroll(const aq_batch_norm_args_t &a, int64_t c, int64_t lo, int64_t hi, F f) {
  const bool nr = narrow(a);
  const int64_t nt = block_threads();
  for (int64_t i = lo + block_thread(); i < hi; i += UNROLL * nt) {
    int64_t o[UNROLL];
    int n = 0;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool in = i + u * nt < hi;
      n += in;
      o[u] = at(a, c, in ? i + u * nt : i, nr);
    }
    f(o, n);
  }
}

// Writes item it's sums of f(o, n) (a pair, over n offsets) into the
// partial buffer.
template <typename F>
__device__ inline void slice_sums(const aq_batch_norm_args_t &a, int64_t it, F f, double *scratch) {
  int64_t lo, hi;
  const int64_t c = slice_of(a, it, lo, hi);
  double s0 = 0, s1 = 0;
  by_unroll(a, c, lo, hi, [&](const int64_t(&o)[UNROLL], int n) { f(o, n, s0, s1); });
  s0 = block_sum(s0, scratch);
  s1 = block_sum(s1, scratch);
  if (block_thread() == 0) a.partial[2 * it] = s0, a.partial[2 * it + 1] = s1;
}

// Channel c's partial sums added in slice order (warp 0's lanes a slice in
// 32 each, then shuffles in a fixed order: the same in every block of a
// launch), into out[2] for the whole block.
__device__ inline void channel_sums(const aq_batch_norm_args_t &a, int64_t c, double *out) {
  const int t = block_thread();
  const double *p = a.partial + c * a.slices * 2;
  __syncthreads(); /* out may still be read from the previous item */
  if (block_threads() >= 32) {
    if (t < 32) {
      double x = 0, y = 0;
      for (int64_t s = t; s < a.slices; s += 32) x += p[2 * s], y += p[2 * s + 1];
      x = warp_sum(x), y = warp_sum(y);
      if (t == 0) out[0] = x, out[1] = y;
    }
  } else if (t == 0) {
    double x = 0, y = 0;
    for (int64_t s = 0; s < a.slices; ++s) x += p[2 * s], y += p[2 * s + 1];
    out[0] = x, out[1] = y;
  }
  __syncthreads();
}

// aq_relu_f32's rule (elementwise.cu) where Relu: v where positive, else 0.
template <bool Relu>
__device__ __forceinline__ float relu_if(float v) {
  return Relu ? (v > 0.0f ? v : 0.0f) : v;
}

}  // namespace bn

AQ_KERNEL void aq_batch_norm_stats_f32(aq_batch_norm_args_t a) {
  if (!a.x || !bn::sliced(a)) return;
  __shared__ double scratch[32];
  for (int64_t it = grid_block(); it < a.c * a.slices; it += grid_blocks()) {
    const double shift = a.x[(it / a.slices) * a.hw]; /* the channel's first value */
    bn::slice_sums(
        a, it,
        [&](const int64_t(&o)[bn::UNROLL], int n, double &s0, double &s1) {
          float v[bn::UNROLL];
#pragma unroll
          for (int u = 0; u < bn::UNROLL; ++u) v[u] = a.x[o[u]];
#pragma unroll
          for (int u = 0; u < bn::UNROLL; ++u)
            if (u < n) {
              const double d = (double)v[u] - shift;
              s0 += d, s1 += d * d;
            }
        },
        scratch);
  }
}

// _apply, and with relu in its write-back where Relu (the fused kernel).
template <bool Relu>
__device__ inline void batch_norm_apply(aq_batch_norm_args_t a) {
  if (!a.x || !a.y || !a.running_mean || !a.running_var || a.n <= 0 || a.c <= 0 || a.hw <= 0 || a.slices < 1) return;
  if (a.training && (!a.mean || !a.rstd || !a.partial)) return;
  __shared__ double sums[2];
  const double m = (double)(a.n * a.hw);
  bn::each_slice(a, [&](int64_t it, int64_t c, int64_t lo, int64_t hi) {
    double mean, var;
    if (a.training) { /* the running statistics are slice 0's to update */
      bn::channel_sums(a, c, sums);
      mean = sums[0] / m, var = sums[1] / m - mean * mean, mean += a.x[c * a.hw];
      if (var < 0) var = 0;
      if (it % a.slices == 0 && block_thread() == 0) bn::store_stats(a, c, mean, var);
    } else {
      mean = a.running_mean[c], var = a.running_var[c];
    }
    const float rstd = (float)(1.0 / sqrt(var + a.eps)), g = a.gamma ? a.gamma[c] : 1.0f,
                b = a.beta ? a.beta[c] : 0.0f, p = rstd * g, q = b - (float)mean * rstd * g;
    bn::by_unroll(a, c, lo, hi, [&](const int64_t(&o)[bn::UNROLL], int n) {
      float v[bn::UNROLL];
#pragma unroll
      for (int u = 0; u < bn::UNROLL; ++u) v[u] = a.x[o[u]];
#pragma unroll
      for (int u = 0; u < bn::UNROLL; ++u)
        if (u < n) a.y[o[u]] = bn::relu_if<Relu>(p * v[u] + q);
    });
  });
}

AQ_KERNEL void aq_batch_norm_apply_f32(aq_batch_norm_args_t a) { batch_norm_apply<false>(a); }
AQ_KERNEL void aq_batch_norm_apply_relu_f32(aq_batch_norm_args_t a) { batch_norm_apply<true>(a); }

AQ_KERNEL void aq_batch_norm_bwd_stats_f32(aq_batch_norm_args_t a) {
  if (!a.x || !a.dy || !a.mean || !bn::sliced(a)) return;
  __shared__ double scratch[32];
  for (int64_t it = grid_block(); it < a.c * a.slices; it += grid_blocks()) {
    const float mean = a.mean[it / a.slices];
    bn::slice_sums(
        a, it,
        [&](const int64_t(&o)[bn::UNROLL], int n, double &s0, double &s1) {
          float dy[bn::UNROLL], x[bn::UNROLL];
#pragma unroll
          for (int u = 0; u < bn::UNROLL; ++u) dy[u] = a.dy[o[u]], x[u] = a.x[o[u]];
#pragma unroll
          for (int u = 0; u < bn::UNROLL; ++u)
            if (u < n) s0 += dy[u], s1 += (double)dy[u] * (x[u] - mean);
        },
        scratch);
  }
}

AQ_KERNEL void aq_batch_norm_bwd_apply_f32(aq_batch_norm_args_t a) {
  if (!a.x || !a.dy || !a.dx || !a.mean || !a.rstd || !a.dgamma || !a.dbeta || !bn::sliced(a)) return;
  __shared__ double sums[2];
  const double m = (double)(a.n * a.hw);
  bn::each_slice(a, [&](int64_t it, int64_t c, int64_t lo, int64_t hi) {
    bn::channel_sums(a, c, sums);
    const float mean = a.mean[c], rstd = a.rstd[c], g = a.gamma ? a.gamma[c] : 1.0f;
    const double sdy = sums[0], sdyx = sums[1] * rstd; /* sum(dy xhat) */
    if (it % a.slices == 0 && block_thread() == 0) a.dgamma[c] = (float)sdyx, a.dbeta[c] = (float)sdy;
    const double kg = (double)g * rstd;
    const float k_dy = (float)kg, k_x = (float)(-kg * rstd * sdyx / m), k = (float)(-kg * sdy / m + kg * rstd * sdyx / m * mean);
    bn::by_unroll(a, c, lo, hi, [&](const int64_t(&o)[bn::UNROLL], int n) {
      float dy[bn::UNROLL], x[bn::UNROLL];
#pragma unroll
      for (int u = 0; u < bn::UNROLL; ++u) dy[u] = a.dy[o[u]], x[u] = a.x[o[u]];
#pragma unroll
      for (int u = 0; u < bn::UNROLL; ++u)
        if (u < n) a.dx[o[u]] = k_dy * dy[u] + k_x * x[u] + k;
    });
  });
}
