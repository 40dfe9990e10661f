/* The CPU op kernels, dispatched through a CPU agent's queue exactly as the
 * scheduler does, against plain C references on awkward shapes. */
#include <math.h>

#include "kernels.h"

TestSuite(ops, .init = setup, .fini = teardown);

static void check_matmul(int64_t m, int64_t n, int64_t k, int ta, int tb, int bias, int relu, float beta,
                         int64_t batch) {
  int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2; /* non-contiguous rows */
  int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
  float *a = rnd((size_t)(sa * batch), 1), *b = rnd((size_t)(sb * batch), 2), *c = rnd((size_t)(sc * batch), 3);
  float *bv = bias ? rnd((size_t)n, 4) : NULL, *ref = malloc((size_t)(sc * batch) * sizeof(float));
  memcpy(ref, c, (size_t)(sc * batch) * sizeof(float));
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += (double)(ta ? a[q * sa + l * lda + i] : a[q * sa + i * lda + l]) *
               (tb ? b[q * sb + j * ldb + l] : b[q * sb + l * ldb + j]);
        float *r = &ref[q * sc + i * ldc + j];
        double v = 0.5 * s + beta * *r + (bias ? bv[j] : 0.0);
        *r = (float)(relu && v < 0 ? 0 : v);
      }
  aq_matmul_args_t args = {a, b, c, bv, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, 0.5f, beta, ta, tb,
                           relu ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float got = c[q * sc + i * ldc + j], want = ref[q * sc + i * ldc + j];
        cr_assert(fabsf(got - want) <= 1e-4f * (1.0f + (float)k) * (1.0f + fabsf(want)),
                  "m=%lld n=%lld k=%lld ta=%d tb=%d: C[%lld,%lld,%lld] = %g, want %g", (long long)m, (long long)n,
                  (long long)k, ta, tb, (long long)q, (long long)i, (long long)j, got, want);
      }
  for (int64_t i = 0; i < m; ++i) /* the padding between rows is untouched */
    cr_assert_eq(c[i * ldc + n], ref[i * ldc + n]);
  free(a), free(b), free(c), free(bv), free(ref);
}

Test(ops, matmul_awkward_shapes_and_transposes) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 257}, {257, 33, 7}, {100, 300, 260}, {6, 32, 256}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int t = 0; t < 4; ++t) check_matmul(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, 0, 0, 0.0f, 1);
}

Test(ops, matmul_epilogue_beta_and_batch) {
  check_matmul(37, 70, 19, 0, 0, 1, 1, 0.0f, 1);
  check_matmul(37, 70, 300, 1, 0, 1, 0, 0.75f, 1);
  check_matmul(9, 17, 13, 0, 1, 0, 0, 1.0f, 3);
  check_matmul(5, 8, 0, 0, 0, 1, 0, 0.5f, 1); /* k = 0: C = beta C + bias */
}

Test(ops, matmul_every_isa_path) {
  const char *isas[] = {"generic", "avx2"};
  for (int i = 0; i < 2; ++i) {
    /* The ISA is picked once per process; only the first setting applies, so
     * the sandboxed test process sees just this one. */
    kernels_restart_with("AQ_CPU_ISA", isas[i]);
    check_matmul(13, 40, 33, 0, 0, 1, 1, 0.0f, 1);
  }
}

Test(ops, matmul_bad_kernargs_fault_without_touching_memory) {
  aq_matmul_args_t args = {.a = NULL, .m = 4, .n = 4, .k = 4, .lda = 4, .ldb = 4, .ldc = 4, .batch = 1};
  cr_assert_eq(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)), AQ_ERROR_KERNEL_FAULT);
  cr_assert(strstr(aq_last_error(), AQ_KERNEL_MATMUL), "%s", aq_last_error());
  /* A precision that is neither default nor exact: refused, C untouched. */
  float a[16], c[16];
  for (int i = 0; i < 16; ++i) a[i] = 1.0f, c[i] = -5.0f;
  args.a = args.b = a, args.c = c, args.alpha = 1.0f, args.precision = 2;
  cr_assert_eq(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)), AQ_ERROR_KERNEL_FAULT);
  for (int i = 0; i < 16; ++i) cr_assert_eq(c[i], -5.0f);
  args.precision = AQ_MATMUL_PRECISION_EXACT;
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)));
  for (int i = 0; i < 16; ++i) cr_assert_eq(c[i], 4.0f);
}

