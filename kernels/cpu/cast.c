/* fp32 <-> bf16 casts (round to nearest even, NaN kept quiet), vectorised
 * per ISA (simd.h). */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

AQ_INLINE void to_bf16_loop_body(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = aq_f32_to_bf16(src[i]);
}
AQ_VECTORISE(to_bf16_loop, (const float *src, uint16_t *dst, int64_t n), (src, dst, n))

AQ_INLINE void to_f32_loop_body(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = aq_bf16_to_f32(src[i]);
}
AQ_VECTORISE(to_f32_loop, (const uint16_t *src, float *dst, int64_t n), (src, dst, n))

static int to_bf16(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_cast_args_t *a = kernarg;
  if (!a->src || !a->dst || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  to_bf16_loop((const float *)a->src + lo, (uint16_t *)a->dst + lo, hi - lo);
  return 0;
}

static int to_f32(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_cast_args_t *a = kernarg;
  if (!a->src || !a->dst || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  to_f32_loop((const uint16_t *)a->src + lo, (float *)a->dst + lo, hi - lo);
  return 0;
}

const aq_kernel_desc_t aq_cpu_cast_f32_bf16_desc = {AQ_KERNEL_CAST_F32_BF16, to_bf16, sizeof(aq_cast_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_cast_bf16_f32_desc = {AQ_KERNEL_CAST_BF16_F32, to_f32, sizeof(aq_cast_args_t), 8, 0, 0};
