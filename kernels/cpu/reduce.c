/* Reductions: column sums over rows (bias gradients) and the mean of a
 * vector (a batch's loss). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/update.h"

/* acc[j] += x[j]: one row into the group's column accumulators. */
AQ_INLINE void add_row_body(const float *x, float *acc, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}
AQ_VECTORISE(add_row, (const float *x, float *acc, int64_t n), (x, acc, n))

/* The sums of columns [lo, hi) into g (alpha applied, beta * out added). */
static void column_sums(const aq_sum_rows_args_t *a, int64_t lo, int64_t hi, float *g) {
  float acc[AQ_COLS_WG];
  for (int64_t j = lo; j < hi; ++j) acc[j - lo] = 0.0f;
  for (int64_t i = 0; i < a->rows; ++i) add_row(a->x + i * a->ldx + lo, acc, hi - lo);
  for (int64_t j = lo; j < hi; ++j)
    g[j - lo] = a->alpha * acc[j - lo] + (a->beta != 0.0f ? a->beta * a->out[j] : 0.0f);
}

static int sum_rows_valid(const aq_sum_rows_args_t *a) {
  return a->x && a->out && a->rows >= 0 && a->cols >= 0 && a->ldx >= a->cols;
}

static int sum_rows(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sum_rows_args_t *a = kernarg;
  if (!sum_rows_valid(a)) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->cols, &lo, &hi)) return 0;
  column_sums(a, lo, hi, a->out + lo);
  return 0;
}

/* The fused form: the sums are the gradient of out, which takes the SGD
 * update (update.h) instead of them. */
static int sum_rows_sgd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_sum_rows_sgd_args_t *a = kernarg;
  if (!sum_rows_valid(&a->sr) || !a->velocity || a->sr.beta != 0.0f) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->sr.cols, &lo, &hi)) return 0;
  float g[AQ_COLS_WG];
  column_sums(&a->sr, lo, hi, g);
  cpu_sgd_update(1, hi - lo, a->sr.out + lo, 0, g, 0, a->velocity + lo, 0, a->lr, a->momentum, a->weight_decay);
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
const aq_kernel_desc_t aq_cpu_sum_rows_sgd_desc = {AQ_KERNEL_SUM_ROWS_SGD, sum_rows_sgd, sizeof(aq_sum_rows_sgd_args_t),
                                                   8, 0, 0};
const aq_kernel_desc_t aq_cpu_mean_desc = {AQ_KERNEL_MEAN, mean, sizeof(aq_mean_args_t), 8, 0, 0};
