/* The pointwise, row-wise and optimizer op kernels on the GPU against plain
 * C references, for sizes 1, 7, 257 and several blocks' worth, each launched
 * as the scheduler does (aq_gpu_shape over the CPU grid). */
#include "gk.h"

TestSuite(gpu_ops, .init = gk_setup, .fini = gk_teardown);

static const int64_t sizes[] = {1, 7, 257, 5000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) {
  double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

Test(gpu_ops, activations_forward_and_backward) {
  const char *names[] = {AQ_KERNEL_RELU, AQ_KERNEL_RELU_BWD, AQ_KERNEL_SIGMOID, AQ_KERNEL_SIGMOID_BWD,
                         AQ_KERNEL_TANH, AQ_KERNEL_TANH_BWD, AQ_KERNEL_GELU, AQ_KERNEL_GELU_BWD};
  for (size_t z = 0; z < NSIZES; ++z) {
    int64_t n = sizes[z];
    float *x = gk_random((size_t)n, 1), *dy = gk_random((size_t)n, 2), *y = gk_floats((size_t)n), *want = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; ++i) x[i] *= 4.0f;
    for (int f = 0; f < 8; ++f) {
      for (int64_t i = 0; i < n; ++i) {
        double v = x[i], g = dy[i], r = 0;
        switch (f) {
          case 0: r = v > 0 ? v : 0; break;
          case 1: r = v > 0 ? g : 0; break;
          case 2: r = 1 / (1 + exp(-v)); break;
          case 3: r = g * v * (1 - v); break; /* x holds the forward output */
          case 4: r = tanh(v); break;
          case 5: r = g * (1 - v * v); break;
          case 6: r = gelu(v); break;
          case 7: r = g * gelu_grad(v); break;
        }
        want[i] = (float)r;
      }
      aq_unary_args_t a = {x, dy, y, n};
      gk_op(names[f], &a, aq_elementwise_grid(n));
      gk_expect_close(names[f], y, want, (size_t)n, 2e-6f);
    }
    aq_memory_free(x), aq_memory_free(dy), aq_memory_free(y), free(want);
  }
}

