/* aq-bench gemm: fp32 matmul through a CPU agent's queue against OpenBLAS
 * (cblas_sgemm, same thread count) in the same process.
 * Options: --sizes 256,512,1024,2048  --reps R (default 5)
 *          --shapes MxNxK[:ta][:tb],... products of any shape instead (ta:
 *          A stored k x m, tb: B stored n x k), or --shapes mlp: the five
 *          large products of the MLP training step on a batch of 256
 *          --density D: keep a fraction D (0 < D <= 1, default 1) of A's
 *          values and zero the rest at random, as ReLU leaves activations
 *          (the CPU GEMM leaves zeros out; gflops still counts 2mnk)
 *          --order interleaved|blocks: the two timed in turns (default), or
 *          each in a block of its own, back to back, after a pause that lets
 *          the other's threads go idle (OpenBLAS's spin for some 2^28
 *          cycles after a call, taking a core from Aquila's workers on a
 *          2-core machine when the turns interleave)
 *          --agent cpu|gpu (gpu lines come from gemm_gpu.c when built). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "bench.h"

__attribute__((weak)) int aq_bench_gemm_gpu(int argc, char **argv);

#define CHECK(expr) BENCH_CHECK("gemm", expr)

/* n floats on a cache line (aligned_alloc takes a multiple of the alignment). */
static float *floats(size_t n) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "aq-bench gemm: no memory for %zu floats\n", n);
    exit(1);
  }
  return p;
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

/* One cblas_sgemm of the same product, timed. */
static double time_peer(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, const aq_matmul_args_t *x, float *c) {
  uint64_t t0 = bench_now_ns();
  cblas_sgemm(CblasRowMajor, ta, tb, (int)x->m, (int)x->n, (int)x->k, 1.0f, x->a, (int)x->lda, x->b, (int)x->ldb,
              0.0f, c, (int)x->n);
  return (double)(bench_now_ns() - t0) / 1e9;
}

static const cli_option_t gemm_options[] = {
    {"agent", 0, CLI_CHOICE, "cpu|gpu", "where: cpu (against OpenBLAS, default) or gpu (against cuBLAS)", 0, 0},
    BENCH_REPS(5; gpu 7),
    {"sizes", 0, CLI_TEXT, "N,...", "square products N x N x N", 0, 0},
    {"shapes", 0, CLI_TEXT, "MxNxK[:ta][:tb],...", "fp32 products of any shape, or mlp: the MLP step's five", 0, 0},
    {"density", 0, CLI_TEXT, "D", "cpu: A keeps a fraction D of its values, in (0, 1] (default 1)", 0, 0},
    {"dtype", 0, CLI_CHOICE, "f32|bf16|all", "gpu: which products (default all)", 0, 0},
    {"precision", 0, CLI_TEXT, "default|exact", "gpu fp32: 3xTF32 (default) or FFMA", 0, 0},
    {"f32-kernel", 0, CLI_TEXT, "NAME", "gpu: this fp32 kernel instead of the op library's choice", 0, 0},
    {"bf16-kernel", 0, CLI_TEXT, "NAME", "gpu: this bf16 kernel variant", 0, 0},
    {"order", 0, CLI_CHOICE, "interleaved|blocks", "cpu: Aquila and OpenBLAS call by call (default), or each side's "
     "calls in a block of their own (OpenBLAS's threads spin after a call and take a core from the next)", 0, 0},
};

