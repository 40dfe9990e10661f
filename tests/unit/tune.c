/* Auto-tuning (scheduler/tune.c, kernels/cuda/launch.h): the candidate
 * builds of each conv shape and their own launches, the tuned-builds file
 * read back as written, a foreign, corrupt or stale file refused by name
 * with the table still usable and the file rewritten, and AQ_TUNE. The
 * GPU side (timing, lowering the choice) is tests/gpu/tune.c. */
#include <stdio.h>

#include "kernels/cuda/launch.h"
#include "runtime/settings.h"
#include "scheduler/oplib.h"
#include "scheduler/tune.h"

#include "units.h"

static char dir[64], path[128];

static void setup(void) {
  perf_dir_make(dir, "tune", path, "tuned.tsv");
  AQ_ASSERT_OK(aq_init(NULL));
  aq_tune_reset();
}

static void teardown(void) {
  aq_shut_down();
  perf_dir_remove(dir);
  unsetenv("AQ_TUNE");
  aq_tune_reset();
}
TestSuite(tune, .init = setup, .fini = teardown);

static aq_conv2d_args_t conv(int64_t n, int64_t c, int64_t hw, int64_t k, int64_t rs, int32_t pad, int dbias) {
  aq_conv2d_args_t a = {.n = n, .c = c, .h = hw, .wd = hw, .k = k, .r = rs, .s = rs, .stride_h = 1, .stride_w = 1,
                        .pad_h = pad, .pad_w = pad, .dil_h = 1, .dil_w = 1};
  a.p = a.q = aq_conv_out(hw, rs, 1, pad, 1);
  static float bias;
  a.dbias = dbias ? &bias : NULL;
  return a;
}

static int listed(const char *const *names, uint32_t n, const char *build) {
  for (uint32_t i = 0; i < n; ++i)
    if (!strcmp(names[i], build)) return 1;
  return 0;
}

static int same_shape(aq_dispatch_shape_t x, aq_dispatch_shape_t y) {
  return !memcmp(x.grid, y.grid, sizeof(x.grid)) && !memcmp(x.workgroup, y.workgroup, sizeof(x.workgroup));
}

