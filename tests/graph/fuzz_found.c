/* What make fuzz-graph found, one test each: the smallest call sequence
 * that crashed, leaked or misreported before its fix. */
#include <math.h>

#include "../runtime/common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(fuzz_found, .init = setup, .fini = teardown);

static void assert_refused(aq_status_t s, aq_status_t want, const char *needle) {
  cr_assert_eq(s, want, "got %s: %s", aq_status_string(s), aq_last_error());
  cr_assert(strstr(aq_last_error(), needle), "message '%s' lacks '%s'", aq_last_error(), needle);
}

/* y = relu(x) over 4 floats, instantiated eagerly. */
static aq_exec_t *relu_exec(aq_graph_t **g, aq_tensor_t *x, aq_tensor_t *y) {
  AQ_ASSERT_OK(aq_graph_create(NULL, g));
  AQ_ASSERT_OK(aq_tensor_create(*g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, x));
  AQ_ASSERT_OK(aq_op_relu(*g, *x, y));
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .flags = AQ_EXEC_NO_MEMORY_REUSE};
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(*g, &o, &e));
  return e;
}

/* A tensor added after instantiation was read past the exec's per-tensor
 * tables (aq_exec_read); a task added was past its per-task ones. */
Test(fuzz_found, graph_frozen_while_an_exec_lives) {
  aq_graph_t *g;
  aq_tensor_t x, y, z, late;
  aq_exec_t *e = relu_exec(&g, &x, &y);
  assert_refused(aq_tensor_create(g, "late", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &late), AQ_ERROR_BUSY,
                 "live exec");
  assert_refused(aq_op_relu(g, y, &z), AQ_ERROR_BUSY, "destroy it first");
  aq_task_t first = {1};
  assert_refused(aq_graph_add_edge(g, first, AQ_EDGE_AFTER_ALL, NULL, 0), AQ_ERROR_BUSY, "live exec");
  /* The exec is untouched and runs. */
  float in[4] = {-1, 2, -3, 4}, out[4];
  AQ_ASSERT_OK(aq_exec_write(e, x, in, sizeof(in)));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert(out[0] == 0 && out[1] == 2 && out[2] == 0 && out[3] == 4);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* Without the exec the graph grows again. */
  AQ_ASSERT_OK(aq_tensor_create(g, "late", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &late));
  AQ_ASSERT_OK(aq_op_relu(g, y, &z));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* A kernel task without kernargs, on an agent where no task takes any,
 * was given NULL + 0 as its kernarg address (undefined behaviour). */
Test(fuzz_found, a_task_without_kernargs_on_an_agent_without_an_arena) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_kernel_task_t k = {.name = "noop", .code_object = co, .kernel = "noop", .agent = -1,
                        .shape = {{1, 1, 1}, {1, 1, 1}}};
  aq_task_t t;
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, &t));
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, &t));
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN};
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  for (int i = 0; i < 3; ++i) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_code_object_unload(co));
}

/* A grid of 2^32 - 1 work-items in groups of 2 counted its work-groups in
 * 32 bits, wrapped to none, and HEFT's worker sort read before its array. */
Test(fuzz_found, a_grid_near_two_to_the_32_places) {
  aq_graph_t *g;
  aq_tensor_t x;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &x));
  aq_kernel_task_t k = {.name = "wide", .kernel = "aq_noop", .shape = {{0xffffffffu, 1, 1}, {2, 1, 1}},
                        .write_count = 1, .writes = {x}, .write_offsets = {UINT32_MAX}, .agent = -1};
  aq_task_t t;
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, &t));
  aq_exec_t *e = NULL;
  aq_status_t s = aq_graph_instantiate(g, &(aq_exec_options_t){.policy = AQ_SCHED_HEFT}, &e);
  cr_assert(s == AQ_OK || *aq_last_error(), "refused without a message");
  if (e) AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
