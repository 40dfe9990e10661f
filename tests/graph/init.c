/* Initial values as part of the graph (aq_tensor_init), the refusal of a
 * parameter nobody gave values, generated tensor names, and the meaning of
 * an op kernel's fault code. */
#include <math.h>
#include <string.h>

#include "../runtime/common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(init, .init = setup, .fini = teardown);

enum { B = 8, IN = 64, OUT = 32 };

typedef struct net {
  aq_graph_t *g;
  aq_tensor_t x, y, w, b, loss;
} net_t;

static void build(net_t *n) {
  AQ_ASSERT_OK(aq_graph_create(NULL, &n->g));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &n->x));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &n->y));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, OUT}, &n->w));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "b", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){OUT}, &n->b));
  aq_tensor_t logits;
  AQ_ASSERT_OK(aq_op_matmul(n->g, n->x, n->w, n->b, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(n->g, logits, n->y, &n->loss));
}

static void feed(aq_exec_t *e, const net_t *n, int32_t label) {
  static float xs[B * IN];
  int32_t ys[B];
  for (int i = 0; i < B * IN; ++i) xs[i] = (float)(i % 11) / 11.0f;
  for (int i = 0; i < B; ++i) ys[i] = label;
  AQ_ASSERT_OK(aq_exec_write(e, n->x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, n->y, ys, sizeof(ys)));
}

Test(init, a_parameter_never_written_nor_initialised_is_refused_by_name) {
  net_t n;
  build(&n);
  AQ_ASSERT_OK(aq_tensor_init(n.g, n.w, &(aq_initializer_t){.kind = AQ_INIT_XAVIER_UNIFORM, .seed = 1}));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(n.g, NULL, &e));
  feed(e, &n, 1);
  cr_assert_eq(aq_exec_run(e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "parameter 'b' was never written nor initialised"), "%s", aq_last_error());
  /* Writing it is enough, and the exec stays usable. */
  float zeros[OUT] = {0};
  AQ_ASSERT_OK(aq_exec_write(e, n.b, zeros, sizeof(zeros)));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30ull * 1000000000ull));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(n.g));
}

static void read_back(const aq_initializer_t *o, int which, float *out, size_t count) {
  net_t n;
  build(&n);
  aq_tensor_t t = which ? n.b : n.w;
  AQ_ASSERT_OK(aq_tensor_init(n.g, n.w, o));
  AQ_ASSERT_OK(aq_tensor_init(n.g, n.b, which ? o : &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(n.g, NULL, &e));
  AQ_ASSERT_OK(aq_exec_read(e, t, out, count * sizeof(float)));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(n.g));
}

static void moments(const float *x, size_t n, double *mean, double *sd, double *lo, double *hi) {
  double s = 0, s2 = 0;
  *lo = INFINITY, *hi = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    s += x[i], s2 += (double)x[i] * x[i];
    *lo = fmin(*lo, x[i]), *hi = fmax(*hi, x[i]);
  }
  *mean = s / (double)n;
  *sd = sqrt(s2 / (double)n - *mean * *mean);
}

