/* aq_matmul_fused_f32's GPU builds against the GPU's own unfused pair (the
 * product, then aq_sgd_momentum_f32 or aq_relu_bwd_f32), on shapes that
 * select each build the way the scheduler does, at both precisions;
 * aq_sum_rows_sgd_f32 likewise; and the conv block's fused batch norm and
 * pool backward. */
#include "gk.h"

TestSuite(gpu_fused, .init = gk_setup, .fini = gk_teardown);

typedef struct fcase {
  int64_t m, n, k;
  int ta, tb;
  const char *build; /* the fused kernel aq_gpu_op_kernel must pick, exact */
  const char *x3;    /* and at the default precision */
  int32_t precision;
} fcase_t;

static aq_matmul_args_t product(const float *a, const float *b, float *c, const fcase_t *f) {
  aq_matmul_args_t p = {.a = a, .b = b, .c = c, .m = f->m, .n = f->n, .k = f->k, .lda = f->ta ? f->m : f->k,
                        .ldb = f->tb ? f->k : f->n, .ldc = f->n, .batch = 1, .alpha = 1.0f, .trans_a = f->ta,
                        .trans_b = f->tb, .precision = f->precision};
  return p;
}

static void check(const fcase_t *f, aq_matmul_fuse_t kind) {
  size_t mn = (size_t)(f->m * f->n);
  float *a = gk_random((size_t)(f->m * f->k), 1), *b = gk_random((size_t)(f->k * f->n), 2), *g = gk_floats(mn);
  float *c = gk_random(mn, 3), *v = gk_random(mn, 4), *c2 = gk_floats(mn), *v2 = gk_floats(mn);
  float *mask = gk_random(mn, 5);
  memcpy(c2, c, mn * 4), memcpy(v2, v, mn * 4);
  aq_matmul_args_t mm = product(a, b, g, f);
  gk_run(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &mm), &mm, aq_matmul_f32_gpu_shape(&mm));
  if (kind == AQ_MATMUL_FUSE_SGD) {
    aq_sgd_args_t s = {.w = c, .grad = g, .velocity = v, .n = (int64_t)mn, .lr = 0.05f, .momentum = 0.9f,
                       .weight_decay = 1e-3f};
    gk_op(AQ_KERNEL_SGD, &s, aq_elementwise_grid((int64_t)mn));
  } else {
    aq_relu_args_t r = {mask, g, c, (int64_t)mn};
    gk_op(AQ_KERNEL_RELU_BWD, &r, aq_elementwise_grid((int64_t)mn));
  }
  aq_matmul_fused_args_t fa = {.mm = product(a, b, c2, f), .fuse = kind, .mask = mask, .ldmask = f->n,
                               .velocity = v2, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
  const char *name = aq_gpu_op_kernel(AQ_KERNEL_MATMUL_FUSED, &fa);
  cr_assert_str_eq(name, f->precision == AQ_MATMUL_PRECISION_EXACT ? f->build : f->x3, "%lldx%lldx%lld",
                   (long long)f->m, (long long)f->n, (long long)f->k);
  gk_run(name, &fa, aq_gpu_op_shape(AQ_KERNEL_MATMUL_FUSED, &fa, aq_matmul_grid(&fa.mm)));
  /* The products are the same code; only how the update's multiply-adds
   * contract may differ. */
  gk_expect_close(kind == AQ_MATMUL_FUSE_SGD ? "weight" : "dx", c2, c, mn, 1e-6f);
  if (kind == AQ_MATMUL_FUSE_SGD) gk_expect_close("velocity", v2, v, mn, 1e-6f);
  aq_memory_free(a), aq_memory_free(b), aq_memory_free(g), aq_memory_free(c), aq_memory_free(v);
  aq_memory_free(c2), aq_memory_free(v2), aq_memory_free(mask);
}

