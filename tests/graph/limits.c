/* Graph building at the edge of what can be represented: sizes that would
 * wrap, kernarg offsets that would wrap, grids past 32 bits, and
 * hyperparameters no optimizer can use. Each is refused by name. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../runtime/common.h"

static aq_graph_t *g;
static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
}
static void teardown(void) {
  aq_graph_destroy(g);
  aq_shut_down();
}
TestSuite(limits, .init = setup, .fini = teardown);

#define EXPECT_REFUSED(expr, phrase)                                                        \
  do {                                                                                      \
    aq_status_t s_ = (expr);                                                                \
    cr_assert_eq(s_, AQ_ERROR_INVALID_ARGUMENT, "%s -> %s: %s", #expr, aq_status_string(s_), \
                 aq_last_error());                                                          \
    cr_assert(strstr(aq_last_error(), phrase), "%s: '%s' lacks '%s'", #expr, aq_last_error(), phrase); \
  } while (0)

Test(limits, a_shape_whose_size_wraps_is_refused) {
  aq_tensor_t t;
  /* Each dimension alone is small enough; the product is 2^92 bytes. */
  int64_t dims[3] = {(int64_t)1 << 30, (int64_t)1 << 30, (int64_t)1 << 30};
  EXPECT_REFUSED(aq_tensor_create(g, "huge", AQ_DTYPE_F32, AQ_ROLE_INPUT, 3, dims, &t), "larger than");
  int64_t neg[2] = {4, -1};
  EXPECT_REFUSED(aq_tensor_create(g, "neg", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, neg, &t), "dimension 1");
}

Test(limits, a_kernarg_offset_that_wraps_is_refused) {
  aq_tensor_t x;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &x));
  uint8_t kernarg[16] = {0};
  uint32_t off = UINT32_MAX - 4; /* off + 8 wraps to 3 in 32 bits */
  aq_kernel_task_t k = {.kernel = "noop", .kernarg = kernarg, .kernarg_size = sizeof(kernarg),
                        .read_count = 1, .reads = {x}, .read_offsets = {off}, .agent = -1};
  EXPECT_REFUSED(aq_graph_add_kernel(g, &k, NULL), "outside its 16-byte kernarg");
  k.read_count = 0;
  k.write_count = 1, k.writes[0] = x, k.write_offsets[0] = off;
  EXPECT_REFUSED(aq_graph_add_kernel(g, &k, NULL), "outside its 16-byte kernarg");
}

Test(limits, an_op_over_2_32_elements_is_refused_not_cut_short) {
  aq_tensor_t x, y;
  int64_t n = ((int64_t)1 << 32) + 64; /* a 32-bit grid would cover 64 of them */
  AQ_ASSERT_OK(aq_tensor_create(g, "big", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, &n, &x));
  EXPECT_REFUSED(aq_op_relu(g, x, &y), "work-items");
  cr_assert(strstr(aq_last_error(), "relu(big)"), "%s", aq_last_error());
}

Test(limits, destroying_a_graph_twice_is_an_error_not_a_double_free) {
  aq_graph_t *h;
  AQ_ASSERT_OK(aq_graph_create(NULL, &h));
  AQ_ASSERT_OK(aq_graph_destroy(h));
  EXPECT_REFUSED(aq_graph_destroy(h), "not a live graph");
}

typedef struct {
  aq_exec_t *e;
  pthread_barrier_t *go;
  _Atomic int ok;
} runner_t;

static void *run_once(void *arg) {
  runner_t *r = arg;
  pthread_barrier_wait(r->go);
  aq_status_t s = aq_exec_run(r->e);
  if (s == AQ_OK) atomic_fetch_add(&r->ok, 1);
  else cr_assert_eq(s, AQ_ERROR_BUSY, "%s", aq_last_error());
  return NULL;
}

/* Two threads running one exec at once: one run, the other told BUSY, and
 * the wait returns (both starting left its completion signal at -1). */
Test(limits, two_threads_running_one_exec_do_not_both_start_it) {
  aq_tensor_t x, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){1024}, &x));
  aq_tensor_t x0 = x;
  for (int i = 0; i < 128; ++i) {
    AQ_ASSERT_OK(aq_op_relu(g, x, &y));
    x = y;
  }
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float in[1024] = {0};
  AQ_ASSERT_OK(aq_exec_write(e, x0, in, sizeof(in)));
  for (int round = 0; round < 200; ++round) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    runner_t r = {e, &go, 0};
    pthread_t a, b;
    pthread_create(&a, NULL, run_once, &r);
    pthread_create(&b, NULL, run_once, &r);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&go);
    cr_assert_geq(atomic_load(&r.ok), 1);
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC)); /* two successes are legal only one after the other */
  }
  AQ_ASSERT_OK(aq_exec_destroy(e));
}

