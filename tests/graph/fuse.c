/* Epilogue fusion (scheduler/fuse.c) through real execs: an MLP's training
 * step fused (AQ_FUSION=1 puts it on the CPU agent too) computes exactly
 * what the unfused step does, run after run, with a new learning rate and
 * with an input bound in place; so does a CNN's conv block, its relus run
 * in batch norm and in the pool's backward; a gradient that is never
 * stored is refused by name; the DOT file shows which tasks ran as one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"

static void setup(void) {
  setenv("AQ_FUSION", "1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
}
static void teardown(void) {
  aq_shut_down();
  unsetenv("AQ_FUSION");
}
TestSuite(fuse, .init = setup, .fini = teardown);

enum { B = 32, IN = 40, H = 48, OUT = 10, STEPS = 4 };

typedef struct mlp {
  aq_graph_t *g;
  aq_tensor_t x, y, loss, w[3], b[3], dw1;
} mlp_t;

static float *fill(size_t n, unsigned seed, float scale) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
  }
  return p;
}

/* x -> relu(x W1 + b1) -> relu(. W2 + b2) -> . W3 + b3 -> softmax xent,
 * backward, SGD with momentum on every parameter. */
static void build(mlp_t *m, aq_tensor_role_t x_role) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  m->g = g;
  int64_t dims[3][2] = {{IN, H}, {H, H}, {H, OUT}};
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, x_role, 2, (int64_t[]){B, IN}, &m->x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &m->y));
  for (int l = 0; l < 3; ++l) {
    char name[8];
    snprintf(name, sizeof(name), "w%d", l + 1);
    AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, dims[l], &m->w[l]));
    snprintf(name, sizeof(name), "b%d", l + 1);
    AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, &dims[l][1], &m->b[l]));
  }
  aq_tensor_t h = m->x;
  for (int l = 0; l < 3; ++l)
    AQ_ASSERT_OK(aq_op_matmul(g, h, m->w[l], m->b[l], 0, 0, l < 2 ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE, &h));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, h, m->y, &m->loss));
  AQ_ASSERT_OK(aq_graph_backward(g, m->loss));
  AQ_ASSERT_OK(aq_graph_gradient(g, m->w[0], &m->dw1));
  aq_sgd_options_t o = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f};
  for (int l = 0; l < 3; ++l) {
    aq_tensor_t gw, gb;
    AQ_ASSERT_OK(aq_graph_gradient(g, m->w[l], &gw));
    AQ_ASSERT_OK(aq_graph_gradient(g, m->b[l], &gb));
    AQ_ASSERT_OK(aq_op_sgd(g, m->w[l], gw, &o));
    AQ_ASSERT_OK(aq_op_sgd(g, m->b[l], gb, &o));
  }
}

static aq_exec_t *instantiate_on(mlp_t *m, uint32_t flags, aq_agent_kind_t kind) {
  aq_exec_t *e;
  aq_exec_options_t eo = {.flags = flags, .kernel_agent_kinds = 1u << kind};
  AQ_ASSERT_OK(aq_graph_instantiate(m->g, &eo, &e));
  int64_t sizes[3] = {IN * H, H * H, H * OUT}, widths[3] = {H, H, OUT};
  for (int l = 0; l < 3; ++l) {
    float *w = fill((size_t)sizes[l], 10 + l, 0.3f), *b = fill((size_t)widths[l], 20 + l, 0.1f);
    AQ_ASSERT_OK(aq_exec_write(e, m->w[l], w, (size_t)sizes[l] * 4));
    AQ_ASSERT_OK(aq_exec_write(e, m->b[l], b, (size_t)widths[l] * 4));
    free(w), free(b);
  }
  int32_t labels[B];
  for (int i = 0; i < B; ++i) labels[i] = (i * 7) % OUT;
  AQ_ASSERT_OK(aq_exec_write(e, m->y, labels, sizeof(labels)));
  return e;
}

/* CPU agents, where AQ_FUSION=1 (set up above) turns fusion on. */
static aq_exec_t *instantiate(mlp_t *m, uint32_t flags) { return instantiate_on(m, flags, AQ_AGENT_KIND_CPU); }

static void run(aq_exec_t *e) {
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30ull * 1000000000ull));
}