Test(tune, each_conv_shape_lists_the_builds_whose_rules_apply_the_rule_s_pick_first) {
  const aq_conv2d_args_t lenet1 = conv(256, 1, 28, 6, 5, 2, 1), lenet2 = conv(256, 6, 14, 16, 5, 0, 1);
  const aq_conv2d_args_t wide = conv(32, 64, 56, 64, 3, 1, 0);
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  const aq_conv2d_args_t *lenets[2] = {&lenet1, &lenet2};
  for (int i = 0; i < 2; ++i) { /* staged (three clusters), plain, split, and fp32's tensor cores */
    uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, lenets[i], names, AQ_GPU_OP_BUILDS_MAX);
    cr_assert_eq(n, 8, "LeNet conv %d: %u fp32 builds", i + 1, n);
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED4) && listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16));
    cr_assert_str_eq(names[0], aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, lenets[i]));
    cr_assert_str_eq(names[0], i ? AQ_KERNEL_CONV2D_BWD_FILTER_STAGED : AQ_KERNEL_CONV2D_BWD_FILTER_STAGED16,
                     "the staged build of least cost: 6 filters over 6 clusters of 16, 16 in pairs over clusters of 8");
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER) && listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT) &&
              listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3) && listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) &&
              listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6));
    n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, lenets[i], names, AQ_GPU_OP_BUILDS_MAX);
    cr_assert_eq(n, 8);
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16));
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED4) &&
              listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16));
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT) &&
              listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6));
    cr_assert_str_eq(names[0], i ? AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED : AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED16);
    cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16) &&
              listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_SPLIT));
  }
  /* 3x3 over 56x56 planes: no stage or tile holds them; the rule picks
   * Winograd's thin build (dw's 4 tiles of 32 x 32 would leave most
   * clusters idle), the tensor cores', the wide, the square and the warp
   * one candidates */
  uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &wide, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 10);
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN);
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BWD_FILTER_X3);
  cr_assert_str_eq(names[2], AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN);
  cr_assert_str_eq(names[3], AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6);
  cr_assert_str_eq(names[4], AQ_KERNEL_CONV2D_BWD_FILTER_FFMA);
  cr_assert_str_eq(names[5], AQ_KERNEL_CONV2D_BWD_FILTER_WINO);
  cr_assert_str_eq(names[6], AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC);
  cr_assert_str_eq(names[7], AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP);
  cr_assert_str_eq(names[8], AQ_KERNEL_CONV2D_BWD_FILTER);
  cr_assert_str_eq(names[9], AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT);
  aq_conv2d_args_t exact = wide;
  exact.precision = AQ_MATMUL_PRECISION_EXACT;
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &exact, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(n == 3 && !listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3) &&
                !listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3_THIN) && !listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_X3_SPLIT6),
            "exact: FFMA builds only");
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BWD_FILTER_FFMA, "the implicit GEMM first, the plain loops timed beside it");
  for (int pass = 0; pass < 2; ++pass) { /* and the forward's and backward data's */
    const char *op = pass ? AQ_KERNEL_CONV2D_BWD_DATA : AQ_KERNEL_CONV2D;
    n = aq_gpu_op_builds(op, &exact, names, AQ_GPU_OP_BUILDS_MAX);
    cr_assert(n == 2 && !strcmp(names[0], pass ? AQ_KERNEL_CONV2D_BWD_DATA_FFMA : AQ_KERNEL_CONV2D_FFMA) && !strcmp(names[1], op));
    n = aq_gpu_op_builds(op, &wide, names, AQ_GPU_OP_BUILDS_MAX);
    cr_assert(n == 4 && listed(names, n, pass ? AQ_KERNEL_CONV2D_BWD_DATA_FFMA : AQ_KERNEL_CONV2D_FFMA) &&
                  listed(names, n, pass ? AQ_KERNEL_CONV2D_BWD_DATA_WINO : AQ_KERNEL_CONV2D_WINO),
              "FFMA and Winograd candidates of x3's: %u", n);
    n = aq_gpu_op_builds(op, &exact, names, AQ_GPU_OP_BUILDS_MAX);
    cr_assert(!listed(names, n, pass ? AQ_KERNEL_CONV2D_BWD_DATA_WINO : AQ_KERNEL_CONV2D_WINO), "exact: no Winograd");
  }
  /* the backward filter's wide Winograd build where dw has tiles enough
   * for two blocks an SM, its warp one (blocks of 512 threads, one an SM)
   * where they fill clusters of 6 once, else its thin one over clusters
   * of 16 */
  const aq_conv2d_args_t c256 = conv(32, 256, 14, 256, 3, 1, 0), c128 = conv(32, 128, 28, 128, 3, 1, 0);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &c256), AQ_KERNEL_CONV2D_BWD_FILTER_WINO, "64 tiles of dw");
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &c256, aq_planes_grid(1)).grid[0],
               64 * AQ_GPU_CONV2D_BWD_FILTER_SPLIT * AQ_GPU_BLOCK, "a cluster a tile");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &c128), AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP,
                   "16 wide tiles: the warp build");
  const aq_dispatch_shape_t w128 = aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &c128, aq_planes_grid(1));
  cr_assert_eq(w128.grid[0], 16 * AQ_GPU_CONV2D_WINO_WARP_SPLIT * AQ_GPU_CONV2D_WINO_WARP_THREADS);
  cr_assert_eq(w128.workgroup[0], AQ_GPU_CONV2D_WINO_WARP_THREADS);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP, &c128), AQ_GPU_CONV2D_WINO_WARP_BYTES);
  cr_assert_eq(aq_gpu_op_build_shape(AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC, &c128,
                                     aq_planes_grid(1)).grid[0],
               16 * AQ_GPU_CONV2D_WINO_TC_SPLIT * AQ_GPU_BLOCK, "the square build a tuning candidate");
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC, &c128), AQ_GPU_CONV2D_WINO_TC_BYTES);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &wide), AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN,
                   "4 tiles: too few clusters; 8 thin ones");
  cr_assert_eq(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_FILTER, &wide, aq_planes_grid(1)).grid[0],
               8 * AQ_GPU_CONV2D_WINO_THIN_SPLIT * AQ_GPU_BLOCK, "a cluster a 16 x 32 tile");
  const aq_conv2d_args_t c32 = conv(32, 32, 56, 32, 3, 1, 0);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER, &c32), AQ_KERNEL_CONV2D_BWD_FILTER_WINO_THIN,
                   "2 thin tiles, 32 blocks: still Winograd's");
  aq_conv2d_args_t strided = wide;
  strided.stride_h = strided.stride_w = 2, strided.p = strided.q = 28;
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D, &strided, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(!listed(names, n, AQ_KERNEL_CONV2D_WINO), "Winograd's F(2x2, 3x3): unit strides only");
  /* a strided backward data: FFMA by rule, x3 a candidate; at unit stride x3's */
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_DATA, &strided, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(n >= 2 && !strcmp(names[0], AQ_KERNEL_CONV2D_BWD_DATA_FFMA) && listed(names, n, AQ_KERNEL_CONV2D_BWD_DATA_X3));
  cr_assert(same_shape(aq_gpu_op_shape(AQ_KERNEL_CONV2D_BWD_DATA, &strided, aq_planes_grid(1)),
                       aq_conv2d_ffma_gpu_shape(&strided, 1)));
  aq_conv2d_args_t unit = wide;
  unit.r = unit.s = 5, unit.pad_h = unit.pad_w = 2; /* no Winograd */
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_DATA, &unit), AQ_KERNEL_CONV2D_BWD_DATA_X3);
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &wide, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 7, "three taps wide at unit stride: the rows builds over clusters of 16 and 8 (and in chunks), the "
                     "tensor cores' tiles split over clusters of 16, 8, 6, or not");
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS, "6 tiles of 64 filters x 32 channels x a filter row");
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_BWD_FILTER_BF16);
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT) &&
            listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT6) &&
            listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT16) &&
            listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8) &&
            listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS_WIDE));
  /* the forward: tiled, or the tensor cores */
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_CONV2D, &lenet1, names, AQ_GPU_OP_BUILDS_MAX), 2);
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D);
  cr_assert_str_eq(names[1], AQ_KERNEL_CONV2D_X3);
  /* ops of one build: the rule's pick alone; and max is kept */
  aq_matmul_args_t mm = {.m = 256, .n = 1024, .k = 784, .batch = 1};
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_MATMUL, &mm, names, AQ_GPU_OP_BUILDS_MAX), 1);
  cr_assert_str_eq(names[0], aq_gpu_op_kernel(AQ_KERNEL_MATMUL, &mm));
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &lenet1, names, 2), 2);
  cr_assert_eq(aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &lenet1, names, 0), 0);
}

