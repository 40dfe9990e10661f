// GELU (tanh approximation) and its backward (from the input).
#include "activations.cuh"
__device__ inline float gelu_grad(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  float t = tanhf(k0 * (x + k1 * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k0 * (1.0f + 3.0f * k1 * x * x);
}
AQ_CUDA_UNARY(aq_gelu_f32, 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))))
AQ_CUDA_UNARY_BWD(aq_gelu_bwd_f32, dy * gelu_grad(x))
