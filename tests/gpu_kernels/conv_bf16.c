/* The bf16 conv2d kernels (ops_gpu.h: x, w, dy in bf16; y, dx, dw, dbias in
 * fp32) on the GPU against a double-precision C reference computed on the
 * bf16 values themselves: stride, padding, dilation; 1, 3, 7, 33, 64 and
 * more channels on either side (both tile shapes, several tiles each way);
 * odd spatial sizes; batches of 1 and more; depths that are and are not
 * multiples of 8 (the vector and the element loads); each tile shape. Each case runs with
 * the GPU launch shape (aq_gpu_op_shape), with one block for all the tiles
 * (the grid-stride walk), and with the CPU grid that aq_gpu_shape turns
 * into blocks of other sizes (the exact direct path).
 *
 * Tolerance: a product of two bf16 values is exact in fp32, so the only
 * error is fp32 rounding in the sums, which grows like u sqrt(depth) mag in
 * practice (u = 2^-24, mag = the sum of the terms' magnitudes) and at most
 * like u depth mag. 1e-5 (1 + mag) is 168 u mag: above the first for every
 * depth here (at most 3920), and a wrong index or a lost tap, which moves
 * many outputs by a term's size (0.25 on average), is far above it. */
#include "gk.h"
#include "../conv_taps.h"

TestSuite(gpu_conv_bf16, .init = gk_setup, .fini = gk_teardown);

typedef struct { int64_t n, c, h, w, k, r, s; int32_t sh, sw, ph, pw, dh, dw; } bcase_t;

static const bcase_t cases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1},
    {2, 3, 7, 9, 4, 3, 2, 2, 1, 1, 0, 1, 2},
    {3, 7, 33, 17, 33, 5, 5, 1, 1, 2, 2, 1, 1},
    {2, 33, 13, 11, 7, 3, 3, 2, 2, 1, 1, 2, 1},   /* stride 2: dy feeds dx only where it divides */
    {2, 5, 12, 10, 9, 3, 3, 3, 2, 2, 1, 2, 1},
    {1, 64, 15, 15, 64, 3, 3, 1, 1, 1, 1, 1, 1},  /* c r s = 576: whole chunks of w */
    {2, 64, 16, 16, 130, 1, 1, 1, 1, 0, 0, 1, 1}, /* 130 filters: 128-wide tiles, two of them */
    {2, 130, 9, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1},    /* 130 input channels: the same for dx */
    {4, 3, 31, 29, 64, 7, 7, 2, 2, 3, 3, 1, 1},   /* a stem: 960 output positions, four row tiles */
    {5, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2, 1, 1},    /* LeNet's first layer: p q = 784, whole chunks of dy */
    {64, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 1, 1},  /* LeNet's second: the tiled split backward filter */
    /* Enough tiles for the big ones (aq_conv2d_bf16_gpu_tiles); the cases
     * above run 64x64 tiles but in the backward filter. */
    {4, 3, 96, 96, 16, 3, 3, 1, 1, 1, 1, 1, 1},   /* 256x64: forward and backward data */
    {4, 3, 96, 96, 16, 3, 3, 2, 2, 1, 1, 1, 1},   /* 256x64 backward data, stride 2 */
    {4, 16, 136, 136, 16, 3, 3, 1, 1, 1, 1, 1, 1}, /* 128x64: forward and backward data, their waves end better */
    {2, 4, 66, 66, 130, 3, 3, 1, 1, 1, 1, 1, 1},  /* 128x128 forward */
    {2, 130, 66, 66, 4, 3, 3, 2, 2, 1, 1, 1, 1},  /* 128x128 backward data, stride 2 */
    /* A strided backward data runs a GEMM a phase of dx (launch.h): */
    {2, 40, 7, 8, 66, 1, 1, 2, 2, 0, 0, 1, 1},    /* 1x1 stride 2: three phases without a tap, dx zero */
    {2, 33, 5, 4, 64, 5, 5, 3, 3, 2, 2, 1, 1},    /* stride 3 over 5 x 4: phases of 2, 1 rows and columns */
    {2, 34, 9, 9, 33, 4, 4, 4, 4, 0, 0, 2, 2},    /* stride 4, dilation 2: odd phases without a tap */
    {2, 3, 32, 32, 64, 16, 16, 16, 16, 0, 0, 1, 1}, /* a patch embedding: 256 phases, a tap each */
    /* The rows builds' (launch.h: aq_conv2d_bf16_rows_fits): three taps wide at unit stride, even rows. */
    {2, 40, 10, 12, 70, 3, 3, 1, 1, 1, 1, 1, 1},  /* 2 x 2 tiles, both cut short; 8-byte copies; 20 rows over 16 */
    {3, 33, 9, 16, 64, 5, 3, 1, 1, 2, 0, 1, 1},   /* 5 filter rows; no padding along q: 4-byte copies, even taps */
    {2, 64, 8, 64, 32, 3, 3, 1, 1, 1, 1, 1, 1},   /* q = 64: four steps a row, 16-byte copies */
    {2, 8, 6, 14, 8, 3, 3, 1, 1, 1, 2, 1, 1},     /* padding 2 along q (q = 16 > w) */
    {4, 32, 30, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1},  /* 120 rows: each rank's through the three stages */
    {1, 8, 4, 144, 40, 3, 3, 1, 1, 1, 1, 1, 1},   /* q = 144: rows of dy in chunks of 64, 64 and 16 */
    {2, 6, 5, 130, 16, 3, 3, 1, 1, 0, 1, 1, 1},   /* q = 130: chunks of 64, 64 and 2, 4-byte copies */
    /* The columns build's (launch.h: aq_conv2d_bf16_col_fits): dy's plane within 64, c r s whole chunks. */
    {2, 64, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1},  /* stride 2 into 7 x 7: 40 filters, a stage cut short */
    {3, 40, 8, 8, 72, 3, 3, 1, 1, 1, 1, 1, 1},    /* 64 positions; 40 channels: a second tile of 8 */
    {2, 16, 9, 9, 33, 2, 2, 2, 2, 0, 0, 1, 1},    /* four taps: two warps without rows; 16 channels */
    {1, 8, 13, 11, 16, 3, 3, 2, 2, 1, 1, 2, 2},   /* stride and dilation 2: 6 x 5 positions, dy's runs unaligned */
    /* Its backward filter's planes of dy in chunks of 64 (launch.h: aq_conv2d_bf16_col_filter_fits): */
    {2, 48, 14, 14, 80, 3, 3, 1, 1, 1, 1, 1, 1},  /* 196 positions: 64, 64, 64, 4; tiles cut short both ways */
    {3, 8, 11, 13, 24, 2, 3, 1, 1, 0, 1, 1, 1},   /* 10 x 13: 64, 64, 2, dy's runs unaligned; 2x3 taps */
    {1, 16, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1},   /* 256 positions: four whole chunks */
    /* The forward by planes' (launch.h: aq_conv2d_bf16_planes_fits): 3x3, x's plane within 256. */
    {2, 24, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1},    /* 7x7: x's runs unaligned, a stage cut short, 40 filters */
    {2, 16, 8, 7, 72, 3, 3, 2, 1, 1, 0, 2, 1},    /* stride and dilation 2 along p only: 3 x 5 positions */
    {2, 24, 14, 14, 72, 3, 3, 1, 1, 1, 1, 1, 1},  /* 14x14: y's plane in four tiles of 49 */
    {1, 40, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1},  /* x's plane of 256, y's in four tiles of 64 */
    {2, 16, 12, 10, 8, 3, 3, 1, 1, 2, 2, 1, 1},   /* padding 2: y's 14 x 12 over x's 12 x 10, three tiles of 56 */
    {2, 32, 7, 8, 66, 1, 1, 2, 2, 0, 0, 1, 1},    /* 1x1 at stride 2: positions of x no tap reaches */
    {1, 24, 16, 16, 8, 3, 3, 3, 3, 0, 1, 1, 1},   /* stride 3, padding along q only; 24 channels */
};

