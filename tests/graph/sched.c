/* The scheduler's planning: HEFT over measured performance models (and the
 * models file), memory reuse by lifetime, lowering that waits once per lane
 * hop, inputs that must be given data, binding user memory, DOT. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(sched, .init = setup, .fini = teardown);

static void run_ok(aq_exec_t *e) {
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
}

static void fill(float *v, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

/* A small MLP step (batch 64, hidden 128: activations of 32 KiB, which
 * reuse concerns) trained a few steps; returns the losses. */
enum { B = 64, IN = 32, H = 128, OUT = 10, STEPS = 4 };
static void train_mlp_ex(uint32_t flags, aq_sched_policy_t policy, float losses[STEPS], size_t *bytes,
                         aq_exec_info_t *info_out, float *w1_out, const char *dot);
static void train_mlp(uint32_t flags, aq_sched_policy_t policy, float losses[STEPS], size_t *bytes) {
  train_mlp_ex(flags, policy, losses, bytes, NULL, NULL, NULL);
}
static void train_mlp_ex(uint32_t flags, aq_sched_policy_t policy, float losses[STEPS], size_t *bytes,
                         aq_exec_info_t *info_out, float *w1_out, const char *dot) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w1, b1, w2, b2, w3, h1, h2, logits, loss;
  (void)h1;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &b1));
  AQ_ASSERT_OK(aq_tensor_init(g, b1, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, H}, &w2));
  AQ_ASSERT_OK(aq_tensor_create(g, "b2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &b2));
  AQ_ASSERT_OK(aq_tensor_init(g, b2, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_tensor_create(g, "w3", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, OUT}, &w3));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, b1, 0, 0, AQ_ACTIVATION_NONE, &h1));
  AQ_ASSERT_OK(aq_op_relu(g, h1, &h1));
  AQ_ASSERT_OK(aq_op_matmul(g, h1, w2, b2, 0, 0, AQ_ACTIVATION_NONE, &h2));
  AQ_ASSERT_OK(aq_op_tanh(g, h2, &h2));
  AQ_ASSERT_OK(aq_op_matmul(g, h2, w3, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t params[5] = {w1, b1, w2, b2, w3};
  aq_sgd_options_t so = {.lr = 0.1f, .momentum = 0.9f};
  for (int i = 0; i < 5; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(g, params[i], &gr));
    AQ_ASSERT_OK(aq_op_sgd(g, params[i], gr, &so));
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = policy, .flags = flags, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  if (dot) AQ_ASSERT_OK(aq_exec_write_dot(e, dot));
  static float xs[B * IN], w1s[IN * H], w2s[H * H], w3s[H * OUT];
  int32_t ys[B];
  fill(xs, B * IN, 1), fill(w1s, IN * H, 2), fill(w2s, H * H, 3), fill(w3s, H * OUT, 4);
  for (int i = 0; i < IN * H; ++i) w1s[i] *= 0.2f;
  for (int i = 0; i < H * H; ++i) w2s[i] *= 0.1f;
  for (int i = 0; i < H * OUT; ++i) w3s[i] *= 0.1f;
  for (int i = 0; i < B; ++i) ys[i] = (i * 7) % OUT;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  AQ_ASSERT_OK(aq_exec_write(e, w3, w3s, sizeof(w3s)));
  for (int s = 0; s < STEPS; ++s) {
    run_ok(e);
    AQ_ASSERT_OK(aq_exec_read(e, loss, &losses[s], sizeof(float)));
  }
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  *bytes = info.bytes;
  if (info_out) *info_out = info;
  if (w1_out) AQ_ASSERT_OK(aq_exec_read(e, w1, w1_out, IN * H * sizeof(float)));
  /* An activation whose buffer was handed on cannot be read (its bytes are
   * the later one's); one that kept its buffer (the loss) can. */
  int refused = 0;
  for (uint32_t id = 1;; ++id) {
    aq_tensor_info_t ti;
    if (aq_tensor_get_info(g, (aq_tensor_t){id}, &ti) != AQ_OK) break;
    if (ti.role != AQ_ROLE_ACTIVATION) continue;
    void *probe = malloc(ti.bytes);
    aq_status_t s = aq_exec_read(e, (aq_tensor_t){id}, probe, ti.bytes);
    free(probe);
    if (s == AQ_OK) continue;
    cr_assert_eq(s, AQ_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(aq_last_error(), "shares its buffer"), "%s", aq_last_error());
    refused++;
  }
  if (flags & AQ_EXEC_NO_MEMORY_REUSE) cr_assert_eq(refused, 0);
  else cr_assert_gt(refused, 0);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(sched, activations_share_memory_and_training_is_unchanged) {
  float with[STEPS], without[STEPS];
  size_t bytes_with, bytes_without;
  train_mlp(0, AQ_SCHED_EAGER, with, &bytes_with);
  train_mlp(AQ_EXEC_NO_MEMORY_REUSE, AQ_SCHED_EAGER, without, &bytes_without);
  cr_assert_lt(bytes_with, bytes_without, "reuse: %zu bytes, without: %zu", bytes_with, bytes_without);
  for (int s = 0; s < STEPS; ++s)
    cr_assert_float_eq(with[s], without[s], 1e-4f * fabsf(without[s]) + 1e-6f, "step %d: %g vs %g", s, with[s],
                       without[s]);
  cr_assert_lt(with[STEPS - 1], with[0], "the loss falls: %g -> %g", with[0], with[STEPS - 1]);
}

/* Parallel branches must not share: a and b are alive at once on two lanes. */
Test(sched, parallel_branches_never_share_a_buffer) {
  for (int pass = 0; pass < 2; ++pass) {
    aq_graph_t *g;
    AQ_ASSERT_OK(aq_graph_create(NULL, &g));
    aq_tensor_t x, a, b, c, d, out;
    AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){64, 64}, &x));
    AQ_ASSERT_OK(aq_op_relu(g, x, &a));
    AQ_ASSERT_OK(aq_op_sigmoid(g, x, &b));
    AQ_ASSERT_OK(aq_op_tanh(g, a, &c));
    AQ_ASSERT_OK(aq_op_gelu(g, b, &d));
    AQ_ASSERT_OK(aq_op_matmul(g, c, d, (aq_tensor_t){0}, 0, 1, AQ_ACTIVATION_NONE, &out));
    aq_exec_t *e;
    aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN, .flags = pass ? AQ_EXEC_NO_MEMORY_REUSE : 0};
    AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
    static float xs[64 * 64], res[2][64 * 64];
    fill(xs, 64 * 64, 9);
    AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
    run_ok(e);
    run_ok(e);
    AQ_ASSERT_OK(aq_exec_read(e, out, res[pass], sizeof(res[pass])));
    if (pass)
      for (int i = 0; i < 64 * 64; ++i) cr_assert_float_eq(res[0][i], res[1][i], 1e-5f, "element %d", i);
    AQ_ASSERT_OK(aq_exec_destroy(e));
    AQ_ASSERT_OK(aq_graph_destroy(g));
  }
}

