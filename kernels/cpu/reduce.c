/* Reductions: column sums over rows (bias gradients) and the mean of a
 * vector (a batch's loss). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

/* acc[j] += x[j]: one row into the group's column accumulators. */
AQ_INLINE void add_row_body(const float *x, float *acc, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}
AQ_VECTORISE(add_row, (const float *x, float *acc, int64_t n), (x, acc, n))

static int sum_rows(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sum_rows_args_t *a = kernarg;
  if (!a->x || !a->out || a->rows < 0 || a->cols < 0 || a->ldx < a->cols) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->cols, &lo, &hi)) return 0;
  float acc[AQ_COLS_WG];
  for (int64_t j = lo; j < hi; ++j) acc[j - lo] = 0.0f;
  for (int64_t i = 0; i < a->rows; ++i) add_row(a->x + i * a->ldx + lo, acc, hi - lo);
  for (int64_t j = lo; j < hi; ++j)
    a->out[j] = a->alpha * acc[j - lo] + (a->beta != 0.0f ? a->beta * a->out[j] : 0.0f);
  return 0;
}

static int mean(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)ctx;
  const aq_mean_args_t *a = kernarg;
  if (!a->x || !a->out || a->n <= 0) return 1;
  double s = 0.0;
  for (int64_t i = 0; i < a->n; ++i) s += a->x[i];
  a->out[0] = (float)(s / (double)a->n);
  return 0;
}

const aq_kernel_desc_t aq_cpu_sum_rows_desc = {AQ_KERNEL_SUM_ROWS, sum_rows, sizeof(aq_sum_rows_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_mean_desc = {AQ_KERNEL_MEAN, mean, sizeof(aq_mean_args_t), 8, 0, 0};