static uint16_t *bf16_random(size_t n, unsigned seed, double *vals) {
  float *f = gk_random(n, seed);
  uint16_t *b = gk_alloc(n, 2);
  for (size_t i = 0; i < n; ++i) vals[i] = aq_bf16_to_f32(b[i] = aq_f32_to_bf16(f[i]));
  aq_memory_free(f);
  return b;
}

static void expect(const char *what, const bcase_t *t, int shape, const float *got, const double *want,
                   const double *mag, size_t n) {
  for (size_t i = 0; i < n; ++i)
    cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1 + mag[i]),
              "%s[%zu] (n=%ld c=%ld h=%ld w=%ld k=%ld r=%ld s=%ld, launch %d): got %.8g want %.8g", what, i, (long)t->n,
              (long)t->c, (long)t->h, (long)t->w, (long)t->k, (long)t->r, (long)t->s, shape, got[i], want[i]);
}

static void fill(float *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = 1e30f; /* an output left unwritten fails */
}

/* The reference and its magnitudes (sums of |terms|, the tolerance's
 * scale): y, dx, dw, dbias. */
typedef struct {
  const double *x, *w;
  const float *bias;
  const double *dy;
  double *sum[4], *mag[4];
} ref_t;
static void ref_tap(void *ctx, int64_t o, int64_t k, int64_t xi, int64_t wi) {
  ref_t *r = ctx;
  if (xi < 0) {
    r->sum[0][o] += r->bias[k], r->mag[0][o] += fabs(r->bias[k]);
    r->sum[3][k] += r->dy[o], r->mag[3][k] += fabs(r->dy[o]);
    return;
  }
  const double t[3] = {r->w[wi] * r->x[xi], r->w[wi] * r->dy[o], r->x[xi] * r->dy[o]};
  const int64_t at[3] = {o, xi, wi};
  for (int i = 0; i < 3; ++i) r->sum[i][at[i]] += t[i], r->mag[i][at[i]] += fabs(t[i]);
}