static char perf_dir[64];
static void perf_setup(void) {
  perf_dir_make(perf_dir, "perf-test", NULL, NULL);
  restart_with("AQ_PERF_DIR", perf_dir); /* the suite's aq_init read the default */
}
static void perf_teardown(void) {
  teardown();
  perf_dir_remove(perf_dir); /* models.tsv and its lock */
}

static aq_status_t spin_call(void *user, uint64_t us, uint64_t a2, uint64_t a3) {
  (void)user, (void)a2, (void)a3;
  usleep((useconds_t)us);
  return AQ_OK;
}

static int model_line(const char *kernel, double *samples, double *mean_ns) {
  char path[128], line[512];
  snprintf(path, sizeof(path), "%s/models.tsv", perf_dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int found = 0;
  while (fgets(line, sizeof(line), f)) {
    char k[64], arch[128];
    unsigned cls;
    double n, mean, m2, bytes;
    if (sscanf(line, "%63s %x %127s %lf %lf %lf %lf", k, &cls, arch, &n, &mean, &m2, &bytes) == 7 && !strcmp(k, kernel))
      *samples = n, *mean_ns = mean, found = 1;
  }
  fclose(f);
  return found;
}

Test(sched, heft_calibrates_unknown_tasks_and_keeps_models_in_a_file, .init = perf_setup, .fini = perf_teardown) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_task_t prev = {0};
  /* A chain of host tasks of 2 ms each, and an independent one. */
  for (int i = 0; i < 3; ++i) {
    aq_host_task_t h = {.name = "sleep 2ms", .fn = spin_call, .args = {2000}, .agent = -1};
    aq_task_t t;
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, &t));
    if (prev.id) AQ_ASSERT_OK(aq_graph_add_edge(g, t, AQ_EDGE_AFTER_ALL, &prev, 1));
    prev = t;
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_HEFT};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  cr_assert_eq(info.queues, 1, "a chain stays in one queue under heft (%u)", info.queues);
  cr_assert_eq(info.barriers, 0);
  double n = 0, mean = 0;
  for (int r = 0; r < 4; ++r) run_ok(e);
  /* Calibration ends after three profiled runs and writes the file. */
  cr_assert(model_line("host:sleep_2ms", &n, &mean), "no model for the host task in %s", perf_dir);
  /* 3 tasks x 3 profiled runs; on a loaded machine a sample descheduled
   * past 4x the mean is set aside as a spike (perfmodel.h). */
  cr_assert(n >= 7 && n <= 9, "3 tasks x 3 profiled runs, not %g", n);
  double calibrated = n;
  cr_assert(mean > 1.9e6 && mean < 20e6, "mean %g ns for a 2 ms sleep", mean);
  char dot[4096];
  read_dot(e, dot, sizeof(dot));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* The first instantiation had no model: its estimate was the guess. */
  cr_assert(strstr(dot, "[host]") && strstr(dot, "est. 1.0 us"), "%s", dot);
  /* A second exec uses the measured model (about 2000 us a task), and does
   * not profile again. */
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  read_dot(e, dot, sizeof(dot));
  char *est = strstr(dot, "est. ");
  cr_assert(est, "%s", dot);
  double us = atof(est + 5);
  cr_assert(us > 1900 && us < 20000, "estimate %g us from the model: %s", us, dot);
  run_ok(e);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  cr_assert(model_line("host:sleep_2ms", &n, &mean));
  cr_assert_eq(n, calibrated, "a calibrated model is not profiled again (%g samples, %g before)", n, calibrated);
  /* A broken line in the file is skipped, not fatal. */
  char path[128];
  snprintf(path, sizeof(path), "%s/models.tsv", perf_dir);
  FILE *f = fopen(path, "a");
  fputs("garbage line\naq_matmul zz cpu -1 x\n", f);
  fclose(f);
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* The models of one kernel: how many lines (shape classes x archs) and
 * their samples. */
