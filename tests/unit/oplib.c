/* The op library's description as the scheduler indexes it
 * (scheduler/oplib.c): each kernel's roles and fields found by name, the
 * fusion rules by consumer, the other builds by agent kind. */
#include <stddef.h>

#include "scheduler/oplib.h"

#include "units.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(oplib, .init = setup, .fini = teardown);

Test(oplib, optimizers_and_products_are_known_by_their_description) {
  oplib_t lib;
  AQ_ASSERT_OK(aq_oplib_open(&lib));
  cr_assert_not_null(lib.table, "Aquila's op library ships its description");
  cr_assert_eq(aq_oplib_lr_offset(&lib, AQ_KERNEL_SGD), offsetof(aq_sgd_args_t, lr));
  cr_assert_eq(aq_oplib_lr_offset(&lib, AQ_KERNEL_ADAM), offsetof(aq_adam_args_t, lr));
  cr_assert_eq(aq_oplib_lr_offset(&lib, AQ_KERNEL_MATMUL), AQ_OP_FIELD_NONE, "a product has no learning rate");
  cr_assert_eq(aq_oplib_precision_offset(&lib, AQ_KERNEL_MATMUL), offsetof(aq_matmul_args_t, precision));
  cr_assert_eq(aq_oplib_precision_offset(&lib, AQ_KERNEL_MATMUL_FUSED),
               offsetof(aq_matmul_fused_args_t, mm) + offsetof(aq_matmul_args_t, precision));
  cr_assert_eq(aq_oplib_precision_offset(&lib, AQ_KERNEL_SGD), AQ_OP_FIELD_NONE);
  cr_assert_null(aq_oplib_find(&lib, "aq_no_such_kernel"));
  cr_assert_null(aq_oplib_find(&lib, AQ_KERNEL_RELU), "relu has nothing to say: no entry");
  /* relu's backward is the consumer of one rule, SGD of two */
  const oplib_entry_t *relu_bwd = aq_oplib_find(&lib, AQ_KERNEL_RELU_BWD), *sgd = aq_oplib_find(&lib, AQ_KERNEL_SGD);
  cr_assert(relu_bwd && __builtin_popcount(relu_bwd->consumes) == 1);
  cr_assert(sgd && __builtin_popcount(sgd->consumes) == 2);
  cr_assert_str_eq(aq_oplib_build(&lib, AQ_AGENT_KIND_CPU), "kernels-cpu.so");
  cr_assert_str_eq(aq_oplib_build(&lib, AQ_AGENT_KIND_GPU), "kernels-cuda.fatbin");
  cr_assert_null(aq_oplib_build(&lib, 7));
  aq_oplib_close(&lib);
  cr_assert_eq(lib.co.handle, 0);
}

/* Each fusion rule of the library names kernels its CPU build has, and its
 * fused kernarg starts with the product's. */
Test(oplib, every_fusion_rule_names_kernels_the_library_has) {
  oplib_t lib;
  AQ_ASSERT_OK(aq_oplib_open(&lib));
  aq_agent_t agents[8];
  size_t n = 0;
  AQ_ASSERT_OK(aq_agents(agents, 8, &n));
  aq_kernel_info_t k;
  for (uint32_t r = 0; r < lib.table->fusion_count; ++r) {
    const aq_op_fusion_t *f = &lib.table->fusions[r];
    AQ_ASSERT_OK(aq_code_object_find_kernel(lib.co, f->fused, agents[0], &k));
    cr_assert_geq(f->kernarg_size, k.kernarg_size, "rule %u: %s", r, f->fused);
    AQ_ASSERT_OK(aq_code_object_find_kernel(lib.co, f->product, agents[0], &k));
    cr_assert_geq(f->kernarg_size, k.kernarg_size, "rule %u: the fused kernarg starts with %s's", r, f->product);
  }
  aq_oplib_close(&lib);
}
