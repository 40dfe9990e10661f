// GPU kernels the GPU tests dispatch, among them a planted fault.
#include <stdint.h>

typedef struct { int *p; } fault_args_t;
typedef struct { uint64_t *out; uint64_t value; } write_args_t;

extern "C" __global__ void gpu_write(write_args_t a) { *a.out = a.value; }
extern "C" __global__ void gpu_fault(fault_args_t a) { *(volatile int *)a.p = 1; }
