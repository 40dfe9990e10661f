/* The blocked kernels on shapes that cross their block boundaries (GEMM
 * panels, the per-worker parts, conv's column chunks), and the broadcasting
 * and reduction ops, all dispatched through a CPU agent's queue against
 * plain C references in double precision; backwards by finite differences. */
#include <math.h>

#include "kernels.h"

TestSuite(blocked, .init = setup, .fini = teardown);

/* ---- matmul across panel, block and part boundaries ------------------------ */

static void check_matmul(int64_t m, int64_t n, int64_t k, int ta, int tb, int bias, int relu, float beta) {
  int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 4;
  float *a = rnd((size_t)((ta ? k : m) * lda), 11), *b = rnd((size_t)((tb ? n : k) * ldb), 12);
  float *c = rnd((size_t)(m * ldc), 13), *bv = rnd((size_t)n, 14), *want = malloc((size_t)(m * ldc) * 4);
  memcpy(want, c, (size_t)(m * ldc) * 4);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l)
        s += (double)(ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
      double v = 1.5 * s + (beta != 0.0f ? beta * want[i * ldc + j] : 0.0) + (bias ? bv[j] : 0.0);
      want[i * ldc + j] = (float)(relu && v < 0 ? 0 : v);
    }
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .bias = bias ? bv : NULL, .m = m, .n = n, .k = k, .lda = lda,
                           .ldb = ldb, .ldc = ldc, .batch = 1, .alpha = 1.5f, .beta = beta, .trans_a = ta,
                           .trans_b = tb, .activation = relu ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float got = c[i * ldc + j], w = want[i * ldc + j];
      cr_assert(fabsf(got - w) <= 2e-5f * (float)(k + 1) * (1.0f + fabsf(w)),
                "%lldx%lldx%lld ta=%d tb=%d: C[%lld,%lld] = %g, want %g", (long long)m, (long long)n, (long long)k,
                ta, tb, (long long)i, (long long)j, got, w);
    }
    for (int64_t j = n; j < ldc; ++j) cr_assert_eq(c[i * ldc + j], want[i * ldc + j], "padding written");
  }
  free(a), free(b), free(c), free(bv), free(want);
}

Test(blocked, matmul_crosses_kc_mc_nc_blocks_and_parts) {
  /* k > GEMM_KC (512), m > GEMM_MC (384), n > GEMM_NC (1024), odd everywhere. */
  check_matmul(389, 1057, 515, 0, 0, 1, 1, 0.0f);
  check_matmul(389, 1057, 515, 1, 1, 0, 0, 0.5f);
  check_matmul(13, 33, 1100, 1, 0, 1, 0, 1.0f);
  check_matmul(1, 2049, 3, 0, 1, 1, 1, 0.0f);
  check_matmul(700, 1, 9, 0, 0, 0, 1, 0.0f);
}

Test(blocked, matmul_narrow_products_every_layout) {
  /* n <= 16 takes the narrow kernels: 10 columns (a classifier), 16, 7; both
   * layouts of A and B, partial 12-row panels, bias, relu and beta. */
  check_matmul(256, 10, 1024, 0, 0, 1, 0, 0.0f);
  check_matmul(1031, 10, 256, 1, 0, 0, 0, 0.0f);
  check_matmul(77, 16, 300, 0, 1, 1, 1, 0.5f);
  check_matmul(45, 7, 33, 1, 1, 0, 1, 1.0f);
  check_matmul(12, 13, 0, 0, 0, 1, 0, 0.5f);
  /* 40 columns cut into parts of 32 and 8: the narrow part starts at column 32. */
  check_matmul(30, 40, 50, 0, 1, 1, 1, 0.5f);
  check_matmul(20, 40, 300, 1, 0, 1, 0, 0.0f);
}

/* The micro-tile's edges: 12 rows by 32 columns on AVX-512, 16 on AVX2.
 * Widths around 16 and 32 (a part's last tile full, partial, or a lone
 * 16-column panel), rows not a multiple of 6 or 12, depth 1 and 2. */
static void tile_edges(void) {
  check_matmul(7, 48, 1, 0, 0, 1, 0, 0.0f);
  check_matmul(25, 17, 3, 0, 1, 0, 1, 0.5f);
  check_matmul(13, 80, 2, 1, 0, 1, 1, 1.0f);
  check_matmul(6, 33, 19, 1, 1, 0, 0, 0.0f);
  check_matmul(37, 176, 21, 0, 0, 1, 0, 0.5f);
  check_matmul(18, 31, 1, 1, 1, 1, 1, 0.0f);
}
Test(blocked, matmul_tile_edges) { tile_edges(); }
Test(blocked, matmul_tile_edges_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2");
  tile_edges();
}

/* The product alone (batch 1: a product tall enough for its row bands to
 * share one packed B, gemm_share.h) against the same product twice as a
 * batch of two (whose parts pack their own), bit for bit. */
