/* Auto-tuning on a GPU (scheduler/tune.h): a conv graph's first
 * instantiation times the backward filter's builds and writes tuned.tsv,
 * the next ones read it and time nothing, a kept choice of each build runs
 * and matches the launch rule's build within fp32 rounding, and AQ_TUNE=0
 * runs the rule's. Elsewhere each test says "skipped: no GPU". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "aquila/ops_gpu.h"
#include "kernels/cuda/launch.h" /* the op library's candidate builds of a shape */

#include <criterion/parameterized.h>

static aq_agent_t gpu;
static char dir[64], path[128];

static void start(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  if (!gpu.handle) {
    aq_shut_down();
    perf_dir_remove(dir); /* a skip in .init runs no .fini */
    cr_skip_test("skipped: no GPU");
  }
}

static void setup(void) {
  perf_dir_make(dir, "gpu-tune", path, "tuned.tsv");
  unsetenv("AQ_TUNE");
  start();
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
  perf_dir_remove(dir);
  unsetenv("AQ_TUNE");
}
TestSuite(gpu_tune, .init = setup, .fini = teardown, .timeout = 120);

enum { N = 64, C = 1, HW = 28, K = 6, RS = 5, PAD = 2, PQ = 28 };
static float bias_slot; /* a dbias pointer, for the shape's key */

/* LeNet's first conv (batch 64), with its bias's gradient. */
static aq_conv2d_args_t lenet(void) {
  aq_conv2d_args_t a = {.n = N, .c = C, .h = HW, .wd = HW, .k = K, .r = RS, .s = RS, .p = PQ, .q = PQ,
                        .stride_h = 1, .stride_w = 1, .pad_h = PAD, .pad_w = PAD, .dil_h = 1, .dil_w = 1};
  a.dbias = &bias_slot;
  return a;
}

/* The op library's backward filter of lenet() as a graph for GPU agents,
 * run once on fixed inputs: dw then dbias into out (K*C*RS*RS + K). */
static void run_bwd_filter(float *out) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  const int64_t dx[4] = {N, C, HW, HW}, ddy[4] = {N, K, PQ, PQ}, ddw[4] = {K, C, RS, RS}, ddb[1] = {K};
  aq_tensor_t x, dy, dw, db;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, dx, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "dy", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, ddy, &dy));
  AQ_ASSERT_OK(aq_tensor_create(g, "dw", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 4, ddw, &dw));
  AQ_ASSERT_OK(aq_tensor_create(g, "db", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, ddb, &db));
  aq_conv2d_args_t a = lenet();
  a.dbias = NULL;
  aq_kernel_task_t k = {.name = "conv_bwd_filter", .kernel = AQ_KERNEL_CONV2D_BWD_FILTER, .kernarg = &a,
                        .kernarg_size = sizeof(a), .shape = aq_planes_grid(K * C), .read_count = 2, .write_count = 2,
                        .agent = -1};
  k.reads[0] = x, k.read_offsets[0] = offsetof(aq_conv2d_args_t, x);
  k.reads[1] = dy, k.read_offsets[1] = offsetof(aq_conv2d_args_t, dy);
  k.writes[0] = dw, k.write_offsets[0] = offsetof(aq_conv2d_args_t, dw);
  k.writes[1] = db, k.write_offsets[1] = offsetof(aq_conv2d_args_t, dbias);
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, NULL));
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU,
                         .flags = AQ_EXEC_NO_MEMORY_REUSE};
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  float *hx = malloc(sizeof(float) * N * C * HW * HW), *hdy = malloc(sizeof(float) * N * K * PQ * PQ);
  unsigned seed = 11;
  for (int i = 0; i < N * C * HW * HW; ++i) seed = seed * 1664525u + 1013904223u, hx[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
  for (int i = 0; i < N * K * PQ * PQ; ++i) seed = seed * 1664525u + 1013904223u, hdy[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
  AQ_ASSERT_OK(aq_exec_write(e, x, hx, sizeof(float) * N * C * HW * HW));
  AQ_ASSERT_OK(aq_exec_write(e, dy, hdy, sizeof(float) * N * K * PQ * PQ));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, AQ_TIMEOUT_INFINITE));
  AQ_ASSERT_OK(aq_exec_read(e, dw, out, sizeof(float) * K * C * RS * RS));
  AQ_ASSERT_OK(aq_exec_read(e, db, out + K * C * RS * RS, sizeof(float) * K));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  free(hx), free(hdy);
}

