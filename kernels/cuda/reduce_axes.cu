// Sum and mean over any set of axes of a strided tensor on GPUs, as ops.h
// defines them (out contiguous over the kept dimensions, double
// accumulation, alpha 0 meaning 1, beta 0 meaning out is not read). A
// thread per output, grid-stride: reducing leading axes (a bias gradient)
// has consecutive threads read consecutive x.
#include "common.cuh"

namespace reduce_axes {

__device__ inline void run(const aq_reduce_args_t &a, bool mean) {
  if (!a.x || !a.out || a.rank < 1 || a.rank > AQ_MAX_BCAST_RANK || (a.axes >> a.rank)) return;
  int64_t kshape[AQ_MAX_BCAST_RANK], kstride[AQ_MAX_BCAST_RANK], rshape[AQ_MAX_BCAST_RANK],
      rstride[AQ_MAX_BCAST_RANK];
  int nk = 0, nr = 0;
  int64_t outputs = 1, count = 1;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] < 0) return;
    if (a.axes & (1u << d)) rshape[nr] = a.shape[d], rstride[nr++] = a.stride[d], count *= a.shape[d];
    else kshape[nk] = a.shape[d], kstride[nk++] = a.stride[d], outputs *= a.shape[d];
  }
  const float alpha = (a.alpha != 0.0f ? a.alpha : 1.0f) / (mean && count > 0 ? (float)count : 1.0f);
  for (int64_t o = grid_thread(); o < outputs; o += grid_threads()) {
    int64_t rem = o, off = 0;
    for (int d = nk - 1; d >= 0; --d) off += (rem % kshape[d]) * kstride[d], rem /= kshape[d];
    double acc = 0.0;
    for (int64_t t = 0; t < count; ++t) {
      int64_t r = t, base = 0;
      for (int d = nr - 1; d >= 0; --d) base += (r % rshape[d]) * rstride[d], r /= rshape[d];
      acc += a.x[off + base];
    }
    a.out[o] = alpha * (float)acc + (a.beta != 0.0f ? a.beta * a.out[o] : 0.0f);
  }
}

}  // namespace reduce_axes

AQ_KERNEL void aq_reduce_sum_f32(aq_reduce_args_t a) { reduce_axes::run(a, false); }
AQ_KERNEL void aq_reduce_mean_f32(aq_reduce_args_t a) { reduce_axes::run(a, true); }