Test(gpu_fused, every_build_matches_the_unfused_pair) {
  const fcase_t cases[] = {
      {1540, 1410, 40, 0, 0, AQ_KERNEL_MATMUL_FUSED, AQ_KERNEL_MATMUL_FUSED_X3, 0}, /* 128x128 tiles */
      {784, 1024, 256, 1, 0, AQ_KERNEL_MATMUL_FUSED_SPLIT2, AQ_KERNEL_MATMUL_FUSED_X3, 0}, /* an MLP's dW1 = x^T dz1 */
      {256, 1024, 300, 0, 1, AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT2, AQ_KERNEL_MATMUL_FUSED_X3_SPLIT2, 0}, /* k split */
      {128, 1024, 512, 1, 0, AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT4, AQ_KERNEL_MATMUL_FUSED_X3_SPLIT4, 0},
      {256, 1024, 100, 1, 1, AQ_KERNEL_MATMUL_FUSED_TILE64, AQ_KERNEL_MATMUL_FUSED_X3, 0}, /* too shallow to split */
      {1024, 10, 256, 1, 0, AQ_KERNEL_MATMUL_FUSED_ROWS, AQ_KERNEL_MATMUL_FUSED_ROWS, 0}, /* dW3 = h2^T dz3: a warp a row */
      {256, 10, 1024, 0, 0, AQ_KERNEL_MATMUL_FUSED_ROWS, AQ_KERNEL_MATMUL_FUSED_ROWS, 0}, /* lanes along k */
      {77, 45, 33, 0, 0, AQ_KERNEL_MATMUL_FUSED_TILE64, AQ_KERNEL_MATMUL_FUSED_X3, 0}, /* partial tiles everywhere */
      /* relu's backward through a deep product: dz2 W2^T over k = 1024, split */
      {256, 1024, 1024, 0, 1, AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT2, AQ_KERNEL_MATMUL_FUSED_X3_SPLIT2, 0},
  };
  for (int32_t precision = 0; precision < 2; ++precision)
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
      fcase_t c = cases[i];
      c.precision = precision;
      if (c.k <= AQ_MATMUL_FUSE_SGD_MAX_K) check(&c, AQ_MATMUL_FUSE_SGD);
      check(&c, AQ_MATMUL_FUSE_RELU_MASK);
    }
}

Test(gpu_fused, kernargs_outside_the_rules_write_nothing) {
  const fcase_t f = {64, 64, 64, 0, 0, AQ_KERNEL_MATMUL_FUSED_TILE64, AQ_KERNEL_MATMUL_FUSED_X3, 0};
  float *a = gk_random(64 * 64, 1), *w = gk_random(64 * 64, 2), *v = gk_random(64 * 64, 3), before[64 * 64];
  memcpy(before, w, sizeof(before));
  aq_matmul_fused_args_t ok = {.mm = product(a, a, w, &f), .fuse = AQ_MATMUL_FUSE_SGD, .velocity = v, .lr = 0.1f};
  aq_matmul_fused_args_t bad[4] = {ok, ok, ok, ok};
  bad[0].mm.bias = a, bad[1].mm.beta = 1.0f, bad[2].fuse = 9, bad[3].fuse = AQ_MATMUL_FUSE_RELU_MASK;
  for (int i = 0; i < 4; ++i) {
    gk_run(aq_gpu_op_kernel(AQ_KERNEL_MATMUL_FUSED, &bad[i]), &bad[i], aq_matmul_f32_gpu_shape(&bad[i].mm));
    cr_assert(!memcmp(w, before, sizeof(before)), "case %d wrote the weight", i);
  }
  aq_memory_free(a), aq_memory_free(w), aq_memory_free(v);
}