static void bf16_case(const bcase_t *t) {
  aq_conv2d_args_t a = {0};
  a.n = t->n, a.c = t->c, a.h = t->h, a.wd = t->w, a.k = t->k, a.r = t->r, a.s = t->s;
  a.stride_h = t->sh, a.stride_w = t->sw, a.pad_h = t->ph, a.pad_w = t->pw, a.dil_h = t->dh, a.dil_w = t->dw;
  a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w);
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s),
               ny = (size_t)(a.n * a.k * a.p * a.q), nk = (size_t)a.k;
  double *vx = calloc(nx, 8), *vw = calloc(nw, 8), *vdy = calloc(ny, 8);
  uint16_t *x = bf16_random(nx, 1, vx), *w = bf16_random(nw, 2, vw), *dy = bf16_random(ny, 4, vdy);
  float *bias = gk_random(nk, 3), *y = gk_floats(ny), *dx = gk_floats(nx), *dw = gk_floats(nw), *db = gk_floats(nk);
  double *ry = calloc(ny, 8), *my = calloc(ny, 8), *rdx = calloc(nx, 8), *mdx = calloc(nx, 8);
  double *rdw = calloc(nw, 8), *mdw = calloc(nw, 8), *rdb = calloc(nk, 8), *mdb = calloc(nk, 8);
  ref_t ref = {vx, vw, bias, vdy, {ry, rdx, rdw, rdb}, {my, mdx, mdw, mdb}};
  conv_taps(&a, ref_tap, &ref);
  a.x = (const float *)x, a.w = (const float *)w, a.bias = bias, a.y = y, a.dy = (const float *)dy;
  a.dx = dx, a.dw = dw, a.dbias = db;
  const char *names[] = {AQ_KERNEL_CONV2D_BF16, AQ_KERNEL_CONV2D_BWD_DATA_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16};
  const int64_t planes[] = {a.n * a.k, a.n * a.c, a.k * a.c};
  /* 0: the tensor-core tiles; 1: one block; 2: the CPU grid; 3: as the
   * scheduler launches (the tiled split backward filter where it fits);
   * 4: the backward filter's tiles split over clusters of 8, every case;
   * 5: over clusters of 6; 6, 7: the staged backward filter over clusters
   * of 4 and 16, every case (the direct loops where it does not apply);
   * 8: the Winograd forward and backward data, every case (the same);
   * 9: the forward's tiles split over clusters of 2, every case; 10: the
   * backward filter's over clusters of 16; 11, 12: the rows builds over
   * clusters of 16 and 8, every case (the direct loops where they do not
   * apply); 13: the rows build over one cluster, which walks every tile
   * and the bias gradient's items in turn; 14: the rows build in chunks
   * of q (one chunk where q <= 64), every case; 15, 16: the backward data
   * by columns with its own grid and with one block, every case; 17, 18:
   * the backward filter by columns with its own grid and with one
   * cluster (every tile and bias item in turn), every case; 19, 20: the
   * forward's flat tiles split over clusters of 2 with its own grid and
   * with one cluster (every tile in turn), every case; 21: the same over
   * clusters of 4; 22, 23: the forward by planes with its own grid and
   * with one block, every case; 24, 25: the backward filter by columns
   * over clusters of 3 with its own grid and with one cluster; 26, 27:
   * the same over clusters of 2 */
  for (int shape = 0; shape < 28; ++shape) {
    fill(y, ny), fill(dx, nx), fill(dw, nw), fill(db, nk);
    for (int i = 0; i < 3; ++i) {
      aq_dispatch_shape_t cpu = aq_planes_grid(planes[i]), one = {{AQ_GPU_CONV2D_BF16_THREADS, 1, 1}, {AQ_GPU_CONV2D_BF16_THREADS, 1, 1}};
      const char *build = aq_gpu_op_kernel(names[i], &a);
      if (shape == 0) gk_run(names[i], &a, aq_conv2d_bf16_gpu_shape(&a, i));
      else if (shape == 1) gk_run(names[i], &a, one);
      else if (shape == 2) gk_op(names[i], &a, cpu);
      else if (shape == 4 && i == 2)
        gk_run(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, &a, aq_conv2d_bf16_filter_split_shape(&a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT));
      else if (shape == 5 && i == 2)
        gk_run(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6, &a, aq_conv2d_bf16_filter_split_shape(&a, AQ_GPU_CONV2D_SPLIT6));
      else if (shape == 10 && i == 2)
        gk_run(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16, &a,
               aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16, &a, cpu));
      else if (shape >= 11 && shape < 15 && i == 2) {
        const char *rows = shape == 12   ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8
                           : shape == 14 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE
                                         : AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS;
        aq_dispatch_shape_t own = aq_gpu_op_shape(rows, &a, cpu);
        if (shape == 13) own.grid[0] = 16 * own.workgroup[0];
        gk_run(rows, &a, own);
      } else if (shape >= 24 && i == 2) {
        const char *col = shape < 26 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3 : AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2;
        aq_dispatch_shape_t own = aq_gpu_op_shape(col, &a, cpu);
        if (shape == 25 || shape == 27)
          own.grid[0] = (shape == 25 ? AQ_GPU_CONV2D_COL_FILTER_SPLIT3 : AQ_GPU_CONV2D_COL_FILTER_SPLIT2) * own.workgroup[0];
        gk_run(col, &a, own);
      } else if (shape >= 17 && shape < 19 && i == 2) {
        aq_dispatch_shape_t own = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a, cpu);
        if (shape == 18) own.grid[0] = AQ_GPU_CONV2D_COL_FILTER_SPLIT * own.workgroup[0];
        gk_run(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a, own);
      } else if (shape >= 15 && shape < 17 && i == 1) {
        aq_dispatch_shape_t own = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, &a, cpu);
        if (shape == 16) own.grid[0] = own.workgroup[0];
        gk_run(AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, &a, own);
      } else if (shape >= 22 && i == 0) {
        aq_dispatch_shape_t own = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16_PLANES, &a, cpu);
        if (shape == 23) own.grid[0] = own.workgroup[0];
        gk_run(AQ_KERNEL_CONV2D_BF16_PLANES, &a, own);
      } else if (shape >= 19 && i == 0) {
        const char *flat = shape == 21 ? AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4 : AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT;
        aq_dispatch_shape_t own = aq_gpu_op_shape(flat, &a, cpu);
        if (shape == 20) own.grid[0] = AQ_GPU_CONV2D_BF16_FWD_SPLIT * own.workgroup[0];
        gk_run(flat, &a, own);
      } else if (shape == 9 && i == 0)
        gk_run(AQ_KERNEL_CONV2D_BF16_SPLIT, &a, aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16_SPLIT, &a, cpu));
      else if (shape == 8 && i < 2) {
        const char *wino = i ? AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO : AQ_KERNEL_CONV2D_BF16_WINO;
        gk_run(wino, &a, aq_gpu_op_shape(wino, &a, cpu));
      } else if (shape >= 6 && shape < 8 && i == 2) {
        const char *staged = shape == 6 ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4 : AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16;
        gk_run(staged, &a, aq_gpu_op_shape(staged, &a, cpu));
      } else gk_run(build, &a, aq_gpu_op_shape(names[i], &a, cpu));
    }
    expect("y", t, shape, y, ry, my, ny);
    expect("dx", t, shape, dx, rdx, mdx, nx);
    expect("dw", t, shape, dw, rdw, mdw, nw);
    expect("dbias", t, shape, db, rdb, mdb, nk);
  }
  aq_memory_free(x), aq_memory_free(w), aq_memory_free(dy), aq_memory_free(bias), aq_memory_free(y);
  aq_memory_free(dx), aq_memory_free(dw), aq_memory_free(db);
  free(vx), free(vw), free(vdy), free(ry), free(my), free(rdx), free(mdx), free(rdw), free(mdw), free(rdb), free(mdb);
}

Test(gpu_conv_bf16, forward_and_backwards_against_bf16_reference) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) bf16_case(&cases[i]);
}

/* Without bias in the forward and without dbias in the backward filter:
 * y has no bias added, and nothing is written through the NULL. */
Test(gpu_conv_bf16, no_bias) {
  const bcase_t t = {2, 7, 11, 9, 33, 3, 3, 1, 1, 1, 1, 1, 1};
  aq_conv2d_args_t a = {0};
  a.n = t.n, a.c = t.c, a.h = t.h, a.wd = t.w, a.k = t.k, a.r = t.r, a.s = t.s;
  a.stride_h = a.stride_w = a.dil_h = a.dil_w = 1, a.pad_h = a.pad_w = 1;
  a.p = aq_conv_out(a.h, a.r, 1, 1, 1), a.q = aq_conv_out(a.wd, a.s, 1, 1, 1);
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s), ny = (size_t)(a.n * a.k * a.p * a.q);
  double *vx = calloc(nx, 8), *vw = calloc(nw, 8), *vdy = calloc(ny, 8);
  uint16_t *x = bf16_random(nx, 5, vx), *w = bf16_random(nw, 6, vw), *dy = bf16_random(ny, 7, vdy);
  float *y = gk_floats(ny), *dw = gk_floats(nw);
  a.x = (const float *)x, a.w = (const float *)w, a.y = y, a.dy = (const float *)dy, a.dw = dw;
  gk_run(AQ_KERNEL_CONV2D_BF16, &a, aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)));
  gk_run(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), &a, /* the build its shape is for */
         aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1)));
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t k = 0; k < a.k; ++k)
      for (int64_t p = 0; p < a.p; ++p)
        for (int64_t q = 0; q < a.q; ++q) {
          double s = 0, m = 0;
          for (int64_t c = 0; c < a.c; ++c)
            for (int64_t r = 0; r < a.r; ++r)
              for (int64_t u = 0; u < a.s; ++u) {
                int64_t ih = p - 1 + r, iw = q - 1 + u;
                if (ih < 0 || ih >= a.h || iw < 0 || iw >= a.wd) continue;
                double v = vw[((k * a.c + c) * a.r + r) * a.s + u] * vx[((n * a.c + c) * a.h + ih) * a.wd + iw];
                s += v, m += fabs(v);
              }
          const int64_t o = ((n * a.k + k) * a.p + p) * a.q + q;
          cr_assert(fabs(y[o] - s) <= 1e-5 * (1 + m), "y[%ld] = %.8g, want %.8g", (long)o, y[o], s);
        }
  for (size_t i = 0; i < nw; ++i) cr_assert(isfinite(dw[i]), "dw[%zu] written", i);
  aq_memory_free(x), aq_memory_free(w), aq_memory_free(dy), aq_memory_free(y), aq_memory_free(dw);
  free(vx), free(vw), free(vdy);
}