Test(ops, relu_forward_backward_axpby) {
  enum { N = 10007 };
  float *x = rnd(N, 5), *y = rnd(N, 6), *dy = rnd(N, 7), *dx = rnd(N, 8), *z = rnd(N, 9);
  aq_relu_args_t r = {x, NULL, y, N};
  AQ_ASSERT_OK(run(AQ_KERNEL_RELU, &r, aq_elementwise_grid(N)));
  for (int i = 0; i < N; ++i) cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f);
  aq_relu_args_t rb = {y, dy, dx, N};
  AQ_ASSERT_OK(run(AQ_KERNEL_RELU_BWD, &rb, aq_elementwise_grid(N)));
  for (int i = 0; i < N; ++i) cr_assert_eq(dx[i], y[i] > 0 ? dy[i] : 0.0f);
  aq_axpby_args_t ax = {x, dy, z, N, 2.0f, -3.0f};
  AQ_ASSERT_OK(run(AQ_KERNEL_AXPBY, &ax, aq_elementwise_grid(N)));
  for (int i = 0; i < N; ++i) cr_assert_float_eq(z[i], 2.0f * x[i] - 3.0f * dy[i], 1e-6);
  free(x), free(y), free(dy), free(dx), free(z);
}

static double xent_loss(const float *logits, const int32_t *labels, int64_t rows, int64_t classes) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = logits[r * classes], s = 0;
    for (int64_t j = 0; j < classes; ++j) mx = fmax(mx, logits[r * classes + j]);
    for (int64_t j = 0; j < classes; ++j) s += exp(logits[r * classes + j] - mx);
    total += log(s) + mx - logits[r * classes + labels[r]];
  }
  return total / (double)rows;
}

Test(ops, softmax_xent_forward_and_backward_by_finite_differences) {
  enum { ROWS = 67, C = 10 };
  float *logits = rnd(ROWS * C, 10), probs[ROWS * C], loss[ROWS], dl[ROWS * C], mean = 0;
  int32_t labels[ROWS];
  for (int i = 0; i < ROWS; ++i) labels[i] = (i * 7) % C;
  aq_softmax_xent_args_t a = {logits, labels, probs, loss, dl, ROWS, C, 1.0f / ROWS, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_SOFTMAX_XENT, &a, aq_rows_grid(ROWS)));
  aq_mean_args_t m = {loss, &mean, ROWS};
  AQ_ASSERT_OK(run(AQ_KERNEL_MEAN, &m, (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}}));
  cr_assert_float_eq(mean, xent_loss(logits, labels, ROWS, C), 1e-5);
  /* Given dlogits, the forward wrote the gradient: the backward's, bit for bit. */
  float from_forward[ROWS * C];
  memcpy(from_forward, dl, sizeof(dl));
  memset(dl, 0, sizeof(dl));
  AQ_ASSERT_OK(run(AQ_KERNEL_SOFTMAX_XENT_BWD, &a, aq_rows_grid(ROWS)));
  cr_assert(!memcmp(from_forward, dl, sizeof(dl)), "the forward's dlogits differ from the backward's");
  for (int i = 0; i < ROWS * C; i += 13) {
    float keep = logits[i];
    const float h = 1e-2f;
    logits[i] = keep + h;
    double up = xent_loss(logits, labels, ROWS, C);
    logits[i] = keep - h;
    double down = xent_loss(logits, labels, ROWS, C);
    logits[i] = keep;
    cr_assert(fabs(dl[i] - (up - down) / (2 * h)) < 1e-4, "dlogits[%d] = %g, finite difference %g", i, dl[i],
              (up - down) / (2 * h));
  }
  labels[3] = C; /* a label out of range is a fault, not a wild write */
  cr_assert_eq(run(AQ_KERNEL_SOFTMAX_XENT, &a, aq_rows_grid(ROWS)), AQ_ERROR_KERNEL_FAULT);
  free(logits);
}

Test(ops, sum_rows_and_sgd) {
  enum { R = 33, C = 300 };
  float *x = rnd(R * (C + 4), 11), out[C], ref[C];
  for (int j = 0; j < C; ++j) out[j] = ref[j] = 1.0f;
  aq_sum_rows_args_t s = {x, out, R, C, C + 4, 2.0f, 0.5f};
  AQ_ASSERT_OK(run(AQ_KERNEL_SUM_ROWS, &s, aq_cols_grid(C)));
  for (int j = 0; j < C; ++j) {
    double t = 0;
    for (int i = 0; i < R; ++i) t += x[i * (C + 4) + j];
    cr_assert_float_eq(out[j], 2.0 * t + 0.5 * ref[j], 1e-4);
  }
  enum { N = 5000 };
  float *w = rnd(N, 12), *g = rnd(N, 13), *v = rnd(N, 14), *w0 = malloc(N * 4), *v0 = malloc(N * 4);
  memcpy(w0, w, N * 4), memcpy(v0, v, N * 4);
  aq_sgd_args_t sg = {w, g, v, N, 0.1f, 0.9f, 0.01f, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_SGD, &sg, aq_elementwise_grid(N)));
  for (int i = 0; i < N; ++i) {
    float vv = 0.9f * v0[i] + g[i] + 0.01f * w0[i];
    cr_assert_float_eq(v[i], vv, 1e-6);
    cr_assert_float_eq(w[i], w0[i] - 0.1f * vv, 1e-6);
  }
  free(x), free(w), free(g), free(v), free(w0), free(v0);
}

