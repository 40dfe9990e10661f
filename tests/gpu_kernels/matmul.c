/* aq_matmul_f32 and aq_matmul_bf16 on the GPU against a double-precision C
 * reference: awkward shapes (1, 7, 33, 257, non-square), every transpose,
 * padded and odd leading dimensions (the vector and the scalar load paths),
 * alpha / beta / bias / relu, batches, and every launch shape the scheduler
 * may use. */
#include "gk.h"

TestSuite(gpu_matmul, .init = gk_setup, .fini = gk_teardown);

typedef struct {
  int64_t m, n, k;
  int ta, tb, bf16;
  int64_t pad;   /* extra elements per row of A, B and C */
  int bias, relu;
  float alpha, beta;
  int64_t batch;
  int shape;     /* 0: aq_gpu_shape, 1: the exact GPU shape, 2: one block */
} mm_case_t;

/* The bf16 kernel and the candidates built beside it: name, threads a
 * block, tile rows and columns, group segment, and whether only an sm_90
 * GPU runs it (wgmma). aq_matmul_bf16_mma is what sm_80 GPUs run as
 * aq_matmul_bf16; on an H100 it is tested here as a candidate. */
typedef struct { const char *name; uint32_t threads, bm, bn, group; int sm90; } bf16_kernel_t;
static const bf16_kernel_t bf16_kernels[] = {
    {AQ_KERNEL_MATMUL_BF16, 384, 128, 256, AQ_GPU_MATMUL_BF16_GROUP_SEGMENT, 0},
    {"aq_matmul_bf16_mma", 384, 192, 192, AQ_GPU_MATMUL_BF16_GROUP_SEGMENT, 0},
    {"aq_matmul_bf16_wide4", 384, 128, 256, 4 * 48 * 1024 + 2048, 1}};
static const bf16_kernel_t *bf16_kernel = &bf16_kernels[0];

/* Runs f for each bf16 kernel this GPU has code for. */
static void for_each_bf16_kernel(void (*f)(int)) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gk_gpu, &info));
  for (size_t i = 0; i < sizeof(bf16_kernels) / sizeof(bf16_kernels[0]); ++i) {
    if (bf16_kernels[i].sm90 && strncmp(info.isa, "sm_90", 5)) continue;
    bf16_kernel = &bf16_kernels[i];
    f(1);
  }
}

static void verify(const mm_case_t *tp, const float *c, const float *want, const float *tol, const char *kernel) {
  const mm_case_t t = *tp;
  const int64_t ldc = t.n + t.pad, sc = t.m * ldc, nb = t.batch > 0 ? t.batch : 1;
  for (int64_t z = 0; z < nb; ++z)
    for (int64_t i = 0; i < t.m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        int64_t e = z * sc + i * ldc + j;
        if (j >= t.n) { /* padding stays untouched */
          cr_assert_eq(c[e], want[e], "%s m=%ld n=%ld k=%ld: padding [%ld,%ld,%ld] was written", kernel, (long)t.m,
                       (long)t.n, (long)t.k, (long)z, (long)i, (long)j);
          continue;
        }
        cr_assert(fabsf(c[e] - want[e]) <= tol[e],
                  "%s m=%ld n=%ld k=%ld ta=%d tb=%d pad=%ld batch=%ld shape=%d: C[%ld,%ld,%ld] = %.7g, want %.7g",
                  kernel, (long)t.m, (long)t.n, (long)t.k, t.ta, t.tb, (long)t.pad, (long)t.batch, t.shape, (long)z,
                  (long)i, (long)j, c[e], want[e]);
      }
}