/* The rows builds copy whole 4-, 8- or 16-byte pieces of x's and dy's rows:
 * tensors at addresses of 2-byte alignment only take the direct loops, as
 * right (a cp.async from them would fault). */
Test(gpu_conv_bf16, rows_builds_on_unaligned_tensors) {
  aq_conv2d_args_t a = {.n = 2, .c = 8, .h = 8, .wd = 8, .k = 16, .r = 3, .s = 3, .p = 8, .q = 8, .stride_h = 1,
                        .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  cr_assert(aq_conv2d_bf16_rows_fits(&a));
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s), ny = (size_t)(a.n * a.k * a.p * a.q);
  double *vx = calloc(nx + 1, 8), *vdy = calloc(ny + 1, 8), *rdw = calloc(nw, 8), *mdw = calloc(nw, 8);
  double *ry = calloc(ny, 8), *my = calloc(ny, 8), *rdx = calloc(nx, 8), *mdx = calloc(nx, 8), *rdb = calloc(16, 8),
         *mdb = calloc(16, 8), *vw = calloc(nw, 8);
  uint16_t *x = bf16_random(nx + 1, 11, vx), *dy = bf16_random(ny + 1, 12, vdy);
  float *dw = gk_floats(nw), bias[16] = {0}; /* the reference's forward terms: no bias, zero filters */
  ref_t ref = {vx + 1, vw, bias, vdy + 1, {ry, rdx, rdw, rdb}, {my, mdx, mdw, mdb}};
  conv_taps(&a, ref_tap, &ref);
  a.x = (const float *)(x + 1), a.dy = (const float *)(dy + 1), a.dw = dw;
  const char *builds[] = {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8,
                          AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE};
  const bcase_t t = {a.n, a.c, a.h, a.wd, a.k, a.r, a.s, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 3; ++b) {
    fill(dw, nw);
    gk_run(builds[b], &a, aq_gpu_op_shape(builds[b], &a, aq_planes_grid(1)));
    expect("dw", &t, b, dw, rdw, mdw, nw);
  }
  aq_memory_free(x), aq_memory_free(dy), aq_memory_free(dw);
  free(vx), free(vdy), free(rdw), free(mdw), free(ry), free(my), free(rdx), free(mdx), free(rdb), free(mdb), free(vw);
}

/* The columns builds copy 16-byte pieces of w's rows and of x's and dy's
 * runs: a tensor at an address of 2-byte alignment only takes the direct
 * loops. */
Test(gpu_conv_bf16, col_build_on_unaligned_tensors) {
  aq_conv2d_args_t a = {.n = 2, .c = 16, .h = 14, .wd = 14, .k = 24, .r = 3, .s = 3, .p = 7, .q = 7, .stride_h = 2,
                        .stride_w = 2, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  cr_assert(aq_conv2d_bf16_col_fits(&a));
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s), ny = (size_t)(a.n * a.k * a.p * a.q);
  double *vx = calloc(nx, 8), *vdy = calloc(ny + 1, 8), *vw = calloc(nw + 1, 8), *rdw = calloc(nw, 8), *mdw = calloc(nw, 8);
  double *ry = calloc(ny, 8), *my = calloc(ny, 8), *rdx = calloc(nx, 8), *mdx = calloc(nx, 8), *rdb = calloc(24, 8),
         *mdb = calloc(24, 8);
  uint16_t *w = bf16_random(nw + 1, 13, vw), *dy = bf16_random(ny + 1, 14, vdy);
  float *dx = gk_floats(nx), bias[24] = {0};
  const bcase_t t = {a.n, a.c, a.h, a.wd, a.k, a.r, a.s, 2, 2, 1, 1, 1, 1};
  for (int b = 0; b < 2; ++b) { /* w, then dy, one element past its allocation's start */
    ref_t ref = {vx, vw + (b == 0), bias, vdy + (b == 1), {ry, rdx, rdw, rdb}, {my, mdx, mdw, mdb}};
    memset(rdx, 0, nx * 8), memset(mdx, 0, nx * 8);
    conv_taps(&a, ref_tap, &ref);
    a.w = (const float *)(w + (b == 0)), a.dy = (const float *)(dy + (b == 1)), a.dx = dx;
    fill(dx, nx);
    gk_run(AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, &a, aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, &a, aq_planes_grid(1)));
    expect("dx", &t, b, dx, rdx, mdx, nx);
  }
  /* the backward filter's: dy, then x, one element past its start */
  uint16_t *x = bf16_random(nx + 1, 15, vx = realloc(vx, (nx + 1) * 8));
  float *dw = gk_floats(nw);
  for (int b = 0; b < 2; ++b) {
    ref_t ref = {vx + (b == 1), vw, bias, vdy + (b == 0), {ry, rdx, rdw, rdb}, {my, mdx, mdw, mdb}};
    memset(rdw, 0, nw * 8), memset(mdw, 0, nw * 8);
    conv_taps(&a, ref_tap, &ref);
    a.w = (const float *)w, a.x = (const float *)(x + (b == 1)), a.dy = (const float *)(dy + (b == 0)), a.dw = dw;
    fill(dw, nw);
    gk_run(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a,
           aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a, aq_planes_grid(1)));
    expect("dw", &t, b, dw, rdw, mdw, nw);
  }
  aq_memory_free(x), aq_memory_free(dw);
  aq_memory_free(w), aq_memory_free(dy), aq_memory_free(dx);
  free(vx), free(vdy), free(vw), free(rdw), free(mdw), free(ry), free(my), free(rdx), free(mdx), free(rdb), free(mdb);
}

