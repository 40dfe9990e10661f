// Adam / AdamW and the step counter it reads.
#include "common.cuh"

AQ_KERNEL void aq_adam_f32(aq_adam_args_t p) {
  int64_t i = global_x();
  if (i >= p.n) return;
  float t = p.steps[0] + 1.0f;
  float c1 = 1.0f - powf(p.beta1, t), c2 = 1.0f - powf(p.beta2, t);
  float g = p.grad[i] + (p.decoupled ? 0.0f : p.weight_decay * p.w[i]);
  float m = p.beta1 * p.m[i] + (1.0f - p.beta1) * g;
  float v = p.beta2 * p.v[i] + (1.0f - p.beta2) * g * g;
  p.m[i] = m, p.v[i] = v;
  float step = (m / c1) / (sqrtf(v / c2) + p.eps);
  p.w[i] -= p.lr * (step + (p.decoupled ? p.weight_decay * p.w[i] : 0.0f));
}

AQ_KERNEL void aq_increment_f32(aq_increment_args_t p) {
  if (global_x() == 0) p.x[0] += 1.0f;
}