static void shared_matches_own(int64_t m, int64_t n, int64_t k, int ta, int tb) {
  int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 4, cn = m * ldc;
  float *a = rnd((size_t)((ta ? k : m) * lda), 21), *b = rnd((size_t)((tb ? n : k) * ldb), 22);
  float *one = rnd((size_t)cn, 23), *two = malloc((size_t)(2 * cn) * 4), *bias = rnd((size_t)n, 24);
  memcpy(two, one, (size_t)cn * 4), memcpy(two + cn, one, (size_t)cn * 4);
  aq_matmul_args_t args = {.a = a, .b = b, .c = one, .bias = bias, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                           .ldc = ldc, .batch = 1, .alpha = 0.75f, .beta = 0.5f, .trans_a = ta, .trans_b = tb,
                           .activation = AQ_ACTIVATION_RELU};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  args.c = two, args.batch = 2, args.stride_c = cn; /* A and B strides 0: the same product twice */
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t i = 0; i < cn; ++i)
      cr_assert(!memcmp(&one[i], &two[q * cn + i], 4), "%lldx%lldx%lld ta=%d tb=%d: C[%lld] %a alone, %a in a batch",
                (long long)m, (long long)n, (long long)k, ta, tb, (long long)i, one[i], two[q * cn + i]);
  free(a), free(b), free(one), free(two), free(bias);
}

Test(blocked, matmul_parts_sharing_packed_b_match_parts_packing_their_own) {
  kernels_restart_with("AQ_CPU_ISA", "avx2"); /* the streaming engine's */
  const char *workers[] = {"2", "1", "3"};
  for (int w = 0; w < 3; ++w) {
    kernels_restart_with("AQ_CPU_WORKERS", workers[w]);
    /* Two NC blocks (the second one a partial chunk and panel), two KC
     * slices, every layout; A read in place or packed (lda a multiple of
     * 4 KB). */
    shared_matches_own(1300, 1100, 600, 0, 0);
    shared_matches_own(1300, 200, 530, 1, 1);
    shared_matches_own(1250, 333, 1024 - 1, 0, 1);
    shared_matches_own(1200, 1040, 77, 1, 0);
  }
  check_matmul(1300, 1100, 600, 0, 0, 1, 1, 0.0f);
}

Test(blocked, matmul_beta_zero_ignores_nans_in_c) {
  enum { M = 30, N = 40, K = 20 };
  float *a = rnd(M * K, 1), *b = rnd(K * N, 2), c[M * N];
  for (int i = 0; i < M * N; ++i) c[i] = NAN;
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N,
                           .batch = 1, .alpha = 1.0f};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int i = 0; i < M * N; ++i) cr_assert(!isnan(c[i]), "C[%d] is NaN", i);
  free(a), free(b);
}

Test(blocked, matmul_batched_with_strides_and_bad_strides) {
  enum { B = 5, M = 17, N = 45, K = 23 };
  float *a = rnd(B * M * K, 3), *b = rnd(B * K * N, 4), *c = calloc(B * M * N, 4);
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N,
                           .batch = B, .stride_a = M * K, .stride_b = K * N, .stride_c = M * N, .alpha = 1.0f};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int q = 0; q < B; ++q)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int l = 0; l < K; ++l) s += (double)a[q * M * K + i * K + l] * b[q * K * N + l * N + j];
        cr_assert(fabs(c[q * M * N + i * N + j] - s) < 1e-4, "batch %d C[%d,%d]", q, i, j);
      }
  args.stride_a = -1;
  cr_assert_eq(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)), AQ_ERROR_KERNEL_FAULT);
  args.stride_a = M * K, args.activation = 7;
  cr_assert_eq(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)), AQ_ERROR_KERNEL_FAULT);
  free(a), free(b), free(c);
}

/* ---- conv2d against the definition, both paths ---------------------------------- */

static void conv_ref(const aq_conv2d_args_t *a, double *y, double *dx, double *dw) {
  memset(dx, 0, sizeof(double) * (size_t)(a->n * a->c * a->h * a->wd));
  memset(dw, 0, sizeof(double) * (size_t)(a->k * a->c * a->r * a->s));
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t k = 0; k < a->k; ++k)
      for (int64_t p = 0; p < a->p; ++p)
        for (int64_t q = 0; q < a->q; ++q) {
          double s = a->bias ? a->bias[k] : 0.0;
          int64_t o = ((n * a->k + k) * a->p + p) * a->q + q;
          for (int64_t c = 0; c < a->c; ++c)
            for (int64_t r = 0; r < a->r; ++r)
              for (int64_t t = 0; t < a->s; ++t) {
                int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h, iw = q * a->stride_w - a->pad_w + t * a->dil_w;
                if (ih < 0 || ih >= a->h || iw < 0 || iw >= a->wd) continue;
                int64_t xi = ((n * a->c + c) * a->h + ih) * a->wd + iw, wi = ((k * a->c + c) * a->r + r) * a->s + t;
                s += (double)a->x[xi] * a->w[wi];
                dx[xi] += (double)a->dy[o] * a->w[wi];
                dw[wi] += (double)a->dy[o] * a->x[xi];
              }
          y[o] = s;
        }
}

