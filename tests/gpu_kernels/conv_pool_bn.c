/* conv2d (forward, backward data, backward filter + bias), max / avg pooling
 * and batch norm on the GPU against plain C references, on awkward shapes
 * with stride, padding and dilation; each op both with its GPU launch shape
 * (aq_gpu_op_shape) and with the CPU grid the runtime's aq_gpu_shape gives
 * (one-thread blocks: the kernels' fallback paths). */
#include "gk.h"
#include "../conv_taps.h"

TestSuite(gpu_conv, .init = gk_setup, .fini = gk_teardown);

typedef struct { int64_t n, c, h, w, k, r, s; int32_t sh, sw, ph, pw, dh, dw; } conv_case_t;

static const conv_case_t conv_cases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1},
    {2, 3, 7, 9, 4, 3, 2, 2, 1, 1, 0, 1, 2},
    {3, 5, 33, 17, 7, 5, 5, 1, 1, 2, 2, 1, 1},
    {2, 4, 12, 10, 3, 3, 3, 3, 2, 2, 1, 2, 1},
    {1, 3, 9, 11, 2, 3, 3, 2, 2, 1, 1, 1, 1},  /* batch 1, stride 2, padding */
    {2, 2, 9, 9, 3, 7, 7, 1, 1, 3, 3, 1, 1},   /* 49 weights a filter: runs of the backward filter */
    {5, 1, 13, 13, 1, 1, 1, 1, 1, 0, 0, 1, 1}, /* 1x1 */
    {64, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, 1, 1}, /* the Fashion-MNIST CNN's (split backward filter) */
    {64, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 1, 1},
    {3, 64, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1}, /* enough filters for the plain backward filter */
    {2, 3, 70, 70, 2, 3, 3, 1, 1, 1, 1, 1, 1}, /* planes past the tiled passes' shared memory: the direct loops */
    {2, 2, 12, 12, 3, 3, 9, 1, 1, 4, 4, 1, 1}, /* 9 taps a filter row: the direct backward filter */
    {2, 3, 11, 10, 5, 3, 3, 2, 1, 1, 1, 2, 1}, /* row stride and dilation 2, columns 1: staged backward filter */
    {37, 2, 10, 12, 3, 5, 4, 1, 1, 1, 2, 1, 1}, /* 4 taps a row of 5 kept, an odd batch over several stages */
    {3, 1, 11, 9, 5, 3, 2, 2, 1, 1, 0, 2, 1},  /* one channel, 3 x 2 taps: the forward's taps in registers */
    {4, 40, 15, 13, 70, 3, 3, 1, 1, 1, 1, 1, 1}, /* tensor cores: edge tiles every way, depth 360 */
    {3, 19, 9, 11, 67, 3, 2, 2, 2, 1, 0, 1, 2}, /* tensor cores, strided: backward data's skipped phases */
    {2, 64, 20, 20, 65, 1, 1, 1, 1, 0, 0, 1, 1}, /* 1x1, 64 channels */
    /* Winograd's 3x3 at unit stride: tiles past odd planes' edges, channels past a step of 8, pads 0 and 2 */
    {3, 13, 9, 7, 37, 3, 3, 1, 1, 0, 0, 1, 1},
    {2, 9, 6, 5, 33, 3, 3, 1, 1, 2, 2, 1, 1},
    /* A strided backward data runs a GEMM a phase of dx (launch.h): */
    {2, 40, 7, 8, 66, 1, 1, 2, 2, 0, 0, 1, 1},   /* 1x1 stride 2: three phases without a tap, dx zero */
    {2, 33, 5, 4, 64, 5, 5, 3, 3, 2, 2, 1, 1},   /* stride 3 over 5 x 4: phases of 2, 1 rows and columns */
    {1, 36, 6, 7, 40, 3, 3, 2, 2, 1, 1, 3, 3},   /* dilation 3: every other tap a phase */
    {2, 34, 9, 9, 33, 4, 4, 4, 4, 0, 0, 2, 2},   /* stride 4, dilation 2: odd phases without a tap */
    {2, 3, 32, 32, 64, 16, 16, 16, 16, 0, 0, 1, 1}, /* a patch embedding: 256 phases, a tap each */
    /* The backward data by columns (launch.h: aq_conv2d_col_fits): dy's plane within 64, c r s of whole 16-byte chunks */
    {2, 64, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1},  /* stride 2 into 7 x 7: 40 filters, a stage cut short */
    {3, 36, 8, 8, 20, 3, 3, 1, 1, 1, 1, 1, 1},    /* 64 positions; 36 channels: a second tile of 4 */
    {1, 4, 13, 11, 16, 3, 3, 2, 2, 1, 1, 2, 2},   /* stride and dilation 2: 6 x 5 positions */
    {2, 8, 9, 9, 33, 2, 2, 2, 2, 0, 0, 1, 1},     /* four taps: row pairs past the filter's skipped */
};

