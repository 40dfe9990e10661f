// Reductions: column sums (bias gradients) and the mean of a vector.
#include "common.cuh"

AQ_KERNEL void aq_sum_rows_f32(aq_sum_rows_args_t p) {
  int64_t j = global_x();
  if (j >= p.cols) return;
  float s = 0.0f;
  for (int64_t i = 0; i < p.rows; ++i) s += p.x[i * p.ldx + j];
  p.out[j] = p.alpha * s + (p.beta != 0.0f ? p.beta * p.out[j] : 0.0f);
}

AQ_KERNEL void aq_mean_f32(aq_mean_args_t p) {
  __shared__ float part[256];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) s += p.x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (unsigned i = 0; i < blockDim.x; ++i) t += part[i];
    p.out[0] = t / (float)p.n;
  }
}