static void check_conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, int st, int pad,
                       int dil) {
  aq_conv2d_args_t a = {.n = n, .c = c, .h = h, .wd = w, .k = k, .r = r, .s = s, .stride_h = st, .stride_w = st,
                        .pad_h = pad, .pad_w = pad, .dil_h = dil, .dil_w = dil};
  a.p = aq_conv_out(h, r, st, pad, dil), a.q = aq_conv_out(w, s, st, pad, dil);
  size_t nx = (size_t)(n * c * h * w), nw = (size_t)(k * c * r * s), ny = (size_t)(n * k * a.p * a.q);
  float *x = rnd(nx, 21), *wt = rnd(nw, 22), *b = rnd((size_t)k, 23), *dy = rnd(ny, 24);
  float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc((size_t)k * 4);
  a.x = x, a.w = wt, a.bias = b, a.dy = dy, a.y = y, a.dx = dx, a.dw = dw, a.dbias = db;
  double *ry = malloc(ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8);
  conv_ref(&a, ry, rdx, rdw);
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(n * k)));
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D_BWD_DATA, &a, aq_planes_grid(n * c)));
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D_BWD_FILTER, &a, aq_planes_grid(k * c)));
  double tol = 1e-5 * (double)(c * r * s + k * a.p * a.q + n * a.p * a.q);
  for (size_t i = 0; i < ny; ++i) cr_assert(fabs(y[i] - ry[i]) < tol, "y[%zu] = %g, want %g", i, y[i], ry[i]);
  for (size_t i = 0; i < nx; ++i) cr_assert(fabs(dx[i] - rdx[i]) < tol, "dx[%zu] = %g, want %g", i, dx[i], rdx[i]);
  for (size_t i = 0; i < nw; ++i) cr_assert(fabs(dw[i] - rdw[i]) < tol, "dw[%zu] = %g, want %g", i, dw[i], rdw[i]);
  for (int64_t j = 0; j < k; ++j) {
    double want = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t < a.p * a.q; ++t) want += dy[(i * k + j) * a.p * a.q + t];
    cr_assert(fabs(db[j] - want) < tol, "dbias[%lld]", (long long)j);
  }
  free(x), free(wt), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(ry), free(rdx), free(rdw);
}

static void conv_shapes(void) {
  check_conv(3, 5, 33, 35, 14, 3, 3, 1, 1, 1);  /* rows cross the 32-pixel panels */
  check_conv(2, 7, 17, 19, 13, 3, 5, 2, 2, 1);  /* stride 2, non-square filter */
  check_conv(1, 3, 20, 20, 33, 3, 3, 1, 2, 2);  /* dilation, K > MR */
  check_conv(1, 40, 9, 9, 257, 1, 1, 1, 0, 1);  /* 1x1, many filters */
  check_conv(5, 1, 28, 28, 6, 5, 5, 1, 2, 1);   /* LeNet's first layer */
  check_conv(1, 1, 1, 1, 1, 1, 1, 1, 0, 1);     /* the smallest */
  check_conv(7, 3, 6, 5, 13, 3, 3, 1, 1, 1);    /* 91 planes: work-groups of two planes */
  check_conv(2, 6, 14, 14, 16, 5, 5, 1, 0, 1);  /* LeNet's second layer */
  check_conv(1, 3, 12, 12, 5, 5, 5, 1, 0, 1);   /* batch 1, rows of 8 outputs: dy read in place */
  check_conv(3, 1, 13, 11, 7, 5, 3, 1, 2, 1);   /* 7 filters cut by taps, rows of 13: a masked tail */
  check_conv(2, 3, 9, 11, 32, 3, 3, 1, 1, 1);   /* filters in the lanes: two blocks of 16 */
  check_conv(1, 2, 7, 9, 8, 3, 3, 1, 1, 1);     /* 8 filters: one vector, a part-filled last block */
  check_conv(1, 4, 10, 10, 24, 3, 3, 1, 0, 1);  /* 24 filters: a block of 16, then 8 */
}

Test(blocked, conv2d_gemm_path_matches_the_definition) {
  kernels_restart_with("AQ_CONV_ALGO", "gemm");
  conv_shapes();
}

Test(blocked, conv2d_direct_path_matches_the_definition) {
  kernels_restart_with("AQ_CONV_ALGO", "direct");
  conv_shapes();
}

Test(blocked, conv2d_chosen_paths_match_the_definition) { conv_shapes(); }

/* The forward's direct loop on the padded-width grid (conv2d_avx2.c, small
 * filter volumes at stride 1, AVX2 and up) sums as the GEMM path's vector
 * kernels do: an in-order FMA chain over (c, r, s) from zero, padding
 * included, then + 0 and the bias. Checked bit for bit. */