static int model_lines(const char *kernel, double samples[8]) {
  char path[128], line[512];
  snprintf(path, sizeof(path), "%s/models.tsv", perf_dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof(line), f)) {
    char k[64], arch[128];
    unsigned cls;
    double ns, mean, m2, bytes;
    if (sscanf(line, "%63s %x %127s %lf %lf %lf %lf", k, &cls, arch, &ns, &mean, &m2, &bytes) == 7 &&
        !strcmp(k, kernel) && n < 8)
      samples[n++] = ns;
  }
  if (f) fclose(f);
  return n;
}

/* An op-library kernel heft has no model for is measured on the agents
 * that may run it before the graph is placed, once per shape class (a
 * calibration exec of its own, three runs): the first placement rests on
 * measurements, and the exec does not profile its own runs for it. */
Test(sched, heft_measures_unmodelled_kernels_before_placing_them, .init = perf_setup, .fini = perf_teardown) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, w, big, y, h;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){64, 64}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){64, 64}, &w));
  AQ_ASSERT_OK(aq_tensor_create(g, "big", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){256, 256}, &big));
  h = x;
  for (int i = 0; i < 3; ++i) AQ_ASSERT_OK(aq_op_matmul(g, h, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, big, big, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &y));
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_HEFT, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  double n[8];
  cr_assert_eq(model_lines("aq_matmul_f32", n), 2, "a model per shape class, measured before any run");
  cr_assert_eq(n[0], 3, "one task of the class, three calibration runs (%g samples)", n[0]);
  cr_assert_eq(n[1], 3, "%g samples", n[1]);
  static float zeros[256 * 256];
  AQ_ASSERT_OK(aq_exec_write(e, x, zeros, 64 * 64 * sizeof(float)));
  AQ_ASSERT_OK(aq_exec_write(e, w, zeros, 64 * 64 * sizeof(float)));
  AQ_ASSERT_OK(aq_exec_write(e, big, zeros, sizeof(zeros)));
  run_ok(e);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  cr_assert_eq(model_lines("aq_matmul_f32", n), 2);
  cr_assert(n[0] == 3 && n[1] == 3, "the exec's own runs are not profiled (%g, %g samples)", n[0], n[1]);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* The lanes of a CPU agent are queues over the same workers (a dispatch's
 * work-groups go to all of them): two independent 256^3 matmuls (at least
 * 32 groups each), on an agent of at most 32 workers, take twice one's time in heft's
 * estimate, not one's as on two processors of their own. */