/* Equal, or within tol (relative) where the fused update's multiply-adds
 * may contract differently (a GPU compiler's choice). */
static void close_parameters(mlp_t *m, aq_exec_t *a, aq_exec_t *b, const char *when, float tol) {
  int64_t sizes[3] = {IN * H, H * H, H * OUT};
  for (int l = 0; l < 3; ++l) {
    float *wa = malloc((size_t)sizes[l] * 4), *wb = malloc((size_t)sizes[l] * 4);
    AQ_ASSERT_OK(aq_exec_read(a, m->w[l], wa, (size_t)sizes[l] * 4));
    AQ_ASSERT_OK(aq_exec_read(b, m->w[l], wb, (size_t)sizes[l] * 4));
    for (int64_t i = 0; i < sizes[l]; ++i)
      cr_assert(tol ? fabsf(wa[i] - wb[i]) <= tol * (1.0f + fabsf(wb[i])) : wa[i] == wb[i],
                "%s: w%d[%lld] fused %.9g, unfused %.9g", when, l + 1, (long long)i, wa[i], wb[i]);
    free(wa), free(wb);
  }
}

static void same_parameters(mlp_t *m, aq_exec_t *a, aq_exec_t *b, const char *when) {
  close_parameters(m, a, b, when, 0.0f);
}

/* The same data into both execs' x. */
static void feed(mlp_t *m, aq_exec_t *a, aq_exec_t *b, unsigned seed) {
  float *x = fill(B * IN, seed, 1.0f);
  AQ_ASSERT_OK(aq_exec_write(a, m->x, x, B * IN * 4));
  AQ_ASSERT_OK(aq_exec_write(b, m->x, x, B * IN * 4));
  free(x);
}

static void destroy(mlp_t *m, aq_exec_t *a, aq_exec_t *b) {
  AQ_ASSERT_OK(aq_exec_destroy(a));
  AQ_ASSERT_OK(aq_exec_destroy(b));
  AQ_ASSERT_OK(aq_graph_destroy(m->g));
}

Test(fuse, a_fused_training_step_computes_what_the_unfused_one_does) {
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  /* fused with buffers shared by lifetime (the default), plain without either */
  aq_exec_t *fused = instantiate(&m, 0), *plain = instantiate(&m, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE);
  static char dot[1 << 16];
  read_dot(fused, dot, sizeof(dot));
  /* w1, w2, w3's SGD and both relu backwards take their products in, and
   * b1, b2, b3's SGD their sums over rows */
  cr_assert_eq(count(dot, AQ_KERNEL_MATMUL_FUSED), 5, "%s", dot);
  cr_assert_eq(count(dot, AQ_KERNEL_SUM_ROWS_SGD), 3, "%s", dot);
  cr_assert_eq(count(dot, "fused into its consumer"), 8, "%s", dot);
  read_dot(plain, dot, sizeof(dot));
  cr_assert_eq(count(dot, "fused into its consumer"), 0);
  for (int s = 0; s < STEPS; ++s) {
    feed(&m, fused, plain, 100 + s);
    run(fused), run(plain);
    same_parameters(&m, fused, plain, "a step");
    float la, lb;
    AQ_ASSERT_OK(aq_exec_read(fused, m.loss, &la, 4));
    AQ_ASSERT_OK(aq_exec_read(plain, m.loss, &lb, 4));
    cr_assert_eq(la, lb, "loss %g vs %g", la, lb);
  }
  /* A new rate reaches the fused updates as it does the plain ones. */
  AQ_ASSERT_OK(aq_exec_set_learning_rate(fused, 0.02f));
  AQ_ASSERT_OK(aq_exec_set_learning_rate(plain, 0.02f));
  run(fused), run(plain);
  same_parameters(&m, fused, plain, "after aq_exec_set_learning_rate");
  destroy(&m, fused, plain);
}