/* The columns and cluster-split builds sum in an order fixed by the shape:
 * the same inputs give the same bits when run again, and over a grid of
 * one cluster (or block), which walks every tile in turn. */
Test(gpu_conv_bf16, split_and_columns_builds_repeat_bit_for_bit) {
  aq_conv2d_args_t a = {.n = 4, .c = 64, .h = 14, .wd = 14, .k = 64, .r = 3, .s = 3, .p = 7, .q = 7, .stride_h = 2,
                        .stride_w = 2, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  const size_t nx = (size_t)(a.n * a.c * a.h * a.wd), nw = (size_t)(a.k * a.c * a.r * a.s), ny = (size_t)(a.n * a.k * a.p * a.q);
  double *vx = calloc(nx, 8), *vw = calloc(nw, 8), *vdy = calloc(ny, 8);
  uint16_t *x = bf16_random(nx, 21, vx), *w = bf16_random(nw, 22, vw), *dy = bf16_random(ny, 23, vdy);
  float *out = gk_floats(nx + nw + 64), *first = malloc((nx + nw + 64) * 4);
  a.x = (const float *)x, a.w = (const float *)w, a.dy = (const float *)dy;
  a.dx = out, a.dw = out + nx, a.dbias = out + nx + nw;
  const struct { const char *build; int pass, split; } runs[] = {
      {AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, 1, 1},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, 2, AQ_GPU_CONV2D_COL_FILTER_SPLIT},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3, 2, AQ_GPU_CONV2D_COL_FILTER_SPLIT3},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2, 2, AQ_GPU_CONV2D_COL_FILTER_SPLIT2},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, 2, AQ_GPU_CONV2D_BWD_FILTER_SPLIT},
      {AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16, 2, AQ_GPU_CONV2D_SPLIT16},
  };
  for (size_t b = 0; b < sizeof(runs) / sizeof(runs[0]); ++b) {
    const size_t at = runs[b].pass == 1 ? 0 : nx, n = runs[b].pass == 1 ? nx : nw + (size_t)a.k;
    aq_dispatch_shape_t own = aq_gpu_op_shape(runs[b].build, &a, aq_planes_grid(1)), one = own;
    one.grid[0] = (uint32_t)runs[b].split * one.workgroup[0];
    for (int r = 0; r < 3; ++r) {
      fill(out + at, n);
      gk_run(runs[b].build, &a, r < 2 ? own : one);
      if (!r) memcpy(first, out + at, n * 4);
      else cr_assert_eq(memcmp(first, out + at, n * 4), 0, "%s: run %d differs", runs[b].build, r);
    }
    for (size_t i = 0; i < n; ++i) cr_assert(isfinite(first[i]), "%s wrote [%zu]", runs[b].build, i);
  }
  aq_memory_free(x), aq_memory_free(w), aq_memory_free(dy), aq_memory_free(out);
  free(first), free(vx), free(vw), free(vdy);
}

/* Kernargs the kernels refuse (as the fp32 kernels and the CPU kernel do):
 * nothing is written. */
Test(gpu_conv_bf16, bad_kernargs_write_nothing) {
  uint16_t *in = gk_alloc(4096, 2);
  memset(in, 0, 4096 * 2);
  float *out = gk_random(4096, 9), before[4096];
  memcpy(before, out, sizeof(before));
  aq_conv2d_args_t ok = {.x = (const float *)in, .w = (const float *)in, .y = out, .dy = (const float *)in,
                         .dx = out, .dw = out, .dbias = out + 2048, .n = 2, .c = 3, .h = 8, .wd = 8, .k = 4, .r = 3,
                         .s = 3, .p = 8, .q = 8, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
  /* the ops as the scheduler runs them (the rule's build, the op's
   * shape), then every other build by name */
  const char *names[] = {AQ_KERNEL_CONV2D_BF16,
                         AQ_KERNEL_CONV2D_BWD_DATA_BF16,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16,
                         AQ_KERNEL_CONV2D_BF16_WINO,
                         AQ_KERNEL_CONV2D_BF16_SPLIT,
                         AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT,
                         AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4,
                         AQ_KERNEL_CONV2D_BF16_PLANES,
                         AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE,
                         AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL,
                         AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL};
  for (int kind = 0; kind < 8; ++kind)
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); ++i) {
      const int pass = strstr(names[i], "bwd_filter") ? 2 : strstr(names[i], "bwd_data") ? 1 : 0;
      aq_conv2d_args_t a = ok;
      switch (kind) {
        case 0: a.n = -1; break;
        case 1: a.k = 0; break;
        case 2: a.stride_h = 0; break;
        case 3: a.dil_w = 0; break;
        case 4: a.pad_h = -1; break;
        case 5: a.q = 0; break;
        case 6: pass == 1 ? (a.dy = NULL) : (a.x = NULL); break;  /* an input the pass reads */
        default: pass == 0 ? (a.y = NULL) : pass == 1 ? (a.dx = NULL) : (a.dw = NULL); /* its output */
      }
      const char *build = i < 3 ? aq_gpu_op_kernel(names[i], &a) : names[i];
      gk_run(build, &a, aq_gpu_op_shape(names[i], &a, aq_planes_grid(1)));
      cr_assert_eq(memcmp(before, out, sizeof(before)), 0, "%s wrote under bad kernarg %d", build, kind);
    }
  aq_memory_free(in), aq_memory_free(out);
}

