/* aq-bench conv --agent gpu: Aquila's GPU conv2d kernels (forward, backward
 * data, backward filter; exact fp32) through a GPU agent's queue against
 * cuDNN (libcudnn.so.9 / .8, loaded by this benchmark only, fp32 with
 * CUDNN_FMA_MATH so no TF32, each pass's fastest algorithm by
 * cudnnFind*) in the same process on the same buffers.
 *
 * aq_bench_conv (conv.c) calls aq_bench_conv_gpu when --agent gpu is given.
 * Options: --shapes N,C,H,W,K,R,S,STRIDE,PAD[;...] (default a few CNN layers)
 *          --reps R (default 5) */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "aquila/ops_gpu.h"
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
enum { CUDNN_NCHW = 0, CUDNN_FLOAT = 0, CUDNN_CROSS_CORRELATION = 1, CUDNN_FMA_MATH = 3 };

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

static int cudnn_setup(cudnn_t *d, const aq_conv2d_args_t *a) {
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcudnn.so.8", RTLD_NOW | RTLD_NOLOAD);
  fn_set_tensor_t st = (fn_set_tensor_t)dlsym(lib, "cudnnSetTensor4dDescriptor");
  fn_set_filter_t sf = (fn_set_filter_t)dlsym(lib, "cudnnSetFilter4dDescriptor");
  fn_set_conv_t sc = (fn_set_conv_t)dlsym(lib, "cudnnSetConvolution2dDescriptor");
  fn_set_math_t sm = (fn_set_math_t)dlsym(lib, "cudnnSetConvolutionMathType");
  if (!st || !sf || !sc || !sm) return -1;
  return st(d->xd, CUDNN_NCHW, CUDNN_FLOAT, (int)a->n, (int)a->c, (int)a->h, (int)a->wd) ||
         st(d->yd, CUDNN_NCHW, CUDNN_FLOAT, (int)a->n, (int)a->k, (int)a->p, (int)a->q) ||
         sf(d->wd, CUDNN_FLOAT, CUDNN_NCHW, (int)a->k, (int)a->c, (int)a->r, (int)a->s) ||
         sc(d->cd, a->pad_h, a->pad_w, a->stride_h, a->stride_w, a->dil_h, a->dil_w, CUDNN_CROSS_CORRELATION,
            CUDNN_FLOAT) ||
         sm(d->cd, CUDNN_FMA_MATH);
}

/* Descriptor order per pass: forward (x, w, conv, y), backward data (w, dy,
 * conv, dx), backward filter (x, dy, conv, dw). */
static void order(cudnn_t *d, int pass, void **o) {
  void *x = d->xd, *y = d->yd, *w = d->wd;
  void *lists[3][4] = {{x, w, d->cd, y}, {w, y, d->cd, x}, {x, y, d->cd, w}};
  memcpy(o, lists[pass], sizeof(lists[pass]));
}