/* A bf16 tensor-core split build's cluster, from its name's suffix (0:
 * not one). */
static int tc_cluster(const char *name) {
  const char *s = strstr(name, "_tc_split");
  return !s ? 0 : !strcmp(s, "_tc_split6") ? 6 : !strcmp(s, "_tc_split16") ? 16 : 8;
}

/* A rows build's cluster, from its name's suffix (0: not one). */
static int rows_cluster(const char *name) {
  const char *s = strstr(name, "_rows");
  return !s ? 0 : !strcmp(s, "_rows8") ? 8 : 16;
}

/* A staged build's cluster, from its name's suffix (0: not staged). */
static int staged_cluster(const char *name) {
  const char *s = strstr(name, "_staged");
  return !s ? 0 : !strcmp(s, "_staged4") ? 4 : !strcmp(s, "_staged16") ? 16 : 8;
}

Test(tune, each_candidate_launches_with_its_own_shape_and_group_segment) {
  const aq_conv2d_args_t cases[3] = {conv(256, 1, 28, 6, 5, 2, 1), conv(256, 6, 14, 16, 5, 0, 0), conv(32, 64, 56, 64, 3, 1, 0)};
  const char *ops[2] = {AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_BF16};
  const aq_dispatch_shape_t cpu = aq_planes_grid(1);
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 2; ++o) {
      const aq_conv2d_args_t *a = &cases[i];
      const char *names[AQ_GPU_OP_BUILDS_MAX];
      uint32_t n = aq_gpu_op_builds(ops[o], a, names, AQ_GPU_OP_BUILDS_MAX);
      /* the rule's pick launches as the op always has */
      cr_assert(same_shape(aq_gpu_op_build_shape(ops[o], names[0], a, cpu), aq_gpu_op_shape(ops[o], a, cpu)));
      for (uint32_t b = 0; b < n; ++b) {
        aq_dispatch_shape_t sh = aq_gpu_op_build_shape(ops[o], names[b], a, cpu);
        uint32_t group = aq_gpu_op_group_segment(names[b], a);
        aq_dispatch_shape_t want;
        uint32_t want_group;
        if (strstr(names[b], "_x3"))
          want = aq_conv2d_x3_gpu_shape(a, 2, names[b]), want_group = 0;
        else if (strstr(names[b], "_ffma"))
          want = aq_conv2d_ffma_gpu_shape(a, 2), want_group = 0;
        else if (strstr(names[b], "_wino"))
          want = aq_conv2d_wino_gpu_shape(a, names[b]),
          want_group = !strcmp(names[b], AQ_KERNEL_CONV2D_BWD_FILTER_WINO_TC)     ? AQ_GPU_CONV2D_WINO_TC_BYTES
                       : !strcmp(names[b], AQ_KERNEL_CONV2D_BWD_FILTER_WINO_WARP) ? AQ_GPU_CONV2D_WINO_WARP_BYTES
                                                                                 : 0;
        else if (tc_cluster(names[b]))
          want = aq_conv2d_bf16_filter_split_shape(a, tc_cluster(names[b])), want_group = 0;
        else if (rows_cluster(names[b]))
          want = aq_conv2d_bf16_rows_shape(a, rows_cluster(names[b])), want_group = AQ_GPU_CONV2D_ROWS_BYTES(AQ_GPU_CONV2D_ROWS_THREADS(rows_cluster(names[b])));
        else if (staged_cluster(names[b]))
          want = aq_conv2d_filter_gpu_shape(a, staged_cluster(names[b])),
          want_group = (uint32_t)aq_conv2d_filter_bytes(a, staged_cluster(names[b]));
        else if (strstr(names[b], "_split"))
          want = aq_conv2d_bwd_filter_gpu_shape(a, AQ_GPU_CONV2D_BWD_FILTER_SPLIT), want_group = (uint32_t)aq_conv2d_tiled_bytes(a, 2);
        else if (o == 0)
          want = aq_conv2d_bwd_filter_gpu_shape(a, 1), want_group = (uint32_t)aq_conv2d_tiled_bytes(a, 2);
        else
          want = aq_conv2d_bf16_gpu_shape(a, 2), want_group = 0;
        cr_assert(same_shape(sh, want), "case %d: %s launches as another build", i, names[b]);
        cr_assert_eq(group, want_group, "case %d: %s's group segment", i, names[b]);
        /* a cluster build's grid is whole clusters */
        if (strstr(names[b], "_split") || strstr(names[b], "_staged") || strstr(names[b], "_x3") || strstr(names[b], "_wino") ||
            rows_cluster(names[b]))
          cr_assert_eq(sh.grid[0] / sh.workgroup[0] %
                           (tc_cluster(names[b])             ? tc_cluster(names[b])
                            : rows_cluster(names[b])         ? rows_cluster(names[b])
                            : strstr(names[b], "_split6")    ? AQ_GPU_CONV2D_SPLIT6
                            : strstr(names[b], "_wino_thin") ? AQ_GPU_CONV2D_WINO_THIN_SPLIT
                            : strstr(names[b], "_wino_tc")   ? AQ_GPU_CONV2D_WINO_TC_SPLIT
                            : strstr(names[b], "_wino_warp") ? AQ_GPU_CONV2D_WINO_WARP_SPLIT
                            : staged_cluster(names[b])       ? staged_cluster(names[b])
                                                             : AQ_GPU_CONV2D_BWD_FILTER_SPLIT),
                       0, "%s", names[b]);
      }
    }
}