Test(ops, adam_and_adamw_match_the_reference_over_steps) {
  enum { N = 3001 };
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    float *w = rnd(N, 21), *g = rnd(N, 22), m[N] = {0}, v[N] = {0}, steps = 0;
    double rw[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; ++i) rw[i] = w[i];
    aq_adam_args_t a = {w, g, m, v, &steps, N, 0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, decoupled};
    aq_increment_args_t inc = {&steps};
    for (int t = 1; t <= 3; ++t) {
      AQ_ASSERT_OK(run(AQ_KERNEL_ADAM, &a, aq_elementwise_grid(N)));
      AQ_ASSERT_OK(run(AQ_KERNEL_INCREMENT, &inc, (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}}));
      for (int i = 0; i < N; ++i) {
        double gg = g[i] + (decoupled ? 0.0 : 0.05 * rw[i]);
        rm[i] = 0.9 * rm[i] + 0.1 * gg;
        rv[i] = 0.999 * rv[i] + 0.001 * gg * gg;
        double step = (rm[i] / (1 - pow(0.9, t))) / (sqrt(rv[i] / (1 - pow(0.999, t))) + 1e-8);
        rw[i] -= 0.01 * (step + (decoupled ? 0.05 * rw[i] : 0.0));
      }
    }
    cr_assert_eq(steps, 3.0f);
    for (int i = 0; i < N; ++i) cr_assert(fabs(w[i] - rw[i]) < 1e-5, "w[%d] = %g, want %g", i, w[i], rw[i]);
    free(w), free(g);
  }
}

/* f and f' for the pointwise activations, in double. */
static double ref_act(int which, double x) {
  return which == 0 ? 1.0 / (1.0 + exp(-x)) : which == 1 ? tanh(x)
                                                          : 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

Test(ops, sigmoid_tanh_gelu_forward_and_backward_by_finite_differences) {
  static const char *fwd[3] = {AQ_KERNEL_SIGMOID, AQ_KERNEL_TANH, AQ_KERNEL_GELU};
  static const char *bwd[3] = {AQ_KERNEL_SIGMOID_BWD, AQ_KERNEL_TANH_BWD, AQ_KERNEL_GELU_BWD};
  enum { N = 4099 };
  for (int w = 0; w < 3; ++w) {
    float *x = rnd(N, 30 + w), *y = malloc(N * 4), *dy = rnd(N, 40 + w), *dx = malloc(N * 4);
    for (int i = 0; i < N; ++i) x[i] *= 4.0f;
    aq_unary_args_t f = {x, NULL, y, N};
    AQ_ASSERT_OK(run(fwd[w], &f, aq_elementwise_grid(N)));
    for (int i = 0; i < N; ++i) cr_assert(fabs(y[i] - ref_act(w, x[i])) < 1e-5, "%s(%g) = %g", fwd[w], x[i], y[i]);
    /* sigmoid and tanh differentiate from their output, gelu from its input */
    aq_unary_args_t b = {w == 2 ? x : y, dy, dx, N};
    AQ_ASSERT_OK(run(bwd[w], &b, aq_elementwise_grid(N)));
    for (int i = 0; i < N; i += 17) {
      double h = 1e-3, fd = (ref_act(w, x[i] + h) - ref_act(w, x[i] - h)) / (2 * h);
      cr_assert(fabs(dx[i] - dy[i] * fd) < 1e-3 * (1 + fabs(dy[i] * fd)), "%s at %g: %g vs %g", bwd[w], x[i], dx[i],
                dy[i] * fd);
    }
    free(x), free(y), free(dy), free(dx);
  }
}

static double row_loss(const float *x, const float *dy, int cols, int take_log) {
  /* L = sum(dy * f(x)): its gradient is the backward of f applied to dy */
  double mx = x[0], s = 0, l = 0;
  for (int j = 0; j < cols; ++j) mx = fmax(mx, x[j]);
  for (int j = 0; j < cols; ++j) s += exp(x[j] - mx);
  for (int j = 0; j < cols; ++j) l += dy[j] * (take_log ? x[j] - mx - log(s) : exp(x[j] - mx) / s);
  return l;
}

Test(ops, softmax_and_log_softmax_forward_and_backward) {
  enum { R = 9, C = 33 };
  for (int take_log = 0; take_log < 2; ++take_log) {
    float *x = rnd(R * C, 50), y[R * C], *dy = rnd(R * C, 51), dx[R * C];
    aq_softmax_args_t f = {x, NULL, NULL, y, R, C};
    AQ_ASSERT_OK(run(take_log ? AQ_KERNEL_LOG_SOFTMAX : AQ_KERNEL_SOFTMAX, &f, aq_rows_grid(R)));
    for (int r = 0; r < R; ++r) {
      double s = 0;
      for (int j = 0; j < C; ++j) s += take_log ? exp(y[r * C + j]) : y[r * C + j];
      cr_assert(fabs(s - 1.0) < 1e-5, "row %d sums to %g", r, s);
    }
    aq_softmax_args_t b = {NULL, y, dy, dx, R, C};
    AQ_ASSERT_OK(run(take_log ? AQ_KERNEL_LOG_SOFTMAX_BWD : AQ_KERNEL_SOFTMAX_BWD, &b, aq_rows_grid(R)));
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < C; j += 5) {
        float *row = x + r * C, keep = row[j], h = 1e-2f;
        row[j] = keep + h;
        double up = row_loss(row, dy + r * C, C, take_log);
        row[j] = keep - h;
        double down = row_loss(row, dy + r * C, C, take_log);
        row[j] = keep;
        cr_assert(fabs(dx[r * C + j] - (up - down) / (2 * h)) < 1e-3, "log=%d dx[%d,%d] %g vs %g", take_log, r, j,
                  dx[r * C + j], (up - down) / (2 * h));
      }
    free(x), free(dy);
  }
}

