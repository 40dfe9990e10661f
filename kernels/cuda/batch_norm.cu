// Batch norm, a thread per channel.
#include "common.cuh"

AQ_KERNEL void aq_batch_norm_f32(aq_batch_norm_args_t a) {
  int64_t c = global_x();
  if (c >= a.c) return;
  float m = (float)(a.n * a.hw), mean, var;
  if (a.training) {
    float s = 0.0f, ss = 0.0f;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t i = 0; i < a.hw; ++i) s += a.x[(n * a.c + c) * a.hw + i];
    mean = s / m;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t i = 0; i < a.hw; ++i) {
        float d = a.x[(n * a.c + c) * a.hw + i] - mean;
        ss += d * d;
      }
    var = ss / m;
    a.mean[c] = mean, a.rstd[c] = rsqrtf(var + a.eps);
    a.running_mean[c] = (1.0f - a.momentum) * a.running_mean[c] + a.momentum * mean;
    a.running_var[c] = (1.0f - a.momentum) * a.running_var[c] + a.momentum * var * m / (m > 1 ? m - 1 : 1);
  } else {
    mean = a.running_mean[c], var = a.running_var[c];
  }
  float rstd = rsqrtf(var + a.eps), g = a.gamma ? a.gamma[c] : 1.0f, b = a.beta ? a.beta[c] : 0.0f;
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t i = 0; i < a.hw; ++i) {
      int64_t o = (n * a.c + c) * a.hw + i;
      a.y[o] = ((a.x[o] - mean) * rstd) * g + b;
    }
}

AQ_KERNEL void aq_batch_norm_bwd_f32(aq_batch_norm_args_t a) {
  int64_t c = global_x();
  if (c >= a.c) return;
  float m = (float)(a.n * a.hw), mean = a.mean[c], rstd = a.rstd[c], g = a.gamma ? a.gamma[c] : 1.0f;
  float sdy = 0.0f, sdyx = 0.0f;
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t i = 0; i < a.hw; ++i) {
      int64_t o = (n * a.c + c) * a.hw + i;
      sdy += a.dy[o], sdyx += a.dy[o] * (a.x[o] - mean) * rstd;
    }
  a.dgamma[c] = sdyx, a.dbeta[c] = sdy;
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t i = 0; i < a.hw; ++i) {
      int64_t o = (n * a.c + c) * a.hw + i;
      float xh = (a.x[o] - mean) * rstd;
      a.dx[o] = g * rstd / m * (m * a.dy[o] - sdy - xh * sdyx);
    }
}