/* bf16's backward filter by columns takes dy's planes past 64 positions
 * in chunks of 64 (up to 4): by rule where its tiles fill half an H200's
 * SMs and no rows build takes the shape (256 -> 256 at 14x14: 96 rows
 * tiles, four waves), over clusters of 3 where those take fewer waves of
 * images; both a candidate wherever they fit. */
Test(tune, a_bf16_backward_filter_of_chunked_planes_takes_the_columns_build) {
  const aq_conv2d_args_t a = conv(32, 256, 14, 256, 3, 1, 0);
  cr_assert(aq_conv2d_bf16_col_filter_fits(&a) && !aq_conv2d_bf16_col_fits(&a), "196 positions: the backward data's do not fit");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3,
                   "32 tiles: one wave over clusters of 3");
  const char *names[AQ_GPU_OP_BUILDS_MAX];
  uint32_t n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_TC_SPLIT) && listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8) &&
            listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL));
  cr_assert_eq(aq_gpu_op_build_shape(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL, &a, aq_planes_grid(1)).grid[0],
               32 * AQ_GPU_CONV2D_COL_FILTER_SPLIT * AQ_GPU_CONV2D_COL_FILTER_THREADS, "a candidate on its own grid");
  const aq_conv2d_args_t full = conv(32, 256, 16, 256, 3, 1, 0), over = conv(32, 256, 17, 256, 3, 1, 0);
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &full), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3,
                   "256 positions: four whole chunks");
  cr_assert(!aq_conv2d_bf16_col_filter_fits(&over), "289 positions");
  const aq_conv2d_args_t few = conv(32, 128, 14, 128, 3, 1, 0), rows = conv(32, 128, 16, 256, 3, 1, 0);
  cr_assert(!strstr(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &few), "_col"), "8 tiles");
  n = aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &few, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL) && listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL3) &&
                listed(names, n, AQ_KERNEL_CONV2D_BWD_FILTER_BF16_COL2),
            "candidates all the same");
  cr_assert_str_eq(aq_gpu_op_kernel(AQ_KERNEL_CONV2D_BWD_FILTER_BF16, &rows), AQ_KERNEL_CONV2D_BWD_FILTER_BF16_ROWS8,
                   "48 rows tiles in two waves: the rows build's");
}