Test(fuse, a_gradient_never_stored_is_refused_by_name) {
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *fused = instantiate(&m, AQ_EXEC_NO_MEMORY_REUSE);
  aq_exec_t *plain = instantiate(&m, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE);
  float *g = malloc(IN * H * 4);
  feed(&m, fused, plain, 7);
  run(fused), run(plain);
  cr_assert_eq(aq_exec_read(fused, m.dw1, g, IN * H * 4), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "never stored") && strstr(aq_last_error(), "sgd(w1)") &&
                strstr(aq_last_error(), "AQ_EXEC_NO_FUSION"),
            "%s", aq_last_error());
  void *where;
  cr_assert_eq(aq_exec_tensor_data(fused, m.dw1, &where), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_exec_read(plain, m.dw1, g, IN * H * 4)); /* kept when asked */
  /* the refusal leaves the exec as it was */
  run(fused), run(plain);
  same_parameters(&m, fused, plain, "after a refused read");
  free(g);
  destroy(&m, fused, plain);
}

Test(fuse, an_input_a_fused_product_reads_can_be_bound_in_place) {
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *fused = instantiate(&m, 0), *plain = instantiate(&m, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE);
  float *x = aligned_alloc(64, B * IN * 4), *x2 = fill(B * IN, 9, 1.0f);
  memcpy(x, x2, B * IN * 4);
  /* x feeds w1's gradient, x^T dz1, which runs inside sgd(w1) */
  AQ_ASSERT_OK(aq_exec_bind(fused, m.x, x, B * IN * 4));
  AQ_ASSERT_OK(aq_exec_write(plain, m.x, x2, B * IN * 4));
  run(fused), run(plain);
  same_parameters(&m, fused, plain, "bound input");
  float *y = fill(B * IN, 10, 1.0f);
  memcpy(x, y, B * IN * 4); /* the bound memory is read where it is */
  AQ_ASSERT_OK(aq_exec_write(plain, m.x, y, B * IN * 4));
  run(fused), run(plain);
  same_parameters(&m, fused, plain, "bound input rewritten");
  destroy(&m, fused, plain);
  free(x), free(x2), free(y);
}

Test(fuse, aq_fusion_0_and_the_flag_keep_every_task) {
  static char dot[1 << 16];
  const char *values[] = {"0", NULL}; /* unset: CPU agents do not fuse */
  for (int i = 0; i < 2; ++i) {
    restart_with("AQ_FUSION", values[i]);
    mlp_t m;
    build(&m, AQ_ROLE_INPUT);
    aq_exec_t *e = instantiate(&m, 0);
    read_dot(e, dot, sizeof(dot));
    cr_assert_eq(count(dot, "fused into its consumer"), 0, "AQ_FUSION=%s", values[i] ? values[i] : "(unset)");
    AQ_ASSERT_OK(aq_exec_destroy(e));
    AQ_ASSERT_OK(aq_graph_destroy(m.g));
  }
}

/* A setting's bad value is refused by aq_init, naming it; the runtime then
 * starts with a good one. */
static void refused(const char *name, const char *value) {
  aq_shut_down();
  setenv(name, value, 1);
  cr_assert_eq(aq_init(NULL), AQ_ERROR_INVALID_ARGUMENT);
  char want[96];
  snprintf(want, sizeof(want), "%s='%s'", name, value);
  cr_assert(strstr(aq_last_error(), want), "%s", aq_last_error());
}

Test(fuse, a_bad_aq_fusion_is_refused_by_name) {
  refused("AQ_FUSION", "yes");
  setenv("AQ_FUSION", "1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *e = instantiate(&m, 0);
  float *x = fill(B * IN, 3, 1.0f);
  AQ_ASSERT_OK(aq_exec_write(e, m.x, x, B * IN * 4));
  free(x);
  run(e);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(m.g));
}

/* On a GPU, fusion is the default: the same five pairs run as one launch
 * each, and the step trains as the unfused one does. */
Test(fuse, a_gpu_fuses_by_default) {
  if (!first_agent(AQ_AGENT_KIND_GPU).handle) cr_skip_test("skipped: no GPU");
  restart_with("AQ_FUSION", NULL);
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *fused = instantiate_on(&m, 0, AQ_AGENT_KIND_GPU);
  aq_exec_t *plain = instantiate_on(&m, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE, AQ_AGENT_KIND_GPU);
  static char dot[1 << 16];
  read_dot(fused, dot, sizeof(dot));
  cr_assert_eq(count(dot, AQ_KERNEL_MATMUL_FUSED), 5, "%s", dot);
  cr_assert_eq(count(dot, AQ_KERNEL_SUM_ROWS_SGD), 3, "%s", dot);
  cr_assert(strstr(dot, "kernels-cuda.fatbin"), "%s", dot);
  for (int s = 0; s < STEPS; ++s) {
    feed(&m, fused, plain, 100 + s);
    run(fused), run(plain);
    close_parameters(&m, fused, plain, "a GPU step", 1e-5f);
  }
  float g[IN * H];
  cr_assert_eq(aq_exec_read(fused, m.dw1, g, sizeof(g)), AQ_ERROR_INVALID_ARGUMENT);
  destroy(&m, fused, plain);
}

