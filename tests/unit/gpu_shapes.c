/* The GPU builds' work plans (ops_gpu.h), checked where no GPU runs them:
 * every weight of a filter in exactly one run of the backward filter, the
 * split build's grid a whole number of clusters, and the split taken where
 * the plain build would leave an H100's SMs idle; fused kernels launched
 * as their products. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/cuda/launch.h"

TestSuite(gpu_shapes);

static aq_conv2d_args_t conv(int64_t n, int64_t c, int64_t k, int64_t r, int64_t s, int bias) {
  static float b;
  aq_conv2d_args_t a = {.n = n, .c = c, .h = 28, .wd = 28, .k = k, .r = r, .s = s, .p = 28, .q = 28};
  a.dbias = bias ? &b : NULL;
  return a;
}

Test(gpu_shapes, conv2d_bwd_filter_runs_cover_each_filter) {
  const int64_t rs[][2] = {{1, 1}, {3, 3}, {5, 5}, {7, 7}, {1, 17}, {11, 11}};
  const int64_t kc[][2] = {{1, 1}, {6, 1}, {16, 6}, {64, 64}, {3, 500}};
  for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); ++i)
    for (size_t j = 0; j < sizeof(kc) / sizeof(kc[0]); ++j) {
      aq_conv2d_args_t a = conv(8, kc[j][1], kc[j][0], rs[i][0], rs[i][1], 1);
      int64_t w, width = aq_conv2d_bwd_filter_width(&a), runs = (a.r * a.s + width - 1) / width;
      int64_t items = aq_conv2d_bwd_filter_items(&a, &w);
      cr_assert(width >= 1 && width <= AQ_GPU_CONV2D_BWD_FILTER_WIDTH, "width %lld", (long long)width);
      cr_assert_eq(w, a.k * a.c * runs);
      cr_assert_eq(items, w + a.k, "one item a bias entry");
      cr_assert((runs - 1) * width < a.r * a.s, "no empty run: %lld runs of %lld for %lld weights", (long long)runs,
                (long long)width, (long long)(a.r * a.s));
      int split = aq_conv2d_bwd_filter_split(&a);
      cr_assert(split == 1 || split == AQ_GPU_CONV2D_BWD_FILTER_SPLIT);
      aq_dispatch_shape_t sh = aq_gpu_op_shape(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &a), &a, aq_planes_grid(1));
      cr_assert_eq(sh.workgroup[0], AQ_GPU_BLOCK);
      cr_assert_eq(sh.grid[0], (uint32_t)(items * split * AQ_GPU_BLOCK));
      cr_assert_eq(sh.grid[0] % (AQ_GPU_BLOCK * AQ_GPU_CONV2D_BWD_FILTER_SPLIT) == 0 || split == 1, 1);
    }
}

Test(gpu_shapes, conv2d_bwd_filter_splits_the_small_filters) {
  aq_conv2d_args_t lenet1 = conv(256, 1, 6, 5, 5, 1), lenet2 = conv(256, 6, 16, 5, 5, 1), wide = conv(32, 64, 64, 3, 3, 0);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &lenet1), AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &lenet2), AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &wide), AQ_KERNEL_CONV2D_BWD_FILTER);
  /* 1 -> 6 channels: narrower runs, so that the clusters fill an H100 */
  int64_t w;
  aq_conv2d_bwd_filter_items(&lenet1, &w);
  cr_assert_geq(w * AQ_GPU_CONV2D_BWD_FILTER_SPLIT, 200, "%lld weight items", (long long)w);
  /* the split build's own shape is the split one whatever the picker says */
  aq_dispatch_shape_t sh = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT, &wide, aq_planes_grid(1));
  cr_assert_eq(sh.grid[0], (uint32_t)(aq_conv2d_bwd_filter_items(&wide, NULL) * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * AQ_GPU_BLOCK));
}

/* A split backward filter's clusters run in waves of
 * AQ_GPU_CONV2D_SPLIT_CLUSTERS: half-row tiles where they take fewer waves
 * of half the time. */
