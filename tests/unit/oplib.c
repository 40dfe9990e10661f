/* The op library's description as the scheduler indexes it
 * (scheduler/oplib.c): each kernel's roles and fields found by name, the
 * fusion rules by consumer, the other builds by agent kind. */
#include <stddef.h>

#include "kernels/cuda/launch.h"
#include "scheduler/oplib.h"

#include "units.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(oplib, .init = setup, .fini = teardown);

Test(oplib, optimizers_and_products_are_known_by_their_description) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  cr_assert_not_null(lib->table, "Aquila's op library ships its description");
  cr_assert_eq(aq_oplib_lr_offset(lib, AQ_KERNEL_SGD), offsetof(aq_sgd_args_t, lr));
  cr_assert_eq(aq_oplib_lr_offset(lib, AQ_KERNEL_ADAM), offsetof(aq_adam_args_t, lr));
  cr_assert_eq(aq_oplib_lr_offset(lib, AQ_KERNEL_MATMUL), AQ_OP_FIELD_NONE, "a product has no learning rate");
  cr_assert_eq(aq_oplib_precision_offset(lib, AQ_KERNEL_MATMUL), offsetof(aq_matmul_args_t, precision));
  cr_assert_eq(aq_oplib_precision_offset(lib, AQ_KERNEL_MATMUL_FUSED),
               offsetof(aq_matmul_fused_args_t, mm) + offsetof(aq_matmul_args_t, precision));
  cr_assert_eq(aq_oplib_precision_offset(lib, AQ_KERNEL_SGD), AQ_OP_FIELD_NONE);
  cr_assert_null(aq_oplib_find(lib, "aq_no_such_kernel"));
  cr_assert_null(aq_oplib_find(lib, AQ_KERNEL_TANH), "tanh has nothing to say: no entry");
  /* relu is the consumer of one rule (batch norm's), its backward of two
   * (a matmul's, max-pool's), SGD of two */
  const oplib_entry_t *relu = aq_oplib_find(lib, AQ_KERNEL_RELU), *relu_bwd = aq_oplib_find(lib, AQ_KERNEL_RELU_BWD);
  const oplib_entry_t *sgd = aq_oplib_find(lib, AQ_KERNEL_SGD);
  cr_assert(relu && !relu->op && __builtin_popcount(relu->consumes) == 1);
  cr_assert(relu_bwd && __builtin_popcount(relu_bwd->consumes) == 2);
  cr_assert(sgd && __builtin_popcount(sgd->consumes) == 2);
  cr_assert_str_eq(aq_oplib_build(lib, AQ_AGENT_KIND_CPU), "kernels-cpu.so");
  cr_assert_str_eq(aq_oplib_build(lib, AQ_AGENT_KIND_GPU), "kernels-cuda.fatbin");
  cr_assert_null(aq_oplib_build(lib, 7));
  const oplib_t *again;
  AQ_ASSERT_OK(aq_op_library_ops(&again));
  cr_assert_eq(again, lib, "indexed once a runtime");
}

/* Each fusion rule of the library names kernels its CPU build has, and its
 * fused kernarg starts with the product's. */
Test(oplib, every_fusion_rule_names_kernels_the_library_has) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  aq_agent_t agents[8];
  size_t n = 0;
  AQ_ASSERT_OK(aq_agents(agents, 8, &n));
  aq_kernel_info_t k;
  for (uint32_t r = 0; r < lib->table->fusion_count; ++r) {
    const aq_op_fusion_t *f = &lib->table->fusions[r];
    AQ_ASSERT_OK(aq_code_object_find_kernel(lib->co, f->fused, agents[0], &k));
    cr_assert_geq(f->kernarg_size, k.kernarg_size, "rule %u: %s", r, f->fused);
    AQ_ASSERT_OK(aq_code_object_find_kernel(lib->co, f->product, agents[0], &k));
    cr_assert_geq(f->kernarg_size, k.kernarg_size, "rule %u: the fused kernarg starts with %s's", r, f->product);
  }
}

/* The GPU build's launch rules reach the scheduler through the
 * description, as kernels/cuda/launch.h states them: the same variant,
 * shape and group segment, with no GPU needed to ask. */
Test(oplib, the_gpu_builds_launch_rules_come_from_the_description) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  aq_matmul_args_t wide = {.m = 4096, .n = 4096, .k = 4096, .lda = 4096, .ldb = 4096, .ldc = 4096, .alpha = 1},
                   skinny = {.m = 256, .n = 10, .k = 1024, .lda = 1024, .ldb = 10, .ldc = 10, .alpha = 1};
  aq_matmul_args_t *cases[] = {&wide, &skinny};
  for (int i = 0; i < 2; ++i) {
    const char *want = aq_gpu_op_kernel(AQ_KERNEL_MATMUL, cases[i]);
    cr_assert_str_eq(aq_oplib_launch_kernel(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_MATMUL, cases[i]), want);
    aq_dispatch_shape_t cpu = aq_matmul_grid(cases[i]), a = aq_gpu_op_shape(AQ_KERNEL_MATMUL, cases[i], cpu);
    aq_dispatch_shape_t b = aq_oplib_launch_shape(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_MATMUL, cases[i], cpu);
    cr_assert_arr_eq(a.grid, b.grid, sizeof(a.grid));
    cr_assert_arr_eq(a.workgroup, b.workgroup, sizeof(a.workgroup));
  }
  cr_assert_str_neq(aq_oplib_launch_kernel(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_MATMUL, &skinny), AQ_KERNEL_MATMUL,
                    "a skinny product takes a variant");
  cr_assert_eq(aq_oplib_group_segment(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_MATMUL_BF16, &wide),
               AQ_GPU_MATMUL_BF16_GROUP_SEGMENT);
  cr_assert_eq(aq_oplib_group_segment(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_MATMUL, &wide), 0);
  /* CPU agents launch every kernel as the task says */
  cr_assert_str_eq(aq_oplib_launch_kernel(lib, AQ_AGENT_KIND_CPU, AQ_KERNEL_MATMUL, &skinny), AQ_KERNEL_MATMUL);
  aq_dispatch_shape_t cpu = aq_matmul_grid(&wide), same = aq_oplib_launch_shape(lib, AQ_AGENT_KIND_CPU,
                                                                                 AQ_KERNEL_MATMUL, &wide, cpu);
  cr_assert_arr_eq(cpu.grid, same.grid, sizeof(cpu.grid));
}
