/* GPU memory domains: with replicas (AQ_EXEC_REPLICATE) a GPU task works on
 * its GPU's copy of a tensor and the planner inserts copy tasks (aq_copy on
 * the GPU's queue) where a CPU task needs what a GPU wrote, and back; under
 * AQ_MEMORY=unified prefetch tasks move managed pages instead. Results
 * match the default placement (pinned memory both reach in place). Where
 * there is no GPU each test says "skipped: no GPU". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"

static aq_agent_t gpu;

/* One worker: one CPU lane beside the GPU's, so round-robin alternates. */
static void setup(void) {
  AQ_ASSERT_OK(aq_init(&(aq_init_options_t){.cpu_workers = 1}));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  if (!gpu.handle) {
    const char *why = "";
    aq_driver_status("cuda", &why);
    cr_log_warn("skipped: no GPU (%s)", why);
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
}
static void teardown(void) {
  unsetenv("AQ_MEMORY");
  if (gpu.handle) aq_shut_down();
}
TestSuite(gpu_replicas, .init = setup, .fini = teardown);

/* AQ_MEMORY is read at aq_init: the runtime starts again with it, and with
 * the suite's one worker (round-robin must still reach the GPU). */
static void memory_setting(const char *value) {
  aq_shut_down();
  if (value) setenv("AQ_MEMORY", value, 1);
  else unsetenv("AQ_MEMORY");
  AQ_ASSERT_OK(aq_init(&(aq_init_options_t){.cpu_workers = 1}));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
}

/* A small MLP trained a few steps with its tasks dealt to CPU and GPU in
 * turn (round-robin): most tensors cross between them, parameters too. */
enum { B = 64, IN = 32, H = 96, OUT = 10, STEPS = 5 };
static void train(uint32_t flags, float losses[STEPS], aq_exec_info_t *info, const char *dot) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w1, b1, w2, h, logits, loss;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &b1));
  AQ_ASSERT_OK(aq_tensor_init(g, b1, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, OUT}, &w2));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, b1, 0, 0, AQ_ACTIVATION_NONE, &h));
  AQ_ASSERT_OK(aq_op_relu(g, h, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, w2, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t ps[3] = {w1, b1, w2};
  aq_sgd_options_t so = {.lr = 0.2f, .momentum = 0.9f};
  for (int i = 0; i < 3; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(g, ps[i], &gr));
    AQ_ASSERT_OK(aq_op_sgd(g, ps[i], gr, &so));
  }
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN, .flags = flags};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  if (dot) AQ_ASSERT_OK(aq_exec_write_dot(e, dot));
  static float xs[B * IN], w1s[IN * H], w2s[H * OUT];
  int32_t ys[B];
  unsigned seed = 11;
  for (int i = 0; i < B * IN; ++i) xs[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f;
  for (int i = 0; i < IN * H; ++i)
    w1s[i] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f - 0.5f) * 0.3f;
  for (int i = 0; i < H * OUT; ++i)
    w2s[i] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f - 0.5f) * 0.3f;
  for (int i = 0; i < B; ++i) ys[i] = i % OUT;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  for (int s = 0; s < STEPS; ++s) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, loss, &losses[s], sizeof(float)));
  }
  AQ_ASSERT_OK(aq_exec_get_info(e, info));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(gpu_replicas, training_with_gpu_replicas_or_prefetches_matches_the_default_placement) {
  float plain[STEPS], repl[STEPS], unified[STEPS];
  aq_exec_info_t ip, ir, iu;
  train(0, plain, &ip, NULL);
  train(AQ_EXEC_REPLICATE, repl, &ir, "/tmp/aq-replicas-gpu.dot");
  char *dot = slurp("/tmp/aq-replicas-gpu.dot");
  memory_setting("unified");
  train(0, unified, &iu, NULL);
  memory_setting(NULL);
  /* round-robin deals tasks to a CPU lane and every GPU */
  cr_assert_geq(ip.agents_used, 2, "the placement uses the CPU and a GPU");
  cr_assert_eq(ip.queues, ip.agents_used, "one CPU lane and each GPU's (%u)", ip.queues);
  cr_assert_gt(ir.tasks, ip.tasks, "copies are tasks: %u vs %u", ir.tasks, ip.tasks);
  cr_assert_gt(iu.tasks, ip.tasks, "prefetches are tasks: %u vs %u", iu.tasks, ip.tasks);
  for (int s = 0; s < STEPS; ++s) {
    cr_assert_float_eq(plain[s], repl[s], 1e-4f * fabsf(plain[s]) + 1e-6f, "step %d: %g vs %g", s, plain[s], repl[s]);
    cr_assert_float_eq(plain[s], unified[s], 1e-4f * fabsf(plain[s]) + 1e-6f, "step %d: %g vs %g", s, plain[s],
                       unified[s]);
  }
  cr_assert_lt(plain[STEPS - 1], plain[0], "it learned: %g -> %g", plain[0], plain[STEPS - 1]);
  /* Both directions, as kernels of the op library on the GPU. */
  cr_assert(strstr(dot, " -> cuda0\\naq_copy [kernels-cuda.fatbin]"), "no copy to the GPU in the DOT:\n%s", dot);
  cr_assert(strstr(dot, " -> cpu0\\naq_copy [kernels-cuda.fatbin]"), "no copy to the host in the DOT:\n%s", dot);
}