Test(gpu_shapes, filter_thin_where_waves_of_clusters_pay) {
  cr_assert(aq_conv2d_filter_thin(9, 18), "ResNet's 64 -> 64: one wave either way, of half the time");
  cr_assert(aq_conv2d_filter_thin(36, 72), "128 -> 128: 3 thin waves against 2 wide ones");
  cr_assert(!aq_conv2d_filter_thin(144, 288), "a tie keeps the wide tiles");
  cr_assert(!aq_conv2d_filter_thin(20, 40));
  cr_assert(!aq_conv2d_filter_thin(30, 60));
  cr_assert(aq_conv2d_filter_thin(31, 62));
}

/* bf16's tensor-core backward filter: 64x64 tiles, or 32-row ones where
 * the 64x64 tiles split over clusters would leave most of an H100's SMs
 * idle (not by the waves of clusters: its thin tiles ran 128 -> 128
 * slower); the split build's grid the chosen tiles' clusters, whatever
 * pass the others take. */
Test(gpu_shapes, bf16_bwd_filter_takes_thin_tiles_where_clusters_leave_sms_idle) {
  const int64_t ck[][2] = {{64, 64}, {128, 128}, {256, 256}, {16, 16}, {64, 256}, {3, 64}};
  for (size_t i = 0; i < sizeof(ck) / sizeof(ck[0]); ++i) {
    aq_conv2d_args_t a = conv(32, ck[i][0], ck[i][1], 3, 3, 1);
    int tm, tn;
    const int64_t tiles = aq_conv2d_bf16_gpu_tiles(&a, 2, &tm, &tn), wide = aq_conv2d_gemm_tiles(&a, 2, 64, 64);
    const int thin = wide * AQ_GPU_CONV2D_BWD_FILTER_SPLIT < AQ_GPU_CONV2D_BF16_FEW_TILES;
    cr_assert_eq(tn, 64);
    cr_assert_eq(tm, thin ? AQ_GPU_CONV2D_BF16_THIN : 64, "c %lld k %lld: %d rows", (long long)a.c, (long long)a.k, tm);
    cr_assert_eq(tiles, aq_conv2d_gemm_tiles(&a, 2, tm, 64));
    if (aq_conv2d_bf16_filter_split(&a)) {
      aq_dispatch_shape_t sh = aq_conv2d_bf16_filter_split_shape(&a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT);
      cr_assert_eq(sh.grid[0], (uint32_t)((tiles + ((a.k + 7) / 8 + AQ_GPU_CONV2D_BWD_FILTER_SPLIT - 1) / AQ_GPU_CONV2D_BWD_FILTER_SPLIT) *
                                          AQ_GPU_CONV2D_BWD_FILTER_SPLIT * AQ_GPU_BLOCK));
    }
    for (int pass = 0; pass < 2; ++pass) {
      aq_conv2d_bf16_gpu_tiles(&a, pass, &tm, &tn);
      cr_assert_neq(tm, AQ_GPU_CONV2D_BF16_THIN, "pass %d", pass);
    }
  }
  aq_conv2d_args_t r64 = conv(32, 64, 64, 3, 3, 0), r128 = conv(32, 128, 128, 3, 3, 0), r256 = conv(32, 256, 256, 3, 3, 0);
  int tm, tn;
  cr_assert_eq(aq_conv2d_bf16_gpu_tiles(&r64, 2, &tm, &tn), 18, "ResNet's 64 -> 64: 18 tiles of 32 x 64");
  cr_assert_eq(tm, AQ_GPU_CONV2D_BF16_THIN);
  cr_assert_eq(aq_conv2d_bf16_gpu_tiles(&r128, 2, &tm, &tn), 36, "128 -> 128: 36 tiles of 64 x 64");
  cr_assert_eq(tm, 64);
  cr_assert_eq(aq_conv2d_bf16_gpu_tiles(&r256, 2, &tm, &tn), 144, "256 -> 256: 144 tiles of 64 x 64");
  cr_assert_eq(tm, 64);
}

/* bf16's forward and backward data at most 64 columns wide and with
 * enough rows: 256x64 tiles, or 128x64 where their waves of
 * AQ_GPU_CONV2D_BF16_SLOTS end better (ties keep the larger). */