Test(ops, dropout_is_seeded_and_its_backward_uses_the_same_mask) {
  enum { N = 100000 };
  float *x = rnd(N, 60), *y = malloc(N * 4), *y2 = malloc(N * 4), *dy = rnd(N, 61), *dx = malloc(N * 4);
  aq_dropout_args_t f = {x, y, N, 1234, 0.3f, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_DROPOUT, &f, aq_elementwise_grid(N)));
  int dropped = 0;
  for (int i = 0; i < N; ++i) {
    if (y[i] == 0.0f && x[i] != 0.0f) dropped++;
    else cr_assert_float_eq(y[i], x[i] / 0.7f, 1e-5f * (1.0f + fabsf(x[i])));
  }
  cr_assert(dropped > 0.28 * N && dropped < 0.32 * N, "dropped %d of %d at p = 0.3", dropped, N);
  aq_dropout_args_t b = {dy, dx, N, 1234, 0.3f, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_DROPOUT_BWD, &b, aq_elementwise_grid(N)));
  uint32_t cut = (uint32_t)(0.3 * 4294967296.0);
  for (int i = 0; i < N; ++i) {
    int kept = aq_dropout_hash(1234, (uint64_t)i) >= cut;
    cr_assert_eq(y[i], kept ? x[i] * (1.0f / 0.7f) : 0.0f, "forward mask at %d", i);
    cr_assert_eq(dx[i], kept ? dy[i] * (1.0f / 0.7f) : 0.0f, "backward mask at %d", i);
  }
  aq_dropout_args_t other = {x, y2, N, 99, 0.3f, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_DROPOUT, &other, aq_elementwise_grid(N)));
  int differ = 0;
  for (int i = 0; i < N; ++i) differ += (y[i] == 0.0f) != (y2[i] == 0.0f);
  cr_assert_gt(differ, N / 10, "another seed, another mask");
  aq_dropout_args_t bad = {x, y, N, 1, 1.0f, 0};
  cr_assert_eq(run(AQ_KERNEL_DROPOUT, &bad, aq_elementwise_grid(N)), AQ_ERROR_KERNEL_FAULT, "p = 1 is refused");
  free(x), free(y), free(y2), free(dy), free(dx);
}

static double ln_loss(const float *x, const float *g, const float *b, const float *dy, int cols) {
  double s = 0, ss = 0, l = 0;
  for (int j = 0; j < cols; ++j) s += x[j];
  double mean = s / cols;
  for (int j = 0; j < cols; ++j) ss += (x[j] - mean) * (x[j] - mean);
  double rstd = 1.0 / sqrt(ss / cols + 1e-5);
  for (int j = 0; j < cols; ++j) l += dy[j] * ((x[j] - mean) * rstd * g[j] + b[j]);
  return l;
}

Test(ops, layer_norm_forward_and_backward_by_finite_differences) {
  enum { R = 7, C = 33 };
  float *x = rnd(R * C, 70), *g = rnd(C, 71), *b = rnd(C, 72), *dy = rnd(R * C, 73);
  float y[R * C], mean[R], rstd[R], dx[R * C], dg[C], db[C];
  aq_layer_norm_args_t a = {x, g, b, y, mean, rstd, dy, dx, dg, db, R, C, 1e-5f, 0};
  AQ_ASSERT_OK(run(AQ_KERNEL_LAYER_NORM, &a, aq_rows_grid(R)));
  AQ_ASSERT_OK(run(AQ_KERNEL_LAYER_NORM_BWD, &a, aq_rows_grid(R)));
  AQ_ASSERT_OK(run(AQ_KERNEL_LAYER_NORM_BWD_PARAMS, &a, aq_cols_grid(C)));
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; j += 4) {
      float *row = x + r * C, keep = row[j], h = 1e-2f;
      row[j] = keep + h;
      double up = ln_loss(row, g, b, dy + r * C, C);
      row[j] = keep - h;
      double down = ln_loss(row, g, b, dy + r * C, C);
      row[j] = keep;
      cr_assert(fabs(dx[r * C + j] - (up - down) / (2 * h)) < 2e-3, "dx[%d,%d] %g vs %g", r, j, dx[r * C + j],
                (up - down) / (2 * h));
    }
  for (int j = 0; j < C; j += 5) {
    double want_db = 0, want_dg = 0;
    for (int r = 0; r < R; ++r) want_db += dy[r * C + j], want_dg += dy[r * C + j] * (y[r * C + j] - b[j]) / g[j];
    cr_assert(fabs(db[j] - want_db) < 1e-4, "dbeta[%d]", j);
    cr_assert(fabs(dg[j] - want_dg) < 1e-3 * (1 + fabs(want_dg)), "dgamma[%d] %g vs %g", j, dg[j], want_dg);
  }
  free(x), free(g), free(b), free(dy);
}

