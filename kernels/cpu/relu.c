/* aq_relu_f32 and its backward, vectorised per ISA (simd.h). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"
#include "kernels/cpu/update.h"

AQ_INLINE void relu_loop_body(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
AQ_VECTORISE(relu_loop, (const float *x, float *y, int64_t n), (x, y, n))

/* y is the forward output: the gradient passes where it is positive. Rows
 * of n (strides ld*): the standalone kernel's one range, or a GEMM tile's
 * rows when fused (update.h). */
AQ_INLINE void relu_bwd_rows_body(int64_t rows, int64_t n, const float *y, int64_t ldy, const float *dy,
                                  int64_t lddy, float *dx, int64_t lddx) {
  for (int64_t r = 0; r < rows; ++r, y += ldy, dy += lddy, dx += lddx)
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
AQ_VECTORISE(relu_bwd_rows,
             (int64_t rows, int64_t n, const float *y, int64_t ldy, const float *dy, int64_t lddy, float *dx,
              int64_t lddx),
             (rows, n, y, ldy, dy, lddy, dx, lddx))

void cpu_relu_mask(int64_t rows, int64_t cols, const float *y, int64_t ldy, const float *dy, int64_t lddy, float *dx,
                   int64_t lddx) {
  relu_bwd_rows(rows, cols, y, ldy, dy, lddy, dx, lddx);
}

static int relu(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_relu_args_t *a = kernarg;
  if (!a->x || !a->y || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  relu_loop(a->x + lo, a->y + lo, hi - lo);
  return 0;
}

static int relu_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_relu_args_t *a = kernarg;
  if (!a->x || !a->dy || !a->y || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  relu_bwd_rows(1, hi - lo, a->x + lo, 0, a->dy + lo, 0, a->y + lo, 0);
  return 0;
}

const aq_kernel_desc_t aq_cpu_relu_desc = {AQ_KERNEL_RELU, relu, sizeof(aq_relu_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_relu_bwd_desc = {AQ_KERNEL_RELU_BWD, relu_bwd, sizeof(aq_relu_args_t), 8, 0, 0};