Test(gpu_shapes, bf16_narrow_passes_take_128_rows_where_waves_end_better) {
  const int64_t hw_tm[][2] = {{56, 128}, {48, 128}, {40, 256}, {64, 256}};
  for (size_t i = 0; i < sizeof(hw_tm) / sizeof(hw_tm[0]); ++i) {
    aq_conv2d_args_t a = conv(32, 64, 64, 3, 3, 0);
    a.h = a.wd = a.p = a.q = hw_tm[i][0];
    for (int pass = 0; pass < 2; ++pass) {
      int tm, tn;
      const int64_t tiles = aq_conv2d_bf16_gpu_tiles(&a, pass, &tm, &tn), rows = a.n * a.p * a.q;
      const int64_t wide = (rows + 255) / 256, mid = (rows + 127) / 128, w = AQ_GPU_CONV2D_BF16_SLOTS;
      cr_assert_eq(tn, 64);
      cr_assert_eq(tm, hw_tm[i][1], "%lldx%lld: %d rows", (long long)a.h, (long long)a.wd, tm);
      cr_assert_eq(tm == 128, (mid + w - 1) / w < 2 * ((wide + w - 1) / w));
      cr_assert_eq(tiles, tm == 128 ? mid : wide);
    }
  }
}

/* fp32's 3xTF32 backward filter: the thin build where the waves of
 * clusters say so, the build over clusters of 6 where one wave of them
 * beats two of 8, each build's split grid its own tiles' and clusters'. */
Test(gpu_shapes, x3_bwd_filter_by_the_waves_of_its_clusters) {
  const struct {
    int64_t c, k, tiles;
    const char *build;
  } cases[] = {{64, 64, 18, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN},
               {128, 128, 36, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6},
               {256, 256, 144, AQ_KERNEL_CONV2D_BWD_FILTER_X3}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    aq_conv2d_args_t a = conv(32, cases[i].c, cases[i].k, 3, 3, 0);
    cr_assert_str_eq(aq_conv2d_x3_filter(&a), cases[i].build, "c %lld", (long long)a.c);
    const int thin = !strcmp(cases[i].build, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN);
    cr_assert_eq(aq_conv2d_x3_tiles(&a, 2, thin ? AQ_GPU_CONV2D_X3_THIN : AQ_GPU_CONV2D_X3_TILE), cases[i].tiles);
    const char *builds[] = {AQ_KERNEL_CONV2D_BWD_FILTER_X3, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN,
                            AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6};
    const int rows[] = {AQ_GPU_CONV2D_X3_TILE, AQ_GPU_CONV2D_X3_THIN, AQ_GPU_CONV2D_X3_TILE},
              split[] = {AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, AQ_GPU_CONV2D_SPLIT6};
    for (int b = 0; b < 3; ++b)
      cr_assert_eq(aq_conv2d_x3_gpu_shape(&a, 2, builds[b]).grid[0],
                   (uint32_t)(aq_conv2d_gemm_tiles(&a, 2, rows[b], 64) * split[b] * AQ_GPU_BLOCK), "%s", builds[b]);
  }
}

/* Batch norm's two-kernel passes: a block a slice, enough slices to fill an
 * H100 for a CNN's few channels, none smaller than the floor. */
Test(gpu_shapes, batch_norm_slices_fill_the_gpu) {
  const int64_t shapes[][3] = {{256, 6, 784}, {256, 16, 196}, {1, 1, 1}, {8, 512, 49}, {1, 3, 100000}};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
    int64_t n = shapes[i][0], c = shapes[i][1], hw = shapes[i][2];
    aq_batch_norm_args_t a = {.n = n, .c = c, .hw = hw, .slices = aq_batch_norm_slices(n, c, hw)};
    cr_assert_geq(a.slices, 1);
    cr_assert(a.slices == 1 || n * hw / a.slices >= AQ_BATCH_NORM_SLICE_MIN / 2, "%d slices of %lld values", a.slices,
              (long long)(n * hw));
    if (n * hw >= (int64_t)AQ_BATCH_NORM_SLICE_MIN * 132 / c)
      cr_assert_geq(c * a.slices, 132, "%lld x %d blocks", (long long)c, a.slices);
    const char *k[4] = {AQ_KERNEL_BATCH_NORM_STATS, AQ_KERNEL_BATCH_NORM_APPLY, AQ_KERNEL_BATCH_NORM_BWD_STATS,
                        AQ_KERNEL_BATCH_NORM_BWD_APPLY};
    for (int j = 0; j < 4; ++j) {
      aq_dispatch_shape_t sh = aq_gpu_op_shape(k[j], &a, aq_planes_grid(c * a.slices));
      cr_assert_eq(sh.grid[0], (uint32_t)(c * a.slices * AQ_GPU_BLOCK), "%s", k[j]);
      cr_assert_eq(sh.workgroup[0], AQ_GPU_BLOCK);
    }
  }
}