/* The reference: sums in double of the fp32 values. */
typedef struct {
  const float *x, *w, *bias, *dy;
  double *y, *dx, *dw, *db;
} ref_t;
static void ref_tap(void *ctx, int64_t o, int64_t k, int64_t xi, int64_t wi) {
  ref_t *r = ctx;
  if (xi < 0) {
    r->y[o] += r->bias[k], r->db[k] += r->dy[o];
    return;
  }
  r->y[o] += (double)r->w[wi] * r->x[xi], r->dx[xi] += (double)r->w[wi] * r->dy[o], r->dw[wi] += (double)r->x[xi] * r->dy[o];
}

/* launch: 0 the scheduler's build and shape, 1 the CPU grid, 2 the split
 * backward filter, 3 the staged one, 4 the x3 builds (tensor cores) of
 * every pass, 5 the scheduler's at exact precision (FFMA), 6 the x3
 * builds with the thin backward filter, 7 with the one over clusters of 6,
 * 8 the FFMA builds, 9 the Winograd builds, 10 with the thin backward
 * filter, 11 and 12 the staged backward filter over clusters of 4 and 16,
 * 13 the backward data by columns (the scheduler's builds for the rest),
 * 14 and 15 the Winograd builds with the square and the warp backward
 * filter. */
static void conv_case(const conv_case_t *t, int launch) {
  aq_conv2d_args_t a = {0};
  a.precision = launch == 5 ? AQ_MATMUL_PRECISION_EXACT : AQ_MATMUL_PRECISION_DEFAULT;
  a.n = t->n, a.c = t->c, a.h = t->h, a.wd = t->w, a.k = t->k, a.r = t->r, a.s = t->s;
  a.stride_h = t->sh, a.stride_w = t->sw, a.pad_h = t->ph, a.pad_w = t->pw, a.dil_h = t->dh, a.dil_w = t->dw;
  a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w);
  const int64_t nx = a.n * a.c * a.h * a.wd, nw = a.k * a.c * a.r * a.s, ny = a.n * a.k * a.p * a.q;
  float *x = gk_random((size_t)nx, 1), *w = gk_random((size_t)nw, 2), *bias = gk_random((size_t)a.k, 3);
  float *y = gk_floats((size_t)ny), *dy = gk_random((size_t)ny, 4), *dx = gk_floats((size_t)nx);
  float *dw = gk_floats((size_t)nw), *db = gk_floats((size_t)a.k);
  float *ry = calloc((size_t)ny, 4), *rdx = calloc((size_t)nx, 4), *rdw = calloc((size_t)nw, 4), *rdb = calloc((size_t)a.k, 4);
  double *ay = calloc((size_t)ny, 8), *adx = calloc((size_t)nx, 8), *adw = calloc((size_t)nw, 8), *adb = calloc((size_t)a.k, 8);
  ref_t ref = {x, w, bias, dy, ay, adx, adw, adb};
  conv_taps(&a, ref_tap, &ref);
  for (int64_t i = 0; i < ny; ++i) ry[i] = (float)ay[i];
  for (int64_t i = 0; i < nx; ++i) rdx[i] = (float)adx[i];
  for (int64_t i = 0; i < nw; ++i) rdw[i] = (float)adw[i];
  for (int64_t i = 0; i < a.k; ++i) rdb[i] = (float)adb[i];
  a.x = x, a.w = w, a.bias = bias, a.y = y, a.dy = dy, a.dx = dx, a.dw = dw, a.dbias = db;
  const char *names[] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER};
  const char *x3[] = {AQ_KERNEL_CONV2D_X3, AQ_KERNEL_CONV2D_BWD_DATA_X3,
                      launch == 6   ? AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN
                      : launch == 7 ? AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6
                                    : AQ_KERNEL_CONV2D_BWD_FILTER_X3};
  if (launch == 8) x3[0] = AQ_KERNEL_CONV2D_FFMA, x3[1] = AQ_KERNEL_CONV2D_BWD_DATA_FFMA, x3[2] = AQ_KERNEL_CONV2D_BWD_FILTER_FFMA;
  if (launch >= 9) x3[0] = AQ_KERNEL_CONV2D_WINO, x3[1] = AQ_KERNEL_CONV2D_BWD_DATA_WINO, x3[2] = AQ_KERNEL_CONV2D_BWD_FILTER_WINO;
  if (launch == 10) x3[2] = AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN;
  if (launch == 14) x3[2] = AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC;
  if (launch == 15) x3[2] = AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP;
  const int64_t planes[] = {a.n * a.k, a.n * a.c, a.k * a.c};
  for (int i = 0; i < 3; ++i) {
    aq_dispatch_shape_t cpu = aq_planes_grid(planes[i]);
    if (launch == 1) gk_op(names[i], &a, cpu);
    else if (launch == 13 && i == 1)
      gk_run(AQ_KERNEL_CONV2D_BWD_DATA_COL, &a, aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_COL, &a, cpu));
    else if (launch == 4 || (launch >= 6 && launch <= 10) || launch >= 14) gk_run(x3[i], &a, aq_gpu_op_shape(x3[i], &a, cpu));
    else if (launch >= 2 && launch != 13 && i == 2) { /* a build on every case: where it does not apply, its fallback */
      const char *build = launch == 2    ? AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT
                          : launch == 11 ? AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4
                          : launch == 12 ? AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16
                                         : AQ_KERNEL_CONV2D_BWD_FILTER_STAGED;
      gk_run(build, &a, aq_gpu_op_shape(build, &a, cpu));
    }
    else gk_run(aq_gpu_op_kernel(names[i], &a), &a, aq_gpu_op_shape(names[i], &a, cpu)); /* as the scheduler */
  }
  gk_expect_close("conv2d y", y, ry, (size_t)ny, 1e-4f);
  gk_expect_close("conv2d dx", dx, rdx, (size_t)nx, 1e-4f);
  gk_expect_close("conv2d dw", dw, rdw, (size_t)nw, 1e-4f);
  gk_expect_close("conv2d dbias", db, rdb, (size_t)a.k, 1e-4f);
  aq_memory_free(x), aq_memory_free(w), aq_memory_free(bias), aq_memory_free(y), aq_memory_free(dy);
  aq_memory_free(dx), aq_memory_free(dw), aq_memory_free(db);
  free(ry), free(rdx), free(rdw), free(rdb), free(ay), free(adx), free(adw), free(adb);
}

