/* aq_matmul_fused_f32 against the pair it replaces (aq_matmul_f32, then
 * aq_sgd_momentum_f32 or aq_relu_bwd_f32), element for element: the fused
 * write-back must compute what the two kernels do, on every path of the
 * GEMM (narrow, one A block, blocked; one depth slice or several); and
 * aq_sum_rows_sgd_f32 against aq_sum_rows_f32 then the SGD update; the
 * conv block's fused batch norm and pool backward against their pairs. */
#include <string.h>

#include "kernels.h"

TestSuite(fused, .init = setup, .fini = teardown);

static aq_matmul_args_t product(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k, int ta,
                                int tb) {
  aq_matmul_args_t p = {.a = a, .b = b, .c = c, .m = m, .n = n, .k = k, .lda = ta ? m : k, .ldb = tb ? k : n,
                        .ldc = n, .batch = 1, .alpha = 1.0f, .trans_a = ta, .trans_b = tb};
  return p;
}

/* About half of A zero, as a ReLU leaves it (the CPU GEMM's sparse path). */
static float *sparse(float *a, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((i * 2654435761u >> 13) % 9 < 5) a[i] = 0.0f;
  return a;
}

static void check_sgd_on(int64_t m, int64_t n, int64_t k, int ta, int tb, float wd, int zeros) {
  float *a = rnd((size_t)(m * k), 1), *b = rnd((size_t)(k * n), 2), *g = rnd((size_t)(m * n), 3);
  float *w = rnd((size_t)(m * n), 4), *v = rnd((size_t)(m * n), 5);
  float *w2 = malloc((size_t)(m * n) * 4), *v2 = malloc((size_t)(m * n) * 4);
  memcpy(w2, w, (size_t)(m * n) * 4), memcpy(v2, v, (size_t)(m * n) * 4);
  if (zeros) sparse(a, (size_t)(m * k));
  aq_matmul_args_t mm = product(a, b, g, m, n, k, ta, tb);
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &mm, aq_matmul_grid(&mm)));
  aq_sgd_args_t s = {.w = w, .grad = g, .velocity = v, .n = m * n, .lr = 0.05f, .momentum = 0.9f, .weight_decay = wd};
  AQ_ASSERT_OK(run(AQ_KERNEL_SGD, &s, aq_elementwise_grid(m * n)));
  aq_matmul_fused_args_t f = {.mm = product(a, b, w2, m, n, k, ta, tb), .fuse = AQ_MATMUL_FUSE_SGD, .velocity = v2,
                              .lr = 0.05f, .momentum = 0.9f, .weight_decay = wd};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL_FUSED, &f, aq_matmul_grid(&f.mm)));
  for (int64_t i = 0; i < m * n; ++i) {
    cr_assert_eq(w2[i], w[i], "%lldx%lldx%lld: w[%lld] = %.9g fused, %.9g unfused", (long long)m, (long long)n,
                 (long long)k, (long long)i, w2[i], w[i]);
    cr_assert_eq(v2[i], v[i], "%lldx%lldx%lld: velocity[%lld] differs", (long long)m, (long long)n, (long long)k,
                 (long long)i);
  }
  free(a), free(b), free(g), free(w), free(v), free(w2), free(v2);
}

static void check_sgd(int64_t m, int64_t n, int64_t k, int ta, int tb, float wd) { check_sgd_on(m, n, k, ta, tb, wd, 0); }

static void check_relu_mask_on(int64_t m, int64_t n, int64_t k, int ta, int tb, int zeros) {
  float *a = rnd((size_t)(m * k), 6), *b = rnd((size_t)(k * n), 7), *dy = rnd((size_t)(m * n), 8);
  if (zeros) sparse(a, (size_t)(m * k));
  float *y = rnd((size_t)(m * n), 9), *dx = rnd((size_t)(m * n), 10), *dx2 = rnd((size_t)(m * n), 11);
  aq_matmul_args_t mm = product(a, b, dy, m, n, k, ta, tb);
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &mm, aq_matmul_grid(&mm)));
  aq_relu_args_t r = {y, dy, dx, m * n};
  AQ_ASSERT_OK(run(AQ_KERNEL_RELU_BWD, &r, aq_elementwise_grid(m * n)));
  aq_matmul_fused_args_t f = {.mm = product(a, b, dx2, m, n, k, ta, tb), .fuse = AQ_MATMUL_FUSE_RELU_MASK,
                              .mask = y, .ldmask = n};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL_FUSED, &f, aq_matmul_grid(&f.mm)));
  int64_t cut = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    cr_assert_eq(dx2[i], dx[i], "%lldx%lldx%lld: dx[%lld] = %.9g fused, %.9g unfused", (long long)m, (long long)n,
                 (long long)k, (long long)i, dx2[i], dx[i]);
    cut += dx[i] == 0.0f;
  }
  cr_assert(cut > 0 && cut < m * n, "the mask must cut some elements and pass others");
  free(a), free(b), free(dy), free(y), free(dx), free(dx2);
}

