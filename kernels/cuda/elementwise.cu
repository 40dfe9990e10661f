// Elementwise ops: relu and its backward, axpby, SGD with momentum.
#include "common.cuh"

AQ_KERNEL void aq_relu_f32(aq_relu_args_t p) {
  int64_t i = global_x();
  if (i < p.n) p.y[i] = p.x[i] > 0.0f ? p.x[i] : 0.0f;
}

AQ_KERNEL void aq_relu_bwd_f32(aq_relu_args_t p) {
  int64_t i = global_x();
  if (i < p.n) p.y[i] = p.x[i] > 0.0f ? p.dy[i] : 0.0f;
}

AQ_KERNEL void aq_axpby_f32(aq_axpby_args_t p) {
  int64_t i = global_x();
  if (i < p.n) p.z[i] = p.alpha * p.x[i] + (p.y ? p.beta * p.y[i] : 0.0f);
}

AQ_KERNEL void aq_sgd_momentum_f32(aq_sgd_args_t p) {
  int64_t i = global_x();
  if (i >= p.n) return;
  float g = p.grad[i] + p.weight_decay * p.w[i];
  float v = p.momentum * p.velocity[i] + g;
  p.velocity[i] = v;
  p.w[i] -= p.lr * v;
}

AQ_KERNEL void aq_copy(aq_copy_args_t p) {
  int64_t i = global_x();
  if (i < p.bytes / 4) ((uint32_t *)p.dst)[i] = ((const uint32_t *)p.src)[i];
}