static void check(mm_case_t t) {
  const int64_t lda = (t.ta ? t.m : t.k) + t.pad, ldb = (t.tb ? t.k : t.n) + t.pad, ldc = t.n + t.pad;
  const int64_t sa = (t.ta ? t.k : t.m) * lda, sb = (t.tb ? t.n : t.k) * ldb, sc = t.m * ldc;
  const int64_t nb = t.batch > 0 ? t.batch : 1;
  float *a = gk_random((size_t)(sa * nb), 11), *b = gk_random((size_t)(sb * nb), 12);
  float *c = gk_random((size_t)(sc * nb), 13), *bias = t.bias ? gk_random((size_t)t.n, 14) : NULL;
  float *want = malloc((size_t)(sc * nb) * sizeof(float));
  uint16_t *a16 = NULL, *b16 = NULL;
  if (t.bf16) {
    /* The reference multiplies the bf16 values themselves. */
    a16 = gk_alloc((size_t)(sa * nb), 2), b16 = gk_alloc((size_t)(sb * nb), 2);
    for (int64_t i = 0; i < sa * nb; ++i) a[i] = aq_bf16_to_f32(a16[i] = aq_f32_to_bf16(a[i]));
    for (int64_t i = 0; i < sb * nb; ++i) b[i] = aq_bf16_to_f32(b16[i] = aq_f32_to_bf16(b[i]));
  }
  float *tol = malloc((size_t)(sc * nb) * sizeof(float));
  memcpy(want, c, (size_t)(sc * nb) * sizeof(float));
  for (int64_t z = 0; z < nb; ++z)
    for (int64_t i = 0; i < t.m; ++i)
      for (int64_t j = 0; j < t.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < t.k; ++q) {
          double x = t.ta ? a[z * sa + q * lda + i] : a[z * sa + i * lda + q];
          double y = t.tb ? b[z * sb + j * ldb + q] : b[z * sb + q * ldb + j];
          s += x * y, mag += fabs(x * y);
        }
        double v = t.alpha * s + (t.beta != 0.0f ? t.beta * (double)c[z * sc + i * ldc + j] : 0.0);
        if (bias) v += bias[j];
        if (t.relu && v < 0) v = 0;
        want[z * sc + i * ldc + j] = (float)v;
        tol[z * sc + i * ldc + j] = (float)((t.bf16 ? 1e-4 : 1e-5) * (1.0 + fabs(t.alpha) * mag + fabs(v)));
      }
  aq_matmul_args_t args = {.a = t.bf16 ? (const float *)a16 : a, .b = t.bf16 ? (const float *)b16 : b, .c = c,
                           .bias = bias, .m = t.m, .n = t.n, .k = t.k, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .batch = t.batch, .stride_a = sa, .stride_b = sb, .stride_c = sc, .alpha = t.alpha,
                           .beta = t.beta, .trans_a = t.ta, .trans_b = t.tb,
                           .activation = t.relu ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE};
  aq_dispatch_shape_t s;
  if (t.bf16) {
    const bf16_kernel_t *bk = bf16_kernel;
    s = (aq_dispatch_shape_t){{(uint32_t)((t.n + bk->bn - 1) / bk->bn) * bk->threads, (uint32_t)((t.m + bk->bm - 1) / bk->bm),
                               (uint32_t)nb},
                              {(uint16_t)bk->threads, 1, 1}};
    if (bk == &bf16_kernels[0]) {
      aq_dispatch_shape_t r = aq_matmul_bf16_gpu_shape(&args); /* the published rules agree */
      for (int d = 0; d < 3; ++d)
        cr_assert(r.grid[d] == s.grid[d] && r.workgroup[d] == s.workgroup[d], "aq_matmul_bf16_gpu_shape, dim %d", d);
      cr_assert_eq(aq_gpu_op_group_segment(bk->name, &args), bk->group);
    }
    if (t.shape == 2) s.grid[0] = bk->threads, s.grid[1] = 1, s.grid[2] = 1;
    gk_run_group(bk->name, &args, s, bk->group);
    verify(&t, c, want, tol, bk->name);
  } else {
    /* Every GPU build of the fp32 op is right for every product and grid,
     * under the shape of the build aq_gpu_op_kernel picks. */
    static const char *builds[] = {AQ_KERNEL_MATMUL, AQ_KERNEL_MATMUL_F32_TILE64, AQ_KERNEL_MATMUL_F32_ROWS,
                                   AQ_KERNEL_MATMUL_F32_SPLIT2, AQ_KERNEL_MATMUL_F32_TILE64_SPLIT2,
                                   AQ_KERNEL_MATMUL_F32_TILE64_SPLIT4, AQ_KERNEL_MATMUL_F32_X3,
                                   AQ_KERNEL_MATMUL_F32_X3_SPLIT2, AQ_KERNEL_MATMUL_F32_X3_SPLIT4};
    static const uint32_t split_tile[] = {0, 0, 0, 128, 64, 64, 64, 64, 64}, splits[] = {0, 0, 0, 2, 2, 4, 1, 2, 4};
    float *c0 = malloc((size_t)(sc * nb) * sizeof(float));
    memcpy(c0, c, (size_t)(sc * nb) * sizeof(float));
    for (int v = 0; v < 9; ++v) {
      memcpy(c, c0, (size_t)(sc * nb) * sizeof(float));
      s = t.shape == 0 ? aq_gpu_shape(AQ_KERNEL_MATMUL, &args, aq_matmul_grid(&args)) : aq_matmul_f32_gpu_shape(&args);
      if (t.shape == 2) s.grid[0] = 16, s.grid[1] = 16, s.grid[2] = 1;
      const uint32_t split = splits[v], tile = split_tile[v];
      if (split) /* whole clusters: a block a tile and k slice, or one cluster for everything */
        s = (aq_dispatch_shape_t){{t.shape == 2 ? 16 * split : (uint32_t)((t.n + tile - 1) / tile * 16 * split),
                                   t.shape == 2 ? 16 : (uint32_t)((t.m + tile - 1) / tile * 16), t.shape == 2 ? 1 : (uint32_t)nb},
                                  {16, 16, 1}};
      gk_run(builds[v], &args, s);
      verify(&t, c, want, tol, builds[v]);
    }
    free(c0);
  }
  aq_memory_free(a), aq_memory_free(b), aq_memory_free(c);
  if (bias) aq_memory_free(bias);
  if (a16) aq_memory_free(a16), aq_memory_free(b16);
  free(want), free(tol);
}

