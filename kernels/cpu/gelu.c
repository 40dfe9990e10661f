/* aq_gelu_f32 (tanh approximation) and its backward (from the input). */
#include <math.h>

#include "kernels/cpu/table.h"
#include "kernels/cpu/unary.h"

#define K0 0.7978845608028654f /* sqrt(2 / pi) */
#define K1 0.044715f

AQ_INLINE float gelu_grad(float x) {
  float u = K0 * (x + K1 * x * x * x), t = aq_tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * K0 * (1.0f + 3.0f * K1 * x * x);
}

AQ_UNARY_KERNEL(gelu, 0.5f * x * (1.0f + aq_tanhf(K0 * (x + K1 * x * x * x))))
AQ_UNARY_BWD_KERNEL(gelu_bwd, dy * gelu_grad(x))

const aq_kernel_desc_t aq_cpu_gelu_desc = {AQ_KERNEL_GELU, gelu, sizeof(aq_unary_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_gelu_bwd_desc = {AQ_KERNEL_GELU_BWD, gelu_bwd, sizeof(aq_unary_args_t), 8, 0, 0};
