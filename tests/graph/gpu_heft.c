/* HEFT on GPUs: GPU kernels get measured models (the driver's own kernel
 * times, runtime/profile.h), both in calibration runs before placement and
 * in an exec's profiled runs. Where there is no GPU each test says
 * "skipped: no GPU". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/common.h"

static aq_agent_t gpu;
static char perf_dir[64];

static void setup(void) {
  perf_dir_make(perf_dir, "perf-gpu", NULL, NULL);
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  if (!gpu.handle) {
    const char *why = "";
    aq_driver_status("cuda", &why);
    cr_log_warn("skipped: no GPU (%s)", why);
    aq_shut_down();
    perf_dir_remove(perf_dir); /* a skip in .init runs no .fini */
    cr_skip_test("skipped: no GPU");
  }
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
  perf_dir_remove(perf_dir);
}
TestSuite(gpu_heft, .init = setup, .fini = teardown);

/* The samples and mean of kernel's models on a GPU ("cuda/..." archs). */
static int gpu_models(const char *kernel, double samples[8], double mean_ns[8]) {
  char path[128], line[512];
  snprintf(path, sizeof(path), "%s/models.tsv", perf_dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof(line), f)) {
    char k[64], arch[128];
    unsigned cls;
    double ns, mean, m2, bytes;
    if (sscanf(line, "%63s %x %127s %lf %lf %lf %lf", k, &cls, arch, &ns, &mean, &m2, &bytes) == 7 &&
        !strcmp(k, kernel) && !strncmp(arch, "cuda/", 5) && n < 8)
      samples[n] = ns, mean_ns[n++] = mean;
  }
  if (f) fclose(f);
  return n;
}

static aq_graph_t *matmuls(aq_tensor_t *a, aq_tensor_t *b) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t y;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){512, 512}, a));
  AQ_ASSERT_OK(aq_tensor_create(g, "b", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){512, 512}, b));
  AQ_ASSERT_OK(aq_op_matmul(g, *a, *b, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &y));
  AQ_ASSERT_OK(aq_op_relu(g, y, &y));
  return g;
}

Test(gpu_heft, gpu_kernels_are_measured_before_heft_places_them) {
  aq_tensor_t a, b;
  aq_graph_t *g = matmuls(&a, &b);
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_HEFT};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  double n[8], mean[8];
  cr_assert_eq(gpu_models("aq_matmul_f32", n, mean), 1, "a GPU model for the matmul before any run");
  cr_assert_eq(n[0], 3, "three calibration runs (%g samples)", n[0]);
  /* 512^3 on a GPU: microseconds, not the host's launch round trip. */
  cr_assert(mean[0] > 100 && mean[0] < 2e6, "%g ns", mean[0]);
  cr_assert_eq(gpu_models("aq_relu_f32", n, mean), 1, "a GPU model for relu");
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* An exec's profiled runs time its GPU kernels too (AQ_EXEC_PROFILE: every
 * run): each adds one sample per GPU task. */
Test(gpu_heft, profiled_runs_time_gpu_kernels_on_the_gpu) {
  aq_tensor_t a, b;
  aq_graph_t *g = matmuls(&a, &b);
  aq_exec_t *e;
  /* Eager: heft would calibrate first, and add its samples to the runs'. */
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .flags = AQ_EXEC_PROFILE,
                         .kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  static float m[512 * 512];
  AQ_ASSERT_OK(aq_exec_write(e, a, m, sizeof(m)));
  AQ_ASSERT_OK(aq_exec_write(e, b, m, sizeof(m)));
  for (int r = 0; r < 4; ++r) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  }
  AQ_ASSERT_OK(aq_exec_destroy(e)); /* saves the models */
  double n[8], mean[8];
  cr_assert_eq(gpu_models("aq_matmul_f32", n, mean), 1, "no GPU model for the matmul in %s", perf_dir);
  cr_assert_eq(n[0], 4, "a sample per profiled run (%g)", n[0]);
  cr_assert(mean[0] > 100 && mean[0] < 2e6, "%g ns", mean[0]);
  cr_assert_eq(gpu_models("aq_relu_f32", n, mean), 1);
  /* a kernel of a few us: its fourth run may spike past PERF_OUTLIER and
   * be set aside, as the models mean to (perfmodel.h) */
  cr_assert(n[0] == 4 || n[0] == 3, "%g", n[0]);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