static void check_conv_bits(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int pad) {
  aq_conv2d_args_t a = {.n = n, .c = c, .h = h, .wd = w, .k = k, .r = r, .s = r, .stride_h = 1, .stride_w = 1,
                        .pad_h = pad, .pad_w = pad, .dil_h = 1, .dil_w = 1};
  a.p = aq_conv_out(h, r, 1, pad, 1), a.q = aq_conv_out(w, r, 1, pad, 1);
  size_t nx = (size_t)(n * c * h * w), nw = (size_t)(k * c * r * r), ny = (size_t)(n * k * a.p * a.q);
  float *x = rnd(nx, 31), *wt = rnd(nw, 32), *b = rnd((size_t)k, 33), *y = malloc(ny * 4);
  a.x = x, a.w = wt, a.bias = b, a.y = y;
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(n * k)));
  __builtin_cpu_init();
  const char *isa = getenv("AQ_CPU_ISA");
  int exact = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !(isa && !strcmp(isa, "generic"));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < k; ++f)
      for (int64_t p = 0; p < a.p; ++p)
        for (int64_t q = 0; q < a.q; ++q) {
          float acc = 0.0f;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t u = 0; u < r; ++u)
              for (int64_t v = 0; v < r; ++v) {
                int64_t ih = p - pad + u, iw = q - pad + v;
                float xv = ih < 0 || ih >= h || iw < 0 || iw >= w ? 0.0f : x[((i * c + ch) * h + ih) * w + iw];
                acc = fmaf(wt[((f * c + ch) * r + u) * r + v], xv, acc);
              }
          float want = (acc + 0.0f) + b[f], got = y[((i * k + f) * a.p + p) * a.q + q];
          if (exact)
            cr_assert(!memcmp(&got, &want, sizeof(float)), "n%lld c%lld %lldx%lld k%lld r%lld: y[%lld,%lld,%lld,%lld] = %a, want %a",
                      (long long)n, (long long)c, (long long)h, (long long)w, (long long)k, (long long)r, (long long)i,
                      (long long)f, (long long)p, (long long)q, got, want);
          else
            cr_assert(fabsf(got - want) < 1e-4f * (float)(c * r * r), "y = %g, want %g", got, want);
        }
  free(x), free(wt), free(b), free(y);
}

static void conv_bits(void) {
  check_conv_bits(6, 1, 28, 28, 6, 5, 2);  /* LeNet's layers: rows of 32 padded floats */
  check_conv_bits(6, 6, 14, 14, 16, 5, 0); /* blocks of 16 positions cross rows of 14 */
  check_conv_bits(5, 3, 9, 23, 7, 3, 1);   /* 7 filters: a pass of 6, then 1 */
  check_conv_bits(2, 2, 7, 9, 24, 3, 1);   /* filters in the lanes: 16, then 8 */
}
Test(blocked, conv2d_forward_sums_in_order_bit_for_bit) { conv_bits(); }
Test(blocked, conv2d_forward_sums_in_order_bit_for_bit_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2"); /* settings are read at aq_init */
  conv_bits();
}

/* The filter gradient's direct path sums each weight in an order of its
 * own, whatever the parts (filters, then taps) it is cut into: the same
 * bits on one worker as on three. */
static float *conv_dw_on(const char *workers, aq_conv2d_args_t *a) {
  kernels_restart_with("AQ_CPU_WORKERS", workers);
  float *dw = malloc((size_t)(a->k * a->c * a->r * a->s) * sizeof(float));
  a->dw = dw;
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D_BWD_FILTER, a, aq_planes_grid(a->k * a->c)));
  return dw;
}

static void check_conv_dw_cuts(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int pad) {
  aq_conv2d_args_t a = {.n = n, .c = c, .h = h, .wd = w, .k = k, .r = r, .s = r, .stride_h = 1, .stride_w = 1,
                        .pad_h = pad, .pad_w = pad, .dil_h = 1, .dil_w = 1};
  a.p = aq_conv_out(h, r, 1, pad, 1), a.q = aq_conv_out(w, r, 1, pad, 1);
  float *x = rnd((size_t)(n * c * h * w), 41), *dy = rnd((size_t)(n * k * a.p * a.q), 42);
  a.x = x, a.dy = dy;
  float *one = conv_dw_on("1", &a), *three = conv_dw_on("3", &a);
  for (int64_t i = 0; i < k * c * r * r; ++i)
    cr_assert(!memcmp(&one[i], &three[i], sizeof(float)), "n%lld c%lld k%lld: dw[%lld] = %a on one worker, %a on three",
              (long long)n, (long long)c, (long long)k, (long long)i, one[i], three[i]);
  free(x), free(dy), free(one), free(three);
}

Test(blocked, conv2d_filter_gradient_is_the_same_however_it_is_cut) {
  check_conv_dw_cuts(4, 1, 28, 28, 6, 5, 2);  /* LeNet's first layer: cut by taps, dy in place */
  check_conv_dw_cuts(3, 6, 14, 14, 16, 5, 0); /* LeNet's second: cut by filters, dy on the flat grid */
  check_conv_dw_cuts(1, 3, 9, 23, 13, 3, 1);  /* batch 1, odd sizes, a block of one filter */
  check_conv_dw_cuts(2, 3, 9, 11, 32, 3, 1);  /* filters in the lanes, cut by blocks of 16 and taps */
}

/* The forward's GEMM takes a part's images as one batch (the filters
 * packed once a depth slice for all of them): each image's output is, bit
 * for bit, what the image alone gives (one image is cut into parts by
 * rows and columns instead). zeros: that share of the filters zero, so
 * the GEMM may take its sparse path. */
