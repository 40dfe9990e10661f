/* CUDA graphs for repeating stretches of kernel dispatches (AQ_CUDA_GRAPHS,
 * runtime/drivers/cuda_graph.c): the same results with graphs on and off,
 * new arguments and new input data honoured, a stretch published slowly, a
 * fault inside a graph, the setting. Elsewhere each test says "skipped: no
 * GPU". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../runtime/common.h"

static aq_agent_t gpu, cpu;
static aq_code_object_t co;

static void setup(void) {
  unsetenv("AQ_CUDA_GRAPHS");
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  cpu = first_agent(AQ_AGENT_KIND_CPU);
  if (!gpu.handle) {
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
  unsetenv("AQ_CUDA_GRAPHS");
}
TestSuite(gpu_graphs, .init = setup, .fini = teardown);

typedef struct { float *p; uint32_t n; } add_one_args_t;
typedef struct { uint64_t *out; uint64_t value; } write_args_t;
typedef struct { uint64_t **where; uint64_t value; } write_through_args_t;

static void *managed(size_t size) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(gpu, r, 8, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (info.flags & AQ_REGION_MANAGED) {
      void *p;
      AQ_ASSERT_OK(aq_memory_allocate(r[i], size, &p));
      memset(p, 0, size);
      return p;
    }
  }
  cr_assert_fail("no managed region");
  return NULL;
}

/* AQ_CUDA_GRAPHS as `graphs` (NULL: unset), which aq_init reads: the
 * runtime starts again when it changes, with nothing of the test's alive. */
static void graphs_setting(const char *graphs) {
  static const char *now; /* the suite starts with it unset */
  if (graphs == now || (graphs && now && !strcmp(graphs, now))) return;
  now = graphs;
  restart_with("AQ_CUDA_GRAPHS", graphs);
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  cpu = first_agent(AQ_AGENT_KIND_CPU);
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
}

static aq_queue_t gpu_queue(const char *graphs) {
  graphs_setting(graphs);
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  return q;
}

static uint64_t in_graphs(aq_queue_t q) {
  aq_queue_info_t info;
  AQ_ASSERT_OK(aq_queue_get_info(q, &info));
  return info.packets_in_graphs;
}

/* n packets reserved together, as an exec writes them; with pause_us, the
 * first is published and rung alone and the rest only after the pause. */
static void submit_all(aq_queue_t q, const hsa_kernel_dispatch_packet_t *ps, uint32_t n, unsigned pause_us) {
  uint64_t first;
  AQ_ASSERT_OK(aq_queue_reserve(q, n, SEC, &first));
  for (uint32_t i = 0; i < n; ++i) {
    void *slot;
    AQ_ASSERT_OK(aq_queue_slot(q, first + i, &slot));
    memcpy((uint8_t *)slot + 4, (const uint8_t *)&ps[i] + 4, sizeof(ps[i]) - 4);
    AQ_ASSERT_OK(aq_queue_publish(q, first + i, ps[i].header, ps[i].setup));
    if (pause_us && i == 0) {
      AQ_ASSERT_OK(aq_queue_ring(q, first));
      usleep(pause_us);
    }
  }
  AQ_ASSERT_OK(aq_queue_ring(q, first + n - 1));
}

/* kernels kernels adding one to every element, the last one completing
 * done, rounds times; returns how many packets ran inside graphs. */
static uint64_t add_rounds(const char *graphs, uint32_t kernels, int rounds, unsigned pause_us) {
  enum { N = 4096, MAX = 1024 };
  aq_queue_t q = gpu_queue(graphs);
  aq_kernel_info_t k = test_kernel(co, gpu, "gpu_add_one");
  float *buf = managed(N * sizeof(float));
  add_one_args_t *a = malloc(sizeof(*a)); /* one address for every round: the bytes repeat */
  *a = (add_one_args_t){buf, N};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  static hsa_kernel_dispatch_packet_t ps[MAX];
  cr_assert_leq(kernels, MAX);
  for (uint32_t i = 0; i < kernels; ++i)
    ps[i] = dispatch_packet(&k, a, N, 64, i == kernels - 1 ? done : (aq_signal_t){0});
  for (int r = 0; r < rounds; ++r) {
    AQ_ASSERT_OK(aq_signal_store(done, 1));
    submit_all(q, ps, kernels, pause_us);
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  }
  for (int i = 0; i < N; ++i)
    cr_assert_eq(buf[i], (float)kernels * rounds, "element %d: %g after %d rounds", i, buf[i], rounds);
  uint64_t n = in_graphs(q);
  AQ_ASSERT_OK(aq_queue_destroy(q));
  aq_signal_destroy(done);
  aq_memory_free(buf);
  free(a);
  return n;
}