/* A fused kernel launches as its product (kernel.h's aq_op_fusion_t): the
 * conv block's fused batch norm and pool backward take their products'
 * shapes, and their variants are their own names. */
static int same_shape(aq_dispatch_shape_t a, aq_dispatch_shape_t b) { /* field by field: the struct has padding */
  for (int d = 0; d < 3; ++d)
    if (a.grid[d] != b.grid[d] || a.workgroup[d] != b.workgroup[d]) return 0;
  return 1;
}

Test(gpu_shapes, the_conv_blocks_fused_kernels_launch_as_their_products) {
  aq_batch_norm_args_t bn = {.n = 256, .c = 6, .hw = 784};
  bn.slices = aq_batch_norm_slices(bn.n, bn.c, bn.hw);
  aq_pool_relu_bwd_args_t pool = {.pool = {.planes = 256 * 6, .h = 28, .w = 28, .p = 14, .q = 14, .kh = 2, .kw = 2,
                                           .stride_h = 2, .stride_w = 2}};
  aq_dispatch_shape_t cpu = aq_planes_grid(bn.c * bn.slices);
  aq_dispatch_shape_t a = aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_APPLY_RELU, &bn, cpu);
  aq_dispatch_shape_t b = aq_gpu_op_shape(AQ_KERNEL_BATCH_NORM_APPLY, &bn, cpu);
  cr_assert(same_shape(a, b) && a.workgroup[0] == AQ_GPU_BLOCK);
  cpu = aq_planes_grid(pool.pool.planes);
  a = aq_gpu_op_shape(AQ_KERNEL_MAX_POOL_BWD_RELU, &pool, cpu);
  b = aq_gpu_op_shape(AQ_KERNEL_MAX_POOL_BWD, &pool.pool, cpu);
  cr_assert(same_shape(a, b) && a.grid[0] == 256 * 6 * 14 * 14, "2x2 windows tile the plane: a thread a window");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_BATCH_NORM_APPLY_RELU, &bn), AQ_KERNEL_BATCH_NORM_APPLY_RELU);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_MAX_POOL_BWD_RELU, &pool), AQ_KERNEL_MAX_POOL_BWD_RELU);
}

/* A strided backward data's phases (launch.h): for every dx row h, the taps
 * of its phase (h % stride) are exactly those r with dy[p] p stride = h +
 * pad - r dil, and each reads the row the phase's map says; the phases'
 * rows add up to dx's. Against brute force over strides, dilations,
 * paddings, filter and plane sizes. */
Test(gpu_shapes, conv2d_phases_take_exactly_the_taps_that_reach_a_row) {
  for (int stride = 1; stride <= 5; ++stride)
    for (int dil = 1; dil <= 4; ++dil)
      for (int pad = 0; pad <= 3; ++pad)
        for (int taps = 1; taps <= 6; ++taps)
          for (int extent = 1; extent <= 12; ++extent) {
            int rows = 0;
            for (int ph = 0; ph < stride; ++ph) {
              aq_conv2d_phase_t t = aq_conv2d_phase(extent, taps, stride, pad, dil, ph);
              int outs = 0;
              for (int h = ph; h < extent; h += stride, ++outs) {
                const int hh = h / stride;
                int seen = 0;
                for (int r = 0; r < taps; ++r) {
                  const int v = h + pad - r * dil;
                  const int reaches = v % stride == 0;
                  const int i = t.count > 0 ? (r - t.first) / t.step : -1;
                  const int listed = t.count > 0 && r >= t.first && (r - t.first) % t.step == 0 && i < t.count;
                  cr_assert_eq(listed, reaches, "stride %d dil %d pad %d taps %d extent %d: row %d tap %d", stride,
                               dil, pad, taps, extent, h, r);
                  if (!reaches) continue;
                  cr_assert_eq(hh + t.add - i * t.dstep, v / stride, "row %d tap %d reads dy row %d", h, r, v / stride);
                  seen++;
                }
                cr_assert_eq(seen, t.count > 0 ? t.count : 0);
              }
              cr_assert_eq(t.outs, outs, "stride %d extent %d phase %d", stride, extent, ph);
              rows += outs;
            }
            cr_assert_eq(rows, extent);
          }
  /* A GEMM's tiles: the phases' at a strided backward data, each phase's
   * own row tiles (here 4 phases of 3 x 3 = 9 rows each: 4 tiles of 64
   * where the undivided pass has 36 rows in 1). */
  aq_conv2d_args_t a = {.n = 1, .c = 64, .h = 6, .wd = 6, .k = 8, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 3, .q = 3};
  cr_assert_eq(aq_conv2d_gemm_tiles(&a, 1, 64, 64), 4);
  cr_assert_eq(aq_conv2d_gemm_tiles(&a, 0, 64, 64), 1);
  a.stride_h = a.stride_w = 1, a.p = a.q = 6;
  cr_assert_eq(aq_conv2d_gemm_tiles(&a, 1, 64, 64), 1);
}