int aq_bench_gemm(int argc, char **argv) {
  BENCH_OPTIONS("gemm", gemm_options, argc, argv);
  const char *agent_kind = bench_arg("agent");
  if (agent_kind && !strcmp(agent_kind, "gpu")) {
    if (aq_bench_gemm_gpu) return aq_bench_gemm_gpu(argc, argv);
    fprintf(stderr, "aq-bench gemm: this aq-bench has no GPU gemm suite\n");
    return 2;
  }
  int reps = (int)bench_arg_int("reps", 5);
  const char *sizes = bench_products("256,512,1024,2048"), *dens = bench_arg("density");
  if (!sizes) return 2;
  char *end = NULL;
  double density = dens ? strtod(dens, &end) : 1.0;
  if (dens && (end == dens || *end || !(density > 0.0 && density <= 1.0))) {
    fprintf(stderr, "aq-bench gemm: --density %s: expected a fraction of A's values kept, in (0, 1]\n", dens);
    return 2;
  }
  if (reps < 1) reps = 1;
  const char *order = bench_arg("order");
  if (order && strcmp(order, "interleaved") && strcmp(order, "blocks")) {
    fprintf(stderr, "aq-bench gemm: --order %s: expected interleaved or blocks\n", order);
    return 2;
  }
  const int blocks = order && !strcmp(order, "blocks");
  CHECK(aq_init(NULL));
  aq_agent_t agent;
  size_t count;
  CHECK(aq_agents(&agent, 1, &count));
  aq_agent_info_t info;
  CHECK(aq_agent_get_info(agent, &info));
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cpu.so", &co));
  aq_kernel_info_t k_info;
  CHECK(aq_code_object_find_kernel(co, AQ_KERNEL_MATMUL, agent, &k_info));
  aq_queue_t q;
  CHECK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  CHECK(aq_signal_create(1, &done));
  int threads = (int)info.compute_units;
  openblas_set_num_threads(threads);
  char *list = strdup(sizes), *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    bench_product_t pr;
    bench_parse_product(tok, &pr); /* checked by bench_products */
    const int64_t m = pr.m, n = pr.n, k = pr.k;
    const int square = m == n && n == k && !pr.ta && !pr.tb;
    float *a = floats((size_t)(m * k)), *b = floats((size_t)(k * n)), *c = floats((size_t)(m * n));
    float *c_peer = floats((size_t)(m * n));
    bench_fill(a, (size_t)(m * k), 1), bench_fill(b, (size_t)(k * n), 2);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; density < 1.0 && i < m * k; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      if ((double)(state >> 11) * 0x1p-53 >= density) a[i] = 0.0f;
    }
    memset(c, 0, (size_t)(m * n) * 4);
    aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = m, .n = n, .k = k, .lda = pr.ta ? m : k,
                             .ldb = pr.tb ? k : n, .ldc = n, .batch = 1, .alpha = 1.0f, .beta = 0.0f,
                             .trans_a = pr.ta, .trans_b = pr.tb};
    const enum CBLAS_TRANSPOSE ta = pr.ta ? CblasTrans : CblasNoTrans, tb = pr.tb ? CblasTrans : CblasNoTrans;
    double *tma = calloc((size_t)reps, sizeof(double)), *tmb = calloc((size_t)reps, sizeof(double));
    fprintf(stderr, "gemm: %s\n", tok);
    run_aquila(q, &k_info, &args, done);
    cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)args.lda, b, (int)args.ldb, 0.0f,
                c_peer, (int)n);
    /* Aquila's C against OpenBLAS's: the largest difference over the largest |C| (a check that the timed kernel is right) */
    double dmax = 0, cmax = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const double d = fabs((double)c[i] - c_peer[i]);
      dmax = d > dmax || isnan(d) ? d : dmax;
      cmax = fabs(c_peer[i]) > cmax ? fabs(c_peer[i]) : cmax;
    }
    /* Interleaved, so drift in the machine's speed hits both alike; or in
     * blocks, each after the other's threads have gone idle. */
    const struct timespec pause = {0, 400 * 1000 * 1000};
    if (blocks) nanosleep(&pause, NULL);
    for (int r = 0; r < reps; ++r) {
      tma[r] = run_aquila(q, &k_info, &args, done);
      if (blocks) continue;
      tmb[r] = time_peer(ta, tb, &args, c_peer);
    }
    if (blocks) nanosleep(&pause, NULL);
    for (int r = 0; blocks && r < reps; ++r) tmb[r] = time_peer(ta, tb, &args, c_peer);
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double ga = flops / bench_median(tma, (size_t)reps) / 1e9, gb = flops / bench_median(tmb, (size_t)reps) / 1e9;
    for (int peer = 1; peer >= 0; --peer) {
      bench_json_t j;
      bench_json_begin(&j, "gemm", peer ? "openblas" : "aquila");
      bench_json_str(&j, "agent", "cpu");
      bench_json_str(&j, "dtype", "f32");
      if (square) {
        bench_json_int(&j, "n", n);
      } else {
        bench_json_int(&j, "m", m), bench_json_int(&j, "n", n), bench_json_int(&j, "k", k);
        bench_json_int(&j, "trans_a", pr.ta), bench_json_int(&j, "trans_b", pr.tb);
        bench_json_num(&j, "us", flops / (peer ? gb : ga) / 1e3);
      }
      bench_json_int(&j, "threads", threads);
      if (density < 1.0) bench_json_num(&j, "density", density);
      if (blocks) bench_json_str(&j, "order", "blocks");
      bench_json_num(&j, "gflops", peer ? gb : ga);
      if (!peer) bench_json_num(&j, "ratio", ga / gb), bench_json_num(&j, "max_rel_diff", dmax / (cmax > 0 ? cmax : 1));
      bench_json_int(&j, "reps", reps);
      bench_json_end(&j);
    }
    free(a), free(b), free(c), free(c_peer), free(tma), free(tmb);
  }
  free(list);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
  return 0;
}