Test(gpu_graphs, a_repeating_stretch_runs_as_a_graph_with_the_same_result) {
  uint64_t on = add_rounds(NULL, 4, 12, 0), off = add_rounds("0", 4, 12, 0), forced = add_rounds("1", 4, 12, 0);
  cr_assert_eq(off, 0, "AQ_CUDA_GRAPHS=0: %llu packets ran in graphs", (unsigned long long)off);
  /* Seen once, captured the second time, replayed from the third. */
  cr_assert(on > 0 && on <= 40 && on % 4 == 0, "%llu packets in graphs", (unsigned long long)on);
  cr_assert(forced > 0 && forced % 4 == 0, "%llu packets in graphs", (unsigned long long)forced);
}

Test(gpu_graphs, a_stretch_longer_than_a_graph_runs_as_several) {
  /* 600 kernels: graphs of 256 (captured in the first round, from its
   * second 256), 256 again, and 88. */
  uint64_t n = add_rounds(NULL, 600, 6, 0);
  cr_assert(n > 0 && n <= 512 + 4 * 600, "%llu packets in graphs", (unsigned long long)n);
}

Test(gpu_graphs, a_stretch_published_slowly_still_runs_right) {
  /* The processor sees the first packet 20 ms before the rest: it cannot
   * wait that long for a graph's worth, so it launches one by one. */
  uint64_t n = add_rounds(NULL, 4, 6, 20000);
  cr_assert_eq(n, 0, "%llu packets in graphs", (unsigned long long)n);
}

Test(gpu_graphs, a_stretch_whose_arguments_change_computes_the_new_result) {
  enum { N = 256 };
  aq_queue_t q = gpu_queue(NULL);
  aq_kernel_info_t add = test_kernel(co, gpu, "gpu_add_one"), wr = test_kernel(co, gpu, "gpu_write");
  float *buf = managed(N * sizeof(float));
  uint64_t *out = managed(64);
  add_one_args_t *a = malloc(sizeof(*a));
  write_args_t *w = malloc(sizeof(*w));
  *a = (add_one_args_t){buf, N};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t ps[2] = {dispatch_packet(&add, a, N, 64, (aq_signal_t){0}),
                                        dispatch_packet(&wr, w, 1, 1, done)};
  /* Two values in turn (each becomes a graph of its own), and now and then
   * one never seen before. */
  for (int r = 1; r <= 16; ++r) {
    *w = (write_args_t){out, r % 5 == 0 ? 1000u + (uint64_t)r : r % 2 ? 111u : 222u};
    AQ_ASSERT_OK(aq_signal_store(done, 1));
    submit_all(q, ps, 2, 0);
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
    cr_assert_eq(*out, w->value, "round %d: %llu, not %llu", r, (unsigned long long)*out,
                 (unsigned long long)w->value);
    cr_assert_eq(buf[N - 1], (float)r, "round %d", r);
  }
  cr_assert_gt(in_graphs(q), 0);
  AQ_ASSERT_OK(aq_queue_destroy(q));
  aq_signal_destroy(done);
  aq_memory_free(buf), aq_memory_free(out);
  free(a), free(w);
}

/* Traced runs launch one by one (every kernel its own slice), unless
 * AQ_CUDA_GRAPHS=traced: then graphs replay, each one slice in the trace. */