static void check_conv_batch(int64_t n, int64_t c, int64_t h, int64_t k, int64_t r, int stride, int pad, int zeros) {
  aq_conv2d_args_t a = {.n = n, .c = c, .h = h, .wd = h, .k = k, .r = r, .s = r, .stride_h = stride,
                        .stride_w = stride, .pad_h = pad, .pad_w = pad, .dil_h = 1, .dil_w = 1};
  a.p = aq_conv_out(h, r, stride, pad, 1), a.q = aq_conv_out(h, r, stride, pad, 1);
  size_t nx = (size_t)(c * h * h), nw = (size_t)(k * c * r * r), ny = (size_t)(k * a.p * a.q);
  float *x = rnd(nx * (size_t)n, 51), *wt = rnd(nw, 52), *b = rnd((size_t)k, 53);
  float *y = malloc(ny * (size_t)n * 4), *one = malloc(ny * 4);
  for (size_t i = 0; i < nw; ++i)
    if ((int)(i * 37 % 100) < zeros) wt[i] = 0.0f;
  a.x = x, a.w = wt, a.bias = b, a.y = y;
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(n * k)));
  for (int64_t i = 0; i < n; ++i) {
    aq_conv2d_args_t e = a;
    e.n = 1, e.x = x + (size_t)i * nx, e.y = one;
    AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &e, aq_planes_grid(k)));
    for (size_t j = 0; j < ny; ++j)
      cr_assert(!memcmp(&one[j], &y[(size_t)i * ny + j], sizeof(float)),
                "n%lld c%lld %lldx%lld k%lld s%d: image %lld's y[%zu] = %a in the batch, %a alone", (long long)n,
                (long long)c, (long long)h, (long long)h, (long long)k, stride, (long long)i, j, y[(size_t)i * ny + j],
                one[j]);
  }
  free(x), free(wt), free(b), free(y), free(one);
}

Test(blocked, conv2d_forward_batch_matches_each_image_alone) {
  kernels_restart_with("AQ_CONV_ALGO", "gemm");
  check_conv_batch(5, 64, 14, 24, 3, 2, 1, 0);  /* 7x7 planes, two depth slices of the filters */
  check_conv_batch(4, 20, 9, 400, 3, 1, 1, 0);  /* more filters than a packed block: image by image */
  check_conv_batch(6, 8, 8, 13, 3, 2, 1, 0);    /* 4x4 planes: narrow products, image by image */
  check_conv_batch(3, 64, 12, 40, 3, 1, 1, 60); /* sparse filters */
}

Test(blocked, conv2d_gemm_path_on_avx2_and_generic_isas) {
  setenv("AQ_CONV_ALGO", "gemm", 1);
  kernels_restart_with("AQ_CPU_ISA", rand() & 1 ? "avx2" : "generic"); /* one per process; either must agree */
  check_conv(2, 4, 15, 16, 20, 3, 3, 1, 1, 1);
}

Test(blocked, conv2d_data_gradient_chunks_a_large_image) {
  /* 9 x 9 taps x 16 channels x 400 pixels exceeds the column buffer's
   * chunk, so the data gradient goes in pixel chunks and channel blocks. */
  kernels_restart_with("AQ_CONV_ALGO", "gemm");
  check_conv(1, 16, 40, 40, 12, 9, 9, 1, 4, 1);
}

Test(blocked, conv2d_rejects_inconsistent_output_sizes) {
  float buf[64] = {0};
  aq_conv2d_args_t a = {.x = buf, .w = buf, .y = buf, .n = 1, .c = 1, .h = 4, .wd = 4, .k = 1, .r = 3, .s = 3,
                        .p = 4, .q = 4, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1}; /* p should be 2 */
  cr_assert_eq(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(1)), AQ_ERROR_KERNEL_FAULT);
  cr_assert(strstr(aq_last_error(), AQ_KERNEL_CONV2D), "%s", aq_last_error());
}

/* ---- broadcasting binary ops ------------------------------------------------------ */

static double op_ref(int op, double x, double y) { return op == 0 ? x + y : op == 1 ? x - y : x * y; }

