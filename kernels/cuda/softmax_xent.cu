// Softmax cross-entropy with integer labels: a row per thread (the classes
// are few), the backward from the saved softmax.
#include "common.cuh"

AQ_KERNEL void aq_softmax_xent_f32(aq_softmax_xent_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  const float *x = p.logits + r * p.classes;
  float *pr = p.probs + r * p.classes;
  int32_t label = p.labels[r];
  if (label < 0 || label >= p.classes) {
    p.loss[r] = __int_as_float(0x7fc00000); /* NaN marks the bad label */
    return;
  }
  float mx = x[0];
  for (int64_t j = 1; j < p.classes; ++j) mx = fmaxf(mx, x[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < p.classes; ++j) sum += (pr[j] = __expf(x[j] - mx));
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < p.classes; ++j) pr[j] *= inv;
  p.loss[r] = logf(sum) - (x[label] - mx);
}

AQ_KERNEL void aq_softmax_xent_bwd_f32(aq_softmax_xent_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  const float *pr = p.probs + r * p.classes;
  float *d = p.dlogits + r * p.classes;
  int32_t label = p.labels[r];
  for (int64_t j = 0; j < p.classes; ++j) d[j] = pr[j] * p.scale;
  if (label >= 0 && label < p.classes) d[label] -= p.scale;
}