Test(gpu_fused, sgd_of_a_sum_over_rows_matches_the_unfused_pair) {
  const int64_t shapes[][2] = {{256, 1024}, {256, 10}, {7, 300}, {1, 1}};
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); ++c) {
    int64_t rows = shapes[c][0], cols = shapes[c][1];
    float *x = gk_random((size_t)(rows * cols), 1), *g = gk_floats((size_t)cols), *w = gk_random((size_t)cols, 3);
    float *v = gk_random((size_t)cols, 4), *w2 = gk_floats((size_t)cols), *v2 = gk_floats((size_t)cols);
    memcpy(w2, w, (size_t)cols * 4), memcpy(v2, v, (size_t)cols * 4);
    aq_sum_rows_args_t sr = {.x = x, .out = g, .rows = rows, .cols = cols, .ldx = cols, .alpha = 1.0f};
    gk_run(AQ_KERNEL_SUM_ROWS, &sr, aq_gpu_op_shape(AQ_KERNEL_SUM_ROWS, &sr, aq_cols_grid(cols)));
    aq_sgd_args_t s = {.w = w, .grad = g, .velocity = v, .n = cols, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    gk_op(AQ_KERNEL_SGD, &s, aq_elementwise_grid(cols));
    aq_sum_rows_sgd_args_t f = {.sr = sr, .velocity = v2, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    f.sr.out = w2;
    gk_run(AQ_KERNEL_SUM_ROWS_SGD, &f, aq_gpu_op_shape(AQ_KERNEL_SUM_ROWS_SGD, &f, aq_cols_grid(cols)));
    gk_expect_close("weight", w2, w, (size_t)cols, 1e-6f);
    gk_expect_close("velocity", v2, v, (size_t)cols, 1e-6f);
    aq_memory_free(x), aq_memory_free(g), aq_memory_free(w), aq_memory_free(v), aq_memory_free(w2), aq_memory_free(v2);
  }
}

/* A conv block's pairs on the GPU: aq_batch_norm_apply_relu_f32 against
 * _apply then relu, aq_max_pool2d_bwd_relu_f32 against the pool's backward
 * then relu's, each under the launch shape the scheduler gives the fused
 * kernel (the product's). The fused kernels share the pair's device code:
 * the values agree exactly. */
static int same_shape(aq_dispatch_shape_t a, aq_dispatch_shape_t b) { /* field by field: the struct has padding */
  for (int d = 0; d < 3; ++d)
    if (a.grid[d] != b.grid[d] || a.workgroup[d] != b.workgroup[d]) return 0;
  return 1;
}

static void bn_relu_gpu_case(int64_t n, int64_t c, int64_t hw) {
  const int64_t total = n * c * hw;
  const int32_t slices = aq_batch_norm_slices(n, c, hw);
  float *x = gk_random((size_t)total, 21), *g = gk_random((size_t)c, 22), *b = gk_random((size_t)c, 23);
  float *y = gk_floats((size_t)total), *r = gk_floats((size_t)total), *r2 = gk_floats((size_t)total);
  float *pc = gk_floats((size_t)(8 * c)); /* mean, rstd, running mean and variance: twice */
  double *partial = gk_alloc((size_t)(c * slices * 2), sizeof(double));
  for (int64_t i = 0; i < 8 * c; ++i) pc[i] = (i / c) % 4 == 3 ? 1.0f : 0.0f;
  aq_batch_norm_args_t a = {x, g, b, y, pc, pc + c, pc + 2 * c, pc + 3 * c, NULL, NULL, NULL, NULL, n, c, hw,
                            1e-5f, 0.1f, 1, slices, partial};
  aq_dispatch_shape_t cpu = aq_planes_grid(c * slices);
  gk_run(AQ_KERNEL_BATCH_NORM_STATS, &a, aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_STATS, &a, cpu));
  gk_run(AQ_KERNEL_BATCH_NORM_APPLY, &a, aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_APPLY, &a, cpu));
  aq_relu_args_t rl = {y, NULL, r, total};
  gk_op(AQ_KERNEL_RELU, &rl, aq_elementwise_grid(total));
  aq_batch_norm_args_t f = a;
  f.y = r2, f.mean = pc + 4 * c, f.rstd = pc + 5 * c, f.running_mean = pc + 6 * c, f.running_var = pc + 7 * c;
  aq_dispatch_shape_t fs = aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_APPLY_RELU, &f, cpu);
  aq_dispatch_shape_t ps = aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_APPLY, &a, cpu);
  cr_assert(same_shape(fs, ps), "the fused kernel launches as the product");
  gk_run(AQ_KERNEL_BATCH_NORM_APPLY_RELU, &f, fs);
  gk_expect_close("bn relu y", r2, r, (size_t)total, 0.0f);
  gk_expect_close("bn relu statistics", pc + 4 * c, pc, (size_t)(4 * c), 0.0f);
  aq_memory_free(x), aq_memory_free(g), aq_memory_free(b), aq_memory_free(y), aq_memory_free(r), aq_memory_free(r2);
  aq_memory_free(pc), aq_memory_free(partial);
}