Test(ops, embedding_lookup_and_accumulating_backward) {
  enum { V = 11, D = 7, N = 40 };
  float *table = rnd(V * D, 80), out[N * D], *dout = rnd(N * D, 81), dtable[V * D] = {0};
  int32_t ids[N];
  for (int i = 0; i < N; ++i) ids[i] = (i * 7) % V; /* repeats */
  aq_embedding_args_t a = {table, ids, out, dout, dtable, V, D, N};
  AQ_ASSERT_OK(run(AQ_KERNEL_EMBEDDING, &a, aq_rows_grid(N)));
  for (int i = 0; i < N; ++i) cr_assert_eq(memcmp(out + i * D, table + ids[i] * D, D * 4), 0, "row %d", i);
  AQ_ASSERT_OK(run(AQ_KERNEL_EMBEDDING_BWD, &a, aq_cols_grid(D)));
  for (int v = 0; v < V; ++v)
    for (int j = 0; j < D; ++j) {
      double want = 0;
      for (int i = 0; i < N; ++i) want += ids[i] == v ? dout[i * D + j] : 0;
      cr_assert(fabs(dtable[v * D + j] - want) < 1e-5, "dtable[%d,%d]", v, j);
    }
  ids[5] = V; /* out of range: a fault, not a wild read */
  cr_assert_eq(run(AQ_KERNEL_EMBEDDING, &a, aq_rows_grid(N)), AQ_ERROR_KERNEL_FAULT);
  free(table), free(dout);
}

Test(ops, casts_between_fp32_and_bf16_round_to_nearest_even) {
  float in[6] = {1.0f, -2.5f, 3.14159265f, 1e-20f, 65504.0f, 0.0f};
  uint16_t mid[6];
  float back[6];
  aq_cast_args_t to = {in, mid, 6}, from = {mid, back, 6};
  AQ_ASSERT_OK(run(AQ_KERNEL_CAST_F32_BF16, &to, aq_elementwise_grid(6)));
  AQ_ASSERT_OK(run(AQ_KERNEL_CAST_BF16_F32, &from, aq_elementwise_grid(6)));
  cr_assert_eq(mid[0], 0x3f80);
  cr_assert_eq(mid[1], 0xc020);
  cr_assert_eq(mid[2], 0x4049, "pi rounds to 3.140625 (0x4049)");
  for (int i = 0; i < 6; ++i) cr_assert(fabsf(back[i] - in[i]) <= fabsf(in[i]) / 128.0f, "%g -> %g", in[i], back[i]);
  cr_assert_eq(aq_f32_to_bf16(0x1.01p0f), 0x3f80, "a tie rounds to even");
  cr_assert_eq(aq_f32_to_bf16(0x1.03p0f), 0x3f82, "a tie rounds to even, upwards");
}

/* L = sum(dy * conv(x, w)) for finite differences. */
static double conv_loss(const aq_conv2d_args_t *a, const float *x, const float *w, const float *dy) {
  double l = 0;
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t k = 0; k < a->k; ++k)
      for (int64_t p = 0; p < a->p; ++p)
        for (int64_t q = 0; q < a->q; ++q) {
          double y = a->bias ? a->bias[k] : 0;
          for (int64_t c = 0; c < a->c; ++c)
            for (int64_t r = 0; r < a->r; ++r)
              for (int64_t s = 0; s < a->s; ++s) {
                int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h, iw = q * a->stride_w - a->pad_w + s * a->dil_w;
                if (ih >= 0 && ih < a->h && iw >= 0 && iw < a->wd)
                  y += (double)x[((n * a->c + c) * a->h + ih) * a->wd + iw] * w[((k * a->c + c) * a->r + r) * a->s + s];
              }
          l += y * dy[((n * a->k + k) * a->p + p) * a->q + q];
        }
  return l;
}

/* A precision that is neither default nor exact: refused by name, y
 * untouched; exact is taken (the CPU kernels are exact either way). */
