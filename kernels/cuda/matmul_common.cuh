// What the fp32 and bf16 matmul kernels share: kernarg checks and the
// epilogue's activation.
#pragma once
#include "common.cuh"

// The CPU kernel's checks: a kernarg it would fault on leaves C untouched
// here (a GPU kernel cannot return a code without poisoning its context).
__device__ inline bool matmul_valid(const aq_matmul_args_t &p) {
  if (!p.a || !p.b || !p.c || p.m < 0 || p.n < 0 || p.k < 0) return false;
  if (p.ldc < p.n || p.lda < (p.trans_a ? p.m : p.k) || p.ldb < (p.trans_b ? p.k : p.n)) return false;
  if (p.precision != AQ_MATMUL_PRECISION_DEFAULT && p.precision != AQ_MATMUL_PRECISION_EXACT) return false;
  return p.activation == AQ_ACTIVATION_NONE || p.activation == AQ_ACTIVATION_RELU;
}

__device__ __forceinline__ float activate(float v, int32_t act) {
  if (act == AQ_ACTIVATION_RELU) return v > 0.0f ? v : 0.0f;
  return v;
}

__device__ inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