/* The staged backward filter's stages: larger where each block of its grid
 * (a cluster a group of filters) is alone on an SM, within the opt-in
 * group segment of every GPU it builds for, and the ordinary size
 * otherwise or where the larger stages would not fit. */
Test(gpu_shapes, conv2d_staged_filter_stages_grow_where_a_block_is_alone) {
  const int split = AQ_GPU_CONV2D_BWD_FILTER_SPLIT;
  aq_conv2d_args_t l1 = {.n = 256, .c = 1, .h = 28, .wd = 28, .k = 6, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                         .pad_h = 2, .pad_w = 2, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  const int64_t per = aq_conv2d_tiled_image_floats(&l1);
  cr_assert_eq(aq_conv2d_filter_group(&l1, split), 1, "6 clusters a filter each fill an H100 in one wave");
  cr_assert(aq_conv2d_filter_alone(&l1, split));
  cr_assert_eq(aq_conv2d_filter_images(&l1, split), AQ_GPU_CONV2D_FILTER_STAGE_ALONE / per);
  cr_assert_leq(aq_conv2d_filter_bytes(&l1, split), AQ_GPU_CONV2D_FILTER_BYTES_ALONE);
  cr_assert_gt(aq_conv2d_filter_bytes(&l1, split), AQ_GPU_CONV2D_FILTER_BYTES, "more than two blocks an SM could hold");
  /* a grid past the SMs (8 channels: groups of 2 filters at most): two
   * blocks an SM, the ordinary stages */
  aq_conv2d_args_t wide = l1;
  wide.c = 8, wide.k = 64;
  const int64_t g = aq_conv2d_filter_group(&wide, split);
  cr_assert(g == 1 || g == 2);
  cr_assert(!aq_conv2d_filter_alone(&wide, split));
  cr_assert_eq(aq_conv2d_filter_images(&wide, split), AQ_GPU_CONV2D_FILTER_STAGE / aq_conv2d_filter_image_floats(&wide, g));
  cr_assert_leq(aq_conv2d_filter_bytes(&wide, split), AQ_GPU_CONV2D_FILTER_BYTES);
  /* a small batch: a block's share, not the stage, bounds the images */
  aq_conv2d_args_t few = l1;
  few.n = 16;
  cr_assert_eq(aq_conv2d_filter_images(&few, split), 2);
  /* every shape the staged build takes fits its limit, and its group is
   * the one a kernel reads off the grid (k over the clusters, rounded up) */
  for (int64_t c = 1; c <= 64; c *= 2)
    for (int64_t k = 1; k <= 64; k *= 4)
      for (int sp = 4; sp <= 16; sp *= 2) {
        aq_conv2d_args_t a = l1;
        a.c = c, a.k = k;
        const int64_t b = aq_conv2d_filter_bytes(&a, sp), group = aq_conv2d_filter_group(&a, sp);
        cr_assert_leq(b, aq_conv2d_filter_alone(&a, sp) ? AQ_GPU_CONV2D_FILTER_BYTES_ALONE : AQ_GPU_CONV2D_FILTER_BYTES,
                      "c %lld k %lld: %lld bytes", (long long)c, (long long)k, (long long)b);
        if (!b) continue;
        const int64_t clusters = (k + group - 1) / group;
        cr_assert_eq((k + clusters - 1) / clusters, group, "c %lld k %lld split %d", (long long)c, (long long)k, sp);
        cr_assert(group == 1 || aq_conv2d_filter_units(&a, group) <= AQ_GPU_CONV2D_FILTER_WARPS);
      }
}

/* The staged build's group and cluster: the least cost of each cluster's
 * best group (LeNet-like 1 -> 32: five filters a cluster of 16, seven
 * clusters in one wave, where a filter a cluster of 8 took three waves). */
Test(gpu_shapes, conv2d_staged_filter_groups_filters_where_clusters_would_take_waves) {
  aq_conv2d_args_t a = {.n = 256, .c = 1, .h = 28, .wd = 28, .k = 32, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                        .pad_h = 2, .pad_w = 2, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  cr_assert_eq(aq_conv2d_filter_group(&a, AQ_GPU_CONV2D_STAGED_MANY), 5);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &a), AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16);
  aq_dispatch_shape_t s = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &a, aq_planes_grid(1));
  cr_assert_eq(s.workgroup[0], 15 * 32, "5 units, 3 warps each");
  cr_assert_eq(s.grid[0], 7 * 16 * s.workgroup[0], "7 clusters of 16");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16, &a),
               aq_conv2d_filter_bytes_of(&a, 5, aq_conv2d_filter_images(&a, AQ_GPU_CONV2D_STAGED_MANY)));
  /* a group costs more a block: with clusters enough for a filter each, one */
  a.k = 6;
  cr_assert_eq(aq_conv2d_filter_group(&a, AQ_GPU_CONV2D_STAGED_MANY), 1);
  /* LeNet's second layer: 6 channels, pairs of filters over clusters of 8 (12 units) */
  aq_conv2d_args_t l2 = {.n = 256, .c = 6, .h = 14, .wd = 14, .k = 16, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                         .dil_h = 1, .dil_w = 1, .p = 10, .q = 10};
  cr_assert_eq(aq_conv2d_filter_group(&l2, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 2);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &l2), AQ_KERNEL_CONV2D_BWD_FILTER_STAGED);
  l2.c = 9; /* 18 units: a filter a block */
  cr_assert_eq(aq_conv2d_filter_group(&l2, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 1);
}

