/* Optimizer hyperparameters between runs: aq_exec_set_learning_rate
 * changes what the next run's SGD and Adam updates use, exactly, and
 * refuses what it cannot honour without touching the exec. */
#include <math.h>
#include <unistd.h>

#include "../runtime/common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(optim, .init = setup, .fini = teardown);

enum { N = 37 };

/* w -= lr * g: SGD without momentum or decay, the gradient an input. */
typedef struct sgd_graph {
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t w, grad;
} sgd_graph_t;

static void build(sgd_graph_t *s, float lr) {
  AQ_ASSERT_OK(aq_graph_create(NULL, &s->g));
  AQ_ASSERT_OK(aq_tensor_create(s->g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){N}, &s->w));
  AQ_ASSERT_OK(aq_tensor_create(s->g, "grad", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){N}, &s->grad));
  AQ_ASSERT_OK(aq_op_sgd(s->g, s->w, s->grad, &(aq_sgd_options_t){.lr = lr}));
  AQ_ASSERT_OK(aq_graph_instantiate(s->g, NULL, &s->e));
  float w[N], g[N];
  for (int i = 0; i < N; ++i) w[i] = (float)i, g[i] = 1.0f + (float)(i % 4);
  AQ_ASSERT_OK(aq_exec_write(s->e, s->w, w, sizeof(w)));
  AQ_ASSERT_OK(aq_exec_write(s->e, s->grad, g, sizeof(g)));
}

static void step(sgd_graph_t *s, float *w) {
  AQ_ASSERT_OK(aq_exec_run(s->e));
  AQ_ASSERT_OK(aq_exec_wait(s->e, 10ull * 1000000000ull));
  AQ_ASSERT_OK(aq_exec_read(s->e, s->w, w, N * sizeof(float)));
}

static void destroy(sgd_graph_t *s) {
  AQ_ASSERT_OK(aq_exec_destroy(s->e));
  AQ_ASSERT_OK(aq_graph_destroy(s->g));
}

Test(optim, the_next_run_uses_the_new_learning_rate) {
  sgd_graph_t s;
  build(&s, 0.5f);
  float w[N];
  step(&s, w);
  for (int i = 0; i < N; ++i) cr_assert_float_eq(w[i], (float)i - 0.5f * (1.0f + (float)(i % 4)), 1e-6f, "w[%d]", i);
  AQ_ASSERT_OK(aq_exec_set_learning_rate(s.e, 0.25f));
  float before[N];
  for (int i = 0; i < N; ++i) before[i] = w[i];
  step(&s, w);
  for (int i = 0; i < N; ++i)
    cr_assert_eq(w[i], before[i] - 0.25f * (1.0f + (float)(i % 4)), "w[%d] after lr 0.25: %g", i, (double)w[i]);
  destroy(&s);
}