Test(gpu_ops, axpby_copy_sgd_adam_increment) {
  for (size_t z = 0; z < NSIZES; ++z) {
    int64_t n = sizes[z];
    float *x = gk_random((size_t)n, 3), *y = gk_random((size_t)n, 4), *out = gk_floats((size_t)n), *want = malloc((size_t)n * 4);
    aq_axpby_args_t ax = {x, y, out, n, 1.5f, -0.25f};
    gk_op(AQ_KERNEL_AXPBY, &ax, aq_elementwise_grid(n));
    for (int64_t i = 0; i < n; ++i) want[i] = 1.5f * x[i] - 0.25f * y[i];
    gk_expect_close("axpby", out, want, (size_t)n, 1e-6f);
    ax.y = NULL;
    gk_op(AQ_KERNEL_AXPBY, &ax, aq_elementwise_grid(n));
    for (int64_t i = 0; i < n; ++i) want[i] = 1.5f * x[i];
    gk_expect_close("axpby without y", out, want, (size_t)n, 1e-6f);
    aq_copy_args_t cp = {y, out, n * 4};
    gk_op(AQ_KERNEL_COPY, &cp, aq_elementwise_grid(n));
    cr_assert_eq(memcmp(out, y, (size_t)n * 4), 0);

    /* SGD: w, velocity in place over 3 steps. */
    float *w = gk_random((size_t)n, 5), *vel = gk_floats((size_t)n), *rw = malloc((size_t)n * 4), *rv = calloc((size_t)n, 4);
    memset(vel, 0, (size_t)n * 4), memcpy(rw, w, (size_t)n * 4);
    aq_sgd_args_t sg = {w, x, vel, n, 0.1f, 0.9f, 0.01f, 0};
    for (int step = 0; step < 3; ++step) {
      gk_op(AQ_KERNEL_SGD, &sg, aq_elementwise_grid(n));
      for (int64_t i = 0; i < n; ++i) {
        float g = x[i] + 0.01f * rw[i];
        rv[i] = 0.9f * rv[i] + g, rw[i] -= 0.1f * rv[i];
      }
    }
    gk_expect_close("sgd w", w, rw, (size_t)n, 1e-5f);
    gk_expect_close("sgd velocity", vel, rv, (size_t)n, 1e-5f);

    /* Adam and AdamW over 3 steps, the step counter advanced on the GPU. */
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      float *m = gk_floats((size_t)n), *v = gk_floats((size_t)n), *steps = gk_floats(1);
      double *rm = calloc((size_t)n, 8), *rvv = calloc((size_t)n, 8), *rww = malloc((size_t)n * 8);
      memset(m, 0, (size_t)n * 4), memset(v, 0, (size_t)n * 4), steps[0] = 0;
      for (int64_t i = 0; i < n; ++i) rww[i] = w[i];
      aq_adam_args_t ad = {w, x, m, v, steps, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, decoupled};
      aq_increment_args_t inc = {steps};
      for (int t = 1; t <= 3; ++t) {
        gk_op(AQ_KERNEL_ADAM, &ad, aq_elementwise_grid(n));
        gk_op(AQ_KERNEL_INCREMENT, &inc, (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}});
        for (int64_t i = 0; i < n; ++i) {
          double g = x[i] + (decoupled ? 0 : 0.05 * rww[i]);
          rm[i] = 0.9 * rm[i] + 0.1 * g, rvv[i] = 0.999 * rvv[i] + 0.001 * g * g;
          double step = (rm[i] / (1 - pow(0.9, t))) / (sqrt(rvv[i] / (1 - pow(0.999, t))) + 1e-8);
          rww[i] -= 1e-2 * (step + (decoupled ? 0.05 * rww[i] : 0));
        }
      }
      cr_assert_eq(steps[0], 3.0f, "the step counter");
      for (int64_t i = 0; i < n; ++i) cr_assert(fabs(w[i] - rww[i]) < 1e-5, "adam%s w[%ld] %g vs %g", decoupled ? "w" : "", (long)i, w[i], rww[i]);
      aq_memory_free(m), aq_memory_free(v), aq_memory_free(steps), free(rm), free(rvv), free(rww);
    }
    aq_memory_free(x), aq_memory_free(y), aq_memory_free(out), aq_memory_free(w), aq_memory_free(vel);
    free(want), free(rw), free(rv);
  }
}

Test(gpu_ops, dropout_is_seeded_and_matches_the_shared_hash) {
  for (size_t z = 0; z < NSIZES; ++z) {
    int64_t n = sizes[z];
    float *x = gk_random((size_t)n, 6), *y = gk_floats((size_t)n), *dx = gk_floats((size_t)n);
    aq_dropout_args_t d = {x, y, n, 1234, 0.3f, 0};
    gk_op(AQ_KERNEL_DROPOUT, &d, aq_elementwise_grid(n));
    aq_dropout_args_t b = {x, dx, n, 1234, 0.3f, 0}; /* backward of dy = x */
    gk_op(AQ_KERNEL_DROPOUT_BWD, &b, aq_elementwise_grid(n));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      int keep = aq_dropout_hash(1234, (uint64_t)i) >= (uint32_t)(0.3 * 4294967296.0);
      float want = keep ? x[i] / 0.7f : 0.0f;
      kept += keep;
      cr_assert(fabsf(y[i] - want) <= 1e-6f * (1 + fabsf(want)), "dropout[%ld]", (long)i);
      cr_assert_eq(dx[i], y[i], "the backward drops the same elements");
    }
    if (n >= 5000) cr_assert(kept > 0.65 * n && kept < 0.75 * n, "kept %ld of %ld", (long)kept, (long)n);
    aq_memory_free(x), aq_memory_free(y), aq_memory_free(dx);
  }
}