/* bf16's forward of many channels on 7x7 planes: the build by planes by
 * rule, the flat tiles over clusters of 4 and 2, the 64x64 tiles split
 * and whole, and Winograd's as candidates, each launching on its own grid
 * (the split builds' of whole clusters). */
Test(tune, a_bf16_forward_of_small_planes_lists_its_split_builds) {
  const aq_conv2d_args_t a = conv(32, 512, 7, 512, 3, 1, 0);
  const aq_dispatch_shape_t cpu = aq_planes_grid(1);
  const char *names[AQ_GPU_OP_BUILDS_MAX], *op = AQ_KERNEL_CONV2D_BF16;
  const uint32_t n = aq_gpu_op_builds(op, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, 6);
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert(same_shape(aq_gpu_op_build_shape(op, names[0], &a, cpu), aq_conv2d_bf16_planes_shape(&a)));
  cr_assert_eq(aq_gpu_op_group_segment(names[0], &a), AQ_GPU_CONV2D_PLANES_BYTES);
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4));
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BF16) && listed(names, n, AQ_KERNEL_CONV2D_BF16_SPLIT) &&
            listed(names, n, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT) && listed(names, n, AQ_KERNEL_CONV2D_BF16_WINO));
  const aq_dispatch_shape_t flat4 = aq_conv2d_bf16_fwd_flat_shape(&a, AQ_GPU_CONV2D_BF16_FLAT_SPLIT4),
                            flat = aq_conv2d_bf16_fwd_flat_shape(&a, AQ_GPU_CONV2D_BF16_FWD_SPLIT);
  cr_assert(same_shape(aq_gpu_op_build_shape(op, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4, &a, cpu), flat4));
  cr_assert(same_shape(aq_gpu_op_build_shape(op, AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT, &a, cpu), flat));
  cr_assert(same_shape(aq_gpu_op_build_shape(op, AQ_KERNEL_CONV2D_BF16_SPLIT, &a, cpu), aq_conv2d_bf16_fwd_split_shape(&a)));
  cr_assert(same_shape(aq_gpu_op_build_shape(op, AQ_KERNEL_CONV2D_BF16, &a, cpu), aq_conv2d_bf16_gpu_shape(&a, 0)));
  cr_assert_eq(flat4.grid[0] / AQ_GPU_BLOCK % AQ_GPU_CONV2D_BF16_FLAT_SPLIT4, 0);
  cr_assert_eq(flat.grid[0] / AQ_GPU_BLOCK % AQ_GPU_CONV2D_BF16_FWD_SPLIT, 0);
  cr_assert_eq(aq_gpu_op_group_segment(AQ_KERNEL_CONV2D_BF16_SPLIT_FLAT4, &a), 0);
}

/* On 14x14 planes, by rule where its items are more than half the SMs'
 * slots (256 -> 256: an image's four tiles of 49 positions by four of 64
 * filters, 512 of them), a candidate where they are not (8 images). */
Test(tune, a_bf16_forward_of_14x14_planes_takes_the_build_by_planes_by_rule) {
  aq_conv2d_args_t a = conv(32, 256, 14, 256, 3, 1, 0);
  const aq_dispatch_shape_t cpu = aq_planes_grid(1);
  const char *names[AQ_GPU_OP_BUILDS_MAX], *op = AQ_KERNEL_CONV2D_BF16;
  int64_t np;
  cr_assert_eq(aq_conv2d_bf16_planes_tiles(&a, &np), 4);
  cr_assert_eq(np, 49);
  cr_assert_eq(aq_conv2d_bf16_planes_items(&a), 512);
  uint32_t n = aq_gpu_op_builds(op, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert(same_shape(aq_gpu_op_build_shape(op, names[0], &a, cpu), aq_gpu_threads_shape(512 * AQ_GPU_BLOCK)));
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BF16));
  a.n = 8;
  n = aq_gpu_op_builds(op, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_str_neq(names[0], AQ_KERNEL_CONV2D_BF16_PLANES);
  cr_assert(listed(names, n, AQ_KERNEL_CONV2D_BF16_PLANES));
  a.h = a.wd = 17, a.p = a.q = 17; /* x's plane of 289 */
  n = aq_gpu_op_builds(op, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert(!listed(names, n, AQ_KERNEL_CONV2D_BF16_PLANES));
}

Test(tune, the_op_library_hands_the_scheduler_its_candidates_and_keys) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  aq_conv2d_args_t a = conv(256, 1, 28, 6, 5, 2, 1), b = a;
  b.dbias = NULL;
  const char *names[AQ_GPU_OP_BUILDS_MAX], *mine[AQ_GPU_OP_BUILDS_MAX];
  uint32_t n = aq_oplib_builds(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, names, AQ_GPU_OP_BUILDS_MAX);
  cr_assert_eq(n, aq_gpu_op_builds(AQ_KERNEL_CONV2D_BWD_FILTER, &a, mine, AQ_GPU_OP_BUILDS_MAX));
  for (uint32_t i = 0; i < n; ++i) cr_assert_str_eq(names[i], mine[i]);
  char ka[192], kb[192];
  cr_assert(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, ka, sizeof(ka)));
  cr_assert(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &b, kb, sizeof(kb)));
  cr_assert_str_eq(ka, "n256,c1,h28,w28,k6,r5,s5,p28,q28,stride1x1,pad2x2,dil1x1,dbias1,prec0");
  cr_assert_str_neq(ka, kb, "a bias gradient is another shape");
  cr_assert_null(strpbrk(ka, " \t\n"), "one field of the file");
  cr_assert_not(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_RELU, &a, ka, sizeof(ka)), "no key, not tuned");
  cr_assert_not(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, ka, 8), "cut short: none");
  /* CPU agents have one build */
  cr_assert_eq(aq_oplib_builds(lib, AQ_AGENT_KIND_CPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, names, AQ_GPU_OP_BUILDS_MAX), 1);
  cr_assert_str_eq(names[0], AQ_KERNEL_CONV2D_BWD_FILTER);
}

