/* GPU launch shapes against CUDA's limits, without a GPU: the scheduler's
 * check at instantiation (aq_graph_check_gpu_grid, which lowering calls for
 * every task placed on a GPU, on the op library's launch shape) and the CUDA driver's own, per packet
 * (aq_cuda_launch_shape). A product whose tiles pass 65535 along y or z,
 * or whose grid passes 2^32 work-items, is refused with the task and the
 * limit named instead of being launched wrong. */
#include "kernels/cuda/launch.h"
#include "runtime/drivers/cuda.h"
#include "scheduler/graph_internal.h"

#include "units.h"

TestSuite(gpu_grid);

static aq_matmul_args_t product(int64_t m, int64_t n, int64_t k, int64_t batch, int32_t precision) {
  aq_matmul_args_t a = {.m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n, .batch = batch, .alpha = 1,
                        .precision = precision};
  return a;
}

static aq_status_t gpu_shape(aq_matmul_args_t a, aq_dispatch_shape_t *s) {
  *s = aq_gpu_op_shape(AQ_KERNEL_MATMUL, &a, aq_matmul_grid(&a)); /* the op library's launch rule */
  return aq_graph_check_gpu_grid("matmul(x,w)", AQ_KERNEL_MATMUL, *s);
}

static void assert_refused(aq_status_t s, const char *limit) {
  cr_assert_eq(s, AQ_ERROR_INVALID_GRAPH, "got %s", aq_status_string(s));
  cr_assert(strstr(aq_last_error(), "matmul(x,w)"), "the task is not named: %s", aq_last_error());
  cr_assert(strstr(aq_last_error(), limit), "the limit %s is not named: %s", limit, aq_last_error());
}

Test(gpu_grid, a_product_within_the_limits_keeps_its_tiles) {
  aq_dispatch_shape_t s;
  AQ_ASSERT_OK(gpu_shape(product(4096, 4096, 4096, 1, AQ_MATMUL_PRECISION_EXACT), &s));
  cr_assert_eq(s.grid[1], 4096 / 128 * 16, "128-row tiles along y: %u", s.grid[1]);
  cr_assert_eq(s.workgroup[0], 16);
  AQ_ASSERT_OK(gpu_shape(product(65535 * 64, 64, 64, 1, AQ_MATMUL_PRECISION_DEFAULT), &s));
  cr_assert_eq(s.grid[1] / s.workgroup[1], 65535, "the last row of tiles CUDA takes");
}

Test(gpu_grid, too_many_row_tiles_are_refused) {
  aq_dispatch_shape_t s;
  /* 3xTF32 builds run 64x64 tiles: 65536 of them along y. */
  assert_refused(gpu_shape(product(65536 * 64, 64, 64, 1, AQ_MATMUL_PRECISION_DEFAULT), &s), "65535");
}

Test(gpu_grid, a_batch_past_65535_is_refused) {
  aq_dispatch_shape_t s;
  assert_refused(gpu_shape(product(64, 64, 64, 70000, AQ_MATMUL_PRECISION_DEFAULT), &s), "65535");
}

Test(gpu_grid, a_grid_of_2_to_the_32_items_is_refused_not_wrapped) {
  aq_dispatch_shape_t s;
  /* 2^28 column tiles of 16 threads: 2^32 work-items along x, which 32-bit
   * arithmetic wrapped to 0 (then 1). */
  assert_refused(gpu_shape(product(64, (int64_t)1 << 34, 64, 1, AQ_MATMUL_PRECISION_DEFAULT), &s), "2147483647");
  /* The saturating helpers never wrap either. */
  aq_matmul_args_t a = product(64, (int64_t)1 << 34, 64, 1, AQ_MATMUL_PRECISION_DEFAULT);
  cr_assert_eq(aq_gpu_shape(AQ_KERNEL_MATMUL, &a, aq_matmul_grid(&a)).grid[0], AQ_GRID_TOO_LARGE);
  cr_assert_eq(aq_matmul_bf16_gpu_shape(&a).grid[0], AQ_GRID_TOO_LARGE);
  a.n = INT64_MAX;
  cr_assert_eq(aq_gpu_tiles(a.n, 64), (int64_t)1 << 40, "no overflow of n + tile - 1");
}

static hsa_kernel_dispatch_packet_t packet(uint32_t gx, uint32_t gy, uint32_t gz, uint16_t wx, uint16_t wy) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.grid_size_x = gx, p.grid_size_y = gy, p.grid_size_z = gz;
  p.workgroup_size_x = wx, p.workgroup_size_y = wy, p.workgroup_size_z = 1;
  return p;
}

Test(gpu_grid, the_cuda_driver_counts_blocks_in_64_bits) {
  uint32_t blocks[3], wg[3];
  char why[160];
  hsa_kernel_dispatch_packet_t p = packet(UINT32_MAX, 1, 1, 1024, 1);
  cr_assert_eq(aq_cuda_launch_shape(&p, blocks, wg, why, sizeof(why)), 0, "%s", why);
  cr_assert_eq(blocks[0], 4194304u, "(2^32 - 1 + 1023) / 1024, not 0 as 32-bit arithmetic wrapped it: %u", blocks[0]);
  p = packet(64, 65536 * 16u, 1, 16, 16);
  cr_assert_neq(aq_cuda_launch_shape(&p, blocks, wg, why, sizeof(why)), 0);
  cr_assert(strstr(why, "65535") && strstr(why, "along y"), "%s", why);
  p = packet(64, 16, 65536, 16, 16);
  cr_assert_neq(aq_cuda_launch_shape(&p, blocks, wg, why, sizeof(why)), 0);
  cr_assert(strstr(why, "along z"), "%s", why);
  p = packet(0, 1, 1, 16, 1);
  cr_assert_neq(aq_cuda_launch_shape(&p, blocks, wg, why, sizeof(why)), 0);
  cr_assert(strstr(why, "zero"), "%s", why);
}