Test(blocked, add_sub_mul_broadcast_through_strides) {
  const char *names[3] = {AQ_KERNEL_ADD, AQ_KERNEL_SUB, AQ_KERNEL_MUL};
  /* z: 3 x 7 x 33 x 257 would be large; use 2 x 7 x 33 x 9 and a transposed x. */
  enum { D0 = 2, D1 = 7, D2 = 33, D3 = 9 };
  const int64_t total = D0 * D1 * D2 * D3;
  /* x is stored as D3 x D2 x D1 x D0 (all dims reversed: non-contiguous);
   * y is a row of D3 broadcast over everything else (a bias). */
  float *x = rnd((size_t)total, 31), *y = rnd(D3, 32), *z = malloc((size_t)total * 4);
  for (int op = 0; op < 3; ++op) {
    aq_binary_args_t a = {.x = x, .y = y, .z = z, .rank = 4, .shape = {D0, D1, D2, D3},
                          .stride_x = {1, D0, D0 * D1, D0 * D1 * D2}, .stride_y = {0, 0, 0, 1},
                          .alpha = op == 2 ? 0.5f : 0.0f};
    AQ_ASSERT_OK(run(names[op], &a, aq_elementwise_grid(total)));
    for (int64_t i0 = 0; i0 < D0; ++i0)
      for (int64_t i1 = 0; i1 < D1; ++i1)
        for (int64_t i2 = 0; i2 < D2; ++i2)
          for (int64_t i3 = 0; i3 < D3; ++i3) {
            double xv = x[i0 + i1 * D0 + i2 * D0 * D1 + i3 * D0 * D1 * D2], yv = y[i3];
            double want = (op == 2 ? 0.5 : 1.0) * op_ref(op, xv, yv);
            float got = z[((i0 * D1 + i1) * D2 + i2) * D3 + i3];
            cr_assert(fabs(got - want) < 1e-6, "%s at %lld,%lld,%lld,%lld: %g vs %g", names[op], (long long)i0,
                      (long long)i1, (long long)i2, (long long)i3, got, want);
          }
  }
  /* A scalar broadcast on the left, contiguous on the right, rank 1, n = 1 and 257. */
  for (int64_t n = 1; n <= 257; n += 256) {
    float s = 2.0f;
    aq_binary_args_t a = {.x = &s, .y = x, .z = z, .rank = 1, .shape = {n}, .stride_x = {0}, .stride_y = {1}};
    AQ_ASSERT_OK(run(AQ_KERNEL_SUB, &a, aq_elementwise_grid(n)));
    for (int64_t i = 0; i < n; ++i) cr_assert(fabsf(z[i] - (2.0f - x[i])) < 1e-6f);
  }
  aq_binary_args_t bad = {.x = x, .y = NULL, .z = z, .rank = 1, .shape = {4}, .stride_x = {1}};
  cr_assert_eq(run(AQ_KERNEL_ADD, &bad, aq_elementwise_grid(4)), AQ_ERROR_KERNEL_FAULT);
  bad.y = y, bad.rank = 5;
  cr_assert_eq(run(AQ_KERNEL_MUL, &bad, aq_elementwise_grid(4)), AQ_ERROR_KERNEL_FAULT);
  free(x), free(y), free(z);
}

/* ---- reductions over axes, and the broadcast backward they give ---------------- */

static void check_reduce(const int64_t shape[4], uint32_t axes, int mean, int transposed) {
  int64_t total = shape[0] * shape[1] * shape[2] * shape[3];
  float *x = rnd((size_t)total, 41);
  int64_t stride[4];
  if (!transposed) stride[3] = 1, stride[2] = shape[3], stride[1] = shape[2] * shape[3], stride[0] = shape[1] * stride[1];
  else stride[0] = 1, stride[1] = shape[0], stride[2] = shape[0] * shape[1], stride[3] = stride[2] * shape[2];
  int64_t outs = 1, count = 1;
  for (int d = 0; d < 4; ++d) *(axes & (1u << d) ? &count : &outs) *= shape[d];
  float *out = malloc((size_t)outs * 4);
  for (int64_t i = 0; i < outs; ++i) out[i] = 1.0f;
  aq_reduce_args_t a = {.x = x, .out = out, .rank = 4, .axes = axes, .beta = 0.25f};
  memcpy(a.shape, shape, sizeof(a.shape)), memcpy(a.stride, stride, sizeof(a.stride));
  AQ_ASSERT_OK(run(mean ? AQ_KERNEL_REDUCE_MEAN : AQ_KERNEL_REDUCE_SUM, &a, aq_elementwise_grid(outs)));
  double *want = calloc((size_t)outs, sizeof(double));
  for (int64_t i0 = 0; i0 < shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < shape[3]; ++i3) {
          int64_t idx[4] = {i0, i1, i2, i3}, o = 0;
          for (int d = 0; d < 4; ++d)
            if (!(axes & (1u << d))) o = o * shape[d] + idx[d];
          want[o] += x[i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]];
        }
  for (int64_t i = 0; i < outs; ++i) {
    double w = want[i] / (mean ? (double)count : 1.0) + 0.25;
    cr_assert(fabs(out[i] - w) < 1e-4 * (1 + fabs(w)), "axes %#x mean %d out[%lld] = %g, want %g", axes, mean,
              (long long)i, out[i], w);
  }
  free(x), free(out), free(want);
}

Test(blocked, reduce_sum_and_mean_over_any_axes) {
  const int64_t shape[4] = {3, 7, 33, 5}, big[4] = {1, 257, 1, 600};
  for (uint32_t axes = 0; axes < 16; ++axes)
    for (int mean = 0; mean < 2; ++mean) check_reduce(shape, axes, mean, axes & 1);
  check_reduce(big, 0x2, 0, 0); /* a bias gradient: 257 rows of 600 */
  check_reduce(big, 0xf, 1, 1); /* everything into one */
  aq_reduce_args_t bad = {.x = NULL, .rank = 2};
  float o;
  bad.out = &o;
  cr_assert_eq(run(AQ_KERNEL_REDUCE_SUM, &bad, aq_elementwise_grid(1)), AQ_ERROR_KERNEL_FAULT);
  bad.x = &o, bad.axes = 0x4; /* axis 2 of a rank-2 tensor */
  cr_assert_eq(run(AQ_KERNEL_REDUCE_SUM, &bad, aq_elementwise_grid(1)), AQ_ERROR_KERNEL_FAULT);
}