Test(gpu_conv, conv2d_forward_and_backwards_stride_padding_dilation) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 0);
}
/* The backward filter's split build (sm_90 clusters) on every case, even
 * those the picker gives the plain build. */
Test(gpu_conv, conv2d_bwd_filter_split_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 2);
}
/* The staged build on every case: staged where its taps fit, else the
 * direct loops. */
Test(gpu_conv, conv2d_bwd_filter_staged_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 3);
}
/* And over clusters of 4 and of 16 (non-portable). */
Test(gpu_conv, conv2d_bwd_filter_staged_builds_of_other_clusters) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 11);
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 12);
}
/* Every pass on tensor cores (3xTF32) on every case, even those the picker
 * gives other builds: fp32 accuracy, the reference's 1e-4. */
Test(gpu_conv, conv2d_x3_builds) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 4);
}
/* The same with the thin backward filter (32-row tiles, four warp groups
 * on a slice's depth). */
Test(gpu_conv, conv2d_x3_thin_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 6);
}
/* And over clusters of 6. */
Test(gpu_conv, conv2d_x3_split6_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 7);
}
/* The FFMA builds of every pass on every case, even those the picker
 * gives other builds: exact fp32, the reference's 1e-4. */
Test(gpu_conv, conv2d_ffma_builds) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 8);
}
/* The Winograd builds of the forward and backward data on every case: F(2x2,
 * 3x3) where the filter is 3x3 at unit stride and dilation (edge tiles of
 * odd planes, every padding it takes), else the direct loops; the
 * reference's 1e-4. */
Test(gpu_conv, conv2d_wino_builds) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 9);
}
/* The same with the backward filter's thin build (16 x 32 tiles of dw),
 * and its square one (32 x 32 on tensor cores, in a group segment). */
Test(gpu_conv, conv2d_wino_thin_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 10);
}
Test(gpu_conv, conv2d_wino_square_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 14);
}
/* And its warp one (a warp an element, blocks of 512 threads). */
Test(gpu_conv, conv2d_wino_warp_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 15);
}
/* The tensor-core builds' tiles (16 or 32 filters by 32 channels over
 * clusters of 16 or 12) on odd shapes: batch 1, channels and filters past
 * whole tiles, planes of a few positions (one column: a step of 8 tiles
 * wraps eight rows), every padding. */
Test(gpu_conv, conv2d_wino_thin_odd_shapes) {
  static const conv_case_t odd[] = {
      {1, 33, 5, 6, 17, 3, 3, 1, 1, 1, 1, 1, 1},  {1, 32, 2, 3, 16, 3, 3, 1, 1, 1, 1, 1, 1},
      {2, 7, 1, 1, 5, 3, 3, 1, 1, 1, 1, 1, 1},    {1, 40, 3, 3, 48, 3, 3, 1, 1, 0, 0, 1, 1},
      {3, 65, 4, 9, 31, 3, 3, 1, 1, 2, 2, 1, 1},  {2, 48, 11, 13, 40, 3, 3, 1, 1, 1, 1, 1, 1},
      {1, 32, 9, 1, 16, 3, 3, 1, 1, 1, 1, 1, 1},  {5, 34, 6, 5, 18, 3, 3, 1, 1, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); ++i)
    conv_case(&odd[i], 10), conv_case(&odd[i], 14), conv_case(&odd[i], 15);
}
/* Their sums run in an order fixed by the shape: the same bits when run
 * again, and over a grid of one cluster, which walks every tile of dw in
 * turn. */