static void check_relu_mask(int64_t m, int64_t n, int64_t k, int ta, int tb) { check_relu_mask_on(m, n, k, ta, tb, 0); }

Test(fused, sgd_update_in_the_write_back_equals_matmul_then_sgd) {
  check_sgd(1024, 1024, 256, 1, 0, 0.0f);  /* an MLP's weight gradient h^T dz: the blocked path */
  check_sgd(784, 1024, 256, 1, 0, 1e-4f);  /* with weight decay */
  check_sgd(200, 96, 77, 0, 1, 0.0f);      /* one A block (the fused part path), partial tiles */
  check_sgd(1024, 10, 256, 1, 0, 0.0f);    /* a classifier's weights: the narrow kernels */
  check_sgd(37, 45, 512, 0, 0, 0.0f);      /* the deepest single slice */
  check_sgd(5, 3, 0, 0, 0, 0.0f);          /* k = 0: a zero gradient still moves w through momentum */
}

Test(fused, relu_mask_in_the_write_back_equals_matmul_then_relu_backward) {
  check_relu_mask(256, 1024, 1024, 0, 1); /* dz W^T over two depth slices */
  check_relu_mask(256, 1024, 10, 0, 1);   /* the logits' gradient back through W3 */
  check_relu_mask(389, 1057, 515, 1, 0);  /* every block boundary */
  check_relu_mask(64, 12, 40, 0, 0);      /* narrow */
}

/* A mostly zero: the sparse path's write-back through the consumer. */
Test(fused, consumers_on_the_sparse_path_equal_the_pair) {
  check_sgd_on(1024, 1024, 256, 1, 0, 0.0f, 1); /* blocked: A in three blocks */
  check_sgd_on(200, 96, 77, 0, 1, 1e-4f, 1);    /* one block, partial tiles */
  check_relu_mask_on(256, 1024, 1024, 0, 1, 1); /* two depth slices */
  check_relu_mask_on(389, 1057, 515, 1, 0, 1);  /* every block boundary */
}

Test(fused, kernargs_outside_the_rules_fault_and_write_nothing) {
  enum { M = 16, N = 16, K = 16 };
  float *a = rnd(M * K, 1), *b = rnd(K * N, 2), *w = rnd(M * N, 3), *v = rnd(M * N, 4), *bias = rnd(N, 5);
  float *w0 = malloc(M * N * 4);
  memcpy(w0, w, M * N * 4);
  aq_matmul_fused_args_t ok = {.mm = product(a, b, w, M, N, K, 0, 0), .fuse = AQ_MATMUL_FUSE_SGD, .velocity = v,
                               .lr = 0.1f, .momentum = 0.9f};
  aq_matmul_fused_args_t bad[6];
  for (int i = 0; i < 6; ++i) bad[i] = ok;
  bad[0].mm.bias = bias;                        /* nothing may follow the product but the consumer */
  bad[1].mm.activation = AQ_ACTIVATION_RELU;
  bad[2].mm.beta = 1.0f;                        /* SGD's weight is not an accumulator */
  bad[3].mm.k = AQ_MATMUL_FUSE_SGD_MAX_K + 1;   /* more than one depth slice */
  bad[3].mm.lda = bad[3].mm.k, bad[3].mm.a = rnd((size_t)(M * bad[3].mm.k), 6);
  bad[4].fuse = 7;                              /* no such consumer */
  bad[5].fuse = AQ_MATMUL_FUSE_RELU_MASK;       /* ... without its mask */
  for (int i = 0; i < 6; ++i) {
    cr_assert_eq(run(AQ_KERNEL_MATMUL_FUSED, &bad[i], aq_matmul_grid(&bad[i].mm)), AQ_ERROR_KERNEL_FAULT, "case %d", i);
    cr_assert(strstr(aq_last_error(), AQ_KERNEL_MATMUL_FUSED), "case %d: %s", i, aq_last_error());
    cr_assert(!memcmp(w, w0, M * N * 4), "case %d wrote the weight", i);
  }
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL_FUSED, &ok, aq_matmul_grid(&ok.mm)));
  cr_assert(memcmp(w, w0, M * N * 4), "the valid update moves the weight");
  free((void *)bad[3].mm.a);
  free(a), free(b), free(w), free(v), free(bias), free(w0);
}