static tune_entry_t entry(const char *arch, const char *shape, const char *build) {
  tune_entry_t e;
  memset(&e, 0, sizeof(e));
  snprintf(e.arch, sizeof(e.arch), "%s", arch);
  snprintf(e.b.kernel, sizeof(e.b.kernel), "%s", AQ_KERNEL_CONV2D_BWD_FILTER);
  snprintf(e.b.shape, sizeof(e.b.shape), "%s", shape);
  snprintf(e.b.build, sizeof(e.b.build), "%s", build);
  const char *c[3] = {AQ_KERNEL_CONV2D_BWD_FILTER_STAGED, AQ_KERNEL_CONV2D_BWD_FILTER, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT};
  for (int i = 0; i < 3; ++i)
    snprintf(e.b.candidate[i], sizeof(e.b.candidate[i]), "%s", c[i]), e.b.candidate_ns[i] = 1000.0 * (3 - i) + 7;
  e.b.candidates = 3;
  return e;
}

typedef struct got {
  tune_entry_t e[8];
  int n;
} got_t;
static void collect(const tune_entry_t *e, void *user) {
  got_t *g = user;
  if (g->n < 8) g->e[g->n++] = *e;
}

static void write_text(const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
}

Test(tune, the_file_reads_back_as_written) {
  tune_entry_t in[2] = {entry("cuda/sm_90/132/NVIDIA_H100_80GB_HBM3", "n256,c1,dbias1", AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT),
                        entry("cuda/sm_80/108/NVIDIA_A100", "n32,c64,dbias0", AQ_KERNEL_CONV2D_BWD_FILTER_STAGED)};
  AQ_ASSERT_OK(aq_tune_write(path, in, 2));
  got_t got = {0};
  char why[512];
  cr_assert_eq(aq_tune_read(path, collect, &got, why, sizeof(why)), TUNE_FILE_OURS);
  cr_assert_str_empty(why);
  cr_assert_eq(got.n, 2);
  for (int i = 0; i < 2; ++i) {
    cr_assert_str_eq(got.e[i].arch, in[i].arch);
    cr_assert_str_eq(got.e[i].b.kernel, in[i].b.kernel);
    cr_assert_str_eq(got.e[i].b.shape, in[i].b.shape);
    cr_assert_str_eq(got.e[i].b.build, in[i].b.build);
    cr_assert_eq(got.e[i].b.candidates, 3);
    for (int c = 0; c < 3; ++c) {
      cr_assert_str_eq(got.e[i].b.candidate[c], in[i].b.candidate[c]);
      cr_assert_float_eq(got.e[i].b.candidate_ns[c], in[i].b.candidate_ns[c], 0.5);
    }
  }
  /* through the table: kept, found, listed by arch, saved and read again */
  aq_tune_put(&in[0]);
  AQ_ASSERT_OK(aq_tune_save());
  aq_tune_reset();
  tune_entry_t found;
  cr_assert(aq_tune_find(in[0].arch, in[0].b.kernel, in[0].b.shape, &found));
  cr_assert_str_eq(found.b.build, AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT);
  cr_assert(aq_tune_find(in[1].arch, in[1].b.kernel, in[1].b.shape, NULL), "the save merged into the file's");
  cr_assert_not(aq_tune_find("cuda/sm_90/132/Other_GPU", in[0].b.kernel, in[0].b.shape, NULL), "another GPU's");
  aq_tuned_build_t list[4];
  cr_assert_eq(aq_tune_list(in[0].arch, list, 4), 1);
  cr_assert_str_eq(list[0].shape, in[0].b.shape);
  char where[1024];
  cr_assert_str_eq(aq_tune_path(where, sizeof(where)), path, "beside the models, in AQ_PERF_DIR");
  /* a failure to tune: found (not timed again), never listed or saved */
  tune_entry_t failed = entry(in[0].arch, "n9,c9,dbias0", AQ_KERNEL_CONV2D_BWD_FILTER);
  failed.b.candidates = 0;
  aq_tune_put(&failed);
  cr_assert(aq_tune_find(failed.arch, failed.b.kernel, failed.b.shape, NULL));
  cr_assert_eq(aq_tune_list(in[0].arch, list, 4), 1);
  AQ_ASSERT_OK(aq_tune_save());
  aq_tune_reset();
  cr_assert_not(aq_tune_find(failed.arch, failed.b.kernel, failed.b.shape, NULL));
}