static void wino_repeats(const char *build, int split) {
  aq_conv2d_args_t a = {.n = 4, .c = 40, .h = 15, .wd = 13, .k = 70, .r = 3, .s = 3, .p = 15, .q = 13, .stride_h = 1,
                        .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * 9), ny = (size_t)(a.n * a.k * a.p * a.q);
  float *x = gk_random(nx, 31), *dy = gk_random(ny, 32), *out = gk_floats(nw + (size_t)a.k), *first = malloc((nw + (size_t)a.k) * 4);
  a.x = x, a.dy = dy, a.dw = out, a.dbias = out + nw;
  aq_dispatch_shape_t own = aq_gpu_op_shape(build, &a, aq_planes_grid(1)), one = own;
  one.grid[0] = (uint32_t)split * one.workgroup[0];
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < nw + (size_t)a.k; ++i) out[i] = NAN;
    gk_run(build, &a, r < 2 ? own : one);
    if (!r) memcpy(first, out, (nw + (size_t)a.k) * 4);
    else cr_assert_eq(memcmp(first, out, (nw + (size_t)a.k) * 4), 0, "run %d differs", r);
  }
  for (size_t i = 0; i < nw + (size_t)a.k; ++i) cr_assert(isfinite(first[i]), "[%zu] unwritten", i);
  aq_memory_free(x), aq_memory_free(dy), aq_memory_free(out);
  free(first);
}
Test(gpu_conv, conv2d_wino_thin_repeats_bit_for_bit) {
  wino_repeats(AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN, AQ_GPU_CONV2D_WINO_THIN_SPLIT);
  wino_repeats(AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC, AQ_GPU_CONV2D_WINO_TC_SPLIT);
  wino_repeats(AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP, AQ_GPU_CONV2D_WINO_WARP_SPLIT);
}
/* The backward data by columns on every case: where it does not apply
 * (planes of dy past 64 positions, ...), its fallback, the direct loops. A
 * w at an address of 4-byte alignment only (its rows' 16-byte copies
 * would fault) takes the direct loops too. */
Test(gpu_conv, conv2d_bwd_data_col_build) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 13);
  aq_conv2d_args_t a = {.n = 2, .c = 16, .h = 14, .wd = 14, .k = 24, .r = 3, .s = 3, .p = 7, .q = 7, .stride_h = 2,
                        .stride_w = 2, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  cr_assert(aq_conv2d_f32_col_fits(&a));
  const int64_t nx = a.n * a.c * a.h * a.wd, nw = a.k * a.c * a.r * a.s, ny = a.n * a.k * a.p * a.q;
  float *w = gk_random((size_t)nw + 1, 2), *dy = gk_random((size_t)ny, 4), *dx = gk_floats((size_t)nx);
  float *rdx = calloc((size_t)nx, 4);
  double *ay = calloc((size_t)ny, 8), *adx = calloc((size_t)nx, 8), *adw = calloc((size_t)nw, 8), *adb = calloc(24, 8);
  float *x = calloc((size_t)nx, 4), bias[24] = {0};
  ref_t ref = {x, w + 1, bias, dy, ay, adx, adw, adb};
  conv_taps(&a, ref_tap, &ref);
  for (int64_t i = 0; i < nx; ++i) rdx[i] = (float)adx[i];
  a.w = w + 1, a.dy = dy, a.dx = dx;
  gk_run(AQ_KERNEL_CONV2D_BWD_DATA_COL, &a, aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_COL, &a, aq_planes_grid(1)));
  gk_expect_close("conv2d dx (w unaligned)", dx, rdx, (size_t)nx, 1e-4f);
  aq_memory_free(w), aq_memory_free(dy), aq_memory_free(dx);
  free(rdx), free(ay), free(adx), free(adw), free(adb), free(x);
}
/* Bad kernargs, a precision neither default nor exact among them, leave
 * every fp32 build's outputs untouched. */
Test(gpu_conv, bad_kernargs_write_nothing) {
  float *in = gk_random(4096, 8), *out = gk_random(4096, 9), before[4096];
  memcpy(before, out, sizeof(before));
  aq_conv2d_args_t ok = {.x = in, .w = in, .y = out, .dy = in, .dx = out, .dw = out, .dbias = out + 2048, .n = 2,
                         .c = 40, .h = 6, .wd = 6, .k = 40, .r = 3, .s = 3, .p = 6, .q = 6, .stride_h = 1,
                         .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  const char *builds[] = {AQ_KERNEL_CONV2D_X3,   AQ_KERNEL_CONV2D_BWD_DATA_X3,   AQ_KERNEL_CONV2D_BWD_FILTER_X3,
                          AQ_KERNEL_CONV2D,      AQ_KERNEL_CONV2D_BWD_DATA,      AQ_KERNEL_CONV2D_BWD_FILTER,
                          AQ_KERNEL_CONV2D_FFMA, AQ_KERNEL_CONV2D_BWD_DATA_FFMA, AQ_KERNEL_CONV2D_BWD_FILTER_FFMA,
                          AQ_KERNEL_CONV2D_WINO, AQ_KERNEL_CONV2D_BWD_DATA_WINO, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN,
                          AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6, AQ_KERNEL_CONV2D_BWD_FILTER_WINO,
                          AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED,
                          AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16,
                          AQ_KERNEL_CONV2D_BWD_DATA_COL};
  for (int kind = 0; kind < 5; ++kind)
    for (int i = 0; i < (int)(sizeof(builds) / sizeof(builds[0])); ++i) {
      aq_conv2d_args_t a = ok;
      switch (kind) {
        case 0: a.precision = 2; break;
        case 1: a.precision = -1; break;
        case 2: a.stride_w = 0; break;
        case 3: a.c = -3; break;
        default: /* its output */
          strstr(builds[i], "bwd_filter") ? (a.dw = NULL) : strstr(builds[i], "bwd_data") ? (a.dx = NULL) : (a.y = NULL);
      }
      gk_run(builds[i], &a, aq_gpu_op_shape(builds[i], &a, aq_planes_grid(1)));
      cr_assert_eq(memcmp(before, out, sizeof(before)), 0, "%s wrote under bad kernarg %d", builds[i], kind);
    }
  aq_memory_free(in), aq_memory_free(out);
}

/* At exact precision the picker keeps FFMA: the implicit GEMMs of
 * conv2d_ffma.cu where they apply (the cases of 32 filters or more), else
 * the plain loops. */
Test(gpu_conv, conv2d_exact_precision) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 5);
}
/* Which passes run tiled in shared memory, and with what launch (no GPU
 * needed): the group segment a packet asks for is what the kernel checks. */