/* AQ_MATMUL_PRECISION: a value other than default or exact is refused by
 * name at aq_init; on CPU agents, whose products are always
 * one fp32 multiply-add a term, exact changes nothing, bit for bit. */
Test(fuse, aq_matmul_precision_is_checked_and_exact_on_cpus_changes_nothing) {
  refused("AQ_MATMUL_PRECISION", "fast");
  setenv("AQ_MATMUL_PRECISION", "exact", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  restart_with("AQ_MATMUL_PRECISION", NULL);
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *exact = instantiate(&m, AQ_EXEC_EXACT_MATMUL); /* what AQ_MATMUL_PRECISION=exact sets */
  aq_exec_t *plain = instantiate(&m, 0);
  for (int s = 0; s < 3; ++s) {
    feed(&m, exact, plain, 200 + s);
    run(exact), run(plain);
    same_parameters(&m, exact, plain, "exact on a CPU");
  }
  destroy(&m, exact, plain);
}

/* On a GPU, the default products (3xTF32 on tensor cores) and the exact
 * ones (FFMA, AQ_EXEC_EXACT_MATMUL) train alike. */
Test(fuse, a_gpus_default_and_exact_products_train_alike) {
  if (!first_agent(AQ_AGENT_KIND_GPU).handle) cr_skip_test("skipped: no GPU");
  mlp_t m;
  build(&m, AQ_ROLE_INPUT);
  aq_exec_t *fast = instantiate_on(&m, 0, AQ_AGENT_KIND_GPU);
  aq_exec_t *exact = instantiate_on(&m, AQ_EXEC_EXACT_MATMUL, AQ_AGENT_KIND_GPU);
  for (int s = 0; s < STEPS; ++s) {
    feed(&m, fast, exact, 300 + s);
    run(fast), run(exact);
    close_parameters(&m, fast, exact, "default against exact", 1e-4f);
  }
  destroy(&m, fast, exact);
}

/* Update groups (scheduler/fuse_group.c): SGD updates queued together on a
 * lane run as one dispatch of up to AQ_SGD_MULTI_MAX entries, each its own
 * update (sizes across work-groups, one element, rates of their own): what
 * the updates one by one compute (exactly on CPUs; within tol on a GPU,
 * whose compiler contracts each kernel's multiply-adds its own way), run
 * after run and after a new learning rate, which reaches every entry. */
static void grouped_updates(aq_agent_kind_t kind, float tol) {
  enum { P = 10 };
  static const int64_t sizes[P] = {1, 7, 4099, 100, 2, 33, 5000, 1, 64, 9};
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t w[P], grad[P];
  for (int i = 0; i < P; ++i) {
    char name[16];
    snprintf(name, sizeof(name), "w%d", i);
    AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, &sizes[i], &w[i]));
    snprintf(name, sizeof(name), "g%d", i);
    AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, &sizes[i], &grad[i]));
    aq_sgd_options_t o = {.lr = 0.01f * (float)(i + 1), .momentum = 0.1f * (float)(i % 10), .weight_decay = 1e-3f * (float)i};
    AQ_ASSERT_OK(aq_op_sgd(g, w[i], grad[i], &o));
  }
  aq_exec_t *ex[2];
  aq_exec_options_t eo[2] = {{.kernel_agent_kinds = 1u << kind}, {.kernel_agent_kinds = 1u << kind, .flags = AQ_EXEC_NO_FUSION}};
  for (int k = 0; k < 2; ++k) AQ_ASSERT_OK(aq_graph_instantiate(g, &eo[k], &ex[k]));
  static char dot[1 << 16];
  read_dot(ex[0], dot, sizeof(dot));
  /* eight in one group, two in another */
  size_t leads = count(dot, AQ_KERNEL_SGD_MULTI), members = count(dot, "updated in its group's dispatch");
  cr_assert(leads == 2 && members == P - 2, "%zu groups, %zu updates in them besides:\n%s", leads, members, dot);
  /* the explain says where each update runs */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert(f);
  AQ_ASSERT_OK(aq_exec_explain(ex[0], f));
  fclose(f);
  cr_assert_eq(count(text, "updates of its group as one"), 2, "%s", text);
  cr_assert_eq(count(text, "updated in the dispatch of"), P - 2, "%s", text);
  free(text);
  read_dot(ex[1], dot, sizeof(dot));
  cr_assert_eq(count(dot, AQ_KERNEL_SGD_MULTI), 0, "AQ_EXEC_NO_FUSION grouped updates");
  for (int i = 0; i < P; ++i) {
    float *v = fill((size_t)sizes[i], 40 + i, 1.0f);
    for (int k = 0; k < 2; ++k) AQ_ASSERT_OK(aq_exec_write(ex[k], w[i], v, (size_t)sizes[i] * 4));
    free(v);
  }
  for (int step = 0; step < 4; ++step) {
    if (step == 3)
      for (int k = 0; k < 2; ++k) AQ_ASSERT_OK(aq_exec_set_learning_rate(ex[k], 0.5f));
    for (int i = 0; i < P; ++i) {
      float *v = fill((size_t)sizes[i], 70 + 13 * step + i, 0.5f);
      for (int k = 0; k < 2; ++k) AQ_ASSERT_OK(aq_exec_write(ex[k], grad[i], v, (size_t)sizes[i] * 4));
      free(v);
    }
    for (int k = 0; k < 2; ++k) run(ex[k]);
    for (int i = 0; i < P; ++i) {
      float *a = malloc((size_t)sizes[i] * 4), *b = malloc((size_t)sizes[i] * 4);
      AQ_ASSERT_OK(aq_exec_read(ex[0], w[i], a, (size_t)sizes[i] * 4));
      AQ_ASSERT_OK(aq_exec_read(ex[1], w[i], b, (size_t)sizes[i] * 4));
      for (int64_t j = 0; j < sizes[i]; ++j)
        cr_assert(tol ? fabsf(a[j] - b[j]) <= tol * (1.0f + fabsf(b[j])) : a[j] == b[j],
                  "step %d: w%d[%lld] grouped %.9g, one by one %.9g", step, i, (long long)j, a[j], b[j]);
      free(a), free(b);
    }
  }
  for (int k = 0; k < 2; ++k) AQ_ASSERT_OK(aq_exec_destroy(ex[k]));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(fuse, updates_queued_together_run_as_one_dispatch_with_the_same_result) {
  /* One lane, as a GPU's: over a CPU agent's many, HEFT spreads such updates */
  aq_shut_down();
  setenv("AQ_CPU_LANES", "1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  unsetenv("AQ_CPU_LANES");
  grouped_updates(AQ_AGENT_KIND_CPU, 0.0f);
}

Test(fuse, a_gpu_groups_updates_queued_together) {
  if (!first_agent(AQ_AGENT_KIND_GPU).handle) cr_skip_test("skipped: no GPU");
  restart_with("AQ_FUSION", NULL);
  grouped_updates(AQ_AGENT_KIND_GPU, 1e-6f);
}

/* ---- a CNN's conv block: conv2d -> batch norm -> relu -> max-pool ----
 * Batch norm's apply runs with relu in its write-back (its statistics
 * still written), max-pool's backward with relu's backward; the step
 * computes exactly what the unfused one does. Where batch norm's output
 * has a second reader, or relu's output two pools whose backwards add up
 * into one gradient, that pair stays apart and the other still fuses. */

enum { CB = 8, CC = 4, CS = 12, CF = CC * (CS / 2) * (CS / 2), CLASSES = 10 };
enum { CNN_PLAIN, CNN_BN_READ_TWICE, CNN_TWO_POOLS };
enum { CP = 7 }; /* conv w, bias, gamma, beta, fc, running mean and var */

typedef struct cnn {
  aq_graph_t *g;
  aq_tensor_t x, labels, loss, p[CP];
  int64_t size[CP];
} cnn_t;

static aq_tensor_t cnn_tensor(cnn_t *c, int i, const char *name, aq_tensor_role_t role, uint32_t rank, const int64_t *dims) {
  c->size[i] = 1;
  for (uint32_t d = 0; d < rank; ++d) c->size[i] *= dims[d];
  AQ_ASSERT_OK(aq_tensor_create(c->g, name, AQ_DTYPE_F32, role, rank, dims, &c->p[i]));
  return c->p[i];
}

static void build_cnn(cnn_t *c, int variant) {
  memset(c, 0, sizeof(*c));
  AQ_ASSERT_OK(aq_graph_create(NULL, &c->g));
  aq_graph_t *g = c->g;
  int two = variant == CNN_TWO_POOLS;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, (int64_t[]){CB, 1, CS, CS}, &c->x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){CB}, &c->labels));
  aq_tensor_t w = cnn_tensor(c, 0, "conv.w", AQ_ROLE_PARAMETER, 4, (int64_t[]){CC, 1, 3, 3});
  aq_tensor_t bias = cnn_tensor(c, 1, "conv.b", AQ_ROLE_PARAMETER, 1, (int64_t[]){CC});
  aq_tensor_t gamma = cnn_tensor(c, 2, "bn.gamma", AQ_ROLE_PARAMETER, 1, (int64_t[]){CC});
  aq_tensor_t beta = cnn_tensor(c, 3, "bn.beta", AQ_ROLE_PARAMETER, 1, (int64_t[]){CC});
  aq_tensor_t fc = cnn_tensor(c, 4, "fc", AQ_ROLE_PARAMETER, 2, (int64_t[]){CF, CLASSES});
  aq_tensor_t rm = cnn_tensor(c, 5, "bn.running_mean", AQ_ROLE_STATE, 1, (int64_t[]){CC});
  aq_tensor_t rv = cnn_tensor(c, 6, "bn.running_var", AQ_ROLE_STATE, 1, (int64_t[]){CC});
  aq_conv2d_options_t co = {.pad_h = 1, .pad_w = 1};
  aq_batch_norm_options_t bo = {.training = 1};
  aq_pool_options_t po = {.kernel_h = 2, .kernel_w = 2};
  aq_tensor_t conv, bn, r, pooled, flat, logits, none = {0};
  AQ_ASSERT_OK(aq_op_conv2d(g, c->x, w, bias, &co, &conv));
  AQ_ASSERT_OK(aq_op_batch_norm(g, conv, gamma, beta, rm, rv, &bo, &bn));
  AQ_ASSERT_OK(aq_op_relu(g, bn, &r));
  if (variant == CNN_BN_READ_TWICE) { /* the normalised values must be stored for it */
    aq_tensor_t seen;
    AQ_ASSERT_OK(aq_op_sigmoid(g, bn, &seen));
  }
  AQ_ASSERT_OK(aq_op_max_pool2d(g, r, &po, &pooled));
  AQ_ASSERT_OK(aq_op_reshape(g, pooled, 2, (int64_t[]){CB, CF}, &flat));
  if (two) { /* logits = flat x (a second pool of r, as CF x CB): two gradients of r to add */
    aq_tensor_t pooled2, cols;
    AQ_ASSERT_OK(aq_op_max_pool2d(g, r, &po, &pooled2));
    AQ_ASSERT_OK(aq_op_reshape(g, pooled2, 2, (int64_t[]){CF, CB}, &cols));
    AQ_ASSERT_OK(aq_op_matmul(g, flat, cols, none, 0, 0, AQ_ACTIVATION_NONE, &logits));
  } else {
    AQ_ASSERT_OK(aq_op_matmul(g, flat, fc, none, 0, 0, AQ_ACTIVATION_NONE, &logits));
  }
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, c->labels, &c->loss));
  AQ_ASSERT_OK(aq_graph_backward(g, c->loss));
  aq_sgd_options_t o = {.lr = 0.05f, .momentum = 0.9f};
  for (int i = 0; i < (two ? 4 : 5); ++i) { /* fc takes no part in the two pools' logits */
    aq_tensor_t grad;
    AQ_ASSERT_OK(aq_graph_gradient(g, c->p[i], &grad));
    AQ_ASSERT_OK(aq_op_sgd(g, c->p[i], grad, &o));
  }
}