static void pool_relu_gpu_case(int64_t planes, int64_t h, int64_t w, int32_t k, int32_t stride, int32_t pad) {
  aq_pool_args_t a = {.planes = planes, .h = h, .w = w, .kh = k, .kw = k, .stride_h = stride, .stride_w = stride,
                      .pad_h = pad, .pad_w = pad};
  a.p = (h + 2 * pad - k) / stride + 1, a.q = (w + 2 * pad - k) / stride + 1;
  const int64_t in = planes * h * w, out = planes * a.p * a.q;
  float *x = gk_random((size_t)in, 24), *y = gk_floats((size_t)out), *dy = gk_random((size_t)out, 25);
  float *g = gk_floats((size_t)in), *dx = gk_floats((size_t)in), *dx2 = gk_floats((size_t)in);
  int32_t *arg = gk_alloc((size_t)out, 4);
  for (int64_t i = 0; i < in; ++i) x[i] = x[i] > 0 ? x[i] : 0; /* relu's output */
  a.x = x, a.y = y, a.argmax = arg, a.dy = dy, a.dx = g;
  aq_dispatch_shape_t cpu = aq_planes_grid(planes);
  gk_run(AQ_KERNEL_MAX_POOL, &a, aq_gpu_op_shape(AQ_KERNEL_MAX_POOL, &a, cpu));
  gk_run(AQ_KERNEL_MAX_POOL_BWD, &a, aq_gpu_op_shape(AQ_KERNEL_MAX_POOL_BWD, &a, cpu));
  aq_relu_args_t r = {x, g, dx, in};
  gk_op(AQ_KERNEL_RELU_BWD, &r, aq_elementwise_grid(in));
  aq_pool_relu_bwd_args_t f = {a, x};
  f.pool.dx = dx2;
  aq_dispatch_shape_t fs = aq_gpu_op_shape(AQ_KERNEL_MAX_POOL_BWD_RELU, &f, cpu);
  aq_dispatch_shape_t ps = aq_gpu_op_shape(AQ_KERNEL_MAX_POOL_BWD, &a, cpu);
  cr_assert(same_shape(fs, ps), "the fused kernel launches as the product");
  gk_run(AQ_KERNEL_MAX_POOL_BWD_RELU, &f, fs);
  gk_expect_close("pool relu dx", dx2, dx, (size_t)in, 0.0f);
  aq_memory_free(x), aq_memory_free(y), aq_memory_free(dy), aq_memory_free(g), aq_memory_free(dx);
  aq_memory_free(dx2), aq_memory_free(arg);
}

Test(gpu_fused, a_conv_blocks_relus_match_the_unfused_pairs) {
  bn_relu_gpu_case(256, 6, 784); /* the Fashion-MNIST CNN's blocks */
  bn_relu_gpu_case(256, 16, 100);
  bn_relu_gpu_case(5, 3, 33);
  pool_relu_gpu_case(256 * 6, 28, 28, 2, 2, 0);
  pool_relu_gpu_case(256 * 16, 10, 10, 2, 2, 0);
  pool_relu_gpu_case(5, 9, 7, 3, 1, 1); /* overlapping windows */
}