Test(fused, sgd_of_a_sum_over_rows_equals_sum_rows_then_sgd) {
  const int64_t shapes[][2] = {{256, 1024}, {256, 10}, {7, 300}, {1, 1}, {0, 5}};
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); ++c) {
    int64_t rows = shapes[c][0], cols = shapes[c][1];
    float *x = rnd((size_t)(rows * cols), 1), *g = rnd((size_t)cols, 2), *w = rnd((size_t)cols, 3);
    float *v = rnd((size_t)cols, 4), *w2 = malloc((size_t)cols * 4), *v2 = malloc((size_t)cols * 4);
    memcpy(w2, w, (size_t)cols * 4), memcpy(v2, v, (size_t)cols * 4);
    aq_sum_rows_args_t sr = {.x = x, .out = g, .rows = rows, .cols = cols, .ldx = cols, .alpha = 1.0f};
    AQ_ASSERT_OK(run(AQ_KERNEL_SUM_ROWS, &sr, aq_cols_grid(cols)));
    aq_sgd_args_t s = {.w = w, .grad = g, .velocity = v, .n = cols, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    AQ_ASSERT_OK(run(AQ_KERNEL_SGD, &s, aq_elementwise_grid(cols)));
    aq_sum_rows_sgd_args_t f = {.sr = sr, .velocity = v2, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    f.sr.out = w2;
    AQ_ASSERT_OK(run(AQ_KERNEL_SUM_ROWS_SGD, &f, aq_cols_grid(cols)));
    for (int64_t j = 0; j < cols; ++j) {
      cr_assert_eq(w2[j], w[j], "%lldx%lld: w[%lld] = %.9g fused, %.9g unfused", (long long)rows, (long long)cols,
                   (long long)j, w2[j], w[j]);
      cr_assert_eq(v2[j], v[j], "%lldx%lld: velocity[%lld] differs", (long long)rows, (long long)cols, (long long)j);
    }
    /* beta (an accumulating sum) and a missing velocity are outside the rules */
    memcpy(w, w2, (size_t)cols * 4);
    aq_sum_rows_sgd_args_t bad[2] = {f, f};
    bad[0].sr.beta = 1.0f, bad[1].velocity = NULL;
    for (int i = 0; i < 2; ++i) {
      cr_assert_eq(run(AQ_KERNEL_SUM_ROWS_SGD, &bad[i], aq_cols_grid(cols)), AQ_ERROR_KERNEL_FAULT);
      cr_assert(!memcmp(w, w2, (size_t)cols * 4), "a refused update wrote the weight");
    }
    free(x), free(g), free(w), free(v), free(w2), free(v2);
  }
}

/* A conv block's pairs: aq_batch_norm_apply_relu_f32 against _apply then
 * relu, and aq_max_pool2d_bwd_relu_f32 against the pool's backward then
 * relu's, bit for bit (the fused kernels share the pair's loops). */

/* One shape, training and inference, over `slices` slices and a grid of
 * `wg`-item groups: y and every statistic equal. */
static void bn_relu_case(int64_t n, int64_t c, int64_t hw, int32_t slices, uint16_t wg, int training) {
  int64_t total = n * c * hw;
  float *x = rnd((size_t)total, 30), *g = rnd((size_t)c, 31), *b = rnd((size_t)c, 32);
  float *y = rnd((size_t)total, 33), *r = rnd((size_t)total, 34), *r2 = rnd((size_t)total, 35);
  float *pc = calloc((size_t)(8 * c), sizeof(float)); /* mean, rstd, running mean and var: twice */
  for (int64_t i = 0; i < c; ++i) pc[3 * c + i] = pc[7 * c + i] = 1.0f + 0.5f * (float)i, pc[2 * c + i] = pc[6 * c + i] = 0.1f;
  double *partial = calloc((size_t)(c * slices * 2), sizeof(double));
  aq_batch_norm_args_t a = {x, g, b, y, pc, pc + c, pc + 2 * c, pc + 3 * c, NULL, NULL, NULL, NULL, n, c, hw,
                            1e-5f, 0.1f, training, slices, partial};
  aq_dispatch_shape_t grid = {{aq_grid_items(c * slices), 1, 1}, {wg, 1, 1}};
  if (training) AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_STATS, &a, grid));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_APPLY, &a, grid));
  aq_relu_args_t rl = {y, NULL, r, total};
  AQ_ASSERT_OK(run(AQ_KERNEL_RELU, &rl, aq_elementwise_grid(total)));
  aq_batch_norm_args_t f = a; /* the partial sums stay: _apply only reads them */
  f.y = r2, f.mean = pc + 4 * c, f.rstd = pc + 5 * c, f.running_mean = pc + 6 * c, f.running_var = pc + 7 * c;
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_APPLY_RELU, &f, grid));
  int64_t cut = 0;
  for (int64_t i = 0; i < total; ++i) {
    cr_assert_eq(r2[i], r[i], "%lldx%lldx%lld, %d slices: y[%lld] = %.9g fused, %.9g unfused", (long long)n,
                 (long long)c, (long long)hw, slices, (long long)i, r2[i], r[i]);
    cut += r[i] == 0.0f;
  }
  cr_assert(total < 64 || (cut > 0 && cut < total), "relu must cut some values and pass others (%lld of %lld cut)",
            (long long)cut, (long long)total);
  for (int k = 0; k < 4; ++k)
    for (int64_t i = 0; training && i < c; ++i)
      cr_assert_eq(pc[(4 + k) * c + i], pc[k * c + i], "statistic %d of channel %lld", k, (long long)i);
  free(x), free(g), free(b), free(y), free(r), free(r2), free(pc), free(partial);
}