Test(ops, conv2d_bad_precision_faults_without_touching_memory) {
  aq_conv2d_args_t a = {.n = 1, .c = 1, .h = 3, .wd = 3, .k = 1, .r = 1, .s = 1, .p = 3, .q = 3, .stride_h = 1,
                        .stride_w = 1, .dil_h = 1, .dil_w = 1, .precision = 2};
  float x[9], w[1] = {2.0f}, y[9];
  for (int i = 0; i < 9; ++i) x[i] = (float)i, y[i] = -5.0f;
  a.x = x, a.w = w, a.y = y;
  cr_assert_eq(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(1)), AQ_ERROR_KERNEL_FAULT);
  cr_assert(strstr(aq_last_error(), AQ_KERNEL_CONV2D), "%s", aq_last_error());
  for (int i = 0; i < 9; ++i) cr_assert_eq(y[i], -5.0f);
  a.precision = AQ_MATMUL_PRECISION_EXACT;
  AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(1)));
  for (int i = 0; i < 9; ++i) cr_assert_eq(y[i], 2.0f * (float)i);
}

Test(ops, conv2d_forward_and_both_backwards_by_finite_differences) {
  const int cfg[][6] = {{1, 0, 1, 1, 1, 1}, {2, 1, 1, 2, 2, 1}, {1, 2, 2, 1, 1, 2}}; /* stride, pad, dil */
  for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); ++t) {
    aq_conv2d_args_t a = {.n = 2, .c = 3, .h = 9, .wd = 7, .k = 4, .r = 3, .s = 2, .stride_h = cfg[t][0],
                          .stride_w = cfg[t][3], .pad_h = cfg[t][1], .pad_w = cfg[t][4], .dil_h = cfg[t][2],
                          .dil_w = cfg[t][5]};
    a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w);
    int64_t nx = a.n * a.c * a.h * a.wd, nw = a.k * a.c * a.r * a.s, ny = a.n * a.k * a.p * a.q;
    float *x = rnd((size_t)nx, 90), *w = rnd((size_t)nw, 91), *b = rnd((size_t)a.k, 92), *dy = rnd((size_t)ny, 93);
    float *y = calloc((size_t)ny, 4), *dx = calloc((size_t)nx, 4), *dw = calloc((size_t)nw, 4), *db = calloc((size_t)a.k, 4);
    a.x = x, a.w = w, a.bias = b, a.y = y, a.dy = dy, a.dx = dx, a.dw = dw, a.dbias = db;
    AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D, &a, aq_planes_grid(a.n * a.k)));
    double l = 0;
    for (int64_t i = 0; i < ny; ++i) l += (double)y[i] * dy[i];
    cr_assert(fabs(l - conv_loss(&a, x, w, dy)) < 1e-3, "forward, config %zu", t);
    AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D_BWD_DATA, &a, aq_planes_grid(a.n * a.c)));
    AQ_ASSERT_OK(run(AQ_KERNEL_CONV2D_BWD_FILTER, &a, aq_planes_grid(a.k * a.c)));
    for (int64_t i = 0; i < nx; i += 7) {
      float keep = x[i], h = 1e-2f;
      x[i] = keep + h;
      double up = conv_loss(&a, x, w, dy);
      x[i] = keep - h;
      double down = conv_loss(&a, x, w, dy);
      x[i] = keep;
      cr_assert(fabs(dx[i] - (up - down) / (2 * h)) < 2e-3, "config %zu dx[%lld] %g vs %g", t, (long long)i, dx[i],
                (up - down) / (2 * h));
    }
    for (int64_t i = 0; i < nw; i += 5) {
      float keep = w[i], h = 1e-2f;
      w[i] = keep + h;
      double up = conv_loss(&a, x, w, dy);
      w[i] = keep - h;
      double down = conv_loss(&a, x, w, dy);
      w[i] = keep;
      cr_assert(fabs(dw[i] - (up - down) / (2 * h)) < 2e-3, "config %zu dw[%lld] %g vs %g", t, (long long)i, dw[i],
                (up - down) / (2 * h));
    }
    for (int64_t k = 0; k < a.k; ++k) {
      double want = 0;
      for (int64_t n = 0; n < a.n; ++n)
        for (int64_t i = 0; i < a.p * a.q; ++i) want += dy[(n * a.k + k) * a.p * a.q + i];
      cr_assert(fabs(db[k] - want) < 1e-4, "dbias[%lld]", (long long)k);
    }
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
  }
}

