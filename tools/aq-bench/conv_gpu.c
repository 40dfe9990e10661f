/* aq-bench conv --agent gpu: Aquila's GPU conv2d kernels (forward, backward
 * data, backward filter) through a GPU agent's queue against cuDNN
 * (libcudnn.so.9 / .8, loaded by this benchmark only, each pass's fastest
 * algorithm by cudnnFind*) in the same process on the same inputs:
 *  - dtype f32: aq_conv2d_*_f32 (at --precision default, tensor cores at
 *    fp32 accuracy where a pass has them; exact: FFMA) against cuDNN fp32 with
 *    CUDNN_FMA_MATH, so no TF32;
 *  - dtype bf16: aq_conv2d_*_bf16 (bf16 inputs, fp32 accumulation and
 *    outputs; tensor cores) against cuDNN with CUDNN_DATA_BFLOAT16 tensors
 *    and an fp32 compute type (tensor-op math). cuDNN's legacy API keeps
 *    one data type for all a pass's tensors, so its output is bf16 where
 *    Aquila's is fp32: max_rel_diff includes that rounding (2^-9). The
 *    inputs of both dtypes hold the same (bf16) values, and bf16 lines also
 *    carry max_rel_diff_f32, the difference from Aquila's exact fp32 kernel
 *    on them.
 * The cuDNN line names the algorithm cudnnFind* picked (algo, algo_name):
 * at stride 1 its fp32 picks are FFT and Winograd ones, which multiply less
 * than the direct convolution whose multiply-adds every gflops counts.
 *
 * aq_bench_conv (conv.c) calls aq_bench_conv_gpu when --agent gpu is given.
 * Options: --shapes N,C,H,W,K,R,S,STRIDE,PAD[;...] (default two LeNet-like
 *          convolutions at batch 256 and three ResNet-like layers)
 *          --dtype f32|bf16|all (default all)
 *          --reps R (default 5)
 *          --explain (each pass's build, path and launch, on stderr, and
 *          whether the build is the launch rule's or tuned, with the
 *          candidates' times; only the tuning runs, and without a GPU
 *          nothing does)
 *          --precision default|exact (aq_conv2d_args_t.precision of the fp32
 *          passes)
 * Each pass runs the build the scheduler would: for a shape with several
 * builds, the one auto-tuning keeps for this GPU (tuned first where it is
 * not yet: a graph of the three passes is instantiated; AQ_TUNE=0: the
 * launch rule's). */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "kernels/cuda/launch.h"
#include "bench.h"

int aq_bench_conv_gpu(int argc, char **argv);


/* The slice of cuDNN's legacy API this uses (cudnn.h is not needed). */
typedef struct {
  int algo, status;
  float time;
  size_t memory;
  int determinism, math_type, reserved[3];
} cudnn_perf_t;
typedef int (*fn_create_t)(void **);
typedef int (*fn_set_tensor_t)(void *, int, int, int, int, int, int);
typedef int (*fn_set_filter_t)(void *, int, int, int, int, int, int);
typedef int (*fn_set_conv_t)(void *, int, int, int, int, int, int, int, int);
typedef int (*fn_set_math_t)(void *, int);
typedef int (*fn_find_t)(void *, void *, void *, void *, void *, int, int *, cudnn_perf_t *);
typedef int (*fn_ws_t)(void *, void *, void *, void *, void *, int, size_t *);
typedef int (*fn_run_t)(void *, const void *, void *, const void *, void *, const void *, void *, int, void *, size_t,
                        const void *, void *, void *);
enum { CUDNN_NCHW = 0, CUDNN_FLOAT = 0, CUDNN_BFLOAT16 = 9, CUDNN_CROSS_CORRELATION = 1, CUDNN_TENSOR_OP_MATH = 1,
       CUDNN_FMA_MATH = 3 };

typedef struct {
  void *h, *xd, *yd, *wd, *cd;
  fn_find_t find[3];
  fn_ws_t ws[3];
  fn_run_t run[3];
  int ok;
} cudnn_t;

static void load_cudnn(cudnn_t *d) {
  memset(d, 0, sizeof(*d));
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW);
  if (!lib) lib = dlopen("libcudnn.so.8", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "aq-bench conv: no cuDNN (%s); aquila alone\n", dlerror());
    return;
  }
#define SYM(name) dlsym(lib, name)
  fn_create_t create = (fn_create_t)SYM("cudnnCreate"), ct = (fn_create_t)SYM("cudnnCreateTensorDescriptor");
  fn_create_t cf = (fn_create_t)SYM("cudnnCreateFilterDescriptor"), cc = (fn_create_t)SYM("cudnnCreateConvolutionDescriptor");
  const char *find[3] = {"cudnnFindConvolutionForwardAlgorithm", "cudnnFindConvolutionBackwardDataAlgorithm",
                         "cudnnFindConvolutionBackwardFilterAlgorithm"};
  const char *ws[3] = {"cudnnGetConvolutionForwardWorkspaceSize", "cudnnGetConvolutionBackwardDataWorkspaceSize",
                       "cudnnGetConvolutionBackwardFilterWorkspaceSize"};
  const char *run[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter"};
  int ok = create && ct && cf && cc;
  for (int i = 0; i < 3; ++i) {
    d->find[i] = (fn_find_t)SYM(find[i]), d->ws[i] = (fn_ws_t)SYM(ws[i]), d->run[i] = (fn_run_t)SYM(run[i]);
    ok = ok && d->find[i] && d->ws[i] && d->run[i];
  }
  if (!ok || create(&d->h) || ct(&d->xd) || ct(&d->yd) || cf(&d->wd) || cc(&d->cd)) {
    fprintf(stderr, "aq-bench conv: cuDNN did not start; aquila alone\n");
    return;
  }
  d->ok = 1;
}