static aq_exec_t *instantiate_cnn(cnn_t *c, uint32_t flags, aq_agent_kind_t kind) {
  aq_exec_t *e;
  aq_exec_options_t eo = {.flags = flags, .kernel_agent_kinds = 1u << kind};
  AQ_ASSERT_OK(aq_graph_instantiate(c->g, &eo, &e));
  for (int i = 0; i < CP; ++i) {
    float *v = fill((size_t)c->size[i], 50 + i, i == 2 ? 0.2f : 0.5f);
    if (i == 2 || i == 6) /* gamma and the running variance about 1 */
      for (int64_t j = 0; j < c->size[i]; ++j) v[j] += 1.0f;
    AQ_ASSERT_OK(aq_exec_write(e, c->p[i], v, (size_t)c->size[i] * 4));
    free(v);
  }
  int32_t labels[CB];
  for (int i = 0; i < CB; ++i) labels[i] = (i * 3) % CB;
  AQ_ASSERT_OK(aq_exec_write(e, c->labels, labels, sizeof(labels)));
  return e;
}

/* Every parameter and running statistic equal (tol 0), or within tol. */
static void close_cnn(cnn_t *c, aq_exec_t *a, aq_exec_t *b, const char *when, float tol) {
  for (int i = 0; i < CP; ++i) {
    float *va = malloc((size_t)c->size[i] * 4), *vb = malloc((size_t)c->size[i] * 4);
    AQ_ASSERT_OK(aq_exec_read(a, c->p[i], va, (size_t)c->size[i] * 4));
    AQ_ASSERT_OK(aq_exec_read(b, c->p[i], vb, (size_t)c->size[i] * 4));
    for (int64_t j = 0; j < c->size[i]; ++j)
      cr_assert(tol ? fabsf(va[j] - vb[j]) <= tol * (1.0f + fabsf(vb[j])) : va[j] == vb[j],
                "%s: parameter %d [%lld]: %.9g against %.9g", when, i, (long long)j, va[j], vb[j]);
    free(va), free(vb);
  }
  float la, lb;
  AQ_ASSERT_OK(aq_exec_read(a, c->loss, &la, 4));
  AQ_ASSERT_OK(aq_exec_read(b, c->loss, &lb, 4));
  cr_assert(tol ? fabsf(la - lb) <= tol * (1.0f + fabsf(lb)) : la == lb, "%s: loss %.9g against %.9g", when, la, lb);
}