Test(gpu_ops, casts_round_to_nearest_even_both_ways) {
  int64_t n = 5000;
  float *x = gk_random((size_t)n, 7), *back = gk_floats((size_t)n);
  uint16_t *b = gk_alloc((size_t)n, 2);
  x[0] = NAN, x[1] = INFINITY, x[2] = -0.0f, x[3] = 1.00390625f /* a tie: rounds to even (1.0) */;
  x[4] = 1.01171875f /* a tie: rounds up to even */, x[5] = 3.4e38f, x[6] = 1e-40f /* subnormal */;
  aq_cast_args_t c = {x, b, n}, d = {b, back, n};
  gk_op(AQ_KERNEL_CAST_F32_BF16, &c, aq_elementwise_grid(n));
  gk_op(AQ_KERNEL_CAST_BF16_F32, &d, aq_elementwise_grid(n));
  for (int64_t i = 0; i < n; ++i) {
    cr_assert_eq(b[i], aq_f32_to_bf16(x[i]), "bf16[%ld] of %g", (long)i, x[i]);
    float want = aq_bf16_to_f32(b[i]);
    cr_assert(memcmp(&back[i], &want, 4) == 0, "f32[%ld]", (long)i);
  }
  cr_assert_eq(b[3], 0x3f80);
  cr_assert(isnan(back[0]));
  aq_memory_free(x), aq_memory_free(back), aq_memory_free(b);
}

static const int64_t row_shapes[][2] = {{1, 1}, {7, 33}, {257, 10}, {3, 1000}, {64, 257}};
#define NROWS (sizeof(row_shapes) / sizeof(row_shapes[0]))

Test(gpu_ops, softmax_log_softmax_and_backwards) {
  for (size_t z = 0; z < NROWS; ++z) {
    int64_t R = row_shapes[z][0], C = row_shapes[z][1], n = R * C;
    float *x = gk_random((size_t)n, 8), *y = gk_floats((size_t)n), *dy = gk_random((size_t)n, 9), *dx = gk_floats((size_t)n);
    float *want = malloc((size_t)n * 4), *wdx = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; ++i) x[i] *= 5.0f;
    for (int lg = 0; lg < 2; ++lg) {
      for (int64_t r = 0; r < R; ++r) {
        double mx = -INFINITY, s = 0, sd = 0;
        for (int64_t j = 0; j < C; ++j) mx = fmax(mx, x[r * C + j]);
        for (int64_t j = 0; j < C; ++j) s += exp(x[r * C + j] - mx);
        for (int64_t j = 0; j < C; ++j) {
          double v = x[r * C + j] - mx - log(s);
          want[r * C + j] = (float)(lg ? v : exp(v));
          sd += lg ? dy[r * C + j] : dy[r * C + j] * exp(v);
        }
        for (int64_t j = 0; j < C; ++j) {
          double yy = exp(x[r * C + j] - mx - log(s));
          wdx[r * C + j] = (float)(lg ? dy[r * C + j] - yy * sd : yy * (dy[r * C + j] - sd));
        }
      }
      const char *f = lg ? AQ_KERNEL_LOG_SOFTMAX : AQ_KERNEL_SOFTMAX, *b = lg ? AQ_KERNEL_LOG_SOFTMAX_BWD : AQ_KERNEL_SOFTMAX_BWD;
      aq_softmax_args_t a = {x, y, dy, y, R, C};
      gk_op(f, &a, aq_rows_grid(R));
      gk_expect_close(f, y, want, (size_t)n, 1e-5f);
      aq_softmax_args_t ab = {x, y, dy, dx, R, C};
      gk_op(b, &ab, aq_rows_grid(R));
      gk_expect_close(b, dx, wdx, (size_t)n, 1e-5f);
    }
    aq_memory_free(x), aq_memory_free(y), aq_memory_free(dy), aq_memory_free(dx), free(want), free(wdx);
  }
}

/* Loss, softmax and gradient of every row against double precision. */
static void expect_xent(const float *x, const int32_t *lab, const float *loss, const float *probs, const float *d,
                        int64_t R, int64_t C) {
  for (int64_t r = 0; r < R; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) mx = fmax(mx, x[r * C + j]);
    for (int64_t j = 0; j < C; ++j) s += exp(x[r * C + j] - mx);
    float wl = (float)(log(s) - (x[r * C + lab[r]] - mx));
    gk_expect_close("xent loss", &loss[r], &wl, 1, 1e-5f);
    for (int64_t j = 0; j < C; ++j) {
      float p = (float)(exp(x[r * C + j] - mx) / s), g = (p - (j == lab[r])) / (float)R;
      gk_expect_close("xent probs", &probs[r * C + j], &p, 1, 1e-5f);
      gk_expect_close("xent dlogits", &d[r * C + j], &g, 1, 1e-5f);
    }
  }
}

