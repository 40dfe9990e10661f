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