/* L = sum(g * (x * y)) with y broadcast along rows: dL/dy = reduce_sum over
 * rows of (g * x), checked against central differences. */
Test(blocked, broadcast_mul_backward_is_mul_then_reduce_by_finite_differences) {
  enum { R = 9, C = 13 };
  float *x = rnd(R * C, 51), *y = rnd(C, 52), *g = rnd(R * C, 53), gx[R * C], dy[C];
  aq_binary_args_t m = {.x = g, .y = x, .z = gx, .rank = 2, .shape = {R, C}, .stride_x = {C, 1}, .stride_y = {C, 1}};
  AQ_ASSERT_OK(run(AQ_KERNEL_MUL, &m, aq_elementwise_grid(R * C)));
  aq_reduce_args_t r = {.x = gx, .out = dy, .rank = 2, .shape = {R, C}, .stride = {C, 1}, .axes = 0x1};
  AQ_ASSERT_OK(run(AQ_KERNEL_REDUCE_SUM, &r, aq_elementwise_grid(C)));
  for (int j = 0; j < C; ++j) {
    double h = 1e-3, up = 0, down = 0;
    for (int i = 0; i < R; ++i) {
      up += (double)g[i * C + j] * x[i * C + j] * (y[j] + h);
      down += (double)g[i * C + j] * x[i * C + j] * (y[j] - h);
    }
    cr_assert(fabs(dy[j] - (up - down) / (2 * h)) < 1e-4, "dy[%d] = %g vs %g", j, dy[j], (up - down) / (2 * h));
  }
  free(x), free(y), free(g);
}

/* ---- batch norm on planes long enough for the vector lanes ------------------ */

Test(blocked, batch_norm_matches_a_double_reference_on_long_planes) {
  enum { N = 3, C = 5, HW = 37 };
  float *x = rnd(N * C * HW, 61), *g = rnd(C, 62), *b = rnd(C, 63), *dy = rnd(N * C * HW, 64);
  float y[N * C * HW], mean[C], rstd[C], rm[C] = {0}, rv[C] = {1, 1, 1, 1, 1}, dx[N * C * HW], dg[C], db[C];
  for (int i = 0; i < N * C * HW; ++i) x[i] = 3.0f + 2.0f * x[i]; /* an offset mean, as real activations have */
  aq_batch_norm_args_t a = {.x = x, .gamma = g, .beta = b, .y = y, .mean = mean, .rstd = rstd, .running_mean = rm,
                            .running_var = rv, .dy = dy, .dx = dx, .dgamma = dg, .dbeta = db, .n = N, .c = C,
                            .hw = HW, .eps = 1e-5f, .momentum = 0.1f, .training = 1};
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM, &a, aq_planes_grid(C)));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_BWD, &a, aq_planes_grid(C)));
  const double m = N * HW;
  for (int c = 0; c < C; ++c) {
    double s = 0, ss = 0, sdy = 0, sdyx = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) s += x[(n * C + c) * HW + i];
    double mu = s / m;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) ss += (x[(n * C + c) * HW + i] - mu) * (x[(n * C + c) * HW + i] - mu);
    double rs = 1.0 / sqrt(ss / m + 1e-5);
    cr_assert(fabs(mean[c] - mu) < 1e-5 && fabs(rstd[c] - rs) < 1e-4 * rs, "channel %d statistics", c);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        int o = (n * C + c) * HW + i;
        double xh = (x[o] - mu) * rs;
        cr_assert(fabs(y[o] - (xh * g[c] + b[c])) < 1e-4, "y[%d] = %g, want %g", o, y[o], xh * g[c] + b[c]);
        sdy += dy[o], sdyx += dy[o] * xh;
      }
    cr_assert(fabs(db[c] - sdy) < 1e-4 && fabs(dg[c] - sdyx) < 1e-4, "channel %d dgamma / dbeta", c);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        int o = (n * C + c) * HW + i;
        double xh = (x[o] - mu) * rs, want = g[c] * rs / m * (m * dy[o] - sdy - xh * sdyx);
        cr_assert(fabs(dx[o] - want) < 1e-4, "dx[%d] = %g, want %g", o, dx[o], want);
      }
  }
  free(x), free(g), free(b), free(dy);
}

/* ---- pooling on rows long enough for the vector lanes --------------------------- */

