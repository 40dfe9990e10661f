/* The exported kernel table of kernels-cpu.so. Each op's source defines its
 * descriptors; this gathers them, in a constructor since a descriptor of
 * another translation unit is not a constant initialiser. */
#include "kernels/cpu/table.h"

static const aq_kernel_desc_t *const all[] = {
    &aq_cpu_noop_desc,     &aq_cpu_busy_wait_desc,       &aq_cpu_matmul_desc, &aq_cpu_matmul_fused_desc,
    &aq_cpu_relu_desc,     &aq_cpu_relu_bwd_desc,        &aq_cpu_axpby_desc,
    &aq_cpu_sgd_desc,      &aq_cpu_softmax_xent_desc,    &aq_cpu_softmax_xent_bwd_desc,
    &aq_cpu_sum_rows_desc, &aq_cpu_sum_rows_sgd_desc, &aq_cpu_mean_desc,         &aq_cpu_copy_desc,
    &aq_cpu_adam_desc,     &aq_cpu_increment_desc,
    &aq_cpu_sigmoid_desc,
    &aq_cpu_sigmoid_bwd_desc,
    &aq_cpu_tanh_desc,
    &aq_cpu_tanh_bwd_desc,
    &aq_cpu_gelu_desc,
    &aq_cpu_gelu_bwd_desc,
    &aq_cpu_softmax_desc,
    &aq_cpu_softmax_bwd_desc,
    &aq_cpu_log_softmax_desc,
    &aq_cpu_log_softmax_bwd_desc,
    &aq_cpu_dropout_desc,
    &aq_cpu_dropout_bwd_desc,
    &aq_cpu_layer_norm_desc,
    &aq_cpu_layer_norm_bwd_desc,
    &aq_cpu_layer_norm_bwd_params_desc,
    &aq_cpu_embedding_desc,
    &aq_cpu_embedding_bwd_desc,
    &aq_cpu_cast_f32_bf16_desc,
    &aq_cpu_cast_bf16_f32_desc,
    &aq_cpu_conv2d_desc,
    &aq_cpu_conv2d_bwd_data_desc,
    &aq_cpu_conv2d_bwd_filter_desc,
    &aq_cpu_max_pool_desc,
    &aq_cpu_max_pool_bwd_desc,
    &aq_cpu_avg_pool_desc,
    &aq_cpu_avg_pool_bwd_desc,
    &aq_cpu_batch_norm_desc,
    &aq_cpu_batch_norm_bwd_desc,
    &aq_cpu_add_desc,
    &aq_cpu_sub_desc,
    &aq_cpu_mul_desc,
    &aq_cpu_reduce_sum_desc,
    &aq_cpu_reduce_mean_desc,
};

static aq_kernel_desc_t kernels[sizeof(all) / sizeof(all[0])];

__attribute__((constructor)) static void fill(void) {
  for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); ++i) kernels[i] = *all[i];
}

AQ_DEFINE_CODE_OBJECT("aquila op library (cpu)", kernels);
