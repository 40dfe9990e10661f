// Reductions: column sums (bias gradients) and the mean of a vector.
#include "common.cuh"
#include "launch.h" /* AQ_GPU_SUM_ROWS_WIDTH */

// A block takes AQ_GPU_SUM_ROWS_WIDTH (8) columns at a time and splits the
// rows among 32 slices of its threads, so a 256-row bias gradient is one
// round of eight loads in flight a thread and a 1024-column one 128 blocks
// (32 columns a block left 32 blocks each waiting on memory four times:
// 6 us on an H100 where 3 do). Eight columns are a 32-byte sector, so the
// loads still use whole sectors.
// F: the fused form (aq_sum_rows_sgd_f32): the sum is the gradient of out,
// which takes aq_sgd_momentum_f32's update instead of it.
template <bool F>
__device__ void sum_rows(const aq_sum_rows_args_t &p, const aq_sum_rows_sgd_args_t *f) {
  __shared__ float part[1024];
  const int threads = block_threads(), tid = block_thread();
  const int width = threads < AQ_GPU_SUM_ROWS_WIDTH ? threads : AQ_GPU_SUM_ROWS_WIDTH, slices = threads / width;
  const int lane = tid % width, slice = tid / width;
  const int64_t block = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y * gridDim.z;
  for (int64_t c0 = block * width; c0 < p.cols; c0 += blocks * width) {
    const int64_t j = c0 + lane;
    /* What the write-back reads, asked for before the sums so the two waits overlap. */
    float old = 0.0f, vel = 0.0f;
    if (slice == 0 && j < p.cols) {
      if (F || p.beta != 0.0f) old = p.out[j];
      if (F) vel = f->velocity[j];
    }
    float s = 0.0f;
    if (slice < slices && j < p.cols) {
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      int64_t i = slice;
      for (; i + 7 * slices < p.rows; i += 8 * slices)
#pragma unroll
        for (int u = 0; u < 8; ++u) acc[u] += p.x[(i + u * slices) * p.ldx + j];
      for (; i < p.rows; i += slices) acc[0] += p.x[i * p.ldx + j];
      s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    /* The slices' sums meet in a fixed order: across the 4 slices of each
     * warp by shuffles, then over the warps' partials in shared memory (one
     * barrier; a tree over all 32 slices took five). Blocks whose warps do
     * not hold whole groups of 8 columns (a CPU grid's) take the tree. */
    const bool warps = width == 8 && threads % 32 == 0;
    if (warps) {
      s += __shfl_xor_sync(0xffffffffu, s, 8);
      s += __shfl_xor_sync(0xffffffffu, s, 16);
      if ((tid & 31) < 8) part[(tid >> 5) * 8 + lane] = s;
    } else {
      part[tid] = s;
    }
    __syncthreads();
    for (int stride = 1; !warps && stride < slices; stride *= 2) {
      if (slice % (2 * stride) == 0 && slice + stride < slices) part[tid] += part[tid + stride * width];
      __syncthreads();
    }
    if (slice == 0 && j < p.cols) {
      float sum = part[lane];
      if (warps)
        for (int w = 1; w < threads / 32; ++w) sum += part[w * 8 + lane];
      const float v = p.alpha * sum + (p.beta != 0.0f ? p.beta * old : 0.0f);
      if (!F) {
        p.out[j] = v;
      } else {
        const float g = v + f->weight_decay * old, u = f->momentum * vel + g;
        f->velocity[j] = u;
        p.out[j] = old - f->lr * u;
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
