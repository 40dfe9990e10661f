// Row-wise softmax and log-softmax, forward and backward: a row per thread.
#include "common.cuh"

__device__ inline void softmax_row(const aq_softmax_args_t &p, int64_t r, bool take_log) {
  const float *x = p.x + r * p.cols;
  float *y = p.out + r * p.cols, mx = x[0];
  for (int64_t j = 1; j < p.cols; ++j) mx = fmaxf(mx, x[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < p.cols; ++j) sum += expf(x[j] - mx);
  float lse = logf(sum) + mx;
  for (int64_t j = 0; j < p.cols; ++j) y[j] = take_log ? x[j] - lse : expf(x[j] - lse);
}

__device__ inline void softmax_bwd_row(const aq_softmax_args_t &p, int64_t r, bool take_log) {
  const float *y = p.y + r * p.cols, *dy = p.dy + r * p.cols;
  float *dx = p.out + r * p.cols, s = 0.0f;
  for (int64_t j = 0; j < p.cols; ++j) s += take_log ? dy[j] : dy[j] * y[j];
  for (int64_t j = 0; j < p.cols; ++j) dx[j] = take_log ? dy[j] - expf(y[j]) * s : y[j] * (dy[j] - s);
}

AQ_KERNEL void aq_softmax_f32(aq_softmax_args_t p) {
  int64_t r = global_x();
  if (r < p.rows) softmax_row(p, r, false);
}
AQ_KERNEL void aq_log_softmax_f32(aq_softmax_args_t p) {
  int64_t r = global_x();
  if (r < p.rows) softmax_row(p, r, true);
}
AQ_KERNEL void aq_softmax_bwd_f32(aq_softmax_args_t p) {
  int64_t r = global_x();
  if (r < p.rows) softmax_bwd_row(p, r, false);
}
AQ_KERNEL void aq_log_softmax_bwd_f32(aq_softmax_args_t p) {
  int64_t r = global_x();
  if (r < p.rows) softmax_bwd_row(p, r, true);
}
