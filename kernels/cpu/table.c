/* The exported kernel table of kernels-cpu.so. Each op's source defines its
 * descriptors; this gathers them, in a constructor since a descriptor of
 * another translation unit is not a constant initialiser. */
#include "kernels/cpu/table.h"

#include "kernels/cpu/settings.h"

static const aq_kernel_desc_t *const all[] = {
    &aq_cpu_noop_desc,     &aq_cpu_busy_wait_desc,       &aq_cpu_matmul_desc, &aq_cpu_matmul_fused_desc,
    &aq_cpu_relu_desc,     &aq_cpu_relu_bwd_desc,        &aq_cpu_axpby_desc,
    &aq_cpu_sgd_desc,      &aq_cpu_sgd_multi_desc, &aq_cpu_softmax_xent_desc,    &aq_cpu_softmax_xent_bwd_desc,
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
    &aq_cpu_max_pool_bwd_relu_desc,
    &aq_cpu_avg_pool_desc,
    &aq_cpu_avg_pool_bwd_desc,
    &aq_cpu_batch_norm_desc,
    &aq_cpu_batch_norm_bwd_desc,
    &aq_cpu_batch_norm_stats_desc,
    &aq_cpu_batch_norm_apply_desc,
    &aq_cpu_batch_norm_apply_relu_desc,
    &aq_cpu_batch_norm_bwd_stats_desc,
    &aq_cpu_batch_norm_bwd_apply_desc,
    &aq_cpu_add_desc,
    &aq_cpu_sub_desc,
    &aq_cpu_mul_desc,
    &aq_cpu_reduce_sum_desc,
    &aq_cpu_reduce_mean_desc,
};

static aq_kernel_desc_t kernels[sizeof(all) / sizeof(all[0])];

/* Every kernel is entered through one of these: it takes the runtime's
 * settings from the dispatch context before the kernel picks a path. */
#define E(i)                                                     \
  static int entry_##i(const void *k, const aq_dispatch_ctx_t *c) { \
    aq_cpu_settings_take(c);                                     \
    return i < sizeof(all) / sizeof(all[0]) ? all[i]->fn(k, c) : 1; \
  }
#define ENTRIES_MAX 64
E(0) E(1) E(2) E(3) E(4) E(5) E(6) E(7) E(8) E(9) E(10) E(11) E(12) E(13) E(14) E(15) E(16) E(17) E(18) E(19) E(20) E(21) E(22) E(23) E(24) E(25) E(26) E(27) E(28) E(29) E(30) E(31) E(32) E(33) E(34) E(35) E(36) E(37) E(38) E(39) E(40) E(41) E(42) E(43) E(44) E(45) E(46) E(47) E(48) E(49) E(50) E(51) E(52) E(53) E(54) E(55) E(56) E(57) E(58) E(59) E(60) E(61) E(62) E(63)
#undef E
#define E(i) entry_##i,
static const aq_cpu_kernel_fn_t entries[ENTRIES_MAX] = {E(0) E(1) E(2) E(3) E(4) E(5) E(6) E(7) E(8) E(9) E(10) E(11) E(12) E(13) E(14) E(15) E(16) E(17) E(18) E(19) E(20) E(21) E(22) E(23) E(24) E(25) E(26) E(27) E(28) E(29) E(30) E(31) E(32) E(33) E(34) E(35) E(36) E(37) E(38) E(39) E(40) E(41) E(42) E(43) E(44) E(45) E(46) E(47) E(48) E(49) E(50) E(51) E(52) E(53) E(54) E(55) E(56) E(57) E(58) E(59) E(60) E(61) E(62) E(63)};
#undef E
_Static_assert(sizeof(all) / sizeof(all[0]) <= ENTRIES_MAX, "more kernels than entries: add E(n)s");

__attribute__((constructor)) static void fill(void) {
  for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
    kernels[i] = *all[i];
    kernels[i].fn = entries[i];
  }
}

AQ_DEFINE_CODE_OBJECT("aquila op library (cpu)", kernels);
