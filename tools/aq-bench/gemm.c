/* aq-bench gemm: fp32 matmul through a CPU agent's queue against OpenBLAS
 * (cblas_sgemm, same thread count) in the same process.
 * Options: --sizes 256,512,1024,2048  --reps R (default 5)
 *          --agent cpu|gpu (gpu lines come from gemm_gpu.c when built). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "bench.h"

__attribute__((weak)) int aq_bench_gemm_gpu(int argc, char **argv);

#define CHECK(expr)                                                                           \
  do {                                                                                        \
    aq_status_t s_ = (expr);                                                                  \
    if (s_ != AQ_OK) {                                                                        \
      fprintf(stderr, "aq-bench gemm: %s: %s: %s\n", #expr, aq_status_string(s_), aq_last_error()); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

static double run_aquila(aq_queue_t q, aq_kernel_info_t *k, aq_matmul_args_t *args, aq_signal_t done) {
  aq_dispatch_shape_t shape = aq_matmul_grid(args);
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = shape.workgroup[0], p.workgroup_size_y = shape.workgroup[1];
  p.workgroup_size_z = shape.workgroup[2];
  p.grid_size_x = shape.grid[0], p.grid_size_y = shape.grid[1], p.grid_size_z = shape.grid[2];
  p.kernel_object = k->kernel_object;
  p.kernarg_address = args;
  p.completion_signal.handle = done.handle;
  CHECK(aq_signal_store(done, 1));
  uint64_t t0 = bench_now_ns();
  CHECK(aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL));
  CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
  return (double)(bench_now_ns() - t0) / 1e9;
}

int aq_bench_gemm(int argc, char **argv) {
  const char *agent_kind = bench_arg(argc, argv, "agent");
  if (agent_kind && !strcmp(agent_kind, "gpu")) {
    if (aq_bench_gemm_gpu) return aq_bench_gemm_gpu(argc, argv);
    fprintf(stderr, "aq-bench gemm: this aq-bench has no GPU gemm suite\n");
    return 2;
  }
  int reps = (int)bench_arg_int(argc, argv, "reps", 5);
  const char *sizes = bench_arg(argc, argv, "sizes");
  if (!sizes) sizes = "256,512,1024,2048";
  CHECK(aq_init(NULL));
  aq_agent_t agent;
  size_t count;
  CHECK(aq_agents(&agent, 1, &count));
  aq_agent_info_t info;
  CHECK(aq_agent_get_info(agent, &info));
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cpu.so", &co));
  aq_kernel_info_t k;
  CHECK(aq_code_object_find_kernel(co, AQ_KERNEL_MATMUL, agent, &k));
  aq_queue_t q;
  CHECK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  CHECK(aq_signal_create(1, &done));
  int threads = (int)info.compute_units;
  openblas_set_num_threads(threads);
  char *list = strdup(sizes), *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t n = strtoll(tok, NULL, 10);
    if (n <= 0) continue;
    size_t nn = (size_t)n * (size_t)n;
    float *a = aligned_alloc(64, nn * 4), *b = aligned_alloc(64, nn * 4), *c = aligned_alloc(64, nn * 4);
    fill(a, nn, 1), fill(b, nn, 2);
    memset(c, 0, nn * 4);
    aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                             .batch = 1, .alpha = 1.0f, .beta = 0.0f};
    double *ta = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
    fprintf(stderr, "gemm: n=%lld\n", (long long)n);
    run_aquila(q, &k, &args, done);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                0.0f, c, (int)n);
    /* Interleaved, so drift in the machine's speed hits both alike. */
    for (int r = 0; r < reps; ++r) {
      ta[r] = run_aquila(q, &k, &args, done);
      uint64_t t0 = bench_now_ns();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                  0.0f, c, (int)n);
      tb[r] = (double)(bench_now_ns() - t0) / 1e9;
    }
    double flops = 2.0 * (double)n * (double)n * (double)n;
    double ga = flops / bench_median(ta, (size_t)reps) / 1e9, gb = flops / bench_median(tb, (size_t)reps) / 1e9;
    for (int peer = 1; peer >= 0; --peer) {
      bench_json_t j;
      bench_json_begin(&j, "gemm", peer ? "openblas" : "aquila");
      bench_json_str(&j, "agent", "cpu");
      bench_json_str(&j, "dtype", "f32");
      bench_json_int(&j, "n", n);
      bench_json_int(&j, "threads", threads);
      bench_json_num(&j, "gflops", peer ? gb : ga);
      if (!peer) bench_json_num(&j, "ratio", ga / gb);
      bench_json_int(&j, "reps", reps);
      bench_json_end(&j);
    }
    free(a), free(b), free(c), free(ta), free(tb);
  }
  free(list);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
  return 0;
}