Test(sched, heft_counts_the_workers_that_cpu_lanes_share, .init = perf_setup, .fini = perf_teardown) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){256, 256}, &a));
  for (int i = 0; i < 2; ++i) AQ_ASSERT_OK(aq_op_matmul(g, a, a, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &y));
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_HEFT, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  double n = 0, mean = 0;
  cr_assert(model_line("aq_matmul_f32", &n, &mean), "calibrated before placement");
  char dot[8192];
  read_dot(e, dot, sizeof(dot));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* The tasks' last finish, not the makespan: that adds the measured hop
   * to the join lane, which on some machines rivals the products. */
  double us = 0;
  for (const char *f = strstr(dot, "finish "); f; f = strstr(f + 7, "finish ")) us = fmax(us, atof(f + 7));
  cr_assert(us > 0, "%s", dot);
  aq_agent_t cpu = first_agent(AQ_AGENT_KIND_CPU);
  aq_agent_info_t ai;
  AQ_ASSERT_OK(aq_agent_get_info(cpu, &ai));
  if (ai.compute_units <= 32) /* (wider agents might run the two side by side) */
    cr_assert(fabs(us * 1e3 - 2 * mean) < 0.01 * mean, "%g us for two of %g us on %u workers: %s", us, mean / 1e3,
              ai.compute_units, dot);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* Spreading rests on the tasks' measured time: before calibration a host
 * call's guess (1 us) is below a lane hop on a slow machine (ASan on two
 * cores), where keeping all eight in one lane is the right estimate. */
