// Layer norm: a row per thread forward and dx; a column per thread for the
// parameter gradients.
#include "common.cuh"

AQ_KERNEL void aq_layer_norm_f32(aq_layer_norm_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  const float *x = p.x + r * p.cols;
  float s = 0.0f, ss = 0.0f;
  for (int64_t j = 0; j < p.cols; ++j) s += x[j];
  float mean = s / p.cols;
  for (int64_t j = 0; j < p.cols; ++j) ss += (x[j] - mean) * (x[j] - mean);
  float rstd = rsqrtf(ss / p.cols + p.eps);
  p.mean[r] = mean, p.rstd[r] = rstd;
  for (int64_t j = 0; j < p.cols; ++j)
    p.y[r * p.cols + j] = ((x[j] - mean) * rstd) * (p.gamma ? p.gamma[j] : 1.0f) + (p.beta ? p.beta[j] : 0.0f);
}

AQ_KERNEL void aq_layer_norm_bwd_f32(aq_layer_norm_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  const float *x = p.x + r * p.cols, *dy = p.dy + r * p.cols;
  float mean = p.mean[r], rstd = p.rstd[r], sg = 0.0f, sgx = 0.0f;
  for (int64_t j = 0; j < p.cols; ++j) {
    float g = dy[j] * (p.gamma ? p.gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
    sg += g, sgx += g * xh;
  }
  float mg = sg / p.cols, mgx = sgx / p.cols;
  for (int64_t j = 0; j < p.cols; ++j) {
    float g = dy[j] * (p.gamma ? p.gamma[j] : 1.0f), xh = (x[j] - mean) * rstd;
    p.dx[r * p.cols + j] = rstd * (g - mg - xh * mgx);
  }
}

AQ_KERNEL void aq_layer_norm_bwd_params_f32(aq_layer_norm_args_t p) {
  int64_t j = global_x();
  if (j >= p.cols) return;
  float dg = 0.0f, db = 0.0f;
  for (int64_t r = 0; r < p.rows; ++r) {
    float dy = p.dy[r * p.cols + j];
    dg += dy * (p.x[r * p.cols + j] - p.mean[r]) * p.rstd[r];
    db += dy;
  }
  p.dgamma[j] = dg, p.dbeta[j] = db;
}
