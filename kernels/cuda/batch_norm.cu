// Batch norm per channel over (n, h, w), NCHW, as the CPU kernels define it
// (two-pass statistics in double, biased variance for normalising, unbiased
// for the running variance). A block per channel (grid-stride over
// channels, so any launch shape is correct): the block's threads stride over
// the channel's n * hw values and reduce through block_sum.
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
      if (block_thread() == 0) {
        a.mean[c] = (float)mean, a.rstd[c] = (float)(1.0 / sqrt(var + a.eps));
        a.running_mean[c] = (1.0f - a.momentum) * a.running_mean[c] + a.momentum * (float)mean;
        a.running_var[c] =
            (1.0f - a.momentum) * a.running_var[c] + a.momentum * (float)(var * m / (m > 1 ? m - 1 : 1));
      }
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