Test(sched, heft_spreads_independent_tasks_and_refuses_bad_pins, .init = perf_setup, .fini = perf_teardown) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  for (int i = 0; i < 8; ++i) {
    aq_host_task_t h = {.name = "independent", .fn = spin_call, .args = {100}, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_HEFT};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  for (int r = 0; r < 4; ++r) run_ok(e);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  double n = 0, mean = 0;
  cr_assert(model_line("host:independent", &n, &mean), "no model for the host task in %s", perf_dir);
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  aq_agent_t a;
  size_t na;
  AQ_ASSERT_OK(aq_agents(&a, 1, &na));
  aq_agent_info_t ai;
  AQ_ASSERT_OK(aq_agent_get_info(a, &ai));
  if (ai.compute_units > 1) cr_assert_gt(info.queues, 1, "independent tasks use every lane");
  AQ_ASSERT_OK(aq_exec_destroy(e));
  aq_host_task_t pinned = {.name = "pinned far", .fn = spin_call, .agent = 63};
  AQ_ASSERT_OK(aq_graph_add_host(g, &pinned, NULL));
  cr_assert_eq(aq_graph_instantiate(g, &o, &e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "'pinned far' is pinned to agent 63"), "%s", aq_last_error());
  o.policy = (aq_sched_policy_t)99;
  cr_assert_eq(aq_graph_instantiate(g, &o, &e), AQ_ERROR_INVALID_ARGUMENT);
  o.policy = AQ_SCHED_HEFT, o.flags = 1u << 30;
  cr_assert_eq(aq_graph_instantiate(g, &o, &e), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "unknown flags"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t nop_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  __atomic_fetch_add((int *)user, 1, __ATOMIC_RELAXED);
  return AQ_OK;
}

/* A fan-in of n tasks over two lanes waits on one signal per lane; a
 * wavefront waits once per lane hop. */
Test(sched, a_fan_in_waits_once_per_lane) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  int count = 0;
  enum { N = 200 };
  aq_task_t tasks[N];
  for (int i = 0; i < N; ++i) {
    aq_host_task_t h = {.name = "leaf", .fn = nop_call, .user = &count, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, &tasks[i]));
  }
  aq_host_task_t sink = {.name = "sink", .fn = nop_call, .user = &count, .agent = -1};
  aq_task_t s;
  AQ_ASSERT_OK(aq_graph_add_host(g, &sink, &s));
  AQ_ASSERT_OK(aq_graph_add_edge(g, s, AQ_EDGE_AFTER_ALL, tasks, N));
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  cr_assert_leq(info.barriers, info.queues, "%u barriers for a fan-in over %u queues", info.barriers, info.queues);
  for (int r = 0; r < 3; ++r) run_ok(e);
  cr_assert_eq(count, 3 * (N + 1));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(sched, inputs_must_be_given_data_before_the_first_run) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "pixels", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){256}, &x));
  AQ_ASSERT_OK(aq_op_relu(g, x, &y));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  cr_assert_eq(aq_exec_run(e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "input 'pixels' was never given data") &&
                strstr(aq_last_error(), "task 'relu(pixels)'"),
            "%s", aq_last_error());
  float v[256];
  fill(v, 256, 5);
  AQ_ASSERT_OK(aq_exec_write(e, x, v, sizeof(v)));
  run_ok(e);
  float out[256];
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  for (int i = 0; i < 256; ++i) cr_assert_eq(out[i], v[i] > 0 ? v[i] : 0.0f);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t slow_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  usleep(30000);
  return AQ_OK;
}

Test(sched, bound_inputs_are_read_in_place_and_rebinding_rewrites_kernargs) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){1024}, &x));
  AQ_ASSERT_OK(aq_op_relu(g, x, &y));
  aq_host_task_t h = {.name = "slow", .fn = slow_call, .agent = -1, .read_count = 1, .reads = {y}};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float *buf[2];
  for (int k = 0; k < 2; ++k) {
    buf[k] = aligned_alloc(64, 1024 * sizeof(float));
    for (int i = 0; i < 1024; ++i) buf[k][i] = (float)(k ? -i : i);
  }
  cr_assert_eq(aq_exec_bind(e, x, buf[0], 1000), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "holds 4096 bytes, not 1000"), "%s", aq_last_error());
  cr_assert_eq(aq_exec_bind(e, x, (char *)buf[0] + 4, 4096), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_exec_bind(e, y, buf[0], 4096), AQ_ERROR_INVALID_ARGUMENT, "an activation cannot be bound");
  AQ_ASSERT_OK(aq_exec_bind(e, x, buf[0], 4096));
  float out[1024];
  run_ok(e);
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert_eq(out[100], 100.0f);
  buf[0][100] = 7.0f; /* read in place: no copy in between */
  run_ok(e);
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert_eq(out[100], 7.0f);
  AQ_ASSERT_OK(aq_exec_bind(e, x, buf[1], 4096));
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_bind(e, x, buf[0], 4096), AQ_ERROR_BUSY, "not while a run is in flight");
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert_eq(out[100], 0.0f, "relu(-100) from the second buffer");
  cr_assert_eq(out[0], 0.0f);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  free(buf[0]), free(buf[1]);
}