enum { OUT = K * C * RS * RS + K };

/* The launch rule's results (AQ_TUNE=0), the runtime started again. */
static void rule_results(float *out) {
  aq_shut_down();
  setenv("AQ_TUNE", "0", 1);
  start();
  aq_tuned_build_t t;
  aq_conv2d_args_t a = lenet();
  cr_assert_eq(aq_tuned_build(gpu, AQ_KERNEL_CONV2D_BWD_FILTER, &a, &t), AQ_ERROR_NOT_FOUND, "off: none");
  run_bwd_filter(out);
  unsetenv("AQ_TUNE");
}

/* Sums over 64 x 28 x 28 positions in another order: within fp32 rounding. */
static void expect_close(const float *got, const float *want, const char *build) {
  for (int i = 0; i < OUT; ++i)
    cr_assert(fabsf(got[i] - want[i]) <= 1e-4f * (1 + fabsf(want[i])), "%s: [%d] %g, the rule's build %g", build, i,
              got[i], want[i]);
}

static char *slurp(void) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "%s was written", path);
  char *text = calloc(1, 65536);
  size_t n = fread(text, 1, 65535, f);
  fclose(f);
  text[n] = 0;
  return text;
}

Test(gpu_tune, a_conv_is_timed_once_its_choice_kept_and_results_match_the_rule) {
  struct stat st;
  cr_assert(stat(path, &st) != 0, "no tuned.tsv yet");
  float *first = malloc(sizeof(float) * OUT), *again = malloc(sizeof(float) * OUT), *rule = malloc(sizeof(float) * OUT);
  run_bwd_filter(first);
  char *text = slurp();
  cr_assert(!strncmp(text, "# aquila tuned builds v1", 24), "%s", text);
  cr_assert(strstr(text, AQ_KERNEL_CONV2D_BWD_FILTER " n64,c1,h28,w28,k6,r5,s5,p28,q28,stride1x1,pad2x2,dil1x1,dbias1,prec0 "),
            "%s", text);
  aq_tuned_build_t t;
  aq_conv2d_args_t a = lenet();
  AQ_ASSERT_OK(aq_tuned_build(gpu, AQ_KERNEL_CONV2D_BWD_FILTER, &a, &t));
  cr_assert_eq(t.candidates, 8, "staged over three clusters, x3 on either tile or clusters of 6, plain and split timed");
  int kept = 0;
  for (uint32_t i = 0; i < t.candidates; ++i) {
    cr_assert(t.candidate_ns[i] > 0, "%s timed", t.candidate[i]);
    kept |= !strcmp(t.candidate[i], t.build);
  }
  cr_assert(kept);
  cr_log_info("tuned %s: %s (%s %.1f us, %s %.1f us, %s %.1f us)", t.shape, t.build, t.candidate[0],
              t.candidate_ns[0] / 1e3, t.candidate[1], t.candidate_ns[1] / 1e3, t.candidate[2], t.candidate_ns[2] / 1e3);
  size_t count = 0;
  AQ_ASSERT_OK(aq_tuned_builds(gpu, NULL, 0, &count));
  cr_assert_eq(count, 1);
  /* instantiated again: nothing timed, nothing written */
  run_bwd_filter(again);
  char *text2 = slurp();
  cr_assert_str_eq(text2, text, "the second instantiation timed nothing");
  for (int i = 0; i < OUT; ++i) cr_assert_eq(again[i], first[i], "the same build, the same bits");
  rule_results(rule);
  expect_close(first, rule, t.build);
  char *text3 = slurp();
  cr_assert_str_eq(text3, text, "AQ_TUNE=0 times and writes nothing");
  free(first), free(again), free(rule), free(text), free(text2), free(text3);
}

/* The GPU's model key, as the scheduler writes it (perfmodel.h). */
static void arch_of(char *arch, size_t size) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  int n = snprintf(arch, size, "%s/%s/%u/%s", info.driver, info.isa[0] ? info.isa : "any", info.compute_units,
                   info.device[0] ? info.device : "unknown");
  for (int i = 0; i < n && (size_t)i < size; ++i)
    if (arch[i] == ' ' || arch[i] == '\t' || arch[i] == '\n') arch[i] = '_';
}