/* b = relu(a) on the GPU; a host task reads b and writes c = 2b; the GPU
 * then reads both: d = tanh(b), f = relu(c) (b is named "relu(a)" in the
 * DOT, as its op names it). Exactly two copies are needed
 * (b to the host, c to the GPU): a stays on the GPU, and b's GPU copy is
 * still valid after the host read it. Unified memory: four prefetches (b
 * and c each go to the host and back). */
enum { N = 4096 };
typedef struct {
  aq_exec_t *e;
  aq_tensor_t b, c;
} host_args_t;

static aq_status_t double_it(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  host_args_t *h = user;
  float *b, *c;
  aq_status_t s = aq_exec_tensor_data(h->e, h->b, (void **)&b);
  if (s == AQ_OK) s = aq_exec_tensor_data(h->e, h->c, (void **)&c);
  if (s != AQ_OK) return s;
  for (int i = 0; i < N; ++i) c[i] = 2 * b[i];
  return AQ_OK;
}

static uint32_t cpu_reads_gpu_result(uint32_t flags, const char *dot_path, char **dot) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b, c, d, f;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){N}, &a));
  AQ_ASSERT_OK(aq_tensor_create(g, "c", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){N}, &c));
  AQ_ASSERT_OK(aq_op_relu(g, a, &b));
  host_args_t h = {NULL, b, c};
  aq_host_task_t ht = {.name = "double", .fn = double_it, .user = &h, .agent = -1, .read_count = 1,
                       .reads = {b}, .write_count = 1, .writes = {c}};
  AQ_ASSERT_OK(aq_graph_add_host(g, &ht, NULL));
  AQ_ASSERT_OK(aq_op_tanh(g, b, &d));
  AQ_ASSERT_OK(aq_op_relu(g, c, &f));
  aq_exec_options_t o = {.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU, .flags = flags | AQ_EXEC_NO_MEMORY_REUSE};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &h.e));
  AQ_ASSERT_OK(aq_exec_write_dot(h.e, dot_path));
  *dot = slurp(dot_path);
  static float as[N], ds[N], fs[N];
  for (int run = 0; run < 3; ++run) {
    for (int i = 0; i < N; ++i) as[i] = (float)((i * 37 + run * 11) % 101 - 50) / 25.0f;
    AQ_ASSERT_OK(aq_exec_write(h.e, a, as, sizeof(as)));
    AQ_ASSERT_OK(aq_exec_run(h.e));
    AQ_ASSERT_OK(aq_exec_wait(h.e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(h.e, d, ds, sizeof(ds)));
    AQ_ASSERT_OK(aq_exec_read(h.e, f, fs, sizeof(fs)));
    for (int i = 0; i < N; ++i) {
      float bi = as[i] > 0 ? as[i] : 0;
      cr_assert_float_eq(ds[i], tanhf(bi), 1e-5f, "run %d: d[%d] = %g, not tanh(%g)", run, i, ds[i], bi);
      cr_assert_float_eq(fs[i], 2 * bi, 1e-6f, "run %d: f[%d] = %g, not %g", run, i, fs[i], 2 * bi);
    }
  }
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(h.e, &info));
  AQ_ASSERT_OK(aq_exec_destroy(h.e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  return info.tasks;
}

Test(gpu_replicas, a_cpu_task_reading_a_gpu_result_needs_no_copy_by_default) {
  char *dot;
  uint32_t plain = cpu_reads_gpu_result(0, "/tmp/aq-replicas-count.dot", &dot);
  cr_assert_eq(plain, 4, "four tasks as declared, no copies by default (%u)", plain);
  cr_assert_eq(count(dot, "label=\"copy "), 0, "%s", dot);
}

Test(gpu_replicas, a_cpu_task_reading_a_gpu_result_gets_exactly_the_copies_it_needs) {
  char *dot;
  /* Traced, so the copies show as kernels in the trace too. */
  AQ_ASSERT_OK(aq_trace_start(&(aq_trace_options_t){.path = "/tmp/aq-replicas-trace.json"}));
  uint32_t repl = cpu_reads_gpu_result(AQ_EXEC_REPLICATE, "/tmp/aq-replicas-count.dot", &dot);
  AQ_ASSERT_OK(aq_trace_stop());
  cr_assert_eq(repl, 6, "two copies, not %u", repl - 4);
  cr_assert_eq(count(dot, "label=\"copy "), 2, "%s", dot);
  cr_assert(strstr(dot, "copy relu(a) -> cpu0"), "%s", dot);
  cr_assert(strstr(dot, "copy c -> cuda0"), "%s", dot);
  char *trace = slurp("/tmp/aq-replicas-trace.json");
  cr_assert_geq(count(trace, "\"aq_copy\""), 6, "3 runs x 2 copies as GPU kernels in the trace");
}

Test(gpu_replicas, under_unified_memory_a_cpu_task_reading_a_gpu_result_gets_prefetches) {
  char *dot;
  memory_setting("unified");
  uint32_t unified = cpu_reads_gpu_result(0, "/tmp/aq-replicas-count.dot", &dot);
  memory_setting(NULL);
  cr_assert_eq(unified, 8, "four prefetches, not %u", unified - 4);
  cr_assert_eq(count(dot, "label=\"prefetch "), 4, "%s", dot);
  cr_assert(strstr(dot, "prefetch relu(a) -> cpu0") && strstr(dot, "prefetch relu(a) -> cuda0"), "%s", dot);
  cr_assert(strstr(dot, "prefetch c -> cpu0") && strstr(dot, "prefetch c -> cuda0"), "%s", dot);
}
