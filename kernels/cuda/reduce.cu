// Reductions: column sums (bias gradients) and the mean of a vector.
#include "common.cuh"

// A block takes 32 columns at a time (a warp's width, so loads coalesce)
// and splits the rows among its warps; the warps' sums meet in shared memory
// and are added in a fixed order. One thread a column summing every row
// left a 1024-column bias gradient to 4 blocks walking 256 dependent loads.
// F: the fused form (aq_sum_rows_sgd_f32): the sum is the gradient of out,
// which takes aq_sgd_momentum_f32's update instead of it.
template <bool F>
__device__ void sum_rows(const aq_sum_rows_args_t &p, const aq_sum_rows_sgd_args_t *f) {
  __shared__ float part[1024];
  const int threads = (int)(blockDim.x * blockDim.y * blockDim.z);
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int width = threads < 32 ? threads : 32, slices = threads / width, lane = tid % width, slice = tid / width;
  const int64_t block = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y * gridDim.z;
  for (int64_t c0 = block * width; c0 < p.cols; c0 += blocks * width) {
    const int64_t j = c0 + lane;
    float s = 0.0f;
    if (slice < slices && j < p.cols) {
      /* Eight loads in flight a thread: one at a time, a block waited on
       * memory 32 times in a row (256 rows: 8 us where 2 do); four at a
       * time still waited 8 times. */
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      int64_t i = slice;
      for (; i + 7 * slices < p.rows; i += 8 * slices)
#pragma unroll
        for (int u = 0; u < 8; ++u) acc[u] += p.x[(i + u * slices) * p.ldx + j];
      for (; i < p.rows; i += slices) acc[0] += p.x[i * p.ldx + j];
      s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    part[tid] = s;
    __syncthreads();
    if (slice == 0 && j < p.cols) {
      float t = 0.0f;
      for (int q = 0; q < slices; ++q) t += part[q * width + lane];
      const float v = p.alpha * t + (p.beta != 0.0f ? p.beta * p.out[j] : 0.0f);
      if (!F) {
        p.out[j] = v;
      } else {
        const float w = p.out[j], g = v + f->weight_decay * w, u = f->momentum * f->velocity[j] + g;
        f->velocity[j] = u;
        p.out[j] = w - f->lr * u;
      }
    }
    __syncthreads();
  }
}

AQ_KERNEL void aq_sum_rows_f32(aq_sum_rows_args_t p) { sum_rows<false>(p, nullptr); }

AQ_KERNEL void aq_sum_rows_sgd_f32(aq_sum_rows_sgd_args_t a) {
  if (!a.velocity || a.sr.beta != 0.0f) return; /* the CPU kernel faults; nothing is written here */
  sum_rows<true>(a.sr, &a);
}

AQ_KERNEL void aq_mean_f32(aq_mean_args_t p) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int64_t i = block_thread(); i < p.n; i += block_threads()) s += p.x[i];
  /* Through a tree in a fixed order: thread 0 adding the 256 partials one
   * after another was most of the kernel's 4 us. */
  s = block_sum(s, scratch);
  if (block_thread() == 0) p.out[0] = s / (float)p.n;
}
