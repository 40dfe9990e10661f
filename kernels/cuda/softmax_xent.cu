// Softmax cross-entropy with integer labels: a row per thread (the classes
// are few), the backward from the saved softmax; the forward writes the
// gradient too when given dlogits.
#include "common.cuh"

__device__ __forceinline__ void grad_row(const float *pr, float *d, int64_t classes, int32_t label, float scale) {
  for (int64_t j = 0; j < classes; ++j) d[j] = pr[j] * scale;
  d[label] -= scale;
}

AQ_KERNEL void aq_softmax_xent_f32(aq_softmax_xent_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  const float *x = p.logits + r * p.classes;
  float *pr = p.probs + r * p.classes;
  int32_t label = p.labels[r];
  if (label < 0 || label >= p.classes) {
    p.loss[r] = __int_as_float(0x7fc00000); /* NaN marks the bad label */
    if (p.dlogits)
      for (int64_t j = 0; j < p.classes; ++j) p.dlogits[r * p.classes + j] = __int_as_float(0x7fc00000);
    return;
  }
  float mx = x[0];
  for (int64_t j = 1; j < p.classes; ++j) mx = fmaxf(mx, x[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < p.classes; ++j) sum += (pr[j] = __expf(x[j] - mx));
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < p.classes; ++j) pr[j] *= inv;
  p.loss[r] = logf(sum) - (x[label] - mx);
  if (p.dlogits) grad_row(pr, p.dlogits + r * p.classes, p.classes, label, p.scale);
}

AQ_KERNEL void aq_softmax_xent_bwd_f32(aq_softmax_xent_args_t p) {
  int64_t r = global_x();
  if (r >= p.rows) return;
  int32_t label = p.labels[r];
  float *d = p.dlogits + r * p.classes;
  if (label >= 0 && label < p.classes) grad_row(p.probs + r * p.classes, d, p.classes, label, p.scale);
  else for (int64_t j = 0; j < p.classes; ++j) d[j] = p.probs[r * p.classes + j] * p.scale;
}
