/* fp32 <-> bf16 casts. */
#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int to_bf16(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_cast_args_t *a = kernarg;
  if (!a->src || !a->dst || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) ((uint16_t *)a->dst)[i] = aq_f32_to_bf16(((const float *)a->src)[i]);
  return 0;
}

static int to_f32(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_cast_args_t *a = kernarg;
  if (!a->src || !a->dst || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) ((float *)a->dst)[i] = aq_bf16_to_f32(((const uint16_t *)a->src)[i]);
  return 0;
}

const aq_kernel_desc_t aq_cpu_cast_f32_bf16_desc = {AQ_KERNEL_CAST_F32_BF16, to_bf16, sizeof(aq_cast_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_cast_bf16_f32_desc = {AQ_KERNEL_CAST_BF16_F32, to_f32, sizeof(aq_cast_args_t), 8, 0, 0};
