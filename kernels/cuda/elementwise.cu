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

// Block b updates the entry its index falls in (ops.h: blocks of
// ceil(n / blockDim.x) an entry, in entry order).
AQ_KERNEL void aq_sgd_momentum_multi_f32(aq_sgd_multi_args_t p) {
  int64_t b = blockIdx.x;
  for (int k = 0; k < p.count && k < AQ_SGD_MULTI_MAX; ++k) {
    const aq_sgd_args_t &s = p.t[k];
    const int64_t blocks = (s.n + blockDim.x - 1) / blockDim.x;
    if (b >= blocks) {
      b -= blocks;
      continue;
    }
    const int64_t i = b * blockDim.x + threadIdx.x;
    if (i >= s.n) return;
    float g = s.grad[i] + s.weight_decay * s.w[i];
    float v = s.momentum * s.velocity[i] + g;
    s.velocity[i] = v;
    s.w[i] -= s.lr * v;
    return;
  }
}

AQ_KERNEL void aq_copy(aq_copy_args_t p) {
  int64_t i = global_x();
  if (i < p.bytes / 4) ((uint32_t *)p.dst)[i] = ((const uint32_t *)p.src)[i];
}
