/* aq-bench gemm --agent gpu: aq_matmul_f32 through a GPU agent's queue
 * against cuBLAS's SGEMM (libcublas, loaded by the benchmark only) in the
 * same process, on the same device buffers. fp32 only (no TF32). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "bench.h"

typedef int (*cublas_create_t)(void **);
typedef int (*cublas_sgemm_t)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                              const float *, float *, int);
typedef int (*ctx_sync_t)(void);

int aq_bench_gemm_gpu(int argc, char **argv) {
  int reps = (int)bench_arg_int(argc, argv, "reps", 5);
  const char *sizes = bench_arg(argc, argv, "sizes");
  if (!sizes) sizes = "1024,2048,4096,8192";
  if (aq_init(NULL) != AQ_OK) return fprintf(stderr, "aq-bench gemm: %s\n", aq_last_error()), 1;
  aq_agent_t all[64], gpu = {0};
  size_t n;
  aq_agents(all, 64, &n);
  for (size_t i = 0; i < n && !gpu.handle; ++i) {
    aq_agent_info_t info;
    aq_agent_get_info(all[i], &info);
    if (info.kind == AQ_AGENT_KIND_GPU) gpu = all[i];
  }
  if (!gpu.handle) return fprintf(stderr, "aq-bench gemm: no GPU agent\n"), 2;
  void *cb = dlopen("libcublas.so.13", RTLD_NOW);
  if (!cb) cb = dlopen("libcublas.so.12", RTLD_NOW);
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  cublas_create_t create = cb ? (cublas_create_t)dlsym(cb, "cublasCreate_v2") : NULL;
  cublas_sgemm_t sgemm = cb ? (cublas_sgemm_t)dlsym(cb, "cublasSgemm_v2") : NULL;
  ctx_sync_t sync = cu ? (ctx_sync_t)dlsym(cu, "cuCtxSynchronize") : NULL;
  void *handle = NULL;
  if (!create || !sgemm || !sync || create(&handle)) fprintf(stderr, "aq-bench gemm: no cuBLAS; aquila alone\n");
  aq_code_object_t co;
  aq_kernel_info_t k;
  if (aq_code_object_load("kernels-cuda.fatbin", &co) || aq_code_object_find_kernel(co, "aq_matmul_f32", gpu, &k))
    return fprintf(stderr, "aq-bench gemm: %s\n", aq_last_error()), 1;
  aq_region_t regs[8], dev = {0};
  size_t nr;
  aq_agent_regions(gpu, regs, 8, &nr);
  for (size_t i = 0; i < nr; ++i) {
    aq_region_info_t ri;
    aq_region_get_info(regs[i], &ri);
    if (ri.flags & AQ_REGION_DEVICE) dev = regs[i];
  }
  aq_queue_t q;
  aq_queue_create(gpu, NULL, &q);
  aq_signal_t done;
  aq_signal_create(0, &done);
  char *list = strdup(sizes), *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t s = strtoll(tok, NULL, 10);
    size_t bytes = (size_t)s * (size_t)s * 4;
    float *a, *b, *c, *host = malloc(bytes);
    for (size_t i = 0; i < (size_t)s * (size_t)s; ++i) host[i] = (float)(i % 17) * 0.01f;
    if (aq_memory_allocate(dev, bytes, (void **)&a) || aq_memory_allocate(dev, bytes, (void **)&b) ||
        aq_memory_allocate(dev, bytes, (void **)&c))
      return fprintf(stderr, "aq-bench gemm: %s\n", aq_last_error()), 1;
    aq_memory_copy(a, host, bytes);
    aq_memory_copy(b, host, bytes);
    aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = s, .n = s, .k = s, .lda = s, .ldb = s, .ldc = s,
                             .batch = 1, .alpha = 1.0f};
    aq_dispatch_shape_t sh = aq_gpu_shape(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args));
    hsa_kernel_dispatch_packet_t p;
    memset(&p, 0, sizeof(p));
    p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
    p.setup = 3;
    p.workgroup_size_x = sh.workgroup[0], p.workgroup_size_y = sh.workgroup[1], p.workgroup_size_z = sh.workgroup[2];
    p.grid_size_x = sh.grid[0], p.grid_size_y = sh.grid[1], p.grid_size_z = sh.grid[2];
    p.kernel_object = k.kernel_object;
    p.kernarg_address = &args;
    p.completion_signal.handle = done.handle;
    double *ta = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
    const float one = 1.0f, zero = 0.0f;
    for (int r = -1; r < reps; ++r) {
      aq_signal_store(done, 1);
      uint64_t t0 = bench_now_ns();
      aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL);
      aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
      if (r >= 0) ta[r] = (double)(bench_now_ns() - t0) / 1e9;
      if (handle) {
        t0 = bench_now_ns();
        /* row-major C = A B is column-major C^T = B^T A^T */
        sgemm(handle, 0, 0, (int)s, (int)s, (int)s, &one, b, (int)s, a, (int)s, &zero, c, (int)s);
        sync();
        if (r >= 0) tb[r] = (double)(bench_now_ns() - t0) / 1e9;
      }
    }
    double flops = 2.0 * (double)s * s * s, ga = flops / bench_median(ta, (size_t)reps) / 1e9;
    double gb = handle ? flops / bench_median(tb, (size_t)reps) / 1e9 : 0;
    for (int peer = handle ? 1 : 0; peer >= 0; --peer) {
      bench_json_t j;
      bench_json_begin(&j, "gemm", peer ? "cublas" : "aquila");
      bench_json_str(&j, "agent", "gpu");
      bench_json_str(&j, "dtype", "f32");
      bench_json_int(&j, "n", s);
      bench_json_int(&j, "threads", 0);
      bench_json_num(&j, "gflops", peer ? gb : ga);
      if (!peer && handle) bench_json_num(&j, "ratio", ga / gb);
      bench_json_int(&j, "reps", reps);
      bench_json_end(&j);
    }
    aq_memory_free(a), aq_memory_free(b), aq_memory_free(c);
    free(host), free(ta), free(tb);
  }
  free(list);
  aq_queue_destroy(q);
  aq_shut_down();
  return 0;
}