Test(conv_tiled_shape, small_planes_tiled_large_ones_direct) {
  aq_conv2d_args_t l1 = {.n = 256, .c = 1, .h = 28, .wd = 28, .k = 6, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                         .pad_h = 2, .pad_w = 2, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  aq_conv2d_args_t l2 = {.n = 256, .c = 6, .h = 14, .wd = 14, .k = 16, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                         .dil_h = 1, .dil_w = 1, .p = 10, .q = 10};
  const char *passes[] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT};
  for (int i = 0; i < 3; ++i) {
    uint32_t g1 = aq_gpu_op_group_segment(passes[i], &l1), g2 = aq_gpu_op_group_segment(passes[i], &l2);
    cr_assert(g1 > 0 && g1 <= AQ_GPU_CONV2D_TILED_BYTES, "%s on LeNet's first layer: %u bytes", passes[i], g1);
    cr_assert(g2 > 0 && g2 <= AQ_GPU_CONV2D_TILED_BYTES, "%s on LeNet's second layer: %u bytes", passes[i], g2);
  }
  /* the backward filter staged over clusters of 8, a block alone on its
   * SM (6 filters a cluster each, or 16 in pairs): two buffers of 11
   * (first layer: a 32 x 33 window and a 28 x 28 plane an image) or 14
   * images (6 windows of 14 x 14, two planes of 10 x 10), then the sums */
  cr_assert(aq_conv2d_filter_alone(&l1, AQ_GPU_CONV2D_BWD_FILTER_SPLIT));
  cr_assert(aq_conv2d_filter_alone(&l2, AQ_GPU_CONV2D_BWD_FILTER_SPLIT));
  cr_assert_eq(aq_conv2d_filter_images(&l1, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 11);
  cr_assert_eq(aq_conv2d_filter_images(&l2, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 14);
  const char *staged = AQ_KERNEL_CONV2D_BWD_FILTER_STAGED;
  cr_assert_eq(aq_gpu_op_group_segment(staged, &l1), (2 * 11 * (32 * 33 + 28 * 28) + 16 * 26 + 25 + 1) * 4);
  cr_assert_eq(aq_gpu_op_group_segment(staged, &l2), (2 * 14 * (6 * 14 * 14 + 2 * 100) + 12 * 26 + 2 * (150 + 1)) * 4);
  cr_assert(aq_gpu_op_group_segment(staged, &l2) <= AQ_GPU_CONV2D_FILTER_BYTES_ALONE);
  /* more filters than SMs for their blocks (8 channels: pairs at most):
   * two blocks an SM, the ordinary stages */
  aq_conv2d_args_t wide = l1;
  wide.c = 8, wide.k = 64;
  cr_assert(!aq_conv2d_filter_alone(&wide, AQ_GPU_CONV2D_BWD_FILTER_SPLIT));
  cr_assert(aq_gpu_op_group_segment(staged, &wide) <= AQ_GPU_CONV2D_FILTER_BYTES);
  cr_assert_eq(aq_conv2d_tiled_stride(&l1), 33, "a 32-float window row is padded off the banks");
  cr_assert_eq(aq_conv2d_tiled_stride(&l2), 14);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D, &l1, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 256 * AQ_GPU_BLOCK, "a block an image");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &l1), AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16);
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &l1, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], 16 * 32, "one channel: every warp on it");
  cr_assert_eq(s.grid[0], 6 * AQ_GPU_CONV2D_STAGED_MANY * 16 * 32, "a cluster of 16 a filter");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &l2, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], 12 * 32, "six channels of two filters: a warp each");
  cr_assert_eq(s.grid[0], 8 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * 12 * 32, "a cluster a pair of filters");
  aq_conv2d_args_t strided = l2;
  strided.stride_w = 2, strided.q = 5;
  cr_assert_eq(aq_conv2d_filter_bytes(&strided, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 0, "a column stride of 2: not staged");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &strided), AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT, "but tiled");
  aq_conv2d_args_t big = {.n = 32, .c = 64, .h = 56, .wd = 56, .k = 64, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                          .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 56, .q = 56};
  for (int i = 0; i < 3; ++i) cr_assert_eq(aq_gpu_op_group_segment(passes[i], &big), 0, "%s: not tiled", passes[i]);
  /* big's backward filter takes Winograd's thin build: a cluster of 16 a
   * 16 x 32 tile of dw (64 x 64 of 3x3: 8 of them, its 4 wide ones would
   * leave most SMs idle), then the bias gradient's 8 items of 8 channels,
   * a cluster's worth */
  const char *x3[] = {AQ_KERNEL_CONV2D_WINO, AQ_KERNEL_CONV2D_BWD_DATA_WINO, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN};
  const char *ops[] = {AQ_KERNEL_CONV2D, AQ_KERNEL_CONV2D_BWD_DATA, AQ_KERNEL_CONV2D_BWD_FILTER};
  /* and its 3x3 forward and backward data, at unit stride, Winograd's F(2x2, 3x3): 28 x 28 tiles of 2x2 an
   * image, 32 of them by 32 channels a block */
  const int64_t blocks[] = {32 * 28 * 28 / 32 * 2, 32 * 28 * 28 / 32 * 2, 8 * AQ_GPU_CONV2D_WINO_THIN_SPLIT};
  for (int i = 0; i < 3; ++i) {
    cr_assert_str_eq(aq_gpu_op_kernel(ops[i], &big), x3[i]);
    cr_assert_eq(aq_gpu_op_group_segment(x3[i], &big), 0);
    s = aq_gpu_op_shape(ops[i], &big, aq_planes_grid(1));
    cr_assert_eq(s.grid[0], blocks[i] * 256, "%s: %u threads", ops[i], s.grid[0]);
    cr_assert_eq(s.workgroup[0], 256);
    aq_dispatch_shape_t named = aq_gpu_op_shape(x3[i], &big, aq_planes_grid(1));
    cr_assert_eq(named.grid[0], s.grid[0], "the build named launches as the build picked");
  }
  big.dbias = (float *)8;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &big, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 9 * AQ_GPU_CONV2D_WINO_THIN_SPLIT * 256, "one more cluster for dbias");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_X3, &big, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 10 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * 256, "the wide build named: its 9 tiles and dbias");
  big.precision = AQ_MATMUL_PRECISION_EXACT;
  /* exact: the FFMA builds, a block a 128x64 tile; the backward filter's 5
   * tiles (dw 576 x 64) a cluster each, then dbias's */
  const char *ffma[] = {AQ_KERNEL_CONV2D_FFMA, AQ_KERNEL_CONV2D_BWD_DATA_FFMA, AQ_KERNEL_CONV2D_BWD_FILTER_FFMA};
  const int64_t ffma_blocks[] = {32 * 56 * 56 / 128, 32 * 56 * 56 / 128, 6 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT};
  for (int i = 0; i < 3; ++i) {
    cr_assert_str_eq(aq_gpu_op_kernel(ops[i], &big), ffma[i], "exact: FFMA");
    s = aq_gpu_op_shape(ops[i], &big, aq_planes_grid(1));
    cr_assert_eq(s.grid[0], ffma_blocks[i] * 256, "%s: %u threads", ffma[i], s.grid[0]);
    cr_assert_eq(aq_gpu_op_shape(ffma[i], &big, aq_planes_grid(1)).grid[0], s.grid[0], "named as picked");
    cr_assert_eq(aq_gpu_op_group_segment(ffma[i], &big), 0);
  }
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &l1), AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16,
                   "LeNet's keep their tiled and staged builds");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D, &l1), AQ_KERNEL_CONV2D);
  l2.s = 9, l2.q = 6;
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER, &l2), 0, "9 taps a row: more than a thread keeps");
  cr_assert(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D, &l2) > 0, "the forward still fits");
  l2.stride_h = 0;
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D, &l2), 0, "bad arguments run nothing tiled");
}