Test(ops, max_and_avg_pool_forward_and_backward) {
  enum { PL = 3, H = 6, W = 5 };
  float *x = rnd(PL * H * W, 100), y[PL * 9], dy[PL * 9], dx[PL * H * W];
  int32_t arg[PL * 9];
  for (int i = 0; i < PL * 9; ++i) dy[i] = (float)(i + 1);
  aq_pool_args_t a = {x, y, arg, dy, dx, PL, H, W, 3, 3, 2, 2, 2, 2, 0, 1}; /* 2x2 windows, stride 2, pad_w 1 */
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL, &a, aq_planes_grid(PL)));
  for (int pl = 0; pl < PL; ++pl)
    for (int p = 0; p < 3; ++p)
      for (int q = 0; q < 3; ++q) {
        float best = -1e30f;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) {
            int ih = p * 2 + i, iw = q * 2 - 1 + j;
            if (iw >= 0 && iw < W) best = fmaxf(best, x[(pl * H + ih) * W + iw]);
          }
        cr_assert_eq(y[(pl * 3 + p) * 3 + q], best);
      }
  AQ_ASSERT_OK(run(AQ_KERNEL_MAX_POOL_BWD, &a, aq_planes_grid(PL)));
  double sx = 0, sy = 0;
  for (int i = 0; i < PL * H * W; ++i) sx += dx[i];
  for (int i = 0; i < PL * 9; ++i) sy += dy[i];
  cr_assert(fabs(sx - sy) < 1e-3, "max-pool routes every gradient to one input");
  AQ_ASSERT_OK(run(AQ_KERNEL_AVG_POOL, &a, aq_planes_grid(PL)));
  cr_assert_float_eq(y[4], (x[(0 * H + 2) * W + 1] + x[(0 * H + 2) * W + 2] + x[(0 * H + 3) * W + 1] +
                            x[(0 * H + 3) * W + 2]) / 4.0f, 1e-6);
  AQ_ASSERT_OK(run(AQ_KERNEL_AVG_POOL_BWD, &a, aq_planes_grid(PL)));
  cr_assert_float_eq(dx[(0 * H + 2) * W + 1], dy[4] / 4.0f, 1e-6);
  free(x);
}

static double bn_loss(const float *x, const float *dy, int n, int c, int hw, const float *g, const float *b) {
  double l = 0;
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0, m = n * hw;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j) s += x[(i * c + ch) * hw + j];
    double mean = s / m;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j) ss += pow(x[(i * c + ch) * hw + j] - mean, 2);
    double rstd = 1 / sqrt(ss / m + 1e-5);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hw; ++j) {
        int o = (i * c + ch) * hw + j;
        l += dy[o] * ((x[o] - mean) * rstd * g[ch] + b[ch]);
      }
  }
  return l;
}

/* |got - want| <= tol (1 + |want|) over n floats. */
static void expect_close(const char *what, const float *got, const float *want, int64_t n, float tol) {
  for (int64_t i = 0; i < n; ++i)
    cr_assert(fabsf(got[i] - want[i]) <= tol * (1 + fabsf(want[i])), "%s[%lld]: %.8g, the whole pass %.8g", what,
              (long long)i, got[i], want[i]);
}

/* One shape: the two-kernel passes the graph runs (stats, apply), over
 * `slices` slices and a grid of `wg`-item groups, against the whole passes
 * (training, backward, inference). */
static void bn_sliced_case(int64_t n, int64_t c, int64_t hw, int32_t slices, uint16_t wg) {
  int64_t total = n * c * hw;
  float *x = rnd((size_t)total, 120), *g = rnd((size_t)c, 121), *b = rnd((size_t)c, 122), *dy = rnd((size_t)total, 123);
  for (int64_t i = 0; i < total; ++i) x[i] = 3 * x[i] + 2; /* a mean well away from 0 */
  float *buf = calloc((size_t)(4 * total + 16 * c), sizeof(float));
  float *y = buf, *dx = y + total, *y2 = dx + total, *dx2 = y2 + total, *pc = dx2 + total; /* 8 per-channel arrays */
  double *partial = calloc((size_t)(c * slices * 2), sizeof(double));
  for (int64_t i = 0; i < c; ++i) pc[3 * c + i] = pc[11 * c + i] = 1.0f; /* running variances */
  aq_batch_norm_args_t whole = {x, g, b, y, pc, pc + c, pc + 2 * c, pc + 3 * c, dy, dx, pc + 4 * c, pc + 5 * c, n, c, hw,
                                1e-5f, 0.1f, 1, 0, NULL};
  aq_batch_norm_args_t two = {x, g, b, y2, pc + 8 * c, pc + 9 * c, pc + 10 * c, pc + 11 * c, dy, dx2, pc + 12 * c,
                              pc + 13 * c, n, c, hw, 1e-5f, 0.1f, 1, slices, partial};
  int64_t items = c * slices;
  aq_dispatch_shape_t grid = {{aq_grid_items(items), 1, 1}, {wg, 1, 1}};
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM, &whole, aq_planes_grid(c)));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_BWD, &whole, aq_planes_grid(c)));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_STATS, &two, grid));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_APPLY, &two, grid));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_BWD_STATS, &two, grid));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_BWD_APPLY, &two, grid));
  const char *names[6] = {"mean", "rstd", "running_mean", "running_var", "dgamma", "dbeta"};
  for (int k = 0; k < 6; ++k) expect_close(names[k], pc + (8 + k) * c, pc + k * c, c, 1e-5f);
  expect_close("y", y2, y, total, 1e-5f);
  expect_close("dx", dx2, dx, total, 1e-4f);
  whole.training = two.training = 0; /* inference: _apply alone */
  two.running_mean = whole.running_mean, two.running_var = whole.running_var, two.partial = NULL;
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM, &whole, aq_planes_grid(c)));
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_APPLY, &two, grid));
  expect_close("inference y", y2, y, total, 1e-6f);
  free(x), free(g), free(b), free(dy), free(buf), free(partial);
}