#define CHECK(expr)                                                                                  \
  do {                                                                                               \
    aq_status_t s_ = (expr);                                                                         \
    if (s_ != AQ_OK) {                                                                               \
      fprintf(stderr, "aq-bench conv: %s: %s: %s\n", #expr, aq_status_string(s_), aq_last_error()); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

int aq_bench_conv_gpu(int argc, char **argv) {
  int reps = (int)bench_arg_int(argc, argv, "reps", 5);
  const char *shapes = bench_arg(argc, argv, "shapes");
  if (!shapes) shapes = "256,1,28,28,32,5,5,1,2;32,64,56,56,64,3,3,1,1;32,128,28,28,128,3,3,1,1;32,256,14,14,256,3,3,2,1";
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
    fprintf(stderr, "aq-bench conv: no GPU agent\n");
    aq_shut_down();
    return 2;
  }
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  int (*sync)(void) = cu ? (int (*)(void))dlsym(cu, "cuCtxSynchronize") : NULL;
  cudnn_t dn;
  load_cudnn(&dn);
  if (!sync) dn.ok = 0;
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cuda.fatbin", &co));
  const char *names[3] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER};
  const char *passes[3] = {"fwd", "bwd_data", "bwd_filter"};
  aq_kernel_info_t k[3];
  for (int i = 0; i < 3; ++i) CHECK(aq_code_object_find_kernel(co, names[i], gpu, &k[i]));
  aq_region_t regs[8], dev = {0};
  size_t nr;
  CHECK(aq_agent_regions(gpu, regs, 8, &nr));
  for (size_t i = 0; i < nr; ++i) {
    aq_region_info_t ri;
    CHECK(aq_region_get_info(regs[i], &ri));
    if (ri.flags & AQ_REGION_DEVICE) dev = regs[i];
  }
  aq_queue_t q;
  CHECK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t done;
  CHECK(aq_signal_create(0, &done));
  char *list = strdup(shapes), *save = NULL;
  for (char *tok = strtok_r(list, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    long v[9];
    if (sscanf(tok, "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
               &v[8]) != 9) {
      fprintf(stderr, "aq-bench conv: bad shape '%s' (N,C,H,W,K,R,S,STRIDE,PAD)\n", tok);
      return 2;
    }
    aq_conv2d_args_t a = {0};
    a.n = v[0], a.c = v[1], a.h = v[2], a.wd = v[3], a.k = v[4], a.r = v[5], a.s = v[6];
    a.stride_h = a.stride_w = (int32_t)v[7], a.pad_h = a.pad_w = (int32_t)v[8], a.dil_h = a.dil_w = 1;
    a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, 1), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, 1);
    const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s),
                 ny = (size_t)(a.n * a.k * a.p * a.q);
    float *hx = malloc(nx * 4), *hw = malloc(nw * 4), *hy = malloc(ny * 4);
    unsigned seed = 3;
    for (size_t i = 0; i < nx; ++i) seed = seed * 1664525u + 1013904223u, hx[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
    for (size_t i = 0; i < nw; ++i) seed = seed * 1664525u + 1013904223u, hw[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
    for (size_t i = 0; i < ny; ++i) seed = seed * 1664525u + 1013904223u, hy[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
    void *x, *w, *y, *dy, *dx, *dw, *bias, *peer_out;
    size_t big = nx > ny ? nx : ny;
    big = big > nw ? big : nw;
    CHECK(aq_memory_allocate(dev, nx * 4, &x));
    CHECK(aq_memory_allocate(dev, nw * 4, &w));
    CHECK(aq_memory_allocate(dev, ny * 4, &y));
    CHECK(aq_memory_allocate(dev, ny * 4, &dy));
    CHECK(aq_memory_allocate(dev, nx * 4, &dx));
    CHECK(aq_memory_allocate(dev, nw * 4, &dw));
    CHECK(aq_memory_allocate(dev, (size_t)a.k * 4, &bias));
    CHECK(aq_memory_allocate(dev, big * 4, &peer_out));
    CHECK(aq_memory_copy(x, hx, nx * 4));
    CHECK(aq_memory_copy(w, hw, nw * 4));
    CHECK(aq_memory_copy(dy, hy, ny * 4));
    a.x = x, a.w = w, a.y = y, a.dy = dy, a.dx = dx, a.dw = dw, a.bias = NULL, a.dbias = NULL;
    (void)bias;
    int peer = dn.ok && !cudnn_setup(&dn, &a);
    const double flops = 2.0 * (double)ny * (double)(a.c * a.r * a.s);
    for (int pass = 0; pass < 3; ++pass) {
      aq_dispatch_shape_t sh = aq_gpu_op_shape(names[pass], &a, aq_planes_grid(1));
      hsa_kernel_dispatch_packet_t p;
      memset(&p, 0, sizeof(p));
      p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
      p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
      p.workgroup_size_x = sh.workgroup[0], p.workgroup_size_y = sh.workgroup[1], p.workgroup_size_z = sh.workgroup[2];
      p.grid_size_x = sh.grid[0], p.grid_size_y = sh.grid[1], p.grid_size_z = sh.grid[2];
      p.kernel_object = k[pass].kernel_object;
      p.kernarg_address = &a;
      p.completion_signal.handle = done.handle;
      /* cuDNN: the fastest FMA-math algorithm, and its workspace. */
      int algo = -1;
      void *ws = NULL;
      size_t ws_size = 0;
      void *d[4];
      order(&dn, pass, d);
      if (peer) {
        cudnn_perf_t perf[16];
        int got = 0;
        if (dn.find[pass](dn.h, d[0], d[1], d[2], d[3], 16, &got, perf) == 0)
          for (int i = 0; i < got && algo < 0; ++i)
            if (perf[i].status == 0) algo = perf[i].algo;
        if (algo < 0 || dn.ws[pass](dn.h, d[0], d[1], d[2], d[3], algo, &ws_size)) algo = -1;
        if (algo >= 0 && ws_size && aq_memory_allocate(dev, ws_size, &ws) != AQ_OK) algo = -1;
        if (algo < 0) fprintf(stderr, "aq-bench conv: cuDNN has no %s algorithm here\n", passes[pass]);
      }
      const void *in1[3] = {x, w, x}, *in2[3] = {w, dy, dy};
      void *out[3] = {y, dx, dw};
      const float one = 1.0f, zero = 0.0f;
      double *ta = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
      for (int r = -1; r < reps; ++r) {
        CHECK(aq_signal_store(done, 1));
        uint64_t t0 = bench_now_ns();
        CHECK(aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL));
        CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
        if (r >= 0) ta[r] = (double)(bench_now_ns() - t0) / 1e9;
        if (algo >= 0) {
          t0 = bench_now_ns();
          if (dn.run[pass](dn.h, &one, d[0], (void *)in1[pass], d[1], (void *)in2[pass], d[2], algo, ws, ws_size, &zero,
                           d[3], peer_out))
            algo = -1, fprintf(stderr, "aq-bench conv: cuDNN %s failed\n", passes[pass]);
          sync();
          if (r >= 0) tb[r] = (double)(bench_now_ns() - t0) / 1e9;
        }
      }
      aq_status_t err = AQ_OK;
      aq_signal_get_error(done, 1, &err);
      if (err != AQ_OK) return fprintf(stderr, "aq-bench conv: %s failed: %s\n", names[pass], aq_last_error()), 1;
      /* The two results should agree. */
      double diff = -1;
      size_t count = pass == 0 ? ny : pass == 1 ? nx : nw;
      if (algo >= 0) {
        float *ha = malloc(count * 4), *hb = malloc(count * 4);
        CHECK(aq_memory_copy(ha, out[pass], count * 4));
        CHECK(aq_memory_copy(hb, peer_out, count * 4));
        double dmax = 0, cmax = 0;
        for (size_t i = 0; i < count; ++i) {
          double e = fabs((double)ha[i] - hb[i]);
          dmax = e > dmax || isnan(e) ? e : dmax, cmax = fabs(hb[i]) > cmax ? fabs(hb[i]) : cmax;
        }
        diff = dmax / (cmax > 0 ? cmax : 1);
        free(ha), free(hb);
      }
      double ga = flops / bench_median(ta, (size_t)reps) / 1e9, gb = algo >= 0 ? flops / bench_median(tb, (size_t)reps) / 1e9 : 0;
      for (int pe = algo >= 0 ? 1 : 0; pe >= 0; --pe) {
        bench_json_t j;
        bench_json_begin(&j, "conv", pe ? "cudnn" : "aquila");
        bench_json_str(&j, "agent", "gpu");
        bench_json_str(&j, "dtype", "f32");
        bench_json_int(&j, "n", a.n), bench_json_int(&j, "c", a.c), bench_json_int(&j, "h", a.h);
        bench_json_int(&j, "w", a.wd), bench_json_int(&j, "k", a.k), bench_json_int(&j, "r", a.r);
        bench_json_int(&j, "s", a.s), bench_json_int(&j, "stride", a.stride_h), bench_json_int(&j, "pad", a.pad_h);
        bench_json_str(&j, "pass", passes[pass]);
        bench_json_num(&j, "gflops", pe ? gb : ga);
        if (!pe && algo >= 0) bench_json_num(&j, "ratio", ga / gb), bench_json_num(&j, "max_rel_diff", diff);
        if (pe) bench_json_int(&j, "algo", algo);
        bench_json_int(&j, "reps", reps);
        bench_json_end(&j);
      }
      if (ws) aq_memory_free(ws);
      free(ta), free(tb);
    }
    aq_memory_free(x), aq_memory_free(w), aq_memory_free(y), aq_memory_free(dy), aq_memory_free(dx);
    aq_memory_free(dw), aq_memory_free(bias), aq_memory_free(peer_out);
    free(hx), free(hw), free(hy);
  }
  free(list);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
  return 0;
}
