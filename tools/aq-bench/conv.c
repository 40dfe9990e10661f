/* aq-bench conv: conv2d forward, backward data and backward filter through a
 * CPU agent's queue against im2col + OpenBLAS (cblas_sgemm, same thread
 * count; col2im for the data gradient), in the same process on the same
 * buffers, the two results compared.
 * Options: --shapes N,C,H,W,K,R,S,STRIDE,PAD[;...] (default: LeNet's two
 *          convolutions and three ResNet-like layers)
 *          --reps R (default 5)
 *          --passes fwd,bwd_data,bwd_filter: which passes (default all three)
 *          --order interleaved|blocks: Aquila and the peer timed in turns
 *          (default), or each side's repetitions back to back after a pause
 *          that lets the other's threads go idle (as aq-bench gemm's)
 *          --agent cpu|gpu (gpu lines come from conv_gpu.c when built). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aquila/aquila.h"
#include "aquila/ops.h"
#include "bench.h"

__attribute__((weak)) int aq_bench_conv_gpu(int argc, char **argv);

#define CHECK(expr) BENCH_CHECK("conv", expr)

static const char *const passes[3] = {"fwd", "bwd_data", "bwd_filter"};
static const char *const kernels[3] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER};

/* ---- the peer: the textbook im2col + sgemm, an image at a time ------------- */

static void im2col(const aq_conv2d_args_t *a, const float *x, float *col) {
  for (int64_t c = 0; c < a->c; ++c)
    for (int64_t r = 0; r < a->r; ++r)
      for (int64_t s = 0; s < a->s; ++s, col += a->p * a->q)
        for (int64_t p = 0; p < a->p; ++p) {
          int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
          for (int64_t q = 0; q < a->q; ++q) {
            int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
            col[p * a->q + q] = ih >= 0 && ih < a->h && iw >= 0 && iw < a->wd ? x[(c * a->h + ih) * a->wd + iw] : 0.0f;
          }
        }
}

static void col2im(const aq_conv2d_args_t *a, const float *col, float *x) {
  memset(x, 0, (size_t)(a->c * a->h * a->wd) * sizeof(float));
  for (int64_t c = 0; c < a->c; ++c)
    for (int64_t r = 0; r < a->r; ++r)
      for (int64_t s = 0; s < a->s; ++s, col += a->p * a->q)
        for (int64_t p = 0; p < a->p; ++p) {
          int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
          if (ih < 0 || ih >= a->h) continue;
          for (int64_t q = 0; q < a->q; ++q) {
            int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
            if (iw >= 0 && iw < a->wd) x[(c * a->h + ih) * a->wd + iw] += col[p * a->q + q];
          }
        }
}

static void peer_pass(int pass, const aq_conv2d_args_t *a, float *col, float *out) {
  int pq = (int)(a->p * a->q), crs = (int)(a->c * a->r * a->s), k = (int)a->k;
  for (int64_t n = 0; n < a->n; ++n) {
    const float *x = a->x + n * a->c * a->h * a->wd, *dy = a->dy + n * a->k * pq;
    if (pass == 0) {
      im2col(a, x, col);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, pq, crs, 1.0f, a->w, crs, col, pq, 0.0f,
                  out + n * a->k * pq, pq);
    } else if (pass == 1) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, pq, k, 1.0f, a->w, crs, dy, pq, 0.0f, col, pq);
      col2im(a, col, out + n * a->c * a->h * a->wd);
    } else {
      im2col(a, x, col);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, crs, pq, 1.0f, dy, pq, col, pq, n ? 1.0f : 0.0f, out,
                  crs);
    }
  }
}

/* ---- aquila: one kernel dispatch packet, its grid from ops.h ---------------- */

static double run_aquila(aq_queue_t q, const aq_kernel_info_t *k, const aq_conv2d_args_t *a, int pass,
                         aq_signal_t done) {
  int64_t planes = pass == 0 ? a->n * a->k : pass == 1 ? a->n * a->c : a->k * a->c;
  aq_dispatch_shape_t sh = aq_planes_grid(planes);
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = sh.workgroup[0], p.workgroup_size_y = sh.workgroup[1], p.workgroup_size_z = sh.workgroup[2];
  p.grid_size_x = sh.grid[0], p.grid_size_y = sh.grid[1], p.grid_size_z = sh.grid[2];
  p.kernel_object = k->kernel_object;
  p.kernarg_address = (void *)a;
  p.completion_signal.handle = done.handle;
  CHECK(aq_signal_store(done, 1));
  uint64_t t0 = bench_now_ns();
  CHECK(aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL));
  CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
  double t = (double)(bench_now_ns() - t0) / 1e9;
  aq_status_t err = AQ_OK;
  aq_signal_get_error(done, 1, &err);
  if (err != AQ_OK) {
    fprintf(stderr, "aq-bench conv: %s failed: %s\n", k->name, aq_last_error());
    exit(1);
  }
  return t;
}


