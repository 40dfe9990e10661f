// The loop every pointwise activation shares.
#pragma once
#include "common.cuh"

#define AQ_CUDA_UNARY(name, expr)                       \
  AQ_KERNEL void name(aq_unary_args_t p) {              \
    int64_t i = global_x();                             \
    if (i >= p.n) return;                               \
    float x = p.x[i];                                   \
    p.y[i] = (expr);                                    \
  }
#define AQ_CUDA_UNARY_BWD(name, expr)                   \
  AQ_KERNEL void name(aq_unary_args_t p) {              \
    int64_t i = global_x();                             \
    if (i >= p.n) return;                               \
    float x = p.x[i], dy = p.dy[i];                     \
    p.y[i] = (expr);                                    \
  }
