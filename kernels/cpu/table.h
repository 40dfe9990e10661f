/* The CPU op library's table: each op's source defines its descriptors,
 * table.c gathers them into the one exported aq_code_object_table. */
#ifndef AQ_KERNELS_CPU_TABLE_H_
#define AQ_KERNELS_CPU_TABLE_H_

#include <stdint.h>

#include "aquila/kernel.h"

typedef struct aq_busy_wait_args {
  uint64_t ns; /* how long each work-group spins */
} aq_busy_wait_args_t;

extern const aq_kernel_desc_t aq_cpu_noop_desc;
extern const aq_kernel_desc_t aq_cpu_busy_wait_desc;
extern const aq_kernel_desc_t aq_cpu_matmul_desc;
extern const aq_kernel_desc_t aq_cpu_matmul_fused_desc;
extern const aq_kernel_desc_t aq_cpu_relu_desc;
extern const aq_kernel_desc_t aq_cpu_relu_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_axpby_desc;
extern const aq_kernel_desc_t aq_cpu_sgd_desc;
extern const aq_kernel_desc_t aq_cpu_sgd_multi_desc;
extern const aq_kernel_desc_t aq_cpu_softmax_xent_desc;
extern const aq_kernel_desc_t aq_cpu_softmax_xent_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_sum_rows_desc;
extern const aq_kernel_desc_t aq_cpu_sum_rows_sgd_desc;
extern const aq_kernel_desc_t aq_cpu_mean_desc;
extern const aq_kernel_desc_t aq_cpu_copy_desc;
extern const aq_kernel_desc_t aq_cpu_adam_desc;
extern const aq_kernel_desc_t aq_cpu_increment_desc;
extern const aq_kernel_desc_t aq_cpu_sigmoid_desc;
extern const aq_kernel_desc_t aq_cpu_sigmoid_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_tanh_desc;
extern const aq_kernel_desc_t aq_cpu_tanh_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_gelu_desc;
extern const aq_kernel_desc_t aq_cpu_gelu_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_softmax_desc;
extern const aq_kernel_desc_t aq_cpu_softmax_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_log_softmax_desc;
extern const aq_kernel_desc_t aq_cpu_log_softmax_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_dropout_desc;
extern const aq_kernel_desc_t aq_cpu_dropout_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_layer_norm_desc;
extern const aq_kernel_desc_t aq_cpu_layer_norm_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_layer_norm_bwd_params_desc;
extern const aq_kernel_desc_t aq_cpu_embedding_desc;
extern const aq_kernel_desc_t aq_cpu_embedding_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_cast_f32_bf16_desc;
extern const aq_kernel_desc_t aq_cpu_cast_bf16_f32_desc;
extern const aq_kernel_desc_t aq_cpu_conv2d_desc;
extern const aq_kernel_desc_t aq_cpu_conv2d_bwd_data_desc;
extern const aq_kernel_desc_t aq_cpu_conv2d_bwd_filter_desc;
extern const aq_kernel_desc_t aq_cpu_max_pool_desc;
extern const aq_kernel_desc_t aq_cpu_max_pool_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_max_pool_bwd_relu_desc;
extern const aq_kernel_desc_t aq_cpu_avg_pool_desc;
extern const aq_kernel_desc_t aq_cpu_avg_pool_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_bwd_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_stats_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_apply_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_apply_relu_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_bwd_stats_desc;
extern const aq_kernel_desc_t aq_cpu_batch_norm_bwd_apply_desc;
extern const aq_kernel_desc_t aq_cpu_add_desc;
extern const aq_kernel_desc_t aq_cpu_sub_desc;
extern const aq_kernel_desc_t aq_cpu_mul_desc;
extern const aq_kernel_desc_t aq_cpu_reduce_sum_desc;
extern const aq_kernel_desc_t aq_cpu_reduce_mean_desc;

#endif