Test(init, each_initialiser_draws_what_it_promises_and_a_seed_repeats_it) {
  static float a[IN * OUT], c[IN * OUT];
  double mean, sd, lo, hi;
  read_back(&(aq_initializer_t){.kind = AQ_INIT_CONSTANT, .value = 0.25f}, 1, a, OUT);
  for (int i = 0; i < OUT; ++i) cr_assert_eq(a[i], 0.25f);

  read_back(&(aq_initializer_t){.kind = AQ_INIT_UNIFORM, .low = -2, .high = 3, .seed = 7}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(lo >= -2 && hi < 3 && fabs(mean - 0.5) < 0.15, "uniform: [%g, %g], mean %g", lo, hi, mean);

  read_back(&(aq_initializer_t){.kind = AQ_INIT_NORMAL, .mean = 1, .stddev = 0.5f, .seed = 7}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(fabs(mean - 1) < 0.05 && fabs(sd - 0.5) < 0.05, "normal: mean %g sd %g", mean, sd);

  double glorot = sqrt(6.0 / (IN + OUT)), he = sqrt(2.0) * sqrt(3.0 / IN);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_XAVIER_UNIFORM, .seed = 3}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(lo >= -glorot && hi <= glorot && hi > 0.9 * glorot, "xavier: [%g, %g] within %g", lo, hi, glorot);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_KAIMING_UNIFORM, .seed = 3}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(lo >= -he && hi <= he && hi > 0.9 * he, "kaiming: [%g, %g] within %g", lo, hi, he);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_KAIMING_NORMAL, .seed = 3}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(fabs(sd - sqrt(2.0 / IN)) < 0.1 * sqrt(2.0 / IN), "kaiming normal: sd %g", sd);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_XAVIER_NORMAL, .seed = 3}, 0, a, IN * OUT);
  moments(a, IN * OUT, &mean, &sd, &lo, &hi);
  cr_assert(fabs(sd - sqrt(2.0 / (IN + OUT))) < 0.1 * sqrt(2.0 / (IN + OUT)), "xavier normal: sd %g", sd);

  read_back(&(aq_initializer_t){.kind = AQ_INIT_KAIMING_NORMAL, .seed = 3}, 0, c, IN * OUT);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_XAVIER_NORMAL, .seed = 3}, 0, a, IN * OUT);
  read_back(&(aq_initializer_t){.kind = AQ_INIT_XAVIER_NORMAL, .seed = 3}, 0, c, IN * OUT);
  cr_assert(!memcmp(a, c, sizeof(a)), "the same seed, the same values");
  read_back(&(aq_initializer_t){.kind = AQ_INIT_XAVIER_NORMAL, .seed = 4}, 0, c, IN * OUT);
  cr_assert(memcmp(a, c, sizeof(a)), "another seed, other values");
}

Test(init, bad_initialisers_are_refused) {
  net_t n;
  build(&n);
  cr_assert_eq(aq_tensor_init(n.g, n.x, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}), AQ_ERROR_INVALID_ARGUMENT,
               "an input gets its values from the user");
  cr_assert(strstr(aq_last_error(), "'x' is not a parameter"), "%s", aq_last_error());
  cr_assert_eq(aq_tensor_init(n.g, n.w, &(aq_initializer_t){.kind = 99}), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_tensor_init(n.g, n.w, &(aq_initializer_t){.kind = AQ_INIT_UNIFORM, .low = 1, .high = 1}),
               AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_tensor_init(n.g, n.w, &(aq_initializer_t){.kind = AQ_INIT_NORMAL, .stddev = NAN}),
               AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_tensor_init(n.g, (aq_tensor_t){999}, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}),
               AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_graph_destroy(n.g));
}

static int balanced(const char *s) {
  int depth = 0;
  for (; *s; ++s) {
    depth += (*s == '(') - (*s == ')');
    if (depth < 0) return 0;
  }
  return depth == 0;
}

Test(init, generated_names_are_balanced_and_duplicate_names_refused) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, w1, h, a, a2, deep;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){4, 4}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){4, 4}, &w1));
  cr_assert_eq(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){4}, &h),
               AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "tensor name 'w1' is taken"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &h));
  AQ_ASSERT_OK(aq_op_tanh(g, h, &a));
  AQ_ASSERT_OK(aq_op_tanh(g, h, &a2));
  aq_tensor_info_t i;
  AQ_ASSERT_OK(aq_tensor_get_info(g, a, &i));
  cr_assert_str_eq(i.name, "tanh(matmul(x,w1))");
  AQ_ASSERT_OK(aq_tensor_get_info(g, a2, &i));
  cr_assert_str_eq(i.name, "tanh(matmul(x,w1))#2", "a generated name another tensor has is numbered");
  deep = a;
  for (int k = 0; k < 12; ++k) AQ_ASSERT_OK(aq_op_sigmoid(g, deep, &deep));
  AQ_ASSERT_OK(aq_tensor_get_info(g, deep, &i));
  cr_assert(balanced(i.name) && strstr(i.name, ".."), "cut and still balanced: %s", i.name);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(init, a_label_out_of_range_is_named_as_such) {
  net_t n;
  build(&n);
  AQ_ASSERT_OK(aq_tensor_init(n.g, n.w, &(aq_initializer_t){.kind = AQ_INIT_XAVIER_UNIFORM, .seed = 1}));
  AQ_ASSERT_OK(aq_tensor_init(n.g, n.b, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(n.g, &(aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU}, &e));
  feed(e, &n, OUT + 3);
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_wait(e, 30ull * 1000000000ull), AQ_ERROR_KERNEL_FAULT);
  cr_assert(strstr(aq_last_error(), "label or index out of range"), "%s", aq_last_error());
  feed(e, &n, 1);
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30ull * 1000000000ull));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(n.g));
}