static void feed_cnn(cnn_t *c, aq_exec_t *const *e, int n, unsigned seed) {
  float *x = fill(CB * CS * CS, seed, 1.0f);
  for (int k = 0; k < n; ++k) AQ_ASSERT_OK(aq_exec_write(e[k], c->x, x, CB * CS * CS * 4));
  free(x);
}

static char *explain_text(aq_exec_t *e) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert(f);
  AQ_ASSERT_OK(aq_exec_explain(e, f));
  fclose(f);
  return text;
}

/* The variant's fused pairs: batch norm into relu, pool backward into
 * relu's backward. */
static void expect_cnn_pairs(aq_exec_t *e, size_t bn_relu, size_t pool_relu) {
  static char dot[1 << 17];
  read_dot(e, dot, sizeof(dot));
  cr_assert_eq(count(dot, AQ_KERNEL_BATCH_NORM_APPLY_RELU), bn_relu, "%s", dot);
  cr_assert_eq(count(dot, AQ_KERNEL_MAX_POOL_BWD_RELU), pool_relu, "%s", dot);
  char *text = explain_text(e);
  cr_assert_eq(count(text, "as " AQ_KERNEL_BATCH_NORM_APPLY_RELU), bn_relu, "%s", text);
  cr_assert_eq(count(text, "as " AQ_KERNEL_MAX_POOL_BWD_RELU), pool_relu, "%s", text);
  free(text);
}