Test(gpu_ops, softmax_cross_entropy_with_labels) {
  for (size_t z = 0; z < NROWS; ++z) {
    int64_t R = row_shapes[z][0], C = row_shapes[z][1], n = R * C;
    float *x = gk_random((size_t)n, 10), *probs = gk_floats((size_t)n), *loss = gk_floats((size_t)R), *d = gk_floats((size_t)n);
    int32_t *lab = gk_alloc((size_t)R, 4);
    for (int64_t r = 0; r < R; ++r) lab[r] = (int32_t)((r * 7 + 3) % C);
    aq_softmax_xent_args_t a = {x, lab, probs, loss, d, R, C, 1.0f / (float)R, 0};
    gk_op(AQ_KERNEL_SOFTMAX_XENT, &a, aq_rows_grid(R)); /* given dlogits, it writes the gradient too */
    expect_xent(x, lab, loss, probs, d, R, C);
    memset(d, 0, (size_t)n * sizeof(float));
    gk_op(AQ_KERNEL_SOFTMAX_XENT_BWD, &a, aq_rows_grid(R));
    expect_xent(x, lab, loss, probs, d, R, C);
    aq_memory_free(x), aq_memory_free(probs), aq_memory_free(loss), aq_memory_free(d), aq_memory_free(lab);
  }
}

Test(gpu_ops, layer_norm_forward_and_backward) {
  for (size_t z = 0; z < NROWS; ++z) {
    int64_t R = row_shapes[z][0], C = row_shapes[z][1], n = R * C;
    float *x = gk_random((size_t)n, 11), *g = gk_random((size_t)C, 12), *b = gk_random((size_t)C, 13), *y = gk_floats((size_t)n);
    float *mean = gk_floats((size_t)R), *rstd = gk_floats((size_t)R), *dy = gk_random((size_t)n, 14), *dx = gk_floats((size_t)n);
    float *dg = gk_floats((size_t)C), *db = gk_floats((size_t)C);
    aq_layer_norm_args_t a = {x, g, b, y, mean, rstd, dy, dx, dg, db, R, C, 1e-5f, 0};
    gk_op(AQ_KERNEL_LAYER_NORM, &a, aq_rows_grid(R));
    gk_op(AQ_KERNEL_LAYER_NORM_BWD, &a, aq_rows_grid(R));
    gk_op(AQ_KERNEL_LAYER_NORM_BWD_PARAMS, &a, aq_cols_grid(C));
    double *rdg = calloc((size_t)C, 8), *rdb = calloc((size_t)C, 8);
    for (int64_t r = 0; r < R; ++r) {
      double s = 0, ss = 0, sg = 0, sgx = 0;
      for (int64_t j = 0; j < C; ++j) s += x[r * C + j];
      double mu = s / C;
      for (int64_t j = 0; j < C; ++j) ss += pow(x[r * C + j] - mu, 2);
      double rs = 1 / sqrt(ss / C + 1e-5);
      for (int64_t j = 0; j < C; ++j) {
        double xh = (x[r * C + j] - mu) * rs, gg = dy[r * C + j] * g[j];
        float wy = (float)(xh * g[j] + b[j]);
        gk_expect_close("layer_norm y", &y[r * C + j], &wy, 1, 1e-4f);
        sg += gg, sgx += gg * xh, rdg[j] += dy[r * C + j] * xh, rdb[j] += dy[r * C + j];
      }
      for (int64_t j = 0; j < C; ++j) {
        double xh = (x[r * C + j] - mu) * rs, gg = dy[r * C + j] * g[j];
        float wdx = (float)(rs * (gg - sg / C - xh * sgx / C));
        gk_expect_close("layer_norm dx", &dx[r * C + j], &wdx, 1, 1e-3f);
      }
    }
    for (int64_t j = 0; j < C; ++j) {
      float wg = (float)rdg[j], wb = (float)rdb[j];
      gk_expect_close("layer_norm dgamma", &dg[j], &wg, 1, 1e-4f);
      gk_expect_close("layer_norm dbeta", &db[j], &wb, 1, 1e-4f);
    }
    free(rdg), free(rdb);
    aq_memory_free(x), aq_memory_free(g), aq_memory_free(b), aq_memory_free(y), aq_memory_free(mean);
    aq_memory_free(rstd), aq_memory_free(dy), aq_memory_free(dx), aq_memory_free(dg), aq_memory_free(db);
  }
}

