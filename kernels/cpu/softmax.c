/* Row-wise softmax and log-softmax, forward and backward. */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/vmath.h"

/* One row: y = softmax(x) or log-softmax(x), vectorised per ISA. */
AQ_INLINE void row_fwd_body(const float *x, float *y, int64_t n, int take_log) {
  float mx = aq_row_max(x, n);
  float lse = logf(aq_row_sum_exp(x, n, mx)) + mx;
  if (take_log)
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] - lse;
  else
    for (int64_t j = 0; j < n; ++j) y[j] = aq_expf(x[j] - lse);
}
AQ_VECTORISE(row_fwd, (const float *x, float *y, int64_t n, int take_log), (x, y, n, take_log))

static int rows_of(const aq_dispatch_ctx_t *ctx, const aq_softmax_args_t *a, int64_t *lo, int64_t *hi) {
  return a->rows >= 0 && a->cols > 0 && aq_group_range(ctx, a->rows, lo, hi);
}

static int forward(const void *kernarg, const aq_dispatch_ctx_t *ctx, int take_log) {
  const aq_softmax_args_t *a = kernarg;
  if (!a->x || !a->out) return 1;
  int64_t lo, hi;
  if (!rows_of(ctx, a, &lo, &hi)) return a->rows < 0 || a->cols <= 0;
  for (int64_t r = lo; r < hi; ++r) row_fwd(a->x + r * a->cols, a->out + r * a->cols, a->cols, take_log);
  return 0;
}

static int backward(const void *kernarg, const aq_dispatch_ctx_t *ctx, int take_log) {
  const aq_softmax_args_t *a = kernarg;
  if (!a->y || !a->dy || !a->out) return 1;
  int64_t lo, hi;
  if (!rows_of(ctx, a, &lo, &hi)) return a->rows < 0 || a->cols <= 0;
  for (int64_t r = lo; r < hi; ++r) {
    const float *y = a->y + r * a->cols, *dy = a->dy + r * a->cols;
    float *dx = a->out + r * a->cols;
    double s = 0;
    for (int64_t j = 0; j < a->cols; ++j) s += take_log ? dy[j] : dy[j] * y[j];
    for (int64_t j = 0; j < a->cols; ++j) dx[j] = take_log ? dy[j] - expf(y[j]) * (float)s : y[j] * (dy[j] - (float)s);
  }
  return 0;
}

static int softmax(const void *k, const aq_dispatch_ctx_t *c) { return forward(k, c, 0); }
static int log_softmax(const void *k, const aq_dispatch_ctx_t *c) { return forward(k, c, 1); }
static int softmax_bwd(const void *k, const aq_dispatch_ctx_t *c) { return backward(k, c, 0); }
static int log_softmax_bwd(const void *k, const aq_dispatch_ctx_t *c) { return backward(k, c, 1); }

const aq_kernel_desc_t aq_cpu_softmax_desc = {AQ_KERNEL_SOFTMAX, softmax, sizeof(aq_softmax_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_softmax_bwd_desc = {AQ_KERNEL_SOFTMAX_BWD, softmax_bwd, sizeof(aq_softmax_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_log_softmax_desc = {AQ_KERNEL_LOG_SOFTMAX, log_softmax, sizeof(aq_softmax_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_log_softmax_bwd_desc = {AQ_KERNEL_LOG_SOFTMAX_BWD, log_softmax_bwd,
                                                      sizeof(aq_softmax_args_t), 8, 0, 0};