Test(optim, bad_rates_and_execs_without_an_optimizer_are_refused) {
  sgd_graph_t s;
  build(&s, 0.5f);
  const float bad[] = {0.0f, -0.1f, NAN, INFINITY};
  for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    cr_assert_eq(aq_exec_set_learning_rate(s.e, bad[i]), AQ_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(aq_last_error(), "lr"), "the error names the rate: %s", aq_last_error());
  }
  cr_assert_eq(aq_exec_set_learning_rate(NULL, 0.1f), AQ_ERROR_INVALID_ARGUMENT);
  /* Refusals leave the rate as it was. */
  float w[N];
  step(&s, w);
  cr_assert_float_eq(w[3], 3.0f - 0.5f * 4.0f, 1e-6f);
  destroy(&s);

  aq_graph_t *g;
  aq_tensor_t x, y;
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){N}, &x));
  AQ_ASSERT_OK(aq_op_relu(g, x, &y));
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  cr_assert_eq(aq_exec_set_learning_rate(e, 0.1f), AQ_ERROR_NOT_FOUND);
  cr_assert(strstr(aq_last_error(), "no optimizer task"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t nap(void *user, uint64_t us, uint64_t a2, uint64_t a3) {
  (void)user, (void)a2, (void)a3;
  usleep((useconds_t)us);
  return AQ_OK;
}

/* While a run is in flight its kernargs are the queues': a new rate is
 * refused, and the run and the next one use the rate they had. */
Test(optim, a_rate_set_while_a_run_is_in_flight_is_refused) {
  sgd_graph_t s;
  AQ_ASSERT_OK(aq_graph_create(NULL, &s.g));
  AQ_ASSERT_OK(aq_tensor_create(s.g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){N}, &s.w));
  AQ_ASSERT_OK(aq_tensor_create(s.g, "grad", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){N}, &s.grad));
  aq_host_task_t h = {.name = "nap", .fn = nap, .args = {200000}, .agent = -1, .read_count = 1, .reads = {s.grad}};
  AQ_ASSERT_OK(aq_graph_add_host(s.g, &h, NULL));
  AQ_ASSERT_OK(aq_op_sgd(s.g, s.w, s.grad, &(aq_sgd_options_t){.lr = 0.5f}));
  AQ_ASSERT_OK(aq_graph_instantiate(s.g, NULL, &s.e));
  float w[N], g[N];
  for (int i = 0; i < N; ++i) w[i] = (float)i, g[i] = 1.0f;
  AQ_ASSERT_OK(aq_exec_write(s.e, s.w, w, sizeof(w)));
  AQ_ASSERT_OK(aq_exec_write(s.e, s.grad, g, sizeof(g)));
  AQ_ASSERT_OK(aq_exec_run(s.e));
  cr_assert_eq(aq_exec_set_learning_rate(s.e, 0.25f), AQ_ERROR_BUSY);
  cr_assert(strstr(aq_last_error(), "in flight"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_exec_wait(s.e, 10ull * 1000000000ull));
  step(&s, w);
  for (int i = 0; i < N; ++i) cr_assert_eq(w[i], (float)i - 1.0f, "w[%d] after two steps at 0.5: %g", i, (double)w[i]);
  destroy(&s);
}

/* A user's code object describes its own optimizer (test_kernels.c's
 * "descend", w -= lr): the exec finds the rate where the description says,
 * and a code object that describes nothing has no rate to set. */
static void descend_graph(const char *object, aq_code_object_t *co, aq_graph_t **g, aq_exec_t **e, aq_tensor_t *w) {
  AQ_ASSERT_OK(aq_code_object_load(object, co));
  AQ_ASSERT_OK(aq_graph_create(NULL, g));
  AQ_ASSERT_OK(aq_tensor_create(*g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){N}, w));
  struct { float *w; int64_t n; float lr; int32_t reserved_; } args = {NULL, N, 0.25f, 0};
  aq_kernel_task_t t = {.name = "descend", .code_object = *co, .kernel = "descend", .kernarg = &args,
                        .kernarg_size = sizeof(args), .shape = {{1, 1, 1}, {1, 1, 1}}, .read_count = 1,
                        .write_count = 1, .reads = {*w}, .writes = {*w}, .read_offsets = {UINT32_MAX},
                        .write_offsets = {0}, .agent = -1};
  AQ_ASSERT_OK(aq_graph_add_kernel(*g, &t, NULL));
  AQ_ASSERT_OK(aq_graph_instantiate(*g, NULL, e));
  float zeros[N] = {0};
  AQ_ASSERT_OK(aq_exec_write(*e, *w, zeros, sizeof(zeros)));
}

static float descend_step(aq_exec_t *e, aq_tensor_t w) {
  float out[N];
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10ull * 1000000000ull));
  AQ_ASSERT_OK(aq_exec_read(e, w, out, sizeof(out)));
  return out[N - 1];
}

Test(optim, a_user_optimizer_described_by_its_code_object_gets_the_new_rate) {
  aq_code_object_t co;
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t w;
  descend_graph("test-kernels.so", &co, &g, &e, &w);
  float w1 = descend_step(e, w);
  cr_assert_float_eq(w1, -0.25f, 1e-6f);
  AQ_ASSERT_OK(aq_exec_set_learning_rate(e, 0.5f));
  float w2 = descend_step(e, w);
  cr_assert_float_eq(w2, -0.75f, 1e-6f);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_code_object_unload(co));

  descend_graph("test-kernels-no-ops.so", &co, &g, &e, &w);
  cr_assert_eq(aq_exec_set_learning_rate(e, 0.5f), AQ_ERROR_NOT_FOUND);
  float w3 = descend_step(e, w);
  cr_assert_float_eq(w3, -0.25f, 1e-6f);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_code_object_unload(co));
}