static void cnn_fused_against_plain(int variant, size_t bn_relu, size_t pool_relu) {
  cnn_t c;
  build_cnn(&c, variant);
  aq_exec_t *ex[2] = {instantiate_cnn(&c, 0, AQ_AGENT_KIND_CPU),
                      instantiate_cnn(&c, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE, AQ_AGENT_KIND_CPU)};
  expect_cnn_pairs(ex[0], bn_relu, pool_relu);
  expect_cnn_pairs(ex[1], 0, 0);
  for (int s = 0; s < STEPS; ++s) {
    feed_cnn(&c, ex, 2, 300 + s);
    run(ex[0]), run(ex[1]);
    close_cnn(&c, ex[0], ex[1], "a CNN step", 0.0f);
  }
  AQ_ASSERT_OK(aq_exec_destroy(ex[0]));
  AQ_ASSERT_OK(aq_exec_destroy(ex[1]));
  AQ_ASSERT_OK(aq_graph_destroy(c.g));
}

Test(fuse, a_conv_blocks_relus_run_in_batch_norm_and_the_pools_backward) {
  cnn_fused_against_plain(CNN_PLAIN, 1, 1);
}

/* Whether the CNN's classifier gradient runs in its update's epilogue on
 * CPU agents (and its updates in groups), as `fused` says. */