/* The tiled backward data stages an image's dy planes past 48 KB where
 * the batch has an image for each SM (LeNet-like 1 -> 32: 32 planes of
 * 28 x 28), and keeps a small batch on the direct loops. */
Test(gpu_shapes, conv2d_tiled_backward_data_grows_past_48_kb_for_a_large_batch) {
  aq_conv2d_args_t a = {.n = 256, .c = 1, .h = 28, .wd = 28, .k = 32, .r = 5, .s = 5, .stride_h = 1, .stride_w = 1,
                        .pad_h = 2, .pad_w = 2, .dil_h = 1, .dil_w = 1, .p = 28, .q = 28};
  cr_assert_eq(aq_conv2d_tiled_bytes(&a, 1), (32 * 28 * 28 + 32 * 25) * 4);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_DATA, &a), (32 * 28 * 28 + 32 * 25) * 4);
  cr_assert_eq(aq_conv2d_tiled_bytes(&a, 0), (32 * 25 + 32 * 33) * 4, "the forward: filters and a window");
  a.n = 8;
  cr_assert_eq(aq_conv2d_tiled_bytes(&a, 1), 0, "8 images: the direct loops");
  a.n = 256, a.k = 64;
  cr_assert_eq(aq_conv2d_tiled_bytes(&a, 1), 0, "64 planes pass two blocks an SM");
}

/* A staged build named for kernargs of no filters still launches whole
 * clusters (its kernel then writes nothing): a grid of none was rounded
 * to one block, which the CUDA driver refuses for a cluster kernel. */
Test(gpu_shapes, a_staged_build_launches_whole_clusters_for_bad_kernargs) {
  aq_conv2d_args_t a = {.n = 2, .c = 3, .h = 8, .wd = 8, .k = 0, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .p = 8, .q = 8};
  const int splits[] = {4, 8, 16};
  for (int i = 0; i < 3; ++i) {
    const aq_dispatch_shape_t s = aq_conv2d_filter_gpu_shape(&a, splits[i]);
    cr_assert(s.grid[0] > 0 && s.grid[0] / s.workgroup[0] % splits[i] == 0, "clusters of %d: %u threads of %u", splits[i],
              s.grid[0], s.workgroup[0]);
  }
}