Test(fused, batch_norm_with_relu_equals_batch_norm_then_relu) {
  const int64_t shapes[][3] = {{1, 1, 4}, {5, 2, 33}, {64, 6, 784}, {64, 16, 100}, {3, 6, 2000}};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
    int64_t n = shapes[i][0], c = shapes[i][1], hw = shapes[i][2];
    for (int training = 0; training < 2; ++training) {
      bn_relu_case(n, c, hw, aq_batch_norm_slices(n, c, hw), 1, training);
      bn_relu_case(n, c, hw, 7, 3, training); /* slices cut planes; groups of 3 items */
    }
  }
}

/* Max-pool's forward on x, then its backward and relu's (mask: x, as where
 * the pool reads relu's output) against the fused backward. */
static void pool_relu_case(int64_t planes, int64_t h, int64_t w, int32_t k, int32_t stride, int32_t pad) {
  aq_pool_args_t a = {.planes = planes, .h = h, .w = w, .kh = k, .kw = k, .stride_h = stride, .stride_w = stride,
                      .pad_h = pad, .pad_w = pad};
  a.p = (h + 2 * pad - k) / stride + 1, a.q = (w + 2 * pad - k) / stride + 1;
  int64_t in = planes * h * w, out = planes * a.p * a.q;
  float *x = rnd((size_t)in, 40), *y = rnd((size_t)out, 41), *dy = rnd((size_t)out, 42);
  float *g = rnd((size_t)in, 43), *dx = rnd((size_t)in, 44), *dx2 = rnd((size_t)in, 45);
  for (int64_t i = 0; i < in; ++i) x[i] = x[i] > 0 ? x[i] : 0; /* relu's output: about half zero */
  int32_t *arg = malloc((size_t)out * sizeof(int32_t));
  a.x = x, a.y = y, a.argmax = arg, a.dy = dy, a.dx = g;
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL, &a, aq_planes_grid(planes)));
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL_BWD, &a, aq_planes_grid(planes)));
  aq_relu_args_t r = {x, g, dx, in};
  AQ_ASSERT_OK(run(AQ_KERNEL_RELU_BWD, &r, aq_elementwise_grid(in)));
  aq_pool_relu_bwd_args_t f = {a, x};
  f.pool.dx = dx2;
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL_BWD_RELU, &f, aq_planes_grid(planes)));
  int64_t passed = 0;
  for (int64_t i = 0; i < in; ++i) {
    cr_assert_eq(dx2[i], dx[i], "%lld planes of %lldx%lld, window %d stride %d pad %d: dx[%lld] = %.9g fused, %.9g "
                 "unfused", (long long)planes, (long long)h, (long long)w, k, stride, pad, (long long)i, dx2[i], dx[i]);
    passed += dx[i] != 0.0f;
  }
  cr_assert(passed > 0, "some gradient must pass the mask");
  f.mask = NULL; /* outside the rules: a fault, nothing written */
  memcpy(dx2, g, (size_t)in * 4);
  cr_assert_eq(run(AQ_KERNEL_MAX_POOL_BWD_RELU, &f, aq_planes_grid(planes)), AQ_ERROR_KERNEL_FAULT);
  cr_assert(!memcmp(dx2, g, (size_t)in * 4), "a refused backward wrote dx");
  free(x), free(y), free(dy), free(g), free(dx), free(dx2), free(arg);
}

Test(fused, max_pool_backward_with_relu_equals_the_pair) {
  pool_relu_case(64 * 6, 28, 28, 2, 2, 0);  /* the CNN's first block */
  pool_relu_case(64 * 16, 10, 10, 2, 2, 0); /* its second */
  pool_relu_case(5, 9, 7, 3, 1, 1);         /* overlapping windows: an input gathers several outputs */
  pool_relu_case(3, 11, 13, 3, 2, 1);       /* padding, odd sizes */
}