Test(gpu_conv, conv2d_under_the_cpu_grid) {
  for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); ++i) conv_case(&conv_cases[i], 1);
}

static void pool_case(int64_t planes, int64_t h, int64_t w, int32_t kh, int32_t kw, int32_t sh, int32_t sw,
                      int32_t ph, int32_t pw, int cpu_grid) {
  aq_pool_args_t a = {0};
  a.planes = planes, a.h = h, a.w = w, a.kh = kh, a.kw = kw, a.stride_h = sh, a.stride_w = sw, a.pad_h = ph, a.pad_w = pw;
  a.p = (h + 2 * ph - kh) / sh + 1, a.q = (w + 2 * pw - kw) / sw + 1;
  const int64_t nx = planes * h * w, ny = planes * a.p * a.q;
  float *x = gk_random((size_t)nx, 5), *y = gk_floats((size_t)ny), *dy = gk_random((size_t)ny, 6), *dx = gk_floats((size_t)nx);
  int32_t *arg = gk_alloc((size_t)ny, 4);
  a.x = x, a.y = y, a.argmax = arg, a.dy = dy, a.dx = dx;
  for (int max = 0; max < 2; ++max) {
    float *ry = calloc((size_t)ny, 4), *rdx = calloc((size_t)nx, 4);
    int32_t *rarg = calloc((size_t)ny, 4);
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t p = 0; p < a.p; ++p)
        for (int64_t q = 0; q < a.q; ++q) {
          float best = -3.402823466e38f, sum = 0;
          int32_t am = -1;
          for (int32_t i = 0; i < kh; ++i)
            for (int32_t j = 0; j < kw; ++j) {
              int64_t ih = p * sh - ph + i, iw = q * sw - pw + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              float v = x[pl * h * w + ih * w + iw];
              sum += v;
              if (v > best) best = v, am = (int32_t)(ih * w + iw);
            }
          int64_t o = (pl * a.p + p) * a.q + q;
          ry[o] = max ? (am >= 0 ? best : 0.0f) : sum / (float)(kh * kw), rarg[o] = am;
          for (int32_t i = 0; i < kh; ++i)
            for (int32_t j = 0; j < kw; ++j) {
              int64_t ih = p * sh - ph + i, iw = q * sw - pw + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              if (!max) rdx[pl * h * w + ih * w + iw] += dy[o] / (float)(kh * kw);
              else if (am == (int32_t)(ih * w + iw)) rdx[pl * h * w + am] += dy[o];
            }
        }
    const char *fwd = max ? AQ_KERNEL_MAX_POOL : AQ_KERNEL_AVG_POOL, *bwd = max ? AQ_KERNEL_MAX_POOL_BWD : AQ_KERNEL_AVG_POOL_BWD;
    if (cpu_grid) {
      gk_op(fwd, &a, aq_planes_grid(planes));
      gk_op(bwd, &a, aq_planes_grid(planes));
    } else {
      gk_run(fwd, &a, aq_gpu_op_shape(fwd, &a, aq_planes_grid(planes)));
      gk_run(bwd, &a, aq_gpu_op_shape(bwd, &a, aq_planes_grid(planes)));
    }
    gk_expect_close(fwd, y, ry, (size_t)ny, 1e-6f);
    if (max)
      for (int64_t i = 0; i < ny; ++i) cr_assert_eq(arg[i], rarg[i], "argmax[%ld]", (long)i);
    gk_expect_close(bwd, dx, rdx, (size_t)nx, 1e-5f);
    free(ry), free(rdx), free(rarg);
  }
  aq_memory_free(x), aq_memory_free(y), aq_memory_free(dy), aq_memory_free(dx), aq_memory_free(arg);
}

