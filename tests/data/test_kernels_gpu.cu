// GPU kernels the GPU tests dispatch, among them a planted fault.
#include <stdint.h>

typedef struct { int *p; } fault_args_t;
typedef struct { uint64_t *out; uint64_t value; } write_args_t;

extern "C" __global__ void gpu_write(write_args_t a) { *a.out = a.value; }
extern "C" __global__ void gpu_fault(fault_args_t a) { *(volatile int *)a.p = 1; }

// Added for tests/gpu/memory.c: an empty kernel and one that adds one to
// every element (a grid of work-items, one each).
typedef struct { float *p; uint32_t n; } add_one_args_t;
extern "C" __global__ void gpu_empty() {}
extern "C" __global__ void gpu_add_one(add_one_args_t a) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.n) a.p[i] += 1.0f;
}

// Added for tests/gpu/graphs.c: a store through a pointer the kernel reads
// from memory, so a kernel whose arguments never change can fault later.
typedef struct { uint64_t **where; uint64_t value; } write_through_args_t;
extern "C" __global__ void gpu_write_through(write_through_args_t a) { **a.where = a.value; }

// Added for tests/gpu/gpu.c: how much dynamic shared memory (the packet's
// group segment) a launch got, checked by writing and reading its last byte.
typedef struct { uint32_t *out; } group_size_args_t;
extern "C" __global__ void gpu_group_size(group_size_args_t a) {
  extern __shared__ volatile uint8_t group[];
  uint32_t n;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  if (n) group[n - 1] = 7;
  __syncthreads();
  if (threadIdx.x == 0) *a.out = n && group[n - 1] == 7 ? n : 0;
}
