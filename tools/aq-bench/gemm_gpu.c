/* aq-bench gemm --agent gpu: Aquila's GPU matmul kernels (aq_matmul_f32 at its
 * default precision, 3xTF32 on tensor cores, or with --precision exact one
 * FFMA a term; aq_matmul_bf16, tensor cores, fp32 accumulate and C) through a
 * GPU agent's queue, against cuBLAS in the same process on the same device
 * buffers: cublasSgemm (default math mode: no TF32) and cublasGemmEx (bf16
 * A / B, fp32 C, CUBLAS_COMPUTE_32F). cuBLAS is loaded by this benchmark only
 * (dlopen of libcublas); without it the aquila lines come alone.
 *
 * aq_bench_gemm (gemm.c) calls aq_bench_gemm_gpu when --agent gpu is given.
 * Options: --sizes 1024,2048,4096,8192  --dtype f32|bf16|all (default all)
 *          --shapes MxNxK[:ta][:tb],... fp32 products of any shape instead
 *          (ta: A stored k x m, tb: B stored n x k), or --shapes mlp: the
 *          five large products of the MLP training step on a batch of 256
 *          (aq-bench train);
 *          --precision default|exact (aq_matmul_args_t.precision of the
 *          fp32 products: 3xTF32 on tensor cores, or one FFMA a term)
 *          --f32-kernel NAME (a build of ops_gpu.h's fp32 matmul, under
 *          the grid it takes, instead of the one aq_gpu_op_kernel picks)
 *          --bf16-kernel NAME (aq_matmul_bf16, or a candidate built beside
 *          it, as the table below lists them)
 *          --reps R (default 7; each rep times `inner` back-to-back GEMMs,
 *          more for small n, so launch latency does not dominate).
 * Each aquila line also carries max_rel_diff: the largest difference from
 * cuBLAS's C, over the largest |C| (a check that the timed kernel is right). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "kernels/cuda/launch.h"
#include "bench.h"

typedef int (*cublas_create_t)(void **);
typedef int (*cublas_sgemm_t)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                              const float *, float *, int);
typedef int (*cublas_gemm_ex_t)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                                int, int, const void *, void *, int, int, int, int);
typedef int (*ctx_sync_t)(void);
enum { CUDA_R_32F = 0, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };

#define CHECK(expr) BENCH_CHECK("gemm", expr)

typedef struct {
  cublas_sgemm_t sgemm;
  cublas_gemm_ex_t gemm_ex;
  ctx_sync_t sync;
  void *handle;
} cublas_t;

static void load_cublas(cublas_t *cb) {
  memset(cb, 0, sizeof(*cb));
  const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
  void *lib = NULL;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; ++i) lib = dlopen(names[i], RTLD_NOW);
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib || !cu) {
    fprintf(stderr, "aq-bench gemm: no cuBLAS (%s); aquila alone\n", dlerror());
    return;
  }
  cublas_create_t create = (cublas_create_t)dlsym(lib, "cublasCreate_v2");
  cb->sgemm = (cublas_sgemm_t)dlsym(lib, "cublasSgemm_v2");
  cb->gemm_ex = (cublas_gemm_ex_t)dlsym(lib, "cublasGemmEx");
  cb->sync = (ctx_sync_t)dlsym(cu, "cuCtxSynchronize");
  if (!create || !cb->sgemm || !cb->gemm_ex || !cb->sync || create(&cb->handle)) {
    fprintf(stderr, "aq-bench gemm: cuBLAS did not start; aquila alone\n");
    cb->handle = NULL;
  }
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
 * operands swap, and each keeps its own transpose (CUBLAS_OP_T = 1). */