Test(sched, dot_names_agent_variant_and_estimate) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b, c;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){8, 8}, &a));
  AQ_ASSERT_OK(aq_op_relu(g, a, &b));
  AQ_ASSERT_OK(aq_op_matmul(g, b, a, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &c));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  char dot[4096];
  read_dot(e, dot, sizeof(dot));
  cr_assert(strstr(dot, "digraph") && strstr(dot, "[kernels-cpu.so]") && strstr(dot, "on cpu") &&
                strstr(dot, "t0 -> t1"),
            "%s", dot);
  cr_assert(strstr(dot, "fillcolor") && strstr(dot, "cluster_agents"), "tasks coloured by agent, with a legend: %s", dot);
  cr_assert_eq(aq_exec_write_dot(e, "/nonexistent-dir/x.dot"), AQ_ERROR_IO);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(sched, a_kernel_no_agent_has_is_refused_naming_task_and_kernel) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_kernel_task_t k = {.name = "mystery", .kernel = "aq_no_such_kernel", .shape = {{1, 1, 1}, {1, 1, 1}}, .agent = -1};
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, NULL));
  aq_exec_t *e;
  aq_sched_policy_t policies[3] = {AQ_SCHED_EAGER, AQ_SCHED_ROUND_ROBIN, AQ_SCHED_HEFT};
  for (int i = 0; i < 3; ++i) {
    aq_exec_options_t o = {.policy = policies[i]};
    cr_assert_eq(aq_graph_instantiate(g, &o, &e), AQ_ERROR_INVALID_GRAPH);
    cr_assert(strstr(aq_last_error(), "task 'mystery'") && strstr(aq_last_error(), "'aq_no_such_kernel'"), "%s",
              aq_last_error());
  }
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* Two NUMA nodes (synthetic): with replicas, a task reads a copy in its own
 * node's memory, made by a copy task the planner inserted; training agrees
 * with reading remote memory in place, and parameters updated away from
 * home are copied back for the next run. */
Test(sched_numa, replicas_and_copies_across_two_nodes_agree_with_remote_reads) {
  setenv("HWLOC_SYNTHETIC", "numa:2 core:1 pu:1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  float plain[STEPS], repl[STEPS];
  static float w1a[IN * H], w1b[IN * H];
  size_t bytes;
  aq_exec_info_t ia, ib;
  train_mlp_ex(0, AQ_SCHED_ROUND_ROBIN, plain, &bytes, &ia, w1a, NULL);
  train_mlp_ex(AQ_EXEC_REPLICATE, AQ_SCHED_ROUND_ROBIN, repl, &bytes, &ib, w1b, "/tmp/aq-sched-numa.dot");
  cr_assert_eq(ia.agents_used, 2);
  cr_assert_gt(ib.tasks, ia.tasks, "copies are tasks: %u vs %u", ib.tasks, ia.tasks);
  for (int s = 0; s < STEPS; ++s)
    cr_assert_float_eq(plain[s], repl[s], 1e-4f * fabsf(plain[s]) + 1e-6f, "step %d: %g vs %g", s, plain[s], repl[s]);
  for (int i = 0; i < IN * H; ++i) cr_assert_float_eq(w1a[i], w1b[i], 1e-4f, "w1[%d]", i);
  const char *dot = slurp("/tmp/aq-sched-numa.dot");
  cr_assert(strstr(dot, "copy ") && strstr(dot, " -> cpu"), "no copy task in the DOT");
  aq_shut_down();
  unsetenv("HWLOC_SYNTHETIC");
}

static aq_status_t sleepy_count(void *user, uint64_t us, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  usleep((useconds_t)us);
  __atomic_fetch_add((int *)user, 1, __ATOMIC_RELAXED);
  return AQ_OK;
}

Test(sched, a_run_has_one_completion_signal_and_waits_time_out) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  int count = 0;
  for (int i = 0; i < 6; ++i) {
    aq_host_task_t h = {.name = "sleepy", .fn = sleepy_count, .user = &count, .args = {20000}, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_exec_completion_signal(e, &done));
  for (int r = 1; r <= 2; ++r) {
    AQ_ASSERT_OK(aq_exec_run(e));
    aq_signal_value_t v;
    AQ_ASSERT_OK(aq_signal_load(done, &v));
    cr_assert_eq(v, 1, "in flight");
    cr_assert_eq(aq_exec_wait(e, 1000), AQ_ERROR_TIMEOUT, "1 us is too short for 20 ms tasks");
    cr_assert_eq(aq_exec_run(e), AQ_ERROR_BUSY, "a timed-out wait leaves the run in flight");
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
    cr_assert_eq(__atomic_load_n(&count, __ATOMIC_RELAXED), 6 * r, "every task of the run is done");
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  }
  cr_assert_eq(aq_exec_completion_signal(e, NULL), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t touch_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  return AQ_OK;
}

/* NUMA locality: tasks go to the node that holds the most of what they
 * read; here a loader pinned to the second node writes the data. */
Test(sched_numa, locality_follows_the_data_to_its_node) {
  setenv("HWLOC_SYNTHETIC", "numa:2 core:1 pu:1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, small;
  AQ_ASSERT_OK(aq_tensor_create(g, "big", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1 << 16}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "small", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){16}, &small));
  aq_host_task_t load = {.name = "load", .fn = touch_call, .agent = 1, .write_count = 1, .writes = {x}};
  aq_host_task_t load2 = {.name = "load small", .fn = touch_call, .agent = 0, .write_count = 1, .writes = {small}};
  AQ_ASSERT_OK(aq_graph_add_host(g, &load, NULL));
  AQ_ASSERT_OK(aq_graph_add_host(g, &load2, NULL));
  for (int i = 0; i < 4; ++i) {
    aq_host_task_t use = {.name = "use", .fn = touch_call, .agent = -1, .read_count = 2, .reads = {x, small}};
    AQ_ASSERT_OK(aq_graph_add_host(g, &use, NULL));
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_LOCALITY};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  run_ok(e);
  AQ_ASSERT_OK(aq_exec_write_dot(e, "/tmp/aq-sched-loc.dot"));
  FILE *f = fopen("/tmp/aq-sched-loc.dot", "r");
  cr_assert(f);
  char line[512];
  int uses = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "label=\"use\\n")) {
      uses++;
      cr_assert(strstr(line, "on cpu1"), "a reader of 'big' away from its node: %s", line);
    }
  fclose(f);
  unlink("/tmp/aq-sched-loc.dot");
  cr_assert_eq(uses, 4);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  aq_shut_down();
  unsetenv("HWLOC_SYNTHETIC");
}