/* A bad file: refused with a message naming it; the table works without
 * it and the next save rewrites it as ours, the good lines kept. */
static void refused(const char *text, int state, const char *says, int good_lines) {
  write_text(text);
  got_t got = {0};
  char why[512];
  cr_assert_eq(aq_tune_read(path, collect, &got, why, sizeof(why)), state, "%s", text);
  cr_assert(strstr(why, path), "the message names the file: %s", why);
  cr_assert(strstr(why, says), "%s", why);
  cr_assert_eq(got.n, good_lines);
  aq_tune_reset();
  tune_entry_t e = entry("cuda/sm_90/132/GPU", "n1,c1,dbias0", AQ_KERNEL_CONV2D_BWD_FILTER);
  cr_assert_not(aq_tune_find(e.arch, e.b.kernel, e.b.shape, NULL));
  aq_tune_put(&e);
  AQ_ASSERT_OK(aq_tune_save());
  got.n = 0;
  cr_assert_eq(aq_tune_read(path, collect, &got, why, sizeof(why)), TUNE_FILE_OURS, "rewritten: %s", why);
  cr_assert_eq(got.n, good_lines + 1);
}

Test(tune, a_foreign_file_is_refused_by_name_and_rewritten) {
  refused("kernel class arch samples\naq_relu 1 cpu 3 1.0\n", TUNE_FILE_FOREIGN, "not an Aquila tuned-builds file", 0);
}

Test(tune, an_empty_file_is_foreign) { refused("", TUNE_FILE_FOREIGN, "not an Aquila", 0); }

Test(tune, a_stale_file_is_refused_by_name_and_rewritten) {
  refused("# aquila tuned builds v0 aquila=0.0.1\ncuda/x k n1 b b:1\n", TUNE_FILE_STALE, "another Aquila version", 0);
}

Test(tune, a_corrupt_file_keeps_its_good_lines_and_names_the_bad_one) {
  tune_entry_t ok = entry("cuda/sm_90/132/GPU", "n2,c1,dbias0", AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT);
  AQ_ASSERT_OK(aq_tune_write(path, &ok, 1));
  FILE *f = fopen(path, "a");
  cr_assert(f);
  /* a truncated line, a build kept that was never timed, a bad time, garbage bytes */
  fputs("cuda/sm_90/132/GPU aq_conv2d_bwd_filter_f32 n3\n", f);
  fputs("cuda/sm_90/132/GPU aq_conv2d_bwd_filter_f32 n4 aq_other aq_conv2d_bwd_filter_f32:10\n", f);
  fputs("cuda/sm_90/132/GPU aq_conv2d_bwd_filter_f32 n5 aq_conv2d_bwd_filter_f32 aq_conv2d_bwd_filter_f32:nan\n", f);
  fputs("\x01\x02\xff garbage\n", f);
  fclose(f);
  char text[4096];
  f = fopen(path, "r");
  size_t len = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[len] = 0;
  refused(text, TUNE_FILE_CORRUPT, "4 malformed lines, the first line 4", 1);
}

/* The table over a bad file: lookups find nothing, a choice kept is found,
 * and the save replaces the file. */