static const int64_t shapes[][3] = {{1, 1, 1},    {7, 33, 257}, {257, 7, 33}, {33, 257, 7},
                                    {130, 129, 17}, {1, 300, 64}, {257, 257, 257}, {64, 8, 1}};

static void every_shape_and_transpose(int bf16) {
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int tr = 0; tr < 4; ++tr)
      for (int64_t pad = 0; pad <= 3; pad += 3)
        check((mm_case_t){shapes[s][0], shapes[s][1], shapes[s][2], tr & 1, tr >> 1, bf16, pad, 0, 0, 1.0f, 0.0f, 1,
                          (int)(s % 2)});
}

Test(gpu_matmul, f32_awkward_shapes_every_transpose) { every_shape_and_transpose(0); }
Test(gpu_matmul, bf16_awkward_shapes_every_transpose) { for_each_bf16_kernel(every_shape_and_transpose); }

static void epilogues_batches_and_launches(int bf16) {
  for (int tr = 0; tr < 4; ++tr) {
    /* bias + relu + alpha + beta over a batch, aligned (vector path) and not */
    check((mm_case_t){200, 136, 72, tr & 1, tr >> 1, bf16, 0, 1, 1, 0.5f, -0.75f, 3, 0});
    check((mm_case_t){33, 71, 45, tr & 1, tr >> 1, bf16, 1, 1, 1, 2.0f, 1.0f, 2, 1});
  }
  /* more than 8 tile-rows (the grouped tile order), tall and wide */
  check((mm_case_t){1100, 260, 40, 0, 0, bf16, 0, 1, 0, 1.0f, 0.0f, 1, 1});
  check((mm_case_t){40, 1100, 96, 1, 1, bf16, 8, 0, 1, 1.0f, 0.0f, 1, 0});
  /* one block walks every tile of every batch entry */
  check((mm_case_t){300, 270, 50, 0, 1, bf16, 0, 1, 0, 1.0f, 0.5f, 2, 2});
  /* k = 0: C = beta C + bias */
  check((mm_case_t){17, 9, 0, 0, 0, bf16, 0, 1, 0, 1.0f, 0.5f, 1, 1});
  /* a deep k through many pipeline stages */
  check((mm_case_t){128, 128, 1000, 0, 0, bf16, 0, 0, 0, 1.0f, 0.0f, 1, 1});
}