/* Training under heft: its first runs are profiled (stamps around each
 * task) and the losses are those of any other placement. */
Test(sched, heft_trains_like_eager_while_it_calibrates, .init = perf_setup, .fini = perf_teardown) {
  float eager[STEPS], heft[STEPS];
  size_t bytes;
  train_mlp(0, AQ_SCHED_EAGER, eager, &bytes);
  train_mlp(0, AQ_SCHED_HEFT, heft, &bytes);
  for (int s = 0; s < STEPS; ++s)
    cr_assert_float_eq(eager[s], heft[s], 1e-4f * fabsf(eager[s]) + 1e-6f, "step %d: %g vs %g", s, eager[s], heft[s]);
  double n = 0, mean = 0;
  cr_assert(model_line("aq_matmul_f32", &n, &mean) || model_line("aq_matmul", &n, &mean), "no matmul model");
  cr_assert_geq(n, 3);
  cr_assert_gt(mean, 0);
}

/* AQ_SCHED is read once, at aq_init: a name it does not know is refused
 * there, by name, rather than silently meaning some policy. */
Test(sched, an_unknown_aq_sched_is_refused_at_init_by_name) {
  aq_shut_down();
  setenv("AQ_SCHED", "bogus", 1);
  aq_status_t s = aq_init(NULL);
  unsetenv("AQ_SCHED");
  cr_assert_eq(s, AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "AQ_SCHED='bogus'"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_init(NULL));
  aq_setting_t set[32];
  size_t n = 0;
  AQ_ASSERT_OK(aq_settings(set, 32, &n));
  int found = 0;
  for (size_t i = 0; i < n && i < 32; ++i)
    if (!strcmp(set[i].name, "AQ_SCHED")) {
      found = 1;
      cr_expect_str_eq(set[i].value, "heft", "the default placement");
    }
  cr_assert(found, "aq_settings lists AQ_SCHED");
}

/* aq_exec_explain: the placement, the estimate per agent and a reason for
 * every task. */