static int cublas_run(cublas_t *cb, int bf16, const aq_matmul_args_t *p, const void *a, const void *b, float *c) {
  const float one = 1.0f, zero = 0.0f;
  const int m = (int)p->m, n = (int)p->n, k = (int)p->k;
  if (bf16)
    return cb->gemm_ex(cb->handle, 0, 0, n, m, k, &one, b, CUDA_R_16BF, n, a, CUDA_R_16BF, k, &zero, c, CUDA_R_32F, n,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return cb->sgemm(cb->handle, p->trans_b ? 1 : 0, p->trans_a ? 1 : 0, n, m, k, &one, (const float *)b, (int)p->ldb,
                   (const float *)a, (int)p->lda, &zero, c, n);
}

/* A product of --sizes / --shapes as the kernel's arguments (row-major,
 * dense). */
static aq_matmul_args_t product_args(const bench_product_t *p) {
  return (aq_matmul_args_t){.m = p->m, .n = p->n, .k = p->k, .lda = p->ta ? p->m : p->k, .ldb = p->tb ? p->k : p->n,
                            .ldc = p->n, .batch = 1, .alpha = 1.0f, .trans_a = p->ta, .trans_b = p->tb};
}

/* The bf16 kernel and its candidates (kernels/cuda/matmul_bf16.cu): name,
 * threads a block, tile rows x columns, group segment. _nomath measures the
 * copies alone (its C is wrong). */
static const struct { const char *name; uint32_t threads, bm, bn, group; } bf16_kernels[] = {
    {AQ_KERNEL_MATMUL_BF16, AQ_GPU_MATMUL_BF16_THREADS, AQ_GPU_MATMUL_BF16_TILE_M, AQ_GPU_MATMUL_BF16_TILE_N,
     AQ_GPU_MATMUL_BF16_GROUP_SEGMENT},
    {"aq_matmul_bf16_mma", 384, 192, 192, AQ_GPU_MATMUL_BF16_GROUP_SEGMENT},
    {"aq_matmul_bf16_wide4", 384, 128, 256, 4 * 48 * 1024 + 2048},
    {"aq_matmul_bf16_nomath", 384, 128, 256, AQ_GPU_MATMUL_BF16_GROUP_SEGMENT}};

int aq_bench_gemm_gpu(int argc, char **argv) {
  (void)argc, (void)argv; /* read by aq_bench_gemm */
  const char *bf16_name = bench_arg("bf16-kernel");
  size_t bf16_pick = 0;
  for (size_t i = 0; bf16_name && i < sizeof(bf16_kernels) / sizeof(bf16_kernels[0]); ++i)
    if (!strcmp(bf16_name, bf16_kernels[i].name)) bf16_pick = i;
  if (bf16_name && strcmp(bf16_name, bf16_kernels[bf16_pick].name)) {
    fprintf(stderr, "aq-bench gemm: unknown --bf16-kernel %s\n", bf16_name);
    return 2;
  }
  const char *f32_pick = bench_arg("f32-kernel"), *precision = bench_arg("precision");
  if (precision && strcmp(precision, "default") && strcmp(precision, "exact")) {
    fprintf(stderr, "aq-bench gemm: --precision %s: expected default (3xTF32) or exact (FFMA)\n", precision);
    return 2;
  }
  const int exact = precision && !strcmp(precision, "exact");
  int reps = (int)bench_arg_int("reps", 7);
  const char *dtype = bench_arg("dtype");
  const char *sizes = bench_products("1024,2048,4096,8192");
  if (!sizes) return 2;
  if (bench_arg("shapes")) dtype = "f32"; /* the bf16 kernel takes no transposes */
  if (!dtype) dtype = "all";
  if (reps < 1) reps = 1;
  CHECK(aq_init(NULL));
  aq_agent_t all[64], gpu = {0};
  size_t n;
  CHECK(aq_agents(all, 64, &n));
  for (size_t i = 0; i < n && !gpu.handle; ++i) {
    aq_agent_info_t info;
    CHECK(aq_agent_get_info(all[i], &info));
    if (info.kind == AQ_AGENT_KIND_GPU) gpu = all[i];
  }
  if (!gpu.handle) {
    const char *why = "";
    aq_driver_status("cuda", &why);
    fprintf(stderr, "aq-bench gemm: no GPU agent (%s)\n", why ? why : "");
    aq_shut_down();
    return 2;
  }
  cublas_t cb;
  load_cublas(&cb);
  aq_code_object_t co;
  aq_kernel_info_t k32, k16;
  CHECK(aq_code_object_load("kernels-cuda.fatbin", &co));
  CHECK(aq_code_object_find_kernel(co, bf16_kernels[bf16_pick].name, gpu, &k16));
  aq_region_t dev;
  CHECK(bench_device_region(gpu, &dev));
  aq_queue_t q;
  CHECK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t done;
  CHECK(aq_signal_create(0, &done));
  char *list = strdup(sizes), *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    bench_product_t product;
    bench_parse_product(tok, &product); /* checked by bench_products */
    const aq_matmul_args_t shape = product_args(&product);
    const int64_t s = shape.m; /* the n of a square product */
    const int square = shape.m == shape.n && shape.n == shape.k && !shape.trans_a && !shape.trans_b;
    const size_t ka = (size_t)(shape.m * shape.k), kb = (size_t)(shape.k * shape.n), kc = (size_t)(shape.m * shape.n);
    const size_t count = ka > kb ? (ka > kc ? ka : kc) : (kb > kc ? kb : kc), bytes = count * 4;
    float *host = malloc(bytes), *ca = malloc(bytes), *cc = malloc(bytes);
    uint16_t *host16 = malloc(count * 2);
    unsigned seed = 7;
    for (size_t i = 0; i < count; ++i) {
      seed = seed * 1664525u + 1013904223u;
      host[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
      host16[i] = aq_f32_to_bf16(host[i]);
    }
    void *a, *b, *c, *c_peer;
    CHECK(aq_memory_allocate(dev, bytes, &a));
    CHECK(aq_memory_allocate(dev, bytes, &b));
    CHECK(aq_memory_allocate(dev, bytes, &c));
    CHECK(aq_memory_allocate(dev, bytes, &c_peer));
    /* Enough GEMMs a rep for ~20 ms of work at 50 TFLOP/s, at least 1. */
    const double flops = 2.0 * (double)shape.m * (double)shape.n * (double)shape.k;
    int inner = (int)(1e12 / flops);
    inner = inner < 1 ? 1 : inner > 50 ? 50 : inner;
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      if (strcmp(dtype, "all") && strcmp(dtype, bf16 ? "bf16" : "f32")) continue;
      if (bf16 && !square) continue;
      /* Both operands hold the same random matrix: C = A A. */
      CHECK(aq_memory_copy(a, bf16 ? (void *)host16 : (void *)host, bf16 ? count * 2 : bytes));
      CHECK(aq_memory_copy(b, bf16 ? (void *)host16 : (void *)host, bf16 ? count * 2 : bytes));
      aq_matmul_args_t args = shape;
      args.a = a, args.b = b, args.c = c;
      args.precision = exact ? AQ_MATMUL_PRECISION_EXACT : AQ_MATMUL_PRECISION_DEFAULT;
      /* the fp32 build the scheduler would pick for this product */
      const char *f32_name = f32_pick ? f32_pick : aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &args);
      CHECK(aq_code_object_find_kernel(co, f32_name, gpu, &k32));
      aq_dispatch_shape_t sh = aq_gpu_op_shape(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args));
      const char *split_at = strstr(f32_name, "_split");
      if (split_at || strstr(f32_name, "_x3")) { /* a cluster of S (_splitS) a tile of 128x128, or 64x64 (_tile64, _x3) */
        const uint32_t split = split_at ? (uint32_t)atoi(split_at + 6) : 1;
        const uint32_t tile = strstr(f32_name, "_tile64") || strstr(f32_name, "_x3") ? 64 : 128;
        sh = (aq_dispatch_shape_t){{(uint32_t)((args.n + tile - 1) / tile) * 16 * split, (uint32_t)((args.m + tile - 1) / tile) * 16, 1},
                                   {16, 16, 1}};
      }
      if (bf16) {
        const uint32_t th = bf16_kernels[bf16_pick].threads, bm = bf16_kernels[bf16_pick].bm, bn = bf16_kernels[bf16_pick].bn;
        sh = (aq_dispatch_shape_t){{(uint32_t)((s + bn - 1) / bn) * th, (uint32_t)((s + bm - 1) / bm), 1}, {(uint16_t)th, 1, 1}};
      }
      hsa_kernel_dispatch_packet_t p;
      memset(&p, 0, sizeof(p));
      p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
      p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
      p.workgroup_size_x = sh.workgroup[0], p.workgroup_size_y = sh.workgroup[1];
      p.workgroup_size_z = sh.workgroup[2];
      p.grid_size_x = sh.grid[0], p.grid_size_y = sh.grid[1], p.grid_size_z = sh.grid[2];
      p.group_segment_size = bf16 ? bf16_kernels[bf16_pick].group : aq_gpu_op_group_segment(f32_name, &args);
      if (bf16 && !bf16_pick) p.group_segment_size = aq_gpu_op_group_segment(AQ_KERNEL_MATMUL_BF16, &args);
      p.kernel_object = (bf16 ? k16 : k32).kernel_object;
      p.kernarg_address = &args;
      p.completion_signal.handle = done.handle;
      double *ta = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
      int peer_ok = cb.handle != NULL;
      for (int r = -1; r < reps; ++r) { /* r = -1: warm-up */
        /* Only the last GEMM of a rep signals: the queue runs them in order,
         * and a signal has one completer in flight at a time. */
        CHECK(aq_signal_store(done, 1));
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < inner; ++i) {
          p.completion_signal.handle = i == inner - 1 ? done.handle : 0;
          CHECK(aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL));
        }
        CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
        if (r >= 0) ta[r] = (double)(bench_now_ns() - t0) / 1e9 / inner;
        if (peer_ok) {
          t0 = bench_now_ns();
          for (int i = 0; i < inner && peer_ok; ++i)
            if (cublas_run(&cb, bf16, &args, a, b, c_peer)) peer_ok = 0;
          if (cb.sync()) peer_ok = 0;
          if (r >= 0) tb[r] = (double)(bench_now_ns() - t0) / 1e9 / inner;
          if (!peer_ok) fprintf(stderr, "aq-bench gemm: cuBLAS failed at %s\n", tok);
        }
      }
      aq_status_t err = AQ_OK;
      aq_signal_get_error(done, 1, &err);
      if (err != AQ_OK) {
        fprintf(stderr, "aq-bench gemm: %s failed: %s\n", bf16 ? bf16_kernels[bf16_pick].name : f32_name,
                aq_last_error());
        return 1;
      }
      double diff = -1, cmax = 0;
      if (peer_ok) {
        CHECK(aq_memory_copy(ca, c, kc * 4));
        CHECK(aq_memory_copy(cc, c_peer, kc * 4));
        double dmax = 0;
        for (size_t i = 0; i < kc; ++i) {
          double d = fabs((double)ca[i] - cc[i]);
          dmax = d > dmax || isnan(d) ? d : dmax;
          cmax = fabs(cc[i]) > cmax ? fabs(cc[i]) : cmax;
        }
        diff = dmax / (cmax > 0 ? cmax : 1);
      }
      const double ga = flops / bench_median(ta, (size_t)reps) / 1e9;
      const double gb = peer_ok ? flops / bench_median(tb, (size_t)reps) / 1e9 : 0;
      for (int peer = peer_ok ? 1 : 0; peer >= 0; --peer) {
        bench_json_t j;
        bench_json_begin(&j, "gemm", peer ? "cublas" : "aquila");
        bench_json_str(&j, "agent", "gpu");
        bench_json_str(&j, "dtype", bf16 ? "bf16" : "f32");
        if (!bf16 && !peer) bench_json_str(&j, "precision", exact ? "exact" : "default");
        if (square) {
          bench_json_int(&j, "n", s);
        } else {
          bench_json_int(&j, "m", shape.m), bench_json_int(&j, "n", shape.n), bench_json_int(&j, "k", shape.k);
          bench_json_int(&j, "trans_a", shape.trans_a), bench_json_int(&j, "trans_b", shape.trans_b);
          bench_json_num(&j, "us", flops / (peer ? gb : ga) / 1e3);
        }
        bench_json_int(&j, "threads", 0);
        bench_json_num(&j, "gflops", peer ? gb : ga);
        if (!peer && peer_ok) {
          bench_json_num(&j, "ratio", ga / gb);
          bench_json_num(&j, "max_rel_diff", diff);
          bench_json_num(&j, "max_abs_c", cmax);
        }
        bench_json_str(&j, "kernel", peer ? (bf16 ? "cublasGemmEx" : "cublasSgemm")
                                          : (bf16 ? bf16_kernels[bf16_pick].name : f32_name));
        bench_json_int(&j, "reps", reps);
        bench_json_int(&j, "gemms_per_rep", inner);
        bench_json_end(&j);
      }
      free(ta), free(tb);
    }
    aq_memory_free(a), aq_memory_free(b), aq_memory_free(c), aq_memory_free(c_peer);
    free(host), free(host16), free(ca), free(cc);
  }
  free(list);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
  return 0;
}