Test(gpu_ops, embedding_sum_rows_and_mean) {
  for (size_t z = 0; z < NROWS; ++z) {
    int64_t V = row_shapes[z][0] + 2, D = row_shapes[z][1], cnt = 2 * row_shapes[z][0] + 1;
    float *table = gk_random((size_t)(V * D), 15), *out = gk_floats((size_t)(cnt * D)), *dout = gk_random((size_t)(cnt * D), 16);
    float *dt = gk_floats((size_t)(V * D));
    int32_t *ids = gk_alloc((size_t)cnt, 4);
    for (int64_t i = 0; i < cnt; ++i) ids[i] = (int32_t)((i * 5 + 1) % V);
    memset(dt, 0, (size_t)(V * D) * 4);
    aq_embedding_args_t e = {table, ids, out, dout, dt, V, D, cnt};
    gk_op(AQ_KERNEL_EMBEDDING, &e, aq_rows_grid(cnt));
    gk_op(AQ_KERNEL_EMBEDDING_BWD, &e, aq_cols_grid(D));
    for (int64_t i = 0; i < cnt; ++i)
      cr_assert_eq(memcmp(&out[i * D], &table[ids[i] * D], (size_t)D * 4), 0, "embedding row %ld", (long)i);
    float *want = calloc((size_t)(V * D), 4);
    for (int64_t i = 0; i < cnt; ++i)
      for (int64_t j = 0; j < D; ++j) want[ids[i] * D + j] += dout[i * D + j];
    gk_expect_close("embedding dtable", dt, want, (size_t)(V * D), 1e-5f);

    /* sum over rows (with ldx > cols, alpha, beta) and the mean */
    int64_t R = row_shapes[z][0], C = row_shapes[z][1], ld = C + 3;
    float *x = gk_random((size_t)(R * ld), 17), *s = gk_random((size_t)C, 18), *ws = malloc((size_t)C * 4), *mo = gk_floats(1);
    for (int64_t j = 0; j < C; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < R; ++i) acc += x[i * ld + j];
      ws[j] = (float)(0.5 * acc + 2.0 * s[j]);
    }
    aq_sum_rows_args_t sr = {x, s, R, C, ld, 0.5f, 2.0f};
    gk_op(AQ_KERNEL_SUM_ROWS, &sr, aq_cols_grid(C));
    gk_expect_close("sum_rows", s, ws, (size_t)C, 1e-5f);
    double acc = 0;
    for (int64_t i = 0; i < R * ld; ++i) acc += x[i];
    float wm = (float)(acc / (double)(R * ld));
    aq_mean_args_t mn = {x, mo, R * ld};
    gk_op(AQ_KERNEL_MEAN, &mn, (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}});
    gk_expect_close("mean", mo, &wm, 1, 1e-5f);
    aq_memory_free(table), aq_memory_free(out), aq_memory_free(dout), aq_memory_free(dt), aq_memory_free(ids);
    aq_memory_free(x), aq_memory_free(s), aq_memory_free(mo), free(want), free(ws);
  }
}

/* Broadcasting add / sub / mul through strides (a broadcast row, a
 * broadcast column, a transposed operand), against a plain loop. */
