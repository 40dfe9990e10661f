/* aq_reduce_sum_f32 / aq_reduce_mean_f32: reductions over any set of axes
 * of a strided tensor. A work-group covers a contiguous range of outputs;
 * it walks the reduced index space once (outer) and adds each slice into
 * the range's accumulators (inner), so reducing leading axes of a
 * row-major tensor (a bias gradient) reads x contiguously. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int reduce(const void *kernarg, const aq_dispatch_ctx_t *ctx, int mean) {
  const aq_reduce_args_t *a = kernarg;
  if (!a->x || !a->out || a->rank < 1 || a->rank > AQ_MAX_BCAST_RANK || (a->axes >> a->rank)) return 1;
  /* Kept dimensions (the outputs) and reduced ones, in order. */
  int64_t kshape[AQ_MAX_BCAST_RANK], kstride[AQ_MAX_BCAST_RANK], rshape[AQ_MAX_BCAST_RANK],
      rstride[AQ_MAX_BCAST_RANK];
  int nk = 0, nr = 0;
  int64_t outputs = 1, count = 1;
  for (int d = 0; d < a->rank; ++d) {
    if (a->shape[d] < 0) return 1;
    if (a->axes & (1u << d)) rshape[nr] = a->shape[d], rstride[nr++] = a->stride[d], count *= a->shape[d];
    else kshape[nk] = a->shape[d], kstride[nk++] = a->stride[d], outputs *= a->shape[d];
  }
  int64_t lo, hi;
  if (!aq_group_range(ctx, outputs, &lo, &hi)) return 0;
  enum { CHUNK = 512 };
  double acc[CHUNK];
  int64_t off[CHUNK];
  float alpha = (a->alpha != 0.0f ? a->alpha : 1.0f) / (mean && count > 0 ? (float)count : 1.0f);
  for (int64_t c0 = lo; c0 < hi; c0 += CHUNK) {
    int64_t m = hi - c0 < CHUNK ? hi - c0 : CHUNK;
    for (int64_t i = 0; i < m; ++i) {
      int64_t rem = c0 + i, o = 0;
      for (int d = nk - 1; d >= 0; --d) o += (rem % kshape[d]) * kstride[d], rem /= kshape[d];
      off[i] = o, acc[i] = 0.0;
    }
    int64_t ridx[AQ_MAX_BCAST_RANK] = {0};
    for (int64_t t = 0; t < count; ++t) {
      int64_t base = 0;
      for (int d = 0; d < nr; ++d) base += ridx[d] * rstride[d];
      const float *x = a->x + base;
      for (int64_t i = 0; i < m; ++i) acc[i] += x[off[i]];
      for (int d = nr - 1; d >= 0; --d) {
        if (++ridx[d] < rshape[d]) break;
        ridx[d] = 0;
      }
    }
    float *out = a->out + c0;
    for (int64_t i = 0; i < m; ++i)
      out[i] = alpha * (float)acc[i] + (a->beta != 0.0f ? a->beta * out[i] : 0.0f);
  }
  return 0;
}

static int reduce_sum(const void *k, const aq_dispatch_ctx_t *c) { return reduce(k, c, 0); }
static int reduce_mean(const void *k, const aq_dispatch_ctx_t *c) { return reduce(k, c, 1); }

const aq_kernel_desc_t aq_cpu_reduce_sum_desc = {AQ_KERNEL_REDUCE_SUM, reduce_sum, sizeof(aq_reduce_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_reduce_mean_desc = {AQ_KERNEL_REDUCE_MEAN, reduce_mean, sizeof(aq_reduce_args_t), 8, 0,
                                                  0};