/* A kept line for lenet()'s backward filter on arch choosing build, its
 * candidates the first `count` builds the library lists for the shape,
 * with made-up times 3001, 2002, 1003, ... ns. */
static void keep_line(const char *arch, const char *build, uint32_t count) {
  aq_conv2d_args_t a = lenet();
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  const uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &a, names, AQ_GPU_OP_BUILDS_MAX);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fprintf(f, "# aquila tuned builds v1 aquila=%s\n", AQ_VERSION_STRING);
  fprintf(f, "%s %s n64,c1,h28,w28,k6,r5,s5,p28,q28,stride1x1,pad2x2,dil1x1,dbias1,prec0 %s ", arch,
          AQ_KERNEL_CONV2D_BWD_FILTER, build);
  for (uint32_t i = 0; i < count && i < n; ++i) fprintf(f, "%s%s:%u", i ? "," : "", names[i], 3001 - 999 * (i % 3));
  fprintf(f, "\n");
  fclose(f);
}

/* A file kept by an earlier process naming each build in turn: read, not
 * timed again (its made-up times stay), run, and equal to the rule's. */
ParameterizedTestParameters(gpu_tune, a_kept_choice_of_each_build_is_read_and_runs) {
  static int builds[] = {0, 1, 2};
  return cr_make_param_array(int, builds, 3);
}
ParameterizedTest(int *which, gpu_tune, a_kept_choice_of_each_build_is_read_and_runs) {
  static const char *const names[3] = {AQ_KERNEL_CONV2D_BWD_FILTER_STAGED, AQ_KERNEL_CONV2D_BWD_FILTER,
                                       AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT};
  const char *build = names[*which];
  char arch[256];
  arch_of(arch, sizeof(arch));
  /* the runtime starts again, so that the file is read as a later start reads it */
  aq_shut_down();
  keep_line(arch, build, AQ_GPU_OP_BUILDS_MAX);
  char *text = slurp();
  start();
  float *got = malloc(sizeof(float) * OUT), *rule = malloc(sizeof(float) * OUT);
  run_bwd_filter(got);
  aq_tuned_build_t t;
  aq_conv2d_args_t a = lenet();
  AQ_ASSERT_OK(aq_tuned_build(gpu, AQ_KERNEL_CONV2D_BWD_FILTER, &a, &t));
  cr_assert_str_eq(t.build, build);
  cr_assert_float_eq(t.candidate_ns[0], 3001, 0.5, "not timed again");
  char *after = slurp();
  cr_assert_str_eq(after, text);
  rule_results(rule);
  expect_close(got, rule, build);
  free(got), free(rule), free(text), free(after);
}

/* A kept choice that never timed a build the library now lists (written
 * before that build existed) is timed again, every build, and rewritten. */
Test(gpu_tune, a_kept_choice_missing_a_build_is_timed_again) {
  char arch[256];
  arch_of(arch, sizeof(arch));
  aq_shut_down();
  aq_conv2d_args_t a = lenet();
  keep_line(arch, aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &a), 2); /* the rule's pick, listed first */
  char *text = slurp();
  start();
  aq_tuned_build_t t;
  AQ_ASSERT_OK(aq_tuned_build(gpu, AQ_KERNEL_CONV2D_BWD_FILTER, &a, &t));
  cr_assert_eq(t.candidates, 2, "the kept line read: %u", t.candidates);
  float *got = malloc(sizeof(float) * OUT);
  run_bwd_filter(got);
  AQ_ASSERT_OK(aq_tuned_build(gpu, AQ_KERNEL_CONV2D_BWD_FILTER, &a, &t));
  cr_assert_eq(t.candidates, 8, "every build timed: %u", t.candidates);
  for (uint32_t i = 0; i < t.candidates; ++i)
    cr_assert(t.candidate_ns[i] != 3001 && t.candidate_ns[i] != 2002, "%s timed again", t.candidate[i]);
  char *after = slurp();
  cr_assert_str_neq(after, text, "the file rewritten");
  free(got), free(text), free(after);
}
