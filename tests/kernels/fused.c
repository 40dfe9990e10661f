/* aq_matmul_fused_f32 against the pair it replaces (aq_matmul_f32, then
 * aq_sgd_momentum_f32 or aq_relu_bwd_f32), element for element: the fused
 * write-back must compute what the two kernels do, on every path of the
 * GEMM (narrow, one A block, blocked; one depth slice or several); and
 * aq_sum_rows_sgd_f32 against aq_sum_rows_f32 then the SGD update. */
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
