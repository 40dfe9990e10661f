/* aq_add_f32, aq_sub_f32, aq_mul_f32: z = alpha (x op y) with broadcasting
 * through strides. A work-group covers a contiguous range of z; it walks
 * the range a row (the last dimension) at a time, and the row loop is
 * vectorised for the common strides (both 1, or one of them 0). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

enum { OP_ADD = 0, OP_SUB = 1, OP_MUL = 2 };

AQ_INLINE float apply(int op, float x, float y) { return op == OP_ADD ? x + y : op == OP_SUB ? x - y : x * y; }

/* One run of n elements along the last dimension. */
AQ_INLINE void row_body(int op, const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n,
                        float alpha) {
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * apply(op, x[i], y[i]);
  } else if (sx == 1 && sy == 0) {
    float v = y[0];
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * apply(op, x[i], v);
  } else if (sx == 0 && sy == 1) {
    float v = x[0];
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * apply(op, v, y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) z[i] = alpha * apply(op, x[i * sx], y[i * sy]);
  }
}
AQ_INLINE void add_row_body(const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a) {
  row_body(OP_ADD, x, sx, y, sy, z, n, a);
}
AQ_INLINE void sub_row_body(const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a) {
  row_body(OP_SUB, x, sx, y, sy, z, n, a);
}
AQ_INLINE void mul_row_body(const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a) {
  row_body(OP_MUL, x, sx, y, sy, z, n, a);
}
AQ_VECTORISE(add_row, (const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a),
             (x, sx, y, sy, z, n, a))
AQ_VECTORISE(sub_row, (const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a),
             (x, sx, y, sy, z, n, a))
AQ_VECTORISE(mul_row, (const float *x, int64_t sx, const float *y, int64_t sy, float *z, int64_t n, float a),
             (x, sx, y, sy, z, n, a))

typedef void (*row_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t, float);

static int binary(const void *kernarg, const aq_dispatch_ctx_t *ctx, row_fn row) {
  const aq_binary_args_t *a = kernarg;
  if (!a->x || !a->y || !a->z || a->rank < 1 || a->rank > AQ_MAX_BCAST_RANK) return 1;
  int64_t total = 1;
  for (int d = 0; d < a->rank; ++d) {
    if (a->shape[d] < 0) return 1;
    total *= a->shape[d];
  }
  int64_t lo, hi;
  if (!aq_group_range(ctx, total, &lo, &hi)) return 0;
  float alpha = a->alpha != 0.0f ? a->alpha : 1.0f;
  const int r = a->rank, last = r - 1;
  const int64_t len = a->shape[last];
  /* The multi-index of lo, then a row (or the rest of one) at a time. */
  int64_t idx[AQ_MAX_BCAST_RANK], rem = lo;
  for (int d = last; d >= 0; --d) idx[d] = rem % a->shape[d], rem /= a->shape[d];
  for (int64_t i = lo; i < hi;) {
    int64_t ox = 0, oy = 0;
    for (int d = 0; d < r; ++d) ox += idx[d] * a->stride_x[d], oy += idx[d] * a->stride_y[d];
    int64_t n = len - idx[last] < hi - i ? len - idx[last] : hi - i;
    row(a->x + ox, a->stride_x[last], a->y + oy, a->stride_y[last], a->z + i, n, alpha);
    i += n;
    idx[last] += n;
    for (int d = last; d > 0 && idx[d] == a->shape[d]; --d) idx[d] = 0, ++idx[d - 1];
  }
  return 0;
}

static int add(const void *k, const aq_dispatch_ctx_t *c) { return binary(k, c, add_row); }
static int sub(const void *k, const aq_dispatch_ctx_t *c) { return binary(k, c, sub_row); }
static int mul(const void *k, const aq_dispatch_ctx_t *c) { return binary(k, c, mul_row); }

const aq_kernel_desc_t aq_cpu_add_desc = {AQ_KERNEL_ADD, add, sizeof(aq_binary_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_sub_desc = {AQ_KERNEL_SUB, sub, sizeof(aq_binary_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_mul_desc = {AQ_KERNEL_MUL, mul, sizeof(aq_binary_args_t), 8, 0, 0};