Test(tune, the_table_goes_on_over_a_bad_file) {
  write_text("not ours\n");
  aq_tune_reset();
  cr_assert_not(aq_tune_find("a", "k", "s", NULL));
  tune_entry_t e = entry("a", "s", AQ_KERNEL_CONV2D_BWD_FILTER);
  aq_tune_put(&e);
  cr_assert(aq_tune_find("a", AQ_KERNEL_CONV2D_BWD_FILTER, "s", NULL));
  AQ_ASSERT_OK(aq_tune_save());
  aq_tune_reset();
  cr_assert(aq_tune_find("a", AQ_KERNEL_CONV2D_BWD_FILTER, "s", NULL), "read back from the rewritten file");
}

Test(tune, aq_tune_0_turns_the_choice_off) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  aq_conv2d_args_t a = conv(256, 1, 28, 6, 5, 2, 1);
  char key[192];
  cr_assert(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, key, sizeof(key)));
  tune_entry_t e = entry("cuda/test", key, AQ_KERNEL_CONV2D_BWD_FILTER);
  aq_tune_put(&e);
  cr_assert(aq_tune_on());
  const char *pick = aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &a);
  cr_assert_str_eq(pick, AQ_KERNEL_CONV2D_BWD_FILTER, "the kept build, not the rule's staged one");
  cr_assert_null(aq_tune_choice(lib, "cuda/other", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &a), "another GPU model's: the rule");
  /* a build the library does not list for the shape is not run */
  snprintf(e.b.build, sizeof(e.b.build), "%s", AQ_KERNEL_CONV2D_BWD_FILTER_BF16_STAGED);
  snprintf(e.b.candidate[0], sizeof(e.b.candidate[0]), "%s", e.b.build);
  aq_tune_put(&e);
  cr_assert_null(aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &a));
  /* forced (a tuning exec's candidates): task by task, whatever is kept */
  const char *const forced[2] = {AQ_KERNEL_CONV2D_BWD_FILTER_SPLIT, AQ_KERNEL_CONV2D_BWD_FILTER};
  aq_tune_force(forced, 2);
  cr_assert(aq_tune_forcing());
  cr_assert_str_eq(aq_tune_choice(lib, "cuda/other", 1, AQ_KERNEL_CONV2D_BWD_FILTER, &a), AQ_KERNEL_CONV2D_BWD_FILTER);
  cr_assert_null(aq_tune_choice(lib, "cuda/other", 2, AQ_KERNEL_CONV2D_BWD_FILTER, &a));
  aq_tune_force(NULL, 0);
  cr_assert_not(aq_tune_forcing());
  aq_shut_down();
  setenv("AQ_TUNE", "0", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_not(aq_tune_on());
  snprintf(e.b.build, sizeof(e.b.build), "%s", AQ_KERNEL_CONV2D_BWD_FILTER);
  aq_tune_put(&e);
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  cr_assert_null(aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &a), "off: the rule's build");
  setenv("AQ_TUNE", "2", 1);
  aq_shut_down();
  cr_assert_eq(aq_init(NULL), AQ_ERROR_INVALID_ARGUMENT, "a bad value is refused by name");
  cr_assert(strstr(aq_last_error(), "AQ_TUNE"), "%s", aq_last_error());
  unsetenv("AQ_TUNE");
  AQ_ASSERT_OK(aq_init(NULL));
}

/* A choice kept at the default precision (the tensor cores' x3 build) is
 * never run by an exact exec: the key holds the precision, and the x3
 * build is no candidate of an exact kernarg anyway. */
Test(tune, an_exact_exec_never_reads_a_default_precision_choice) {
  const oplib_t *lib;
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
  aq_conv2d_args_t a = conv(32, 64, 56, 64, 3, 1, 0), exact = a;
  exact.precision = AQ_MATMUL_PRECISION_EXACT;
  char key[192], exact_key[192];
  cr_assert(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &a, key, sizeof(key)));
  cr_assert(aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, AQ_KERNEL_CONV2D_BWD_FILTER, &exact, exact_key, sizeof(exact_key)));
  cr_assert_str_neq(key, exact_key, "the precision is part of the shape");
  tune_entry_t e = entry("cuda/test", key, AQ_KERNEL_CONV2D_BWD_FILTER_X3);
  aq_tune_put(&e);
  cr_assert_str_eq(aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &a), AQ_KERNEL_CONV2D_BWD_FILTER_X3);
  cr_assert_null(aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &exact), "exact: the rule's FFMA build");
  /* and were the x3 build kept under the exact key, it is not a candidate there */
  e = entry("cuda/test", exact_key, AQ_KERNEL_CONV2D_BWD_FILTER_X3);
  aq_tune_put(&e);
  cr_assert_null(aq_tune_choice(lib, "cuda/test", 0, AQ_KERNEL_CONV2D_BWD_FILTER, &exact));
}