/* Descriptors for one shape and dtype: fp32 tensors and FMA math, or bf16
 * tensors computed in fp32 on tensor cores. */
static int cudnn_setup(cudnn_t *d, const aq_conv2d_args_t *a, int bf16) {
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcudnn.so.8", RTLD_NOW | RTLD_NOLOAD);
  fn_set_tensor_t st = (fn_set_tensor_t)dlsym(lib, "cudnnSetTensor4dDescriptor");
  fn_set_filter_t sf = (fn_set_filter_t)dlsym(lib, "cudnnSetFilter4dDescriptor");
  fn_set_conv_t sc = (fn_set_conv_t)dlsym(lib, "cudnnSetConvolution2dDescriptor");
  fn_set_math_t sm = (fn_set_math_t)dlsym(lib, "cudnnSetConvolutionMathType");
  if (!st || !sf || !sc || !sm) return -1;
  const int t = bf16 ? CUDNN_BFLOAT16 : CUDNN_FLOAT;
  return st(d->xd, CUDNN_NCHW, t, (int)a->n, (int)a->c, (int)a->h, (int)a->wd) ||
         st(d->yd, CUDNN_NCHW, t, (int)a->n, (int)a->k, (int)a->p, (int)a->q) ||
         sf(d->wd, t, CUDNN_NCHW, (int)a->k, (int)a->c, (int)a->r, (int)a->s) ||
         sc(d->cd, a->pad_h, a->pad_w, a->stride_h, a->stride_w, a->dil_h, a->dil_w, CUDNN_CROSS_CORRELATION,
            CUDNN_FLOAT) ||
         sm(d->cd, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
}

/* Descriptor order per pass: forward (x, w, conv, y), backward data (w, dy,
 * conv, dx), backward filter (x, dy, conv, dw). */
static void order(cudnn_t *d, int pass, void **o) {
  void *x = d->xd, *y = d->yd, *w = d->wd;
  void *lists[3][4] = {{x, w, d->cd, y}, {w, y, d->cd, x}, {x, y, d->cd, w}};
  memcpy(o, lists[pass], sizeof(lists[pass]));
}

#define CHECK(expr) BENCH_CHECK("conv", expr)

/* What a run of the suite shares: the GPU, a queue, the kernels, cuDNN. */
typedef struct {
  aq_region_t dev;
  aq_queue_t q;
  aq_signal_t done;
  aq_kernel_info_t k[2][3]; /* [bf16][pass] */
  aq_agent_t gpu;
  aq_code_object_t co;
  int (*sync)(void);
  cudnn_t dn;
  int reps;
} ctx_t;

/* One shape's device buffers: the inputs in fp32 and in bf16 (the same
 * values rounded), Aquila's fp32 outputs, and the peer's output. */
typedef struct {
  void *in[2][3]; /* [bf16][x, w, dy] */
  void *out[3];   /* y, dx, dw */
  void *peer, *ref; /* cuDNN's output; the fp32 kernel's, beside a bf16 run */
} bufs_t;

static const char *const names[2][3] = {
    {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER},
    {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BWD_DATA_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16}};
static const char *const passes[3] = {"fwd", "bwd_data", "bwd_filter"};

/* cuDNN's fastest algorithm for a pass and its workspace; -1 if none. */
static int cudnn_pick(ctx_t *c, int pass, void **d, void **ws, size_t *ws_size) {
  cudnn_perf_t perf[16];
  int got = 0, algo = -1;
  if (c->dn.find[pass](c->dn.h, d[0], d[1], d[2], d[3], 16, &got, perf) == 0)
    for (int i = 0; i < got && algo < 0; ++i)
      if (perf[i].status == 0) algo = perf[i].algo;
  if (algo < 0 || c->dn.ws[pass](c->dn.h, d[0], d[1], d[2], d[3], algo, ws_size)) algo = -1;
  if (algo >= 0 && *ws_size && aq_memory_allocate(c->dev, *ws_size, ws) != AQ_OK) algo = -1;
  if (algo < 0) fprintf(stderr, "aq-bench conv: cuDNN has no %s algorithm here\n", passes[pass]);
  return algo;
}

/* The largest difference between the two outputs over the largest |peer|
 * (the peer's output is bf16 in the bf16 runs). */
static double compare(const void *ours, const void *peer, size_t count, int bf16) {
  float *ha = malloc(count * 4), *hb = malloc(count * 4);
  uint16_t *hb16 = malloc(count * 2);
  double dmax = 0, cmax = 0;
  if (aq_memory_copy(ha, ours, count * 4) != AQ_OK || aq_memory_copy(bf16 ? (void *)hb16 : hb, peer, count * (bf16 ? 2 : 4)) != AQ_OK)
    dmax = NAN;
  for (size_t i = 0; i < count; ++i) {
    if (bf16) hb[i] = aq_bf16_to_f32(hb16[i]);
    double e = fabs((double)ha[i] - hb[i]);
    dmax = e > dmax || isnan(e) ? e : dmax, cmax = fabs(hb[i]) > cmax ? fabs(hb[i]) : cmax;
  }
  free(ha), free(hb), free(hb16);
  return dmax / (cmax > 0 ? cmax : 1);
}

/* cuDNN's name of a pass's algorithm (cudnnConvolution{Fwd,BwdData,
 * BwdFilter}Algo_t). The FFT and Winograd ones multiply less than a
 * direct convolution does: their gflops, counted as every pass's are (the
 * direct convolution's multiply-adds), run past the arithmetic they do. */
static const char *algo_name(int pass, int algo) {
  static const char *const fwd[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
                                    "winograd", "winograd_nonfused"};
  static const char *const data[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  static const char *const filter[] = {"algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused", "fft_tiling"};
  const char *const *names[] = {fwd, data, filter};
  const int counts[] = {8, 6, 7};
  return algo >= 0 && algo < counts[pass] ? names[pass][algo] : "unknown";
}

static void report(const aq_conv2d_args_t *a, int bf16, int pass, int peer, double gflops, double ratio, double diff,
                   double diff_f32, int algo, int reps) {
  bench_json_t j;
  bench_json_begin(&j, "conv", peer ? "cudnn" : "aquila");
  bench_json_str(&j, "agent", "gpu");
  bench_json_str(&j, "dtype", bf16 ? "bf16" : "f32");
  bench_json_int(&j, "n", a->n), bench_json_int(&j, "c", a->c), bench_json_int(&j, "h", a->h);
  bench_json_int(&j, "w", a->wd), bench_json_int(&j, "k", a->k), bench_json_int(&j, "r", a->r);
  bench_json_int(&j, "s", a->s), bench_json_int(&j, "stride", a->stride_h), bench_json_int(&j, "pad", a->pad_h);
  bench_json_str(&j, "pass", passes[pass]);
  if (!bf16 && !peer) bench_json_str(&j, "precision", a->precision == AQ_MATMUL_PRECISION_EXACT ? "exact" : "default");
  bench_json_num(&j, "gflops", gflops);
  if (!peer && algo >= 0) bench_json_num(&j, "ratio", ratio), bench_json_num(&j, "max_rel_diff", diff);
  if (!peer && bf16) bench_json_num(&j, "max_rel_diff_f32", diff_f32);
  if (peer) bench_json_int(&j, "algo", algo), bench_json_str(&j, "algo_name", algo_name(pass, algo));
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
}


/* The build of a pass the scheduler would run on gpu: the tuned one
 * (*tuned filled), else the launch rule's. */
static const char *build_of(aq_agent_t gpu, int bf16, int pass, const aq_conv2d_args_t *a, aq_tuned_build_t *tuned) {
  const char *op = names[bf16][pass];
  memset(tuned, 0, sizeof(*tuned));
  if (gpu.handle && aq_tuned_build(gpu, op, a, tuned) == AQ_OK) return tuned->build;
  return aq_gpu_op_kernel(op, a);
}

/* A dispatch of one pass's kernel with its GPU shape. */
static void packet(ctx_t *c, int bf16, int pass, const aq_conv2d_args_t *a, hsa_kernel_dispatch_packet_t *p) {
  const char *name = names[bf16][pass];
  aq_tuned_build_t tuned;
  const char *build = build_of(c->gpu, bf16, pass, a, &tuned);
  aq_dispatch_shape_t sh = aq_gpu_op_build_shape(name, build, a, aq_planes_grid(1));
  memset(p, 0, sizeof(*p));
  p->header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p->setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p->workgroup_size_x = sh.workgroup[0], p->workgroup_size_y = sh.workgroup[1], p->workgroup_size_z = sh.workgroup[2];
  p->grid_size_x = sh.grid[0], p->grid_size_y = sh.grid[1], p->grid_size_z = sh.grid[2];
  p->group_segment_size = aq_gpu_op_group_segment(build, a);
  p->kernel_object = c->k[bf16][pass].kernel_object;
  aq_kernel_info_t k; /* another build than the op's own */
  if (strcmp(build, name) && aq_code_object_find_kernel(c->co, build, c->gpu, &k) == AQ_OK)
    p->kernel_object = k.kernel_object;
  p->kernarg_address = (void *)a;
  p->completion_signal.handle = c->done.handle;
}

/* Has the scheduler tune a shape's passes of one dtype on the GPU, where
 * they have several builds and none is kept yet: a graph of the three
 * passes (the op library's kernels) instantiated for GPU agents. */
static void tune(const aq_conv2d_args_t *a, int bf16) {
  aq_graph_t *g;
  if (aq_graph_create(NULL, &g) != AQ_OK) return;
  const int64_t dims[3][4] = {{a->n, a->c, a->h, a->wd}, {a->k, a->c, a->r, a->s}, {a->n, a->k, a->p, a->q}};
  static const char *const tensor[6] = {"x", "w", "dy", "y", "dx", "dw"};
  static const int shape_of[6] = {0, 1, 2, 2, 0, 1}; /* y like dy, dx like x, dw like w */
  aq_tensor_t t[6];
  aq_status_t s = AQ_OK;
  for (int i = 0; i < 6 && s == AQ_OK; ++i)
    s = aq_tensor_create(g, tensor[i], AQ_DTYPE_F32, i < 3 ? AQ_ROLE_INPUT : AQ_ROLE_ACTIVATION, 4, dims[shape_of[i]],
                         &t[i]);
  /* each pass: the two it reads (x, w, dy) and the one it writes, at their kernarg slots */
  static const int reads[3][2] = {{0, 1}, {1, 2}, {0, 2}};
  const uint32_t slot[6] = {offsetof(aq_conv2d_args_t, x), offsetof(aq_conv2d_args_t, w), offsetof(aq_conv2d_args_t, dy),
                            offsetof(aq_conv2d_args_t, y), offsetof(aq_conv2d_args_t, dx), offsetof(aq_conv2d_args_t, dw)};
  for (int pass = 0; pass < 3 && s == AQ_OK; ++pass) {
    aq_kernel_task_t k = {.name = passes[pass], .kernel = names[bf16][pass], .kernarg = a, .kernarg_size = sizeof(*a),
                          .shape = aq_planes_grid(1), .read_count = 2, .write_count = 1, .agent = -1};
    for (int r = 0; r < 2; ++r) k.reads[r] = t[reads[pass][r]], k.read_offsets[r] = slot[reads[pass][r]];
    k.writes[0] = t[3 + pass], k.write_offsets[0] = slot[3 + pass];
    s = aq_graph_add_kernel(g, &k, NULL);
  }
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU};
  aq_exec_t *e = NULL;
  if (s == AQ_OK) s = aq_graph_instantiate(g, &o, &e);
  if (s != AQ_OK) fprintf(stderr, "aq-bench conv: no tuning for %s: %s\n", bf16 ? "bf16" : "f32", aq_last_error());
  if (e) aq_exec_destroy(e);
  aq_graph_destroy(g);
}

/* The fp32 kernel's output for the pass, on the same (bf16) values, into
 * b->ref: the exact answer a bf16 run is compared with. */
static int exact(ctx_t *c, aq_conv2d_args_t a, const bufs_t *b, int pass) {
  a.x = b->in[0][0], a.w = b->in[0][1], a.dy = b->in[0][2];
  a.y = a.dx = a.dw = b->ref, a.bias = NULL, a.dbias = NULL;
  a.precision = AQ_MATMUL_PRECISION_EXACT;
  hsa_kernel_dispatch_packet_t p;
  packet(c, 0, pass, &a, &p);
  CHECK(aq_signal_store(c->done, 1));
  CHECK(aq_queue_submit(c->q, &p, AQ_TIMEOUT_INFINITE, NULL));
  CHECK(aq_signal_wait(c->done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
  return 0;
}

/* Times one pass of one dtype, Aquila's kernel and cuDNN's alternately, and
 * prints their lines. */
static int bench_pass(ctx_t *c, aq_conv2d_args_t a, const bufs_t *b, int bf16, int pass, int peer) {
  a.x = b->in[bf16][0], a.w = b->in[bf16][1], a.dy = b->in[bf16][2];
  a.y = b->out[0], a.dx = b->out[1], a.dw = b->out[2], a.bias = NULL, a.dbias = NULL;
  const char *name = names[bf16][pass];
  hsa_kernel_dispatch_packet_t p;
  packet(c, bf16, pass, &a, &p);
  void *d[4], *ws = NULL;
  size_t ws_size = 0;
  order(&c->dn, pass, d);
  int algo = peer ? cudnn_pick(c, pass, d, &ws, &ws_size) : -1;
  const void *in1[3] = {a.x, a.w, a.x}, *in2[3] = {a.w, a.dy, a.dy};
  const float one = 1.0f, zero = 0.0f;
  double *ta = calloc((size_t)c->reps, sizeof(double)), *tb = calloc((size_t)c->reps, sizeof(double));
  for (int r = -1; r < c->reps; ++r) {
    CHECK(aq_signal_store(c->done, 1));
    uint64_t t0 = bench_now_ns();
    CHECK(aq_queue_submit(c->q, &p, AQ_TIMEOUT_INFINITE, NULL));
    CHECK(aq_signal_wait(c->done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
    if (r >= 0) ta[r] = (double)(bench_now_ns() - t0) / 1e9;
    if (algo >= 0) {
      t0 = bench_now_ns();
      if (c->dn.run[pass](c->dn.h, &one, d[0], (void *)in1[pass], d[1], (void *)in2[pass], d[2], algo, ws, ws_size,
                          &zero, d[3], b->peer))
        algo = -1, fprintf(stderr, "aq-bench conv: cuDNN %s failed\n", passes[pass]);
      c->sync();
      if (r >= 0) tb[r] = (double)(bench_now_ns() - t0) / 1e9;
    }
  }
  aq_status_t err = AQ_OK;
  aq_signal_get_error(c->done, 1, &err);
  if (err != AQ_OK) return fprintf(stderr, "aq-bench conv: %s failed: %s\n", name, aq_last_error()), 1;
  const size_t count = (size_t)(pass == 0 ? a.n * a.k * a.p * a.q : pass == 1 ? a.n * a.c * a.h * a.wd : a.k * a.c * a.r * a.s);
  const double diff = algo >= 0 ? compare(b->out[pass], b->peer, count, bf16) : -1;
  double diff_f32 = -1;
  if (bf16) {
    if (exact(c, a, b, pass)) return 1;
    diff_f32 = compare(b->out[pass], b->ref, count, 0);
  }
  const double flops = 2.0 * (double)(a.n * a.k * a.p * a.q) * (double)(a.c * a.r * a.s);
  const double ga = flops / bench_median(ta, (size_t)c->reps) / 1e9;
  const double gb = algo >= 0 ? flops / bench_median(tb, (size_t)c->reps) / 1e9 : 0;
  if (algo >= 0) report(&a, bf16, pass, 1, gb, 0, 0, 0, algo, c->reps);
  report(&a, bf16, pass, 0, ga, algo >= 0 ? ga / gb : 0, diff, diff_f32, algo, c->reps);
  if (ws) aq_memory_free(ws);
  free(ta), free(tb);
  return 0;
}

/* Device buffers for a shape, the inputs filled with the same values in
 * both precisions (bf16 ones). */
static int alloc_bufs(ctx_t *c, const aq_conv2d_args_t *a, bufs_t *b) {
  const size_t n[3] = {(size_t)(a->n * a->c * a->h * a->wd), (size_t)(a->k * a->c * a->r * a->s),
                       (size_t)(a->n * a->k * a->p * a->q)};
  const size_t outs[3] = {n[2], n[0], n[1]};
  size_t big = n[0] > n[1] ? n[0] : n[1];
  big = big > n[2] ? big : n[2];
  unsigned seed = 3;
  memset(b, 0, sizeof(*b));
  for (int i = 0; i < 3; ++i) {
    float *h = malloc(n[i] * 4);
    uint16_t *h16 = malloc(n[i] * 2);
    for (size_t e = 0; e < n[i]; ++e) {
      seed = seed * 1664525u + 1013904223u;
      h16[e] = aq_f32_to_bf16((float)(seed >> 9) / 8388608.0f - 0.5f), h[e] = aq_bf16_to_f32(h16[e]);
    }
    CHECK(aq_memory_allocate(c->dev, n[i] * 4, &b->in[0][i]));
    CHECK(aq_memory_allocate(c->dev, n[i] * 2, &b->in[1][i]));
    CHECK(aq_memory_copy(b->in[0][i], h, n[i] * 4));
    CHECK(aq_memory_copy(b->in[1][i], h16, n[i] * 2));
    CHECK(aq_memory_allocate(c->dev, outs[i] * 4, &b->out[i]));
    free(h), free(h16);
  }
  CHECK(aq_memory_allocate(c->dev, big * 4, &b->peer));
  CHECK(aq_memory_allocate(c->dev, big * 4, &b->ref));
  return 0;
}

static void free_bufs(bufs_t *b) {
  for (int i = 0; i < 3; ++i) aq_memory_free(b->in[0][i]), aq_memory_free(b->in[1][i]), aq_memory_free(b->out[i]);
  aq_memory_free(b->peer), aq_memory_free(b->ref);
}

/* The first GPU agent, or a null handle. */
static aq_agent_t first_gpu(void) {
  aq_agent_t all[64], gpu = {0};
  size_t n = 0;
  if (aq_agents(all, 64, &n) != AQ_OK) return gpu;
  for (size_t i = 0; i < n && i < 64 && !gpu.handle; ++i) {
    aq_agent_info_t info;
    if (aq_agent_get_info(all[i], &info) == AQ_OK && info.kind == AQ_AGENT_KIND_GPU) gpu = all[i];
  }
  return gpu;
}

static int setup(ctx_t *c) {
  memset(c, 0, sizeof(*c));
  c->reps = (int)bench_arg_int("reps", 5);
  if (c->reps < 1) c->reps = 1;
  CHECK(aq_init(NULL));
  aq_agent_t gpu = first_gpu();
  if (!gpu.handle) {
    fprintf(stderr, "aq-bench conv: no GPU agent\n");
    aq_shut_down();
    return 2;
  }
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  c->sync = cu ? (int (*)(void))dlsym(cu, "cuCtxSynchronize") : NULL;
  load_cudnn(&c->dn);
  if (!c->sync) c->dn.ok = 0;
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cuda.fatbin", &co));
  c->gpu = gpu, c->co = co;
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < 3; ++i) CHECK(aq_code_object_find_kernel(co, names[t][i], gpu, &c->k[t][i]));
  CHECK(bench_device_region(gpu, &c->dev));
  CHECK(aq_queue_create(gpu, NULL, &c->q));
  CHECK(aq_signal_create(0, &c->done));
  return 0;
}

/* bf16's tensor-core path for pass of a (launch.h's tiles; split: the
 * blocks of its clusters, 0 for none; the backward filter's rows of x and
 * dy gathered whole at stride 1), into buf. */
static const char *bf16_path(const aq_conv2d_args_t *a, int pass, int split, char *buf, size_t size) {
  int tm, tn;
  char who[32] = "block";
  aq_conv2d_bf16_gpu_tiles(a, pass, &tm, &tn);
  if (split && pass == 0) tm = tn = 64; /* the forward's split build: always its 64x64 tiles */
  if (split && pass == 2) aq_conv2d_bf16_split_tiles(a, split, &tm), tn = 64; /* the backward filter's, by its cluster */
  if (split) snprintf(who, sizeof(who), "cluster of %d", split);
  snprintf(buf, size, "implicit GEMM on tensor cores, a %s a %dx%d tile%s%s", who, tm, tn,
           split ? " splitting its depth" : "",
           pass == 2 && a->stride_w == 1 ? ", rows of x and dy gathered whole (q padded to 8)" : "");
  return buf;
}

/* How a pass's build runs: tiled (it asks for a group segment), tensor
 * cores (bf16, or fp32's x3 builds: x3 their tiles' rows, 0 for the
 * others), FFMA (ffma 1) or Winograd's (ffma -1, -2 for a backward filter
 * on tensor cores; x3 its backward filter's tile rows), or the direct loops; `split`: the blocks of the clusters of
 * the build the op library picked, 0 where it is not a cluster-split one. */
static const char *path_of(const aq_conv2d_args_t *a, int tiled, int staged, int split, int x3, int ffma, int bf16,
                           int pass, int runs, char *buf, size_t size) {
  if (ffma < 0 && pass == 2) {
    snprintf(buf, size, "Winograd's F(3x3, 2x2), a cluster of %d a %dx%d tile of dw splitting dy's tiles, %s", split, x3,
             AQ_GPU_CONV2D_WINO_COLS,
             ffma == -3   ? "its products on tensor cores (3xTF32), a warp an element, added in fp32 every 64 tiles"
             : ffma == -2 ? "its products on tensor cores (3xTF32)"
                          : "its products in FFMA");
    return buf;
  }
  if (ffma < 0) {
    snprintf(buf, size, "Winograd's F(2x2, 3x3), a block %d output tiles of 2x2 by %d channels, %s",
             AQ_GPU_CONV2D_WINO_TILES, AQ_GPU_CONV2D_WINO_COLS,
             bf16 ? "its products on tensor cores (3xTF32)" : "its products in FFMA");
    return buf;
  }
  if (tiled && pass == 1 && runs) return "tiled in shared memory, a block an image, a thread a run of columns";
  if (tiled && pass < 2) return "tiled in shared memory, a block an image";
  if (staged) { /* a staged build always runs over clusters */
    const int64_t group = aq_conv2d_filter_group(a, split);
    snprintf(buf, size, "staged in shared memory, two buffers; a cluster of %d blocks a group of %lld filter%s, splitting the batch, every channel",
             split, (long long)group, group == 1 ? "" : "s");
    return buf;
  }
  if (tiled) return split ? "tiled in shared memory, a cluster a filter splitting the batch" : "tiled, a block a filter";
  if (x3 && pass == 2) { /* every x3 backward filter splits over clusters, of 8 unless named */
    snprintf(buf, size, "implicit GEMM on tensor cores (3xTF32), a cluster of %d a %dx%d tile splitting its depth",
             split ? split : AQ_GPU_CONV2D_BWD_FILTER_SPLIT, x3, AQ_GPU_CONV2D_X3_TILE);
    return buf;
  }
  if (x3) {
    snprintf(buf, size, "implicit GEMM on tensor cores (3xTF32), a block a %dx%d tile", x3, AQ_GPU_CONV2D_X3_TILE);
    return buf;
  }
  if (ffma) {
    if (pass == 2)
      snprintf(buf, size, "implicit GEMM in FFMA, a cluster of %d a %dx%d tile splitting its depth",
               AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_FFMA_ROWS, AQ_GPU_CONV2D_FFMA_COLS);
    else
      snprintf(buf, size, "implicit GEMM in FFMA, a block a %dx%d tile", AQ_GPU_CONV2D_FFMA_ROWS, AQ_GPU_CONV2D_FFMA_COLS);
    return buf;
  }
  if (bf16) return bf16_path(a, pass, split, buf, size);
  if (pass < 2) return "direct loops, a thread an output (planes past a block's shared memory)";
  return split ? "direct loops, runs of weights split over a cluster" : "direct loops, a block a run of weights";
}

/* --explain: the build the scheduler runs for each pass on gpu (none: no
 * GPU here), whether tuned or the launch rule's, why, and its launch
 * (launch.h). */
static void explain(aq_agent_t gpu, const char *tok, const aq_conv2d_args_t *a, int bf16, int pass) {
  const char *op = names[bf16][pass], *rule = aq_gpu_op_kernel(op, a);
  aq_tuned_build_t tuned;
  const char *build = build_of(gpu, bf16, pass, a, &tuned);
  const aq_dispatch_shape_t sh = aq_gpu_op_build_shape(op, build, a, aq_planes_grid(1));
  const uint32_t group = aq_gpu_op_group_segment(build, a);
  /* thin, square, warp: Winograd's backward filters on tensor cores, over
   * clusters of their own sizes */
  const int staged = aq_conv2d_staged_split(build), thin = !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN),
            warp = !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP),
            square = warp || !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC),
            split = thin                                                  ? AQ_GPU_CONV2D_WINO_THIN_SPLIT
                    : warp                                                ? AQ_GPU_CONV2D_WINO_WARP_SPLIT
                    : square                                              ? AQ_GPU_CONV2D_WINO_TC_SPLIT
                    : !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_WINO) ? AQ_GPU_CONV2D_BWD_FILTER_SPLIT
                    : staged                                           ? staged
                    : aq_conv2d_bf16_tc_split(build)                   ? aq_conv2d_bf16_tc_split(build)
                    : !strstr(build, "_split")                         ? 0
                    : !strcmp(build, AQ_KERNEL_CONV2D_BF16_SPLIT)      ? AQ_GPU_CONV2D_BF16_FWD_SPLIT
                    : !strcmp(build, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT) ? AQ_GPU_CONV2D_BF16_FWD_SPLIT
                    : !strcmp(build, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4) ? AQ_GPU_CONV2D_BF16_FLAT_SPLIT4
                    : strstr(build, "_split6")                         ? AQ_GPU_CONV2D_SPLIT6
                                                                       : AQ_GPU_CONV2D_BWD_FILTER_SPLIT;
  int x3 = 0;
  aq_conv2d_f32_pass(build, &x3);
  if (x3) x3 = strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) ? AQ_GPU_CONV2D_X3_TILE : AQ_GPU_CONV2D_X3_THIN;
  const int ffma = aq_conv2d_wino_pass(build) >= 0 ? (warp ? -3 : thin || square ? -2 : -1)
                                                  : aq_conv2d_ffma_pass(build) >= 0; /* < 0: Winograd's */
  if (ffma < 0) x3 = thin ? AQ_GPU_CONV2D_WINO_FILTER_THIN : AQ_GPU_CONV2D_WINO_COLS; /* its backward filter's tile rows */
  uint64_t blocks = 1, threads = 1;
  for (int d = 0; d < 3; ++d) blocks *= sh.grid[d] / sh.workgroup[d], threads *= sh.workgroup[d];
  const char *all[AQ_GPU_OP_BUILDS_MAX];
  const uint32_t builds = aq_gpu_op_builds(op, a, all, AQ_GPU_OP_BUILDS_MAX);
  char why[1024], path[160];
  int at = 0;
  if (tuned.candidates) {
    at = snprintf(why, sizeof(why), "tuned (%s the launch rule's %s; timed", strcmp(build, rule) ? "over" : "as", rule);
    for (uint32_t i = 0; i < tuned.candidates && at > 0 && (size_t)at < sizeof(why); ++i)
      at += snprintf(why + at, sizeof(why) - (size_t)at, "%s %s %.1f us", i ? "," : "", tuned.candidate[i],
                     tuned.candidate_ns[i] / 1e3);
    if (at > 0 && (size_t)at < sizeof(why)) snprintf(why + at, sizeof(why) - (size_t)at, ")");
  } else {
    snprintf(why, sizeof(why), "the launch rule's (%s)",
             builds < 2    ? "the one build for this shape"
             : !gpu.handle ? "no GPU here to tune on"
                           : "not tuned for this GPU: AQ_TUNE=0, or tuning failed");
  }
  int64_t planes_np; /* the build by planes' positions a block */
  aq_conv2d_bf16_planes_tiles(a, &planes_np);
  const int rows = aq_conv2d_bf16_rows_split(build); /* bf16's rows builds: their own path */
  const char *how = path;
  if (rows)
    snprintf(path, sizeof(path), "tensor cores, a cluster of %d a filter row of a %d-filter x %d-channel tile, splitting dy's rows (staged %s)",
             rows, AQ_GPU_CONV2D_ROWS_FILTERS, AQ_GPU_CONV2D_ROWS_CHANNELS,
             strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE) ? "whole" : "in chunks of 64");
  else if (!strncmp(build, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT, strlen(AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT)))
    snprintf(path, sizeof(path), "implicit GEMM on tensor cores, a cluster of %d a flat %dx%d tile splitting its depth",
             split, AQ_GPU_CONV2D_BF16_THIN, AQ_GPU_CONV2D_BF16_FLAT);
  else if (!strcmp(build, AQ_KERNEL_CONV2D_BF16_PLANES))
    snprintf(path, sizeof(path), "tensor cores, a block an image's %d positions by %d filters: w's rows and x's planes staged whole, the im2col built in shared memory",
             (int)planes_np, AQ_GPU_CONV2D_PLANES_FILTERS);
  else if (!strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL) || !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3) ||
           !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2))
    snprintf(path, sizeof(path), "tensor cores, a cluster of %d a %d-filter x %d-channel tile of dw splitting the batch, each image's columns read from its staged planes%s",
             !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3)   ? AQ_GPU_CONV2D_COL_FILTER_SPLIT3
             : !strcmp(build, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2) ? AQ_GPU_CONV2D_COL_FILTER_SPLIT2
                                                                     : AQ_GPU_CONV2D_COL_FILTER_SPLIT,
             AQ_GPU_CONV2D_COL_FILTERS, AQ_GPU_CONV2D_COL_CHANNELS, a->p * a->q > AQ_GPU_CONV2D_COL_POSITIONS ? " (dy's plane in chunks of 64 positions)" : "");
  else if (!strcmp(build, AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL) || !strcmp(build, AQ_KERNEL_CONV2D_BWD_DATA_COL))
    snprintf(path, sizeof(path), "%s, a block an image's %d channels: their taps x dy's positions over k, then col2im in shared memory",
             bf16 ? "tensor cores" : "FFMA", AQ_GPU_CONV2D_COL_CHANNELS);
  else
    how = path_of(a, group > 0, staged, split, x3, ffma, bf16, pass, !bf16 && aq_conv2d_data_runs(a), path, sizeof(path));
  fprintf(stderr, "conv %s %s %s: %s, %s; %s; %llu blocks of %llu threads, %u bytes of shared memory a block\n", tok,
          bf16 ? "bf16" : "f32", passes[pass], build, how, why,
          (unsigned long long)blocks, (unsigned long long)threads, group);
}