Test(gpu_conv, max_and_avg_pool_forward_backward) {
  for (int g = 0; g < 2; ++g) {
    pool_case(1, 1, 1, 1, 1, 1, 1, 0, 0, g);
    pool_case(6, 7, 9, 2, 2, 2, 2, 0, 0, g);
    pool_case(5, 33, 17, 3, 3, 2, 1, 1, 1, g);
    pool_case(3, 8, 8, 3, 2, 3, 2, 1, 1, g); /* overlapping and uneven windows */
    pool_case(2, 257, 7, 5, 3, 4, 2, 2, 1, g);
    pool_case(4, 28, 28, 2, 2, 2, 2, 0, 0, g); /* windows that tile the plane: a thread an output */
    pool_case(3, 9, 6, 3, 2, 3, 2, 0, 0, g);
  }
}

/* launch: 0 the whole passes with their GPU shapes, 1 under the CPU grid;
 * 2 the graph's two-kernel passes (stats, apply) over `slices` slices with
 * their GPU shapes, 3 under their CPU grid. */
static void bn_case(int64_t n, int64_t c, int64_t hw, int launch, int32_t slices) {
  const int64_t total = n * c * hw;
  float *x = gk_random((size_t)total, 7), *y = gk_floats((size_t)total), *dy = gk_random((size_t)total, 8);
  float *dx = gk_floats((size_t)total), *gamma = gk_random((size_t)c, 9), *beta = gk_random((size_t)c, 10);
  float *mean = gk_floats((size_t)c), *rstd = gk_floats((size_t)c), *rm = gk_random((size_t)c, 11), *rv = gk_floats((size_t)c);
  float *dg = gk_floats((size_t)c), *dbt = gk_floats((size_t)c);
  double *partial = gk_alloc((size_t)(c * slices * 2), sizeof(double));
  for (int64_t i = 0; i < total; ++i) x[i] = x[i] * 3.0f + 0.5f; /* a mean and a variance away from 0 and 1 */
  for (int64_t i = 0; i < c; ++i) rv[i] = 1.0f + 0.1f * (float)i;
  float *rm0 = malloc((size_t)c * 4), *rv0 = malloc((size_t)c * 4);
  memcpy(rm0, rm, (size_t)c * 4), memcpy(rv0, rv, (size_t)c * 4);
  aq_batch_norm_args_t a = {x, gamma, beta, y, mean, rstd, rm, rv, dy, dx, dg, dbt, n, c, hw, 1e-5f, 0.1f, 1, 0, NULL};
  const char *fwd = AQ_KERNEL_BATCH_NORM, *bwd = AQ_KERNEL_BATCH_NORM_BWD;
  aq_dispatch_shape_t cpu = aq_planes_grid(c);
  if (launch >= 2) {
    a.slices = slices, a.partial = partial, cpu = aq_planes_grid(c * slices);
    const char *k[4] = {AQ_KERNEL_BATCH_NORM_STATS, AQ_KERNEL_BATCH_NORM_APPLY, AQ_KERNEL_BATCH_NORM_BWD_STATS,
                        AQ_KERNEL_BATCH_NORM_BWD_APPLY};
    for (int i = 0; i < 4; ++i)
      if (launch == 3) gk_op(k[i], &a, cpu);
      else gk_run(k[i], &a, aq_gpu_op_shape(k[i], &a, cpu));
    fwd = AQ_KERNEL_BATCH_NORM_APPLY;
  } else if (launch == 1) {
    gk_op(fwd, &a, cpu), gk_op(bwd, &a, cpu);
  } else {
    gk_run(fwd, &a, aq_gpu_op_shape(fwd, &a, cpu)), gk_run(bwd, &a, aq_gpu_op_shape(bwd, &a, cpu));
  }
  const double m = (double)(n * hw);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0, sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < n * hw; ++i) s += x[((i / hw) * c + ch) * hw + i % hw];
    double mu = s / m;
    for (int64_t i = 0; i < n * hw; ++i) ss += pow(x[((i / hw) * c + ch) * hw + i % hw] - mu, 2);
    double var = ss / m, rs = 1.0 / sqrt(var + 1e-5);
    float want_rm = (float)(0.9 * rm0[ch] + 0.1 * mu), want_rv = (float)(0.9 * rv0[ch] + 0.1 * var * m / (m > 1 ? m - 1 : 1));
    gk_expect_close("bn mean", &mean[ch], &(float){(float)mu}, 1, 1e-5f);
    gk_expect_close("bn rstd", &rstd[ch], &(float){(float)rs}, 1, 1e-5f);
    gk_expect_close("bn running_mean", &rm[ch], &want_rm, 1, 1e-5f);
    gk_expect_close("bn running_var", &rv[ch], &want_rv, 1, 1e-5f);
    for (int64_t i = 0; i < n * hw; ++i) {
      int64_t o = ((i / hw) * c + ch) * hw + i % hw;
      double xh = (x[o] - mu) * rs;
      float want = (float)(xh * gamma[ch] + beta[ch]);
      gk_expect_close("bn y", &y[o], &want, 1, 1e-4f);
      sdy += dy[o], sdyx += dy[o] * xh;
    }
    gk_expect_close("bn dgamma", &dg[ch], &(float){(float)sdyx}, 1, 1e-4f);
    gk_expect_close("bn dbeta", &dbt[ch], &(float){(float)sdy}, 1, 1e-4f);
    for (int64_t i = 0; i < n * hw; ++i) {
      int64_t o = ((i / hw) * c + ch) * hw + i % hw;
      double xh = (x[o] - mu) * rs;
      float want = (float)(gamma[ch] * rs / m * (m * dy[o] - sdy - xh * sdyx));
      gk_expect_close("bn dx", &dx[o], &want, 1, 1e-3f);
    }
  }
  /* Inference uses the running statistics (now updated). */
  a.training = 0, a.partial = NULL;
  gk_run(fwd, &a, aq_gpu_op_shape(fwd, &a, cpu));
  for (int64_t i = 0; i < total; ++i) {
    int64_t ch = (i / hw) % c;
    float want = (float)((x[i] - rm[ch]) / sqrt(rv[ch] + 1e-5) * gamma[ch] + beta[ch]);
    gk_expect_close("bn inference y", &y[i], &want, 1, 1e-4f);
  }
  aq_memory_free(x), aq_memory_free(y), aq_memory_free(dy), aq_memory_free(dx), aq_memory_free(gamma);
  aq_memory_free(beta), aq_memory_free(mean), aq_memory_free(rstd), aq_memory_free(rm), aq_memory_free(rv);
  aq_memory_free(dg), aq_memory_free(dbt), aq_memory_free(partial);
  free(rm0), free(rv0);
}

Test(gpu_conv, batch_norm_training_inference_backward) {
  for (int g = 0; g < 2; ++g) {
    bn_case(1, 1, 1, g, 1);
    bn_case(7, 3, 33, g, 1);
    bn_case(4, 5, 257, g, 1);
    bn_case(32, 2, 1000, g, 1); /* more values than a block has threads, many times over */
  }
}

/* The graph's two-kernel passes: the slices it picks, slices that cut
 * planes, more slices than values, and the Fashion-MNIST CNN's shapes. */
Test(gpu_conv, batch_norm_in_slices) {
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 3, 7}, {7, 3, 33}, {4, 5, 257}, {32, 2, 1000}, {1, 1, 70001},
                               {256, 6, 784}, {256, 16, 196}};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
    int64_t n = shapes[i][0], c = shapes[i][1], hw = shapes[i][2];
    bn_case(n, c, hw, 2, aq_batch_norm_slices(n, c, hw));
    if (n * hw < 100000) {
      bn_case(n, c, hw, 3, aq_batch_norm_slices(n, c, hw));
      bn_case(n, c, hw, 2, 7);
      bn_case(n, c, hw, 3, (int32_t)(n * hw + 3));
    }
  }
}