/* The launch shape counts the tiles each pass runs (no GPU needed). */
Test(conv_bf16_shape, a_block_a_tile) {
  const uint32_t T = AQ_GPU_CONV2D_BF16_THREADS;
  aq_conv2d_args_t big = {.n = 32, .c = 64, .h = 56, .wd = 56, .k = 128, .r = 3, .s = 3, .p = 56, .q = 56};
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &big, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], T);
  cr_assert_eq(s.grid[0], 784 * T, "100352 rows x 128 columns: 784 tiles of 128x128");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &big, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 784 * T, "100352 rows x 64 columns: 784 tiles of 128x64 (392 of 256x64 end half a wave)");
  aq_conv2d_args_t rows = {.n = 4, .c = 3, .h = 96, .wd = 96, .k = 16, .r = 3, .s = 3, .p = 96, .q = 96};
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &rows, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 144 * T, "36864 rows x 16 columns: 144 tiles of 256x64 (one wave; 288 of 128x64 take two)");
  aq_conv2d_args_t small = {.n = 2, .c = 64, .h = 16, .wd = 16, .k = 130, .r = 1, .s = 1, .p = 16, .q = 16};
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &small, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 8 * 3 * T, "512 x 130: 8 big tiles are few; 24 of 64x64");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &small, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 6 * T, "64 rows x 130 columns: 3 tiles of 64x64 leave SMs idle even split; 6 of 32x64");
  small.dbias = (float *)&small;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &small, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (6 + 17) * T, "and a block per 8 bias gradients");
  cr_assert_eq(aq_conv2d_bf16_pass(AQ_KERNEL_CONV2D), -1, "fp32 conv2d keeps its own shape");
  aq_conv2d_args_t lenet = {.n = 256, .c = 6, .h = 14, .wd = 14, .k = 16, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                            .dil_h = 1, .dil_w = 1, .p = 10, .q = 10};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &lenet), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED,
                   "16 filters of 150 weights: 3 tiles; the staged build instead");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &lenet, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 8 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * s.workgroup[0], "the staged build's grid: a cluster a pair of filters");
  aq_dispatch_shape_t s2 = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED, &lenet, aq_planes_grid(1));
  cr_assert_eq(s2.grid[0], s.grid[0]);
  cr_assert(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED, &lenet) > 0);
  cr_assert(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT, &lenet) > 0, "the tiled split build fits too");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &big), AQ_KERNEL_CONV2D_BWD_FILTER_BF16,
                   "56x56 planes of 64 channels: the tensor cores");
  /* with its strides given: 9 x 2 tiles of 576 x 128 are few, split over
   * clusters (the rows build's rule, three taps wide at unit stride, first) */
  big.stride_h = big.stride_w = big.dil_h = big.dil_w = 1, big.pad_h = big.pad_w = 1;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &big), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS,
                   "12 tiles of 1792 rows: two waves of 16's blocks of four groups");
  cr_assert_str_eq(aq_conv2d_bf16_split_build(&big), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT);
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, &big, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 18 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * T, "a cluster a tile");
  big.dbias = (float *)&big;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, &big, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (18 + 2) * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * T, "and 16 items of 8 bias gradients: 2 clusters");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, &big), 0);
  /* 128 -> 128 at 28x28: 36 tiles, two waves of clusters of 8 (30 at a time), one of 6 */
  aq_conv2d_args_t r128 = {.n = 32, .c = 128, .h = 28, .wd = 28, .k = 128, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                           .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  cr_assert_str_eq(aq_conv2d_bf16_split_build(&r128), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6);
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6, &r128, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 36 * AQ_GPU_CONV2D_SPLIT6 * T);
  r128.dbias = (float *)&r128;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6, &r128, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (36 + 3) * AQ_GPU_CONV2D_SPLIT6 * T, "16 items of 8 bias gradients: 3 clusters of 6");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT, &r128, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (36 + 2) * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * T, "the build of 8 named: its own grid");
}

/* The backward data of 3x3 filters at unit stride takes the Winograd build
 * (fp32 sums on bf16 inputs), whose filters are loaded whole where the
 * tensor-core tiles gather them an element at a time; the tiles stay a
 * tuning candidate, with their own grid, and the forward keeps its tiles
 * with Winograd's a candidate. Too few channels, or a stride: the tiles. */
Test(conv_bf16_shape, stride_one_3x3_backward_data_takes_winograd) {
  aq_conv2d_args_t a = {.n = 32, .c = 64, .h = 56, .wd = 56, .k = 64, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 56, .q = 56};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &a), AQ_KERNEL_CONV2D_BWD_DATA_BF16_WINO);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 32 * 28 * 28 / AQ_GPU_CONV2D_WINO_TILES * (64 / AQ_GPU_CONV2D_WINO_COLS) * AQ_GPU_BLOCK,
               "32 tiles of 2x2 by 32 channels a block");
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BWD_DATA_BF16);
  aq_dispatch_shape_t tiles = aq_gpu_op_build_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, names[1], &a, aq_planes_grid(1));
  cr_assert_eq(tiles.grid[0], aq_conv2d_bf16_gpu_shape(&a, 1).grid[0], "the tiles' own grid");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16);
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BF16_WINO);
  aq_conv2d_args_t few = a, strided = a;
  few.c = 16;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &few), AQ_KERNEL_CONV2D_BWD_DATA_BF16);
  strided.stride_h = strided.stride_w = 2, strided.p = strided.q = 28;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &strided), AQ_KERNEL_CONV2D_BWD_DATA_BF16);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &strided, aq_planes_grid(1)).grid[0],
               aq_conv2d_bf16_gpu_shape(&strided, 1).grid[0]);
}

/* A backward data whose dy planes hold at most 64 positions (a ResNet's
 * 256 -> 256 at 14x14, stride 2, into 7x7; its 512 -> 512 at 7x7) takes
 * the columns build by rule where its filters have 6 taps or more, over
 * the strided phases' GEMMs and over Winograd; a block an image's 32
 * channels. Filters of fewer taps keep the rule's other picks, with the
 * columns build among the tuner's candidates. */
Test(conv_bf16_shape, small_planes_backward_data_takes_the_columns_build) {
  aq_conv2d_args_t a = {.n = 32, .c = 256, .h = 14, .wd = 14, .k = 256, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 7, .q = 7};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &a), AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], AQ_GPU_CONV2D_COL_BF16_THREADS);
  cr_assert_eq(s.grid[0], 32 * 8 * AQ_GPU_CONV2D_COL_BF16_THREADS, "32 images x 8 tiles of 32 channels");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, &a), AQ_GPU_CONV2D_COL_BF16_BYTES);
  aq_conv2d_args_t deep = a;
  deep.c = deep.k = 512, deep.h = deep.wd = 7, deep.stride_h = deep.stride_w = 1;
  cr_assert(aq_conv2d_bwd_data_bf16_wino_fits(&deep));
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &deep), AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL,
                   "over Winograd");
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &deep, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 3, "the columns, the tiles, Winograd");
  aq_conv2d_args_t other = a;
  other.h = other.wd = 16, other.p = other.q = 8;
  cr_assert(aq_conv2d_bf16_col_fits(&other), "64 positions");
  other.h = other.wd = 18, other.p = other.q = 9;
  cr_assert(!aq_conv2d_bf16_col_fits(&other), "81 positions");
  other = a, other.c = 5;
  cr_assert(aq_conv2d_bf16_col_fits(&other) == 0, "c r s = 45: rows of w not of whole 16-byte chunks");
  other = a, other.r = other.s = 1, other.pad_h = other.pad_w = 0;
  cr_assert(aq_conv2d_bf16_col_fits(&other) && !aq_conv2d_col_build(&other, 2), "1x1: one warp of six with rows");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &other), AQ_KERNEL_CONV2D_BWD_DATA_BF16);
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_DATA_BF16, &other, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BWD_DATA_BF16_COL, "a candidate all the same");
  aq_dispatch_shape_t own = aq_gpu_op_build_shape(AQ_KERNEL_CONV2D_BWD_DATA_BF16, names[1], &other, aq_planes_grid(1));
  cr_assert_eq(own.grid[0], s.grid[0], "its own grid as a candidate");
}

