/* aq_tanh_f32 and its backward (from the forward output). */
#include <math.h>

#include "kernels/cpu/table.h"
#include "kernels/cpu/unary.h"

AQ_UNARY_KERNEL(tanh_fwd, aq_tanhf(x))
AQ_UNARY_BWD_KERNEL(tanh_bwd, dy * (1.0f - x * x))

const aq_kernel_desc_t aq_cpu_tanh_desc = {AQ_KERNEL_TANH, tanh_fwd, sizeof(aq_unary_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_tanh_bwd_desc = {AQ_KERNEL_TANH_BWD, tanh_bwd, sizeof(aq_unary_args_t), 8, 0, 0};
