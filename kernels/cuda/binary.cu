// Broadcasting add / sub / mul (z = alpha (x op y)) on GPUs, as ops.h
// defines them: z contiguous over shape[0..rank), x and y read through
// their own strides (0 broadcasts). A thread per element of z, grid-stride
// (any launch shape is correct); consecutive threads write consecutive z.
#include "common.cuh"

namespace binary {

enum { ADD, SUB, MUL };

template <int OP>
__device__ inline void run(const aq_binary_args_t &a) {
  if (!a.x || !a.y || !a.z || a.rank < 1 || a.rank > AQ_MAX_BCAST_RANK) return;
  int64_t total = 1;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] < 0) return;
    total *= a.shape[d];
  }
  const float alpha = a.alpha != 0.0f ? a.alpha : 1.0f;
  for (int64_t i = grid_thread(); i < total; i += grid_threads()) {
    int64_t rem = i, ox = 0, oy = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t q = rem % a.shape[d];
      rem /= a.shape[d];
      ox += q * a.stride_x[d], oy += q * a.stride_y[d];
    }
    const float x = a.x[ox], y = a.y[oy];
    a.z[i] = alpha * (OP == ADD ? x + y : OP == SUB ? x - y : x * y);
  }
}

}  // namespace binary

AQ_KERNEL void aq_add_f32(aq_binary_args_t a) { binary::run<binary::ADD>(a); }
AQ_KERNEL void aq_sub_f32(aq_binary_args_t a) { binary::run<binary::SUB>(a); }
AQ_KERNEL void aq_mul_f32(aq_binary_args_t a) { binary::run<binary::MUL>(a); }