static void expect_cnn_epilogue(int fused) {
  cnn_t c;
  build_cnn(&c, CNN_PLAIN);
  aq_exec_t *e = instantiate_cnn(&c, 0, AQ_AGENT_KIND_CPU);
  char *text = explain_text(e);
  cr_assert_eq(count(text, "as " AQ_KERNEL_MATMUL_FUSED) > 0, fused, "%s", text);
  if (!fused) cr_assert_eq(count(text, AQ_KERNEL_SGD_MULTI), 0, "no update groups either: %s", text);
  free(text);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(c.g));
}

/* Unset, AQ_FUSION fuses on CPU agents only the rules flagged for them
 * (AQ_OP_FUSE_ON_CPUS: the conv block's elementwise pairs), not a
 * product's epilogue, and the step is still the unfused one bit for bit;
 * AQ_FUSION=1 fuses the epilogue too. */
Test(fuse, a_cpu_fuses_a_conv_blocks_pairs_by_default_and_no_epilogue) {
  restart_with("AQ_FUSION", NULL);
  cnn_fused_against_plain(CNN_PLAIN, 1, 1);
  expect_cnn_epilogue(0);
  restart_with("AQ_FUSION", "1");
  expect_cnn_epilogue(1);
}

Test(fuse, a_normalised_tensor_read_twice_or_a_gradient_added_up_stays_apart) {
  cnn_fused_against_plain(CNN_BN_READ_TWICE, 0, 1);
  cnn_fused_against_plain(CNN_TWO_POOLS, 1, 0);
}

/* On a GPU (fusion its default) the same pairs fuse, and the step trains
 * as the GPU's unfused one (within the contractions of the other fused
 * updates) and as the CPU's (within the two builds' sums). */
Test(fuse, a_gpu_fuses_a_conv_blocks_relus) {
  if (!first_agent(AQ_AGENT_KIND_GPU).handle) cr_skip_test("skipped: no GPU");
  restart_with("AQ_FUSION", NULL);
  cnn_t c;
  build_cnn(&c, CNN_PLAIN);
  aq_exec_t *ex[3] = {instantiate_cnn(&c, 0, AQ_AGENT_KIND_GPU),
                      instantiate_cnn(&c, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE, AQ_AGENT_KIND_GPU),
                      instantiate_cnn(&c, AQ_EXEC_NO_FUSION | AQ_EXEC_NO_MEMORY_REUSE, AQ_AGENT_KIND_CPU)};
  expect_cnn_pairs(ex[0], 1, 1);
  static char dot[1 << 17];
  read_dot(ex[0], dot, sizeof(dot));
  cr_assert(strstr(dot, "kernels-cuda.fatbin"), "%s", dot);
  for (int s = 0; s < STEPS; ++s) {
    feed_cnn(&c, ex, 3, 400 + s);
    run(ex[0]), run(ex[1]), run(ex[2]);
    close_cnn(&c, ex[0], ex[1], "GPU fused against GPU unfused", 1e-5f);
    close_cnn(&c, ex[0], ex[2], "GPU fused against the CPU", 1e-3f);
  }
  for (int k = 0; k < 3; ++k) AQ_ASSERT_OK(aq_exec_destroy(ex[k]));
  AQ_ASSERT_OK(aq_graph_destroy(c.g));
}