Test(sched, explain_gives_each_task_its_agent_estimates_and_reason, .init = perf_setup, .fini = perf_teardown) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b, c;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){64, 64}, &a));
  AQ_ASSERT_OK(aq_op_relu(g, a, &b));
  AQ_ASSERT_OK(aq_op_matmul(g, b, a, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &c));
  aq_host_task_t h = {.name = "after", .fn = spin_call, .args = {1}, .agent = -1, .read_count = 1, .reads = {c}};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  char text[8192] = "";
  FILE *f = tmpfile();
  cr_assert(f);
  AQ_ASSERT_OK(aq_exec_explain(e, f));
  rewind(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = 0;
  fclose(f);
  cr_assert(strstr(text, "placement: heft"), "the default placement: %s", text);
  cr_assert(strstr(text, "estimated run:"), "%s", text);
  int lines = 0;
  for (const char *p = text; (p = strchr(p, '\n')); ++p) ++lines;
  /* the header: placement, estimates, links where there are several agents, columns */
  cr_assert(lines == 3 + 3 || lines == 4 + 3, "a header and a line per task: %s", text);
  cr_assert(strstr(text, "relu(a)") && strstr(text, "matmul(") && strstr(text, "after") && strstr(text, " us"), "%s",
            text);
  cr_assert(strstr(text, "a host call: CPU agents run it"), "%s", text);
  cr_assert_eq(aq_exec_explain(NULL, stdout), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_exec_explain(e, NULL), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* Destroying an exec twice is refused, not a double free. */
Test(sched, an_exec_destroyed_twice_is_refused) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){8, 8}, &a));
  AQ_ASSERT_OK(aq_op_relu(g, a, &b));
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  cr_assert_eq(aq_exec_destroy(e), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "not a live exec"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t hold_worker(void *user, uint64_t ms, uint64_t a2, uint64_t a3) {
  (void)user, (void)a2, (void)a3;
  usleep((useconds_t)(ms * 1000));
  return AQ_OK;
}

/* heft measures its link costs with pings of stamping packets, each given
 * a second. Where every CPU worker is held longer (here by host calls on
 * queues of their own), the pings time out, and their stamps run after the
 * measurement gave up: they must find memory that is still theirs (ASan
 * caught a stamp written into a returned stack frame), and the runtime
 * stays usable. */
Test(sched, link_pings_that_time_out_leave_the_runtime_usable) {
  aq_agent_t cpu = first_agent(AQ_AGENT_KIND_CPU);
  aq_agent_info_t ai;
  AQ_ASSERT_OK(aq_agent_get_info(cpu, &ai));
  /* A queue a worker, and as many again for reserve workers; the exec's
   * lanes need queues of the agent's 64 too. */
  enum { HELD_MAX = 32 };
  const uint32_t held = ai.compute_units * 2;
  if (held > HELD_MAX) cr_skip_test("skipped: holding %u workers takes the queues the exec needs", ai.compute_units);
  aq_queue_t q[HELD_MAX];
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(held, &done));
  for (uint32_t i = 0; i < held; ++i) {
    AQ_ASSERT_OK(aq_queue_create(cpu, &(aq_queue_options_t){.size = 4}, &q[i]));
    hsa_agent_dispatch_packet_t p;
    memset(&p, 0, sizeof(p));
    p.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
    p.type = AQ_AGENT_DISPATCH_HOST_CALL;
    p.arg[0] = (uint64_t)(uintptr_t)hold_worker;
    p.arg[1] = 1300;
    p.completion_signal.handle = done.handle;
    AQ_ASSERT_OK(aq_queue_submit(q[i], &p, 1000000000ull, NULL));
  }
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  int count = 0;
  for (int i = 0; i < 4; ++i) {
    aq_host_task_t h = {.name = "after the pings", .fn = nop_call, .user = &count, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  }
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.policy = AQ_SCHED_HEFT}, &e));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 60ull * 1000000000ull, NULL));
  usleep(100000); /* the late stamps run */
  run_ok(e);
  cr_assert_eq(count, 4);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  for (uint32_t i = 0; i < held; ++i) {
    AQ_ASSERT_OK(aq_queue_wait_idle(q[i], 1000000000ull));
    AQ_ASSERT_OK(aq_queue_destroy(q[i]));
  }
  AQ_ASSERT_OK(aq_signal_destroy(done));
}