Test(ops, batch_norm_in_slices_matches_the_whole_pass) {
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 3, 7}, {5, 2, 33}, {3, 6, 2000}, {7, 1, 4096}, {2, 16, 196}};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
    int64_t n = shapes[i][0], c = shapes[i][1], hw = shapes[i][2];
    int32_t picked = aq_batch_norm_slices(n, c, hw);
    cr_assert(picked >= 1 && (picked == 1 || n * hw / picked >= AQ_BATCH_NORM_SLICE_MIN / 2), "%d slices", picked);
    bn_sliced_case(n, c, hw, picked, 1);
    bn_sliced_case(n, c, hw, 7, 3);                     /* slices cut planes; groups of 3 items */
    bn_sliced_case(n, c, hw, (int32_t)(n * hw + 2), 64); /* more slices than values: some empty */
  }
}

Test(ops, batch_norm_in_slices_refuses_a_missing_buffer_or_slices) {
  enum { N = 2, C = 2, HW = 5 };
  float x[N * C * HW] = {0}, y[N * C * HW], dy[N * C * HW] = {0}, dx[N * C * HW], pc[8 * C] = {0};
  double partial[C * 2 * 2];
  aq_batch_norm_args_t a = {x, NULL, NULL, y, pc, pc + C, pc + 2 * C, pc + 3 * C, dy, dx, pc + 4 * C, pc + 5 * C, N, C, HW,
                            1e-5f, 0.1f, 1, 2, NULL};
  aq_dispatch_shape_t grid = aq_planes_grid(C * 2);
  const char *k[4] = {AQ_KERNEL_BATCH_NORM_STATS, AQ_KERNEL_BATCH_NORM_APPLY, AQ_KERNEL_BATCH_NORM_BWD_STATS,
                      AQ_KERNEL_BATCH_NORM_BWD_APPLY};
  for (int i = 0; i < 4; ++i) cr_assert_eq(run(k[i], &a, grid), AQ_ERROR_KERNEL_FAULT, "%s without partial", k[i]);
  a.partial = partial, a.slices = 0;
  for (int i = 0; i < 4; ++i) cr_assert_eq(run(k[i], &a, grid), AQ_ERROR_KERNEL_FAULT, "%s with 0 slices", k[i]);
  a.slices = 2;
  for (int i = 0; i < 4; ++i) AQ_ASSERT_OK(run(k[i], &a, grid));
}

Test(ops, batch_norm_training_inference_and_backward) {
  enum { N = 4, C = 3, HW = 10 };
  float *x = rnd(N * C * HW, 110), *g = rnd(C, 111), *b = rnd(C, 112), *dy = rnd(N * C * HW, 113);
  float y[N * C * HW], mean[C], rstd[C], rm[C] = {0}, rv[C] = {1, 1, 1}, dx[N * C * HW], dg[C], db[C];
  aq_batch_norm_args_t a = {x, g, b, y, mean, rstd, rm, rv, dy, dx, dg, db, N, C, HW, 1e-5f, 0.1f, 1, 0, NULL};
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM, &a, aq_planes_grid(C)));
  for (int ch = 0; ch < C; ++ch) cr_assert(fabsf(rm[ch] - 0.1f * mean[ch]) < 1e-6, "running mean moves by momentum");
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM_BWD, &a, aq_planes_grid(C)));
  for (int i = 0; i < N * C * HW; i += 3) {
    float keep = x[i], h = 1e-2f;
    x[i] = keep + h;
    double up = bn_loss(x, dy, N, C, HW, g, b);
    x[i] = keep - h;
    double down = bn_loss(x, dy, N, C, HW, g, b);
    x[i] = keep;
    cr_assert(fabs(dx[i] - (up - down) / (2 * h)) < 2e-3, "dx[%d] %g vs %g", i, dx[i], (up - down) / (2 * h));
  }
  a.training = 0; /* inference: the running statistics */
  AQ_ASSERT_OK(run(AQ_KERNEL_BATCH_NORM, &a, aq_planes_grid(C)));
  cr_assert_float_eq(y[0], (x[0] - rm[0]) / sqrtf(rv[0] + 1e-5f) * g[0] + b[0], 1e-5);
  free(x), free(g), free(b), free(dy);
}