Test(gpu_matmul, f32_epilogue_batches_and_launch_shapes) { epilogues_batches_and_launches(0); }

/* Few columns and a deep k: a warp a row of C, lanes splitting k (every
 * transpose, the epilogue, batches, 1..16 columns, k not a multiple of 32,
 * and each launch shape). */
Test(gpu_matmul, f32_skinny_rows) {
  aq_matmul_args_t deep = {.m = 256, .n = 10, .k = 1024}, shallow = {.m = 256, .n = 10, .k = 40};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &deep), AQ_KERNEL_MATMUL_F32_ROWS);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &shallow), AQ_KERNEL_MATMUL_F32_X3);
  deep.precision = shallow.precision = AQ_MATMUL_PRECISION_EXACT;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &deep), AQ_KERNEL_MATMUL_F32_ROWS);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &shallow), AQ_KERNEL_MATMUL_F32_TILE64);
  const int64_t ns[] = {1, 10, 16};
  for (int tr = 0; tr < 4; ++tr)
    for (size_t n = 0; n < 3; ++n) {
      check((mm_case_t){257, ns[n], 1000, tr & 1, tr >> 1, 0, tr == 2 ? 3 : 0, 1, 1, 0.5f, -0.75f, 2, tr % 3});
      check((mm_case_t){33, ns[n], 64, tr & 1, tr >> 1, 0, 0, 0, 0, 1.0f, 0.0f, 1, 1});
    }
}

/* By the product's size and precision (aq_gpu_op_kernel): 3xTF32 64x64
 * tiles, k split or not, by default; FFMA 128x128 or 64x64 tiles, k split
 * or not, when exact. Every build, every transpose, with the epilogue: a
 * product with enough big tiles, and the shapes of an MLP training step on
 * a batch of 256. */
Test(gpu_matmul, f32_tile_sizes_and_precisions) {
  aq_matmul_args_t big = {.m = 1540, .n = 1410, .k = 40}, step = {.m = 256, .n = 1024, .k = 784};
  aq_matmul_args_t wgrad = {.m = 784, .n = 1024, .k = 256}, shallow = {.m = 256, .n = 1024, .k = 10};
  aq_matmul_args_t few = {.m = 128, .n = 1024, .k = 1024}, thin = {.m = 256, .n = 1024, .k = 100};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &big), AQ_KERNEL_MATMUL_F32_X3);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &step), AQ_KERNEL_MATMUL_F32_X3_SPLIT2);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &wgrad), AQ_KERNEL_MATMUL_F32_X3);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &few), AQ_KERNEL_MATMUL_F32_X3_SPLIT4);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &thin), AQ_KERNEL_MATMUL_F32_X3);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &shallow), AQ_KERNEL_MATMUL_F32_X3);
  aq_matmul_fused_args_t fused = {.mm = step};
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL_FUSED, &fused), AQ_KERNEL_MATMUL_FUSED_X3_SPLIT2);
  big.precision = step.precision = wgrad.precision = shallow.precision = few.precision = thin.precision =
      fused.mm.precision = AQ_MATMUL_PRECISION_EXACT;
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &big), AQ_KERNEL_MATMUL);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &step), AQ_KERNEL_MATMUL_F32_TILE64_SPLIT2);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &wgrad), AQ_KERNEL_MATMUL_F32_SPLIT2);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &few), AQ_KERNEL_MATMUL_F32_TILE64_SPLIT4);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &thin), AQ_KERNEL_MATMUL_F32_TILE64);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &shallow), AQ_KERNEL_MATMUL_F32_TILE64);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MATMUL_FUSED, &fused), AQ_KERNEL_MATMUL_FUSED_TILE64_SPLIT2);
  for (int tr = 0; tr < 4; ++tr) {
    check((mm_case_t){1540, 1410, 40, tr & 1, tr >> 1, 0, tr == 3 ? 1 : 0, 1, 1, 1.0f, 0.5f, 1, 1});
    check((mm_case_t){256, 1024, 784, tr & 1, tr >> 1, 0, 0, 1, 1, 1.0f, 0.0f, 1, 1});
  }
  check((mm_case_t){1024, 10, 256, 1, 0, 0, 0, 0, 0, 1.0f, 0.0f, 1, 1}); /* dW3 = H2^T dY */
  check((mm_case_t){256, 10, 1024, 0, 0, 0, 0, 1, 0, 1.0f, 0.0f, 1, 1}); /* logits = H2 W3 + b */
  check((mm_case_t){784, 1024, 256, 1, 0, 0, 0, 0, 0, 1.0f, 0.0f, 1, 1}); /* dW1 = X^T dH1 */
  check((mm_case_t){256, 1024, 10, 0, 1, 0, 0, 0, 0, 1.0f, 0.0f, 1, 1}); /* dH2 = dY W3^T */
}
Test(gpu_matmul, bf16_epilogue_batches_and_launch_shapes) { for_each_bf16_kernel(epilogues_batches_and_launches); }