/* The backward filter where the backward data's columns builds fit takes
 * its columns build by rule (filters of 6 taps or more, 16 tiles or more):
 * a cluster of 4 a tile of 64 filters by 32 channels' taps, a block an
 * SM; the staged and tiled builds only where dw has few rows (c r s). */
Test(conv_bf16_shape, small_planes_backward_filter_takes_the_columns_build) {
  aq_conv2d_args_t a = {.n = 32, .c = 256, .h = 14, .wd = 14, .k = 256, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 7, .q = 7};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3,
                   "32 tiles: one wave over clusters of 3, two over 4");
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], AQ_GPU_CONV2D_COL_FILTER_THREADS);
  cr_assert_eq(s.grid[0], 32 * AQ_GPU_CONV2D_COL_FILTER_SPLIT3 * AQ_GPU_CONV2D_COL_FILTER_THREADS, "8 x 4 tiles");
  a.dbias = (float *)&a;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (32 + 11) * AQ_GPU_CONV2D_COL_FILTER_SPLIT3 * AQ_GPU_CONV2D_COL_FILTER_THREADS,
               "and 32 bias items over 11 clusters");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (32 + 8) * AQ_GPU_CONV2D_COL_FILTER_SPLIT * AQ_GPU_CONV2D_COL_FILTER_THREADS,
               "named: clusters of 4, 32 bias items a block each");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a), AQ_GPU_CONV2D_COL_FILTER_BYTES);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3, &a), AQ_GPU_CONV2D_COL_FILTER_BYTES);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2, &a), AQ_GPU_CONV2D_COL_FILTER_BYTES);
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (32 + 16) * AQ_GPU_CONV2D_COL_FILTER_SPLIT2 * AQ_GPU_CONV2D_COL_FILTER_THREADS,
               "named: clusters of 2, 32 bias items over 16");
  aq_conv2d_args_t deep = a;
  deep.c = deep.k = 512, deep.h = deep.wd = deep.p = deep.q = 7, deep.stride_h = deep.stride_w = 1;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &deep), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2,
                   "128 tiles: five waves of 8 images over clusters of 4, four of 11 over 3, two of 16 over 2");
  aq_conv2d_args_t big = a;
  big.h = big.wd = 28, big.p = big.q = 14;
  cr_assert_str_neq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &big), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL,
                    "784 positions of x");
  big.h = big.wd = 14, big.stride_h = big.stride_w = 1;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &big), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3,
                   "196 positions of dy: in chunks");
  /* every build of the op applies to 64 -> 64 at 8x8: the tuner's list holds them all */
  aq_conv2d_args_t all = {.n = 32, .c = 64, .h = 8, .wd = 8, .k = 64, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                          .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 8, .q = 8};
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  const uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &all, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 14, "the GEMM's tiles, split over clusters of 8, 6, 16; tiled; staged over 8, 4, 16; rows over 16, 8, "
                      "in chunks; columns over 4, 3, 2");
  int col = 0, staged = 0;
  for (uint32_t i = 0; i < n; ++i)
    col |= !strcmp(names[i], AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL), staged |= strstr(names[i], "_staged") != NULL;
  cr_assert(col && staged && n < AQ_TUNED_CANDIDATES_MAX, "room in a tuned choice's candidates");
  /* 2 tiles of 64 x 32: the GEMM's tiles over clusters by rule (the staged
   * builds ran 300 us against 15, the columns' 8 blocks 25) */
  cr_assert(!strstr(names[0], "_staged") && strcmp(names[0], AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL) &&
                strcmp(names[0], AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT),
            "%s", names[0]);
  cr_assert(aq_conv2d_filter_staged(&all) && !aq_conv2d_filter_staged_rule(&all), "576 rows of dw");
  aq_conv2d_args_t lenet = {.n = 256, .c = 6, .h = 14, .wd = 14, .k = 16, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                            .dil_h = 1, .dil_w = 1, .p = 10, .q = 10};
  cr_assert(aq_conv2d_filter_staged_rule(&lenet), "a LeNet's 150 rows of dw");
}

/* A forward of few 64x64 tiles (a ResNet's 64 -> 64 at 14x14, stride 2: 25
 * of them) splits each tile's depth over a cluster of 2, in one wave; more
 * tiles than a wave holds split keep the blocks. */
Test(conv_bf16_shape, a_forward_of_few_tiles_splits_their_depth) {
  aq_conv2d_args_t a = {.n = 32, .c = 64, .h = 14, .wd = 14, .k = 64, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 7, .q = 7};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_SPLIT, "too few filters for flat tiles");
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 25 * AQ_GPU_CONV2D_BF16_FWD_SPLIT * AQ_GPU_BLOCK, "1568 x 64: 25 tiles, a cluster each");
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16_SPLIT, &a, aq_planes_grid(1)).grid[0], s.grid[0]);
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  const uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 5, "the split builds, the tiles and the build by planes (a stride: no Winograd)");
  cr_assert(strcmp(names[0], AQ_KERNEL_CONV2D_BF16_PLANES), "by planes only a candidate: 64 items");
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BF16);
  cr_assert_eq(aq_gpu_op_build_shape(AQ_KERNEL_CONV2D_BF16, names[1], &a, aq_planes_grid(1)).grid[0],
               aq_conv2d_bf16_gpu_shape(&a, 0).grid[0], "the tiles' own grid");
  a.c = a.k = 256, a.n = 64, a.h = a.wd = 28, a.p = a.q = 14; /* 196 x 4 tiles of 64x64: a wave's worth unsplit */
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16);
}

/* A forward of few 64x64 tiles with filters enough takes flat ones, 32
 * rows by 128 columns, over clusters of 4 where those fit a wave (128 ->
 * 128 at 14x14, stride 2), else of 2 where those do (256 -> 256); where
 * the build by planes has more items than half the SMs' slots (512 -> 512
 * from 14x14 at stride 2: 256 of them; 256 -> 256 at 14x14, stride 1:
 * 512, y's plane in four tiles), or x's plane is small (7x7), that takes
 * it. */