static const cli_option_t conv_options[] = {
    {"agent", 0, CLI_CHOICE, "cpu|gpu", "where: cpu (against im2col + OpenBLAS, default) or gpu (against cuDNN)", 0, 0},
    BENCH_REPS(5),
    {"shapes", 0, CLI_TEXT, "N,C,H,W,K,R,S,STRIDE,PAD;...", "the convolutions (default: LeNet's and ResNet-like)", 0, 0},
    {"dtype", 0, CLI_CHOICE, "f32|bf16|all", "gpu: which precisions (default all)", 0, 0},
    {"explain", 0, CLI_FLAG, NULL, "gpu: each pass's build and launch on stderr; nothing runs (no GPU needed)", 0, 0},
    {"precision", 0, CLI_TEXT, "default|exact", "gpu fp32: tensor cores at fp32 accuracy where a pass has them (default) or FFMA", 0, 0},
    {"passes", 0, CLI_TEXT, "fwd,bwd_data,bwd_filter", "cpu: the passes to time (default all three)", 0, 0},
    {"order", 0, CLI_CHOICE, "interleaved|blocks", "cpu: Aquila and the peer call by call (default), or each side's "
                                                   "calls together after a pause (the peer's threads spin after a call)", 0, 0},
};

/* The passes named in a comma-separated list, as bits (1 << pass); -1 if a
 * name is none of them. */
static int pass_mask(const char *list) {
  if (!list) return 7;
  int mask = 0;
  char *copy = strdup(list), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int pass = 0;
    while (pass < 3 && strcmp(t, passes[pass])) ++pass;
    if (pass == 3) {
      fprintf(stderr, "aq-bench conv: --passes: '%s' is not fwd, bwd_data or bwd_filter\n", t);
      mask = -1;
      break;
    }
    mask |= 1 << pass;
  }
  free(copy);
  return mask ? mask : -1;
}

