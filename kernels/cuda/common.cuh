// Shared pieces of the CUDA op kernels: the descriptors of include/aquila/ops.h
// (the same structs the CPU kernels take), passed by value as the kernel's one
// parameter, so the runtime hands the kernarg buffer over as one blob.
#pragma once
#include <stdint.h>

#include "aquila/ops.h"

#define AQ_KERNEL extern "C" __global__

__device__ inline int64_t global_x() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