static void check_pool(int64_t h, int64_t w, int32_t kh, int32_t kw, int32_t st, int32_t pad) {
  enum { PL = 3 };
  aq_pool_args_t a = {.planes = PL, .h = h, .w = w, .kh = kh, .kw = kw, .stride_h = st, .stride_w = st,
                      .pad_h = pad, .pad_w = pad};
  a.p = aq_conv_out(h, kh, st, pad, 1), a.q = aq_conv_out(w, kw, st, pad, 1);
  size_t nx = (size_t)(PL * h * w), ny = (size_t)(PL * a.p * a.q);
  float *x = rnd(nx, 71), *y = malloc(ny * 4), *dy = rnd(ny, 72), *dx = malloc(nx * 4);
  int32_t *arg = malloc(ny * 4);
  double *dref = calloc(nx, sizeof(double));
  a.x = x, a.y = y, a.argmax = arg, a.dy = dy, a.dx = dx;
  for (int max = 0; max < 2; ++max) {
    AQ_ASSERT_OK(run(max ? AQ_KERNEL_MAX_POOL : AQ_KERNEL_AVG_POOL, &a, aq_planes_grid(PL)));
    AQ_ASSERT_OK(run(max ? AQ_KERNEL_MAX_POOL_BWD : AQ_KERNEL_AVG_POOL_BWD, &a, aq_planes_grid(PL)));
    memset(dref, 0, nx * sizeof(double));
    for (int64_t pl = 0; pl < PL; ++pl)
      for (int64_t p = 0; p < a.p; ++p)
        for (int64_t q = 0; q < a.q; ++q) {
          double best = -INFINITY, sum = 0;
          int64_t at = -1, o = (pl * a.p + p) * a.q + q;
          for (int i = 0; i < kh; ++i)
            for (int j = 0; j < kw; ++j) {
              int64_t ih = p * st - pad + i, iw = q * st - pad + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              double v = x[(pl * h + ih) * w + iw];
              sum += v;
              if (v > best) best = v, at = ih * w + iw;
            }
          double want = max ? (at >= 0 ? best : 0.0) : sum / (kh * kw);
          cr_assert(fabs(y[o] - want) < 1e-5, "%s %lldx%lld k%dx%d s%d p%d: y[%lld] = %g, want %g", max ? "max" : "avg",
                    (long long)h, (long long)w, kh, kw, st, pad, (long long)o, y[o], want);
          if (max) {
            cr_assert_eq(arg[o], (int32_t)at, "argmax[%lld]", (long long)o);
            if (at >= 0) dref[pl * h * w + at] += dy[o];
          } else {
            for (int i = 0; i < kh; ++i)
              for (int j = 0; j < kw; ++j) {
                int64_t ih = p * st - pad + i, iw = q * st - pad + j;
                if (ih >= 0 && ih < h && iw >= 0 && iw < w) dref[(pl * h + ih) * w + iw] += dy[o] / (kh * kw);
              }
          }
        }
    for (size_t i = 0; i < nx; ++i) cr_assert(fabs(dx[i] - dref[i]) < 1e-5, "dx[%zu] = %g, want %g", i, dx[i], dref[i]);
  }
  free(x), free(y), free(dy), free(dx), free(arg), free(dref);
}

Test(blocked, max_and_avg_pool_match_the_definition_on_wide_rows) {
  check_pool(40, 67, 2, 2, 2, 0);
  check_pool(33, 70, 3, 3, 2, 1);
  check_pool(19, 45, 3, 3, 1, 1);
  check_pool(9, 40, 2, 3, 3, 1); /* stride past the window: gaps */
  check_pool(1, 1, 1, 1, 1, 0);
}

/* The 2 x 2, stride-2 max pool (its own loop): in a window of equal
 * values the first tap in (row, column) order wins; a window of NaNs and
 * -Inf takes none (0, argmax -1), as the general loop's strict '>' does. */
static void check_pool_2x2_ties(void) {
  enum { H = 4, W = 34, P = 2, Q = 17 };
  float x[H * W], y[P * Q];
  int32_t arg[P * Q];
  for (int i = 0; i < H * W; ++i) x[i] = (float)((i / W) / 2 + (i % W) / 2 % 3); /* each window constant */
  x[0] = x[1] = x[W] = x[W + 1] = NAN;
  x[2] = x[3] = x[W + 2] = -INFINITY, x[W + 3] = NAN;
  aq_pool_args_t a = {.x = x, .y = y, .argmax = arg, .planes = 1, .h = H, .w = W, .p = P, .q = Q, .kh = 2, .kw = 2,
                      .stride_h = 2, .stride_w = 2};
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL, &a, aq_planes_grid(1)));
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < Q; ++q) {
      int o = p * Q + q, first = 2 * p * W + 2 * q;
      if (o < 2) {
        cr_assert(arg[o] == -1 && y[o] == 0.0f, "window %d of NaN and -Inf: y %g, argmax %d", o, y[o], arg[o]);
        continue;
      }
      cr_assert_eq(arg[o], first, "window %d: argmax %d, want its first tap %d", o, arg[o], first);
      cr_assert_eq(y[o], x[first]);
    }
}
Test(blocked, max_pool_2x2_ties_go_to_the_first_tap) { check_pool_2x2_ties(); }
Test(blocked, max_pool_2x2_ties_go_to_the_first_tap_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2"); /* settings are read at aq_init */
  check_pool_2x2_ties();
}