Test(limits, hyperparameters_no_optimizer_can_use_are_refused) {
  aq_tensor_t w, gw;
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){8}, &w));
  AQ_ASSERT_OK(aq_tensor_create(g, "gw", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){8}, &gw));
  float bad[] = {INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 3; ++i) {
    EXPECT_REFUSED(aq_op_sgd(g, w, gw, &(aq_sgd_options_t){.lr = bad[i]}), "sgd(w): lr");
    EXPECT_REFUSED(aq_op_sgd(g, w, gw, &(aq_sgd_options_t){.lr = 0.1f, .momentum = bad[i]}), "momentum");
    EXPECT_REFUSED(aq_op_adam(g, w, gw, &(aq_adam_options_t){.lr = bad[i]}), "adam(w)");
    EXPECT_REFUSED(aq_op_adam(g, w, gw, &(aq_adam_options_t){.lr = 0.1f, .beta1 = bad[i]}), "beta1");
    EXPECT_REFUSED(aq_op_adam(g, w, gw, &(aq_adam_options_t){.lr = 0.1f, .beta2 = bad[i]}), "beta2");
    EXPECT_REFUSED(aq_op_adam(g, w, gw, &(aq_adam_options_t){.lr = 0.1f, .eps = bad[i]}), "eps");
  }
  EXPECT_REFUSED(aq_op_adam(g, w, gw, &(aq_adam_options_t){.lr = 0.1f, .beta1 = 1.0f}), "[0, 1)");
  AQ_ASSERT_OK(aq_op_sgd(g, w, gw, &(aq_sgd_options_t){.lr = 0.1f, .momentum = 0.9f}));
}

Test(limits, a_pooling_window_larger_than_its_input_is_refused) {
  aq_tensor_t x, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "img", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, (int64_t[]){1, 1, 3, 3}, &x));
  /* (3 - 5) / 5 + 1 truncates to 1: an output read from outside the image */
  EXPECT_REFUSED(aq_op_max_pool2d(g, x, &(aq_pool_options_t){.kernel_h = 5, .kernel_w = 5}, &y), "larger than 'img'");
  EXPECT_REFUSED(aq_op_max_pool2d(g, x, &(aq_pool_options_t){.kernel_h = 2, .kernel_w = 4}, &y), "larger than");
  AQ_ASSERT_OK(aq_op_max_pool2d(g, x, &(aq_pool_options_t){.kernel_h = 3, .kernel_w = 3}, &y));
  aq_tensor_t w5;
  AQ_ASSERT_OK(aq_tensor_create(g, "w5", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 4, (int64_t[]){1, 1, 5, 5}, &w5));
  EXPECT_REFUSED(aq_op_conv2d(g, x, w5, (aq_tensor_t){0}, &(aq_conv2d_options_t){.stride_h = 3, .stride_w = 3}, &y),
                 "leaves no output");
}

/* A failure deep in instantiation reaches the user with each layer's
 * context: instantiate, then lowering, then the task, then the cause. */
Test(limits, a_lowering_failure_names_each_layer_and_the_task) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("kernels-cpu.so", &co));
  aq_tensor_t x;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){16}, &x));
  uint64_t kernarg = 0; /* far too short for a matmul's arguments */
  aq_kernel_task_t k = {.name = "short(x)", .code_object = co, .kernel = "aq_matmul_f32", .kernarg = &kernarg,
                        .kernarg_size = sizeof(kernarg), .shape = {.grid = {1, 1, 1}, .workgroup = {1, 1, 1}},
                        .read_count = 1, .reads = {x}, .read_offsets = {0}, .agent = -1};
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, NULL));
  aq_exec_t *e = NULL;
  cr_assert_eq(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH, "%s", aq_last_error());
  cr_assert_null(e);
  const char *want = "instantiate: lower: task 'short(x)': kernel 'aq_matmul_f32' takes";
  cr_assert(!strncmp(aq_last_error(), want, strlen(want)), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_code_object_unload(co));
}