Test(conv_bf16_shape, a_forward_of_few_tiles_and_many_filters_takes_flat_ones) {
  aq_conv2d_args_t a = {.n = 32, .c = 256, .h = 14, .wd = 14, .k = 256, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 7, .q = 7};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)).grid[0],
               49 * 2 * AQ_GPU_CONV2D_BF16_FWD_SPLIT * AQ_GPU_BLOCK, "1568 x 256: 49 x 2 flat tiles, a cluster each");
  cr_assert_eq(aq_conv2d_bf16_planes_items(&a), 128, "by planes, a block half the SMs");
  a.c = a.k = 128;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)).grid[0],
               49 * AQ_GPU_CONV2D_BF16_FLAT_SPLIT4 * AQ_GPU_BLOCK, "49 flat tiles over clusters of 4: one wave");
  a.c = a.k = 512;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)).grid[0], 32 * 8 * AQ_GPU_BLOCK,
               "an image's 49 positions by 64 filters a block");
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4, &a, aq_planes_grid(1)).grid[0],
               49 * 4 * AQ_GPU_CONV2D_BF16_FLAT_SPLIT4 * AQ_GPU_BLOCK, "1568 x 512: 49 x 4 flat tiles");
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT, &a, aq_planes_grid(1)).grid[0],
               49 * 4 * AQ_GPU_CONV2D_BF16_FWD_SPLIT * AQ_GPU_BLOCK, "named: its own clusters");
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_CONV2D_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX), 5, "planes, flat twice, 64x64 twice");
  a.c = 500; /* rows of w of part chunks */
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4);
  a.c = 512, a.h = a.wd = 7, a.stride_h = a.stride_w = 1;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)).grid[0], 32 * 8 * AQ_GPU_BLOCK,
               "an image's 64 filters a block");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BF16_PLANES, &a), AQ_GPU_CONV2D_PLANES_BYTES);
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_CONV2D_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX), 6, "and Winograd's");
  a.c = 500;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4);
  a.c = a.k = 256, a.h = a.wd = 14, a.p = a.q = 14;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BF16, &a, aq_planes_grid(1)).grid[0], 32 * 4 * 4 * AQ_GPU_BLOCK,
               "an image's four tiles of 49 positions by 64 filters a block");
  a.n = 8; /* 128 items */
  cr_assert_str_neq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BF16, &a), AQ_KERNEL_CONV2D_BF16_PLANES);
}

/* A backward filter of 9 tiles of 64x64 (64 -> 64, 3x3) splits them over
 * clusters of 16 (144 blocks, the tiles of twice the rows that clusters
 * of 8 would take for as many blocks); 18 of them (64 -> 128) stay with
 * 8, as 16 would take two waves. */
Test(conv_bf16_shape, a_backward_filter_of_nine_tiles_splits_over_sixteen) {
  aq_conv2d_args_t a = {.n = 32, .c = 64, .h = 56, .wd = 56, .k = 64, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 56, .q = 56};
  cr_assert_str_eq(aq_conv2d_bf16_split_build(&a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16);
  int tm;
  cr_assert_eq(aq_conv2d_bf16_split_tiles(&a, AQ_GPU_CONV2D_SPLIT16, &tm), 9);
  cr_assert_eq(tm, 64);
  cr_assert_eq(aq_conv2d_bf16_split_tiles(&a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, &tm), 18, "8: thin tiles");
  cr_assert_eq(tm, AQ_GPU_CONV2D_BF16_THIN);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], 9 * 16 * AQ_GPU_BLOCK);
  a.k = 128;
  cr_assert_str_eq(aq_conv2d_bf16_split_build(&a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT);
}

/* A backward filter three taps wide at unit stride takes the rows builds:
 * over clusters of 16 (blocks of 512 threads) or of 8 (blocks of 256),
 * whichever launch.h counts cheaper (waves x a block's rows and steps
 * along q, plus a tile's fixed cost), where it takes at most two waves;
 * the implicit GEMM past that, and for other filters, strides or rows. */
Test(conv_bf16_shape, three_taps_at_unit_stride_take_the_rows_builds) {
  aq_conv2d_args_t a = {.n = 8, .c = 64, .h = 56, .wd = 56, .k = 64, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 56, .q = 56};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], 512);
  cr_assert_eq(s.grid[0], 6 * 16 * 512, "1 x 2 x 3 tiles, a cluster of 16 each");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS, &a), 3 * 4 * (64 * 72 + 32 * 88) * 2);
  a.dbias = (float *)&a;
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.grid[0], (6 + 1) * 16 * 512, "and 8 items of 8 bias gradients: a cluster");
  a.dbias = NULL, a.c = a.k = 128, a.h = a.wd = a.p = a.q = 28;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8,
                   "24 tiles: four waves of clusters of 16, one of 8");
  s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], 256);
  cr_assert_eq(s.grid[0], 24 * 8 * 256);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8, &a), 3 * 2 * (64 * 72 + 32 * 88) * 2);
  a.n = 32, a.c = 64, a.k = 128, a.h = a.wd = a.p = a.q = 56;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS,
                   "12 tiles of 1792 rows: two waves of 16's");
  a.n = 8, a.c = a.k = 256, a.h = a.wd = a.p = a.q = 14;
  cr_assert_null(aq_conv2d_bf16_rows_build(&a), "96 tiles: four waves of clusters of 8");
  aq_conv2d_args_t other = {.n = 8, .c = 64, .h = 56, .wd = 56, .k = 64, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                            .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  cr_assert(!aq_conv2d_bf16_rows_fits(&other), "stride 2");
  other.stride_h = other.stride_w = 1, other.p = other.q = 56, other.r = other.s = 5, other.pad_h = other.pad_w = 2;
  cr_assert(!aq_conv2d_bf16_rows_fits(&other), "five taps wide");
  other.r = other.s = 3, other.pad_h = other.pad_w = 1, other.h = other.wd = other.p = other.q = 112;
  cr_assert(!aq_conv2d_bf16_rows_fits(&other) && aq_conv2d_bf16_rows_wide_fits(&other), "rows of dy past 64: in chunks");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &other), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE);
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &other, aq_planes_grid(1)).grid[0], 6 * 16 * 512);
  other.pad_w = 9, other.q = 128;
  cr_assert(!aq_conv2d_bf16_rows_wide_fits(&other), "padding past the 8 columns staged before a chunk");
  other.pad_w = 1;
  other.h = other.wd = other.p = other.q = 55;
  cr_assert(!aq_conv2d_bf16_rows_fits(&other), "odd rows: 4-byte copies");
  other.h = other.wd = other.p = other.q = 56;
  cr_assert(aq_conv2d_bf16_rows_fits(&other));
}
