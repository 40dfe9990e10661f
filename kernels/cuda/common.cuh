// Shared pieces of the CUDA op kernels: the descriptors of include/aquila/ops.h
// (the same structs the CPU kernels take), passed by value as the kernel's one
// parameter, so the runtime hands the kernarg buffer over as one blob.
#pragma once
#include <stdint.h>

// The same sources build as HIP for AMD GPUs (hipcc, kernels/module.mk):
// the few CUDA spellings HIP lacks are mapped here. Warps stay 32 lanes
// wide in these kernels' arithmetic; on a 64-lane wavefront the xor
// shuffles below never cross a 32-lane half.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define AQ_HIP 1
#define __shfl_xor_sync(mask, v, o) __shfl_xor((v), (o), 32)
/* A wavefront runs in lockstep; the fence orders its lanes' shared-memory
 * writes before the reads that follow (HIP 5.2 has no __syncwarp). */
#define __syncwarp() (__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront"), __builtin_amdgcn_wave_barrier())
#define __trap() __builtin_trap()
#endif

#include "aquila/ops.h"

#define AQ_KERNEL extern "C" __global__

__device__ inline int64_t global_x() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }

// Grid-stride helpers for kernels that accept any launch shape: the linear
// index of this thread over the whole 3-D grid, and the number of threads.
__device__ inline int64_t grid_thread() {
  const int64_t block = ((int64_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t in_block = ((int64_t)threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  return block * ((int64_t)blockDim.x * blockDim.y * blockDim.z) + in_block;
}
__device__ inline int64_t grid_threads() {
  return (int64_t)gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y * blockDim.z;
}
__device__ inline int64_t grid_block() { return ((int64_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x; }
__device__ inline int64_t grid_blocks() { return (int64_t)gridDim.x * gridDim.y * gridDim.z; }
__device__ inline int block_thread() { return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; }
__device__ inline int block_threads() { return blockDim.x * blockDim.y * blockDim.z; }

// Index arithmetic of the grid-stride loops: 64-bit division takes tens of
// instructions, 32-bit a few, so where a loop's items number under 2^32
// (`narrow`) its indices divide in 32 bits.
__device__ inline bool narrow_items(int64_t items) { return items <= (int64_t)0xffffffff; }

// q = t / d, and t % d returned, for 0 <= t and 0 < d; both under 2^32
// where narrow.
__device__ __forceinline__ int64_t div_mod(int64_t t, int64_t d, bool narrow, int64_t &q) {
  if (narrow) {
    const uint32_t u = (uint32_t)t, v = (uint32_t)d, w = u / v;
    q = w;
    return u - w * v;
  }
  q = t / d;
  return t - q * d;
}

// Item o of planes x rows x cols (row-major) as (plane, row, col).
__device__ __forceinline__ void plane_coords(int64_t o, int64_t rows, int64_t cols, bool narrow, int64_t &plane,
                                             int64_t &row, int64_t &col) {
  int64_t t;
  col = div_mod(o, cols, narrow, t);
  row = div_mod(t, rows, narrow, plane);
}

// Sum over a warp (every lane gets it).
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (every thread gets it); `scratch` holds 32 values.
// Every thread of the block must call it. Blocks of whole warps reduce by
// shuffles in a fixed order; other sizes (a 1-thread block from a CPU grid)
// add into shared memory.
template <typename T>
__device__ inline T block_sum(T v, T *scratch) {
  const int t = block_thread(), nt = block_threads();
  __syncthreads(); /* scratch may still be read from a previous call */
  if (nt % 32 == 0) {
    v = warp_sum(v);
    if ((t & 31) == 0) scratch[t >> 5] = v;
    __syncthreads();
    T s = 0;
    for (int w = 0; w < nt / 32; ++w) s += scratch[w];
    return s;
  }
  if (t == 0) scratch[0] = 0;
  __syncthreads();
  atomicAdd(&scratch[0], v);
  __syncthreads();
  return scratch[0];
}