Test(gpu_ops, broadcasting_binary_ops) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {3, 257, 2}, {2, 4, 1000}};
  const char *names[] = {AQ_KERNEL_ADD, AQ_KERNEL_SUB, AQ_KERNEL_MUL};
  for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); ++z) {
    int64_t A = shapes[z][0], B = shapes[z][1], C = shapes[z][2], n = A * B * C;
    float *x = gk_random((size_t)n, 20), *yrow = gk_random((size_t)C, 21), *ycol = gk_random((size_t)B, 22);
    float *xt = gk_random((size_t)n, 23), *out = gk_floats((size_t)n), *want = malloc((size_t)n * 4);
    for (int op = 0; op < 3; ++op)
      for (int v = 0; v < 3; ++v) {
        /* v = 0: y a row over C (strides 0, 0, 1); 1: y a column over B
         * (0, 1, 0) and alpha 2; 2: x read transposed as C x B x A storage. */
        aq_binary_args_t a = {0};
        a.rank = 3, a.shape[0] = A, a.shape[1] = B, a.shape[2] = C;
        a.x = v == 2 ? xt : x, a.z = out;
        if (v == 2) a.stride_x[0] = 1, a.stride_x[1] = A, a.stride_x[2] = A * B;
        else a.stride_x[0] = B * C, a.stride_x[1] = C, a.stride_x[2] = 1;
        if (v == 1) a.y = ycol, a.stride_y[1] = 1, a.alpha = 2.0f;
        else a.y = yrow, a.stride_y[2] = 1;
        for (int64_t i = 0; i < A; ++i)
          for (int64_t j = 0; j < B; ++j)
            for (int64_t k = 0; k < C; ++k) {
              float xv = a.x[i * a.stride_x[0] + j * a.stride_x[1] + k * a.stride_x[2]];
              float yv = a.y[j * a.stride_y[1] + k * a.stride_y[2]];
              float r = op == 0 ? xv + yv : op == 1 ? xv - yv : xv * yv;
              want[(i * B + j) * C + k] = (v == 1 ? 2.0f : 1.0f) * r;
            }
        gk_op(names[op], &a, aq_elementwise_grid(n));
        gk_expect_close(names[op], out, want, (size_t)n, 1e-6f);
      }
    aq_memory_free(x), aq_memory_free(yrow), aq_memory_free(ycol), aq_memory_free(xt), aq_memory_free(out), free(want);
  }
}

/* Sum and mean over every subset of the axes of a 3-D strided tensor
 * (padded rows), with alpha and beta. */
Test(gpu_ops, sum_and_mean_over_axes) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {3, 257, 2}, {300, 3, 7}};
  for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); ++z) {
    int64_t S[3] = {shapes[z][0], shapes[z][1], shapes[z][2]}, st[3] = {S[1] * (S[2] + 2), S[2] + 2, 1};
    int64_t n = S[0] * st[0];
    float *x = gk_random((size_t)n, 24), *out = gk_floats((size_t)n), *prev = malloc((size_t)n * 4);
    for (int mean = 0; mean < 2; ++mean)
      for (uint32_t axes = 0; axes < 8; ++axes) {
        int64_t outs = 1, count = 1;
        for (int d = 0; d < 3; ++d) {
          if (axes >> d & 1) count *= S[d];
          else outs *= S[d];
        }
        for (int64_t i = 0; i < outs; ++i) out[i] = (float)i * 0.25f;
        memcpy(prev, out, (size_t)outs * 4);
        aq_reduce_args_t a = {x, out, {S[0], S[1], S[2], 0}, {st[0], st[1], st[2], 0}, 3, axes, 0.5f, -1.0f};
        gk_op(mean ? AQ_KERNEL_REDUCE_MEAN : AQ_KERNEL_REDUCE_SUM, &a, aq_elementwise_grid(outs));
        int64_t o = 0;
        for (int64_t i = 0; i < (axes & 1 ? 1 : S[0]); ++i)
          for (int64_t j = 0; j < (axes & 2 ? 1 : S[1]); ++j)
            for (int64_t k = 0; k < (axes & 4 ? 1 : S[2]); ++k, ++o) {
              double acc = 0;
              for (int64_t p = 0; p < (axes & 1 ? S[0] : 1); ++p)
                for (int64_t q = 0; q < (axes & 2 ? S[1] : 1); ++q)
                  for (int64_t r = 0; r < (axes & 4 ? S[2] : 1); ++r)
                    acc += x[(axes & 1 ? p : i) * st[0] + (axes & 2 ? q : j) * st[1] + (axes & 4 ? r : k) * st[2]];
              float want = (float)(0.5 * acc / (mean ? (double)count : 1.0)) - prev[o];
              cr_assert(fabsf(out[o] - want) <= 1e-5f * (1 + fabsf(want)), "%s axes=%u [%ld]: %g want %g",
                        mean ? "mean" : "sum", axes, (long)o, out[o], want);
            }
      }
    aq_memory_free(x), aq_memory_free(out), free(prev);
  }
}