/* The pipeline's stages and barriers carry on from tile to tile: one block
 * walking many tiles of a batch, several 64-deep slices each (k not a
 * multiple of 64), every transpose; and the grid the scheduler gives. */
static void pipeline_across_tiles(int bf16) {
  for (int tr = 0; tr < 4; ++tr) {
    check((mm_case_t){520, 600, 300, tr & 1, tr >> 1, bf16, 0, 1, 0, 1.0f, 0.0f, 2, 2});
    check((mm_case_t){390, 700, 200, tr & 1, tr >> 1, bf16, tr == 1 ? 8 : 0, 0, 1, 0.5f, 0.25f, 1, 1});
  }
}
Test(gpu_matmul, bf16_pipeline_across_tiles) { for_each_bf16_kernel(pipeline_across_tiles); }

/* Only the bf16 kernel asks for a group segment (its stages, past 48 KB). */
Test(gpu_matmul, group_segments) {
  aq_matmul_args_t a = {.m = 64, .n = 64, .k = 64};
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_MATMUL_BF16, &a), AQ_GPU_MATMUL_BF16_GROUP_SEGMENT);
  cr_assert_gt(AQ_GPU_MATMUL_BF16_GROUP_SEGMENT, 48 * 1024);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_MATMUL, &a), 0);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_MATMUL_F32_TILE64, &a), 0);
}

Test(gpu_matmul, bad_kernargs_leave_c_untouched) {
  float *a = gk_random(64, 1), *c = gk_random(64, 2), before[64];
  memcpy(before, c, sizeof(before));
  aq_matmul_args_t bad[] = {
      {.a = a, .b = NULL, .c = c, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1},
      {.a = a, .b = a, .c = c, .m = -1, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1},
      {.a = a, .b = a, .c = c, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 4, .alpha = 1},
      {.a = a, .b = a, .c = c, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1, .activation = 99},
      {.a = a, .b = a, .c = c, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1, .precision = 2},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    gk_run(AQ_KERNEL_MATMUL, &bad[i], aq_matmul_f32_gpu_shape(&bad[i]));
    gk_run(AQ_KERNEL_MATMUL_F32_TILE64, &bad[i], aq_matmul_f32_gpu_shape(&bad[i]));
    gk_run(AQ_KERNEL_MATMUL_F32_ROWS, &bad[i], aq_gpu_threads_shape(32 * 8));
    gk_run(AQ_KERNEL_MATMUL_F32_SPLIT2, &bad[i], (aq_dispatch_shape_t){{32, 16, 1}, {16, 16, 1}});
    gk_run(AQ_KERNEL_MATMUL_F32_TILE64_SPLIT4, &bad[i], (aq_dispatch_shape_t){{64, 16, 1}, {16, 16, 1}});
    gk_run(AQ_KERNEL_MATMUL_F32_X3, &bad[i], aq_matmul_f32_gpu_shape(&bad[i]));
    gk_run(AQ_KERNEL_MATMUL_F32_X3_SPLIT2, &bad[i], (aq_dispatch_shape_t){{32, 16, 1}, {16, 16, 1}});
    gk_run(AQ_KERNEL_MATMUL_BF16, &bad[i], aq_matmul_bf16_gpu_shape(&bad[i]));
    cr_assert_eq(memcmp(before, c, sizeof(before)), 0, "case %zu wrote C", i);
  }
  aq_memory_free(a), aq_memory_free(c);
}