int aq_bench_conv_gpu(int argc, char **argv) {
  (void)argc, (void)argv; /* read by aq_bench_conv */
  const char *shapes = bench_arg("shapes"), *dtype = bench_arg("dtype");
  if (!shapes)
    shapes = "256,1,28,28,32,5,5,1,2;256,6,14,14,16,5,5,1,0;32,64,56,56,64,3,3,1,1;32,128,28,28,128,3,3,1,1;32,256,14,14,256,3,3,2,1";
  if (!dtype) dtype = "all";
  if (strcmp(dtype, "all") && strcmp(dtype, "f32") && strcmp(dtype, "bf16"))
    return fprintf(stderr, "aq-bench conv: --dtype is f32, bf16 or all, not '%s'\n", dtype), 2;
  if (bench_check_conv_shapes(shapes)) return 2;
  const char *precision = bench_arg("precision");
  if (precision && strcmp(precision, "default") && strcmp(precision, "exact")) {
    fprintf(stderr, "aq-bench conv: --precision %s: expected default (tensor cores at fp32 accuracy) or exact (FFMA)\n",
            precision);
    return 2;
  }
  const int exact = precision && !strcmp(precision, "exact");
  const int only_explain = bench_arg("explain") != NULL;
  ctx_t c;
  int rc = only_explain ? 0 : setup(&c);
  if (rc) return rc;
  aq_agent_t gpu = {0};
  if (only_explain && aq_init(NULL) == AQ_OK) gpu = first_gpu();
  if (!only_explain) gpu = c.gpu;
  char *list = strdup(shapes), *save = NULL;
  for (char *tok = strtok_r(list, ";", &save); tok && !rc; tok = strtok_r(NULL, ";", &save)) {
    aq_conv2d_args_t a;
    bench_parse_conv_shape(tok, &a); /* checked above */
    a.precision = exact ? AQ_MATMUL_PRECISION_EXACT : AQ_MATMUL_PRECISION_DEFAULT;
    for (int bf16 = 0; bf16 < 2 && gpu.handle; ++bf16)
      if (!strcmp(dtype, "all") || !strcmp(dtype, bf16 ? "bf16" : "f32")) tune(&a, bf16);
    if (only_explain) {
      for (int bf16 = 0; bf16 < 2; ++bf16)
        for (int pass = 0; pass < 3 && (!strcmp(dtype, "all") || !strcmp(dtype, bf16 ? "bf16" : "f32")); ++pass)
          explain(gpu, tok, &a, bf16, pass);
      continue;
    }
    bufs_t b;
    if (alloc_bufs(&c, &a, &b)) return 1;
    for (int bf16 = 0; bf16 < 2 && !rc; ++bf16) {
      if (strcmp(dtype, "all") && strcmp(dtype, bf16 ? "bf16" : "f32")) continue;
      int peer = c.dn.ok && !cudnn_setup(&c.dn, &a, bf16);
      for (int pass = 0; pass < 3 && !rc; ++pass) rc = bench_pass(&c, a, &b, bf16, pass, peer);
    }
    free_bufs(&b);
  }
  free(list);
  if (only_explain) {
    aq_shut_down();
    return rc;
  }
  aq_signal_destroy(c.done);
  aq_queue_destroy(c.q);
  aq_shut_down();
  return rc;
}