static uint64_t traced_rounds(const char *graphs, char **out_json) {
  char path[] = "/tmp/aq-graph-traceXXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  graphs_setting(graphs); /* before the trace: a new setting starts the runtime again, which ends a trace */
  AQ_ASSERT_OK(aq_trace_start(&(aq_trace_options_t){.path = path}));
  uint64_t n = add_rounds(graphs, 4, 12, 0);
  AQ_ASSERT_OK(aq_trace_stop());
  FILE *f = fopen(path, "rb");
  cr_assert(f, "no trace at %s", path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  *out_json = calloc(1, (size_t)size + 1);
  cr_assert_eq(fread(*out_json, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  unlink(path);
  return n;
}

Test(gpu_graphs, traced_runs_keep_graphs_only_when_asked_and_a_graph_is_one_slice) {
  char *plain, *graphed;
  uint64_t off = traced_rounds("1", &plain), on = traced_rounds("traced", &graphed);
  cr_assert_eq(off, 0, "traced with AQ_CUDA_GRAPHS=1: %llu packets in graphs", (unsigned long long)off);
  cr_assert(!strstr(plain, "CUDA graph of"), "a graph slice in a trace without graphs");
  cr_assert(on > 0 && on % 4 == 0, "traced with AQ_CUDA_GRAPHS=traced: %llu packets in graphs",
            (unsigned long long)on);
  cr_assert(strstr(graphed, "CUDA graph of 4: gpu_add_one .. gpu_add_one"), "no graph slice in the trace");
  free(plain), free(graphed);
}

Test(gpu_graphs, a_bad_setting_is_refused_by_name) {
  aq_shut_down();
  setenv("AQ_CUDA_GRAPHS", "yes", 1);
  aq_status_t s = aq_init(NULL);
  unsetenv("AQ_CUDA_GRAPHS");
  cr_assert_eq(s, AQ_ERROR_INVALID_ARGUMENT, "%s", aq_status_string(s));
  cr_assert(strstr(aq_last_error(), "AQ_CUDA_GRAPHS='yes'") && strstr(aq_last_error(), "traced"), "%s",
            aq_last_error());
  AQ_ASSERT_OK(aq_init(NULL)); /* and the runtime starts with a good value */
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

/* The kernel reads where to store from memory, so the graph captured from
 * good runs faults once that memory points nowhere. */
Test(gpu_graphs, a_fault_inside_a_graph_fails_its_signal_and_spares_the_cpu) {
  enum { N = 256 };
  aq_queue_t q = gpu_queue(NULL);
  aq_kernel_info_t add = test_kernel(co, gpu, "gpu_add_one"), wt = test_kernel(co, gpu, "gpu_write_through");
  float *buf = managed(N * sizeof(float));
  uint64_t *out = managed(64), **where = managed(64);
  *where = out;
  add_one_args_t *a = malloc(sizeof(*a));
  write_through_args_t *w = malloc(sizeof(*w));
  *a = (add_one_args_t){buf, N};
  *w = (write_through_args_t){where, 42};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t ps[3] = {dispatch_packet(&add, a, N, 64, (aq_signal_t){0}),
                                        dispatch_packet(&add, a, N, 64, (aq_signal_t){0}),
                                        dispatch_packet(&wt, w, 1, 1, done)};
  for (int r = 0; r < 4; ++r) {
    AQ_ASSERT_OK(aq_signal_store(done, 1));
    submit_all(q, ps, 3, 0);
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
    cr_assert_eq(*out, 42);
  }
  cr_assert_gt(in_graphs(q), 0, "the stretch became a graph");
  *where = (uint64_t *)(uintptr_t)0x10;
  AQ_ASSERT_OK(aq_signal_store(done, 1));
  submit_all(q, ps, 3, 0);
  aq_status_t s = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL);
  cr_assert_eq(s, AQ_ERROR_KERNEL_FAULT, "%s: %s", aq_status_string(s), aq_last_error());
  cr_assert(strstr(aq_last_error(), "CUDA graph") && strstr(aq_last_error(), "gpu_write_through"), "%s",
            aq_last_error());
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  cr_assert_eq(info.usable, 0, "the GPU is reported unusable until reset");
  /* The GPU's queue refuses more work with a clear error; the CPU runs on. */
  AQ_ASSERT_OK(aq_signal_store(done, 1));
  submit_all(q, ps, 3, 0);
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_KERNEL_FAULT);
  aq_code_object_t cco;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &cco));
  aq_kernel_info_t noop = test_kernel(cco, cpu, "noop");
  aq_queue_t qc;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc));
  aq_signal_t s3;
  AQ_ASSERT_OK(aq_signal_create(1, &s3));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&noop, NULL, 1, 1, s3);
  AQ_ASSERT_OK(aq_queue_submit(qc, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(s3, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  free(a), free(w);
}

/* ---- execs: the graphs an instantiated graph's runs give rise to ---------- */

enum { B = 64, IN = 40, H = 96, C = 10 };

static float lcg(unsigned *seed) { return (float)((*seed = *seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f; }

/* A small training step on the GPU, its loss after each of steps runs. */
static void train_losses(const char *graphs, int steps, float *losses) {
  graphs_setting(graphs);
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w1, b1, w2, b2, h, logits, loss;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &b1));
  AQ_ASSERT_OK(aq_tensor_init(g, b1, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, C}, &w2));
  AQ_ASSERT_OK(aq_tensor_create(g, "b2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){C}, &b2));
  AQ_ASSERT_OK(aq_tensor_init(g, b2, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, b1, 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, w2, b2, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t ps[4] = {w1, b1, w2, b2};
  aq_sgd_options_t o = {.lr = 0.2f, .momentum = 0.9f};
  for (int i = 0; i < 4; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(g, ps[i], &gr));
    AQ_ASSERT_OK(aq_op_sgd(g, ps[i], gr, &o));
  }
  aq_exec_t *e;
  aq_exec_options_t eo = {.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &eo, &e));
  static float xs[B * IN], w1s[IN * H], w2s[H * C];
  int32_t ys[B];
  unsigned seed = 7;
  for (int i = 0; i < B * IN; ++i) xs[i] = lcg(&seed);
  for (int i = 0; i < IN * H; ++i) w1s[i] = (lcg(&seed) - 0.5f) * 0.3f;
  for (int i = 0; i < H * C; ++i) w2s[i] = (lcg(&seed) - 0.5f) * 0.3f;
  for (int i = 0; i < B; ++i) ys[i] = i % C;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  for (int s = 0; s < steps; ++s) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, loss, &losses[s], sizeof(float)));
  }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(gpu_graphs, an_exec_rerun_many_times_gives_the_same_losses_with_graphs_on_and_off) {
  enum { STEPS = 40 };
  float on[STEPS], off[STEPS];
  train_losses("1", STEPS, on);
  train_losses("0", STEPS, off);
  for (int s = 0; s < STEPS; ++s)
    cr_assert(fabsf(on[s] - off[s]) <= 1e-5f * (1 + fabsf(off[s])), "step %d: loss %g with graphs, %g without", s,
              on[s], off[s]);
  cr_assert_lt(on[STEPS - 1], on[0], "it learned");
}

/* Inputs rewritten between runs (aq_exec_write): the graph's kernels read
 * the new data, as plain launches would. */
Test(gpu_graphs, new_input_data_between_runs_gives_new_results) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, w1, w2, h, z;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, C}, &w2));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, w2, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &z));
  aq_exec_t *e;
  aq_exec_options_t eo = {.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &eo, &e));
  static float xs[B * IN], w1s[IN * H], w2s[H * C], hs[B * H], zs[B * C], want[B * C];
  unsigned seed = 11;
  for (int i = 0; i < IN * H; ++i) w1s[i] = lcg(&seed) - 0.5f;
  for (int i = 0; i < H * C; ++i) w2s[i] = lcg(&seed) - 0.5f;
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  for (int r = 0; r < 8; ++r) {
    for (int i = 0; i < B * IN; ++i) xs[i] = lcg(&seed) - 0.5f;
    AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, z, zs, sizeof(zs)));
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < H; ++j) {
        float s = 0;
        for (int k = 0; k < IN; ++k) s += xs[i * IN + k] * w1s[k * H + j];
        hs[i * H + j] = s > 0 ? s : 0;
      }
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < C; ++j) {
        float s = 0;
        for (int k = 0; k < H; ++k) s += hs[i * H + k] * w2s[k * C + j];
        want[i * C + j] = s;
      }
    for (int i = 0; i < B * C; ++i)
      cr_assert(fabsf(zs[i] - want[i]) <= 1e-3f * (1 + fabsf(want[i])), "run %d, element %d: %g, want %g", r, i,
                zs[i], want[i]);
  }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
