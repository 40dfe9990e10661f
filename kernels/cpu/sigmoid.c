/* aq_sigmoid_f32 and its backward (from the forward output). */
#include <math.h>

#include "kernels/cpu/table.h"
#include "kernels/cpu/unary.h"

AQ_UNARY_KERNEL(sigmoid, aq_sigmoidf(x))
AQ_UNARY_BWD_KERNEL(sigmoid_bwd, dy * x * (1.0f - x))

const aq_kernel_desc_t aq_cpu_sigmoid_desc = {AQ_KERNEL_SIGMOID, sigmoid, sizeof(aq_unary_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_sigmoid_bwd_desc = {AQ_KERNEL_SIGMOID_BWD, sigmoid_bwd, sizeof(aq_unary_args_t), 8, 0, 0};