int aq_bench_conv(int argc, char **argv) {
  BENCH_OPTIONS("conv", conv_options, argc, argv);
  const char *agent_kind = bench_arg("agent");
  if (agent_kind && !strcmp(agent_kind, "gpu")) {
    if (aq_bench_conv_gpu) return aq_bench_conv_gpu(argc, argv);
    fprintf(stderr, "aq-bench conv: this aq-bench has no GPU conv suite\n");
    return 2;
  }
  if (agent_kind && strcmp(agent_kind, "cpu")) {
    fprintf(stderr, "aq-bench conv: --agent must be cpu or gpu, not '%s'\n", agent_kind);
    return 2;
  }
  if (bench_arg("explain")) {
    fprintf(stderr, "aq-bench conv: --explain is for --agent gpu (the CPU pass is measured: AQ_CONV_ALGO)\n");
    return 2;
  }
  int reps = (int)bench_arg_int("reps", 5);
  if (reps < 1) reps = 1;
  const int mask = pass_mask(bench_arg("passes"));
  if (mask < 0) return 2;
  const char *order = bench_arg("order");
  const int blocks = order && !strcmp(order, "blocks");
  const char *shapes = bench_arg("shapes");
  if (!shapes)
    shapes = "64,1,28,28,6,5,5,1,2;64,6,14,14,16,5,5,1,0;8,64,56,56,64,3,3,1,1;8,128,28,28,128,3,3,1,1;"
             "8,256,14,14,256,3,3,2,1";
  if (bench_check_conv_shapes(shapes)) return 2;
  CHECK(aq_init(NULL));
  aq_agent_t agents[64], agent = {0};
  size_t count = 0;
  CHECK(aq_agents(agents, 64, &count));
  aq_agent_info_t info;
  int found = 0;
  for (size_t i = 0; i < count && !found; ++i) {
    CHECK(aq_agent_get_info(agents[i], &info));
    if (info.kind == AQ_AGENT_KIND_CPU) agent = agents[i], found = 1;
  }
  if (!found) return fprintf(stderr, "aq-bench conv: no CPU agent\n"), 1;
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cpu.so", &co));
  aq_kernel_info_t k[3];
  for (int i = 0; i < 3; ++i) CHECK(aq_code_object_find_kernel(co, kernels[i], agent, &k[i]));
  aq_queue_t q;
  CHECK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  CHECK(aq_signal_create(1, &done));
  int threads = (int)info.compute_units;
  openblas_set_num_threads(threads);

  char *list = strdup(shapes), *save = NULL;
  for (char *tok = strtok_r(list, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    aq_conv2d_args_t a;
    bench_parse_conv_shape(tok, &a); /* checked above */
    size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s),
           ny = (size_t)(a.n * a.k * a.p * a.q), ncol = (size_t)(a.c * a.r * a.s * a.p * a.q);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *y = malloc(ny * 4), *dy = malloc(ny * 4), *dx = malloc(nx * 4),
          *dw = malloc(nw * 4), *col = malloc(ncol * 4);
    size_t big = nx > ny ? nx : ny;
    float *peer = malloc((big > nw ? big : nw) * 4);
    bench_fill(x, nx, 1), bench_fill(w, nw, 2), bench_fill(dy, ny, 3);
    a.x = x, a.w = w, a.y = y, a.dy = dy, a.dx = dx, a.dw = dw;
    double flops = 2.0 * (double)ny * (double)(a.c * a.r * a.s);
    fprintf(stderr, "conv: %s\n", tok);
    for (int pass = 0; pass < 3; ++pass) {
      if (!(mask & 1 << pass)) continue;
      float *mine = pass == 0 ? y : pass == 1 ? dx : dw;
      size_t n_out = pass == 0 ? ny : pass == 1 ? nx : nw;
      double *ta = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
      /* A warm-up of each, then interleaved repetitions, so drift in the
       * machine's speed hits both alike. */
      const struct timespec pause = {0, 400 * 1000 * 1000};
      run_aquila(q, &k[pass], &a, pass, done);
      peer_pass(pass, &a, col, peer);
      if (blocks) nanosleep(&pause, NULL);
      for (int r = 0; r < reps; ++r) {
        ta[r] = run_aquila(q, &k[pass], &a, pass, done);
        if (blocks) continue;
        uint64_t t0 = bench_now_ns();
        peer_pass(pass, &a, col, peer);
        tb[r] = (double)(bench_now_ns() - t0) / 1e9;
      }
      if (blocks) nanosleep(&pause, NULL);
      for (int r = 0; blocks && r < reps; ++r) {
        uint64_t t0 = bench_now_ns();
        peer_pass(pass, &a, col, peer);
        tb[r] = (double)(bench_now_ns() - t0) / 1e9;
      }
      double dmax = 0, cmax = 0;
      for (size_t i = 0; i < n_out; ++i) {
        double e = fabs((double)mine[i] - peer[i]);
        dmax = e > dmax || isnan(e) ? e : dmax, cmax = fabs(peer[i]) > cmax ? fabs(peer[i]) : cmax;
      }
      double ga = flops / bench_median(ta, (size_t)reps) / 1e9, gb = flops / bench_median(tb, (size_t)reps) / 1e9;
      for (int pe = 1; pe >= 0; --pe) {
        bench_json_t j;
        bench_json_begin(&j, "conv", pe ? "openblas" : "aquila");
        bench_json_str(&j, "agent", "cpu");
        bench_json_str(&j, "dtype", "f32");
        bench_json_int(&j, "n", a.n), bench_json_int(&j, "c", a.c), bench_json_int(&j, "h", a.h);
        bench_json_int(&j, "w", a.wd), bench_json_int(&j, "k", a.k), bench_json_int(&j, "r", a.r);
        bench_json_int(&j, "s", a.s), bench_json_int(&j, "stride", a.stride_h), bench_json_int(&j, "pad", a.pad_h);
        bench_json_str(&j, "pass", passes[pass]);
        bench_json_int(&j, "threads", threads);
        bench_json_num(&j, "gflops", pe ? gb : ga);
        if (!pe) bench_json_num(&j, "ratio", ga / gb), bench_json_num(&j, "max_rel_diff", dmax / (cmax > 0 ? cmax : 1));
        if (pe) bench_json_str(&j, "method", "im2col+sgemm");
        if (blocks) bench_json_str(&j, "order", "blocks");
        bench_json_int(&j, "reps", reps);
        bench_json_end(&j);
      }
      free(ta), free(tb);
    }
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(col), free(peer);
  }
  free(list);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_code_object_unload(co);
  aq_shut_down();
  return 0;
}
