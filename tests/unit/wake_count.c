/* How many of an agent's sleeping workers a rung doorbell wakes
 * (aq_queue_wake_count): one per work-group of a kernel dispatch, up to
 * 64, and one for any other packet or a slot already taken. */
#include "runtime/queue.h"

#include "units.h"

TestSuite(wake_count);

static uint8_t ring[4 * AQ_PACKET_SIZE] __attribute__((aligned(64)));
static aq_queue_impl_t queue = {.ring = ring, .size = 4, .mask = 3};

static void put_dispatch(uint64_t index, uint32_t dims, const uint32_t grid[3], const uint16_t wg[3]) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = (uint16_t)(dims << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
  p.grid_size_x = grid[0], p.grid_size_y = grid[1], p.grid_size_z = grid[2];
  p.workgroup_size_x = wg[0], p.workgroup_size_y = wg[1], p.workgroup_size_z = wg[2];
  memcpy(ring + (index & queue.mask) * AQ_PACKET_SIZE, &p, sizeof(p));
}

static int count(uint32_t dims, uint32_t gx, uint32_t gy, uint32_t gz, uint16_t wx, uint16_t wy, uint16_t wz) {
  const uint32_t grid[3] = {gx, gy, gz};
  const uint16_t wg[3] = {wx, wy, wz};
  put_dispatch(6, dims, grid, wg);
  return aq_queue_wake_count(&queue, 6);
}

Test(wake_count, a_dispatch_wakes_one_sleeper_per_work_group_up_to_64) {
  cr_assert_eq(count(1, 1, 1, 1, 1, 1, 1), 1);
  cr_assert_eq(count(1, 2, 1, 1, 1, 1, 1), 2, "a 2-part product wakes both workers");
  cr_assert_eq(count(1, 100, 1, 1, 64, 1, 1), 2, "a partial last group counts");
  cr_assert_eq(count(3, 4, 3, 2, 2, 1, 1), 12, "groups multiply over the dimensions");
  cr_assert_eq(count(1, 4, 3, 2, 1, 1, 1), 4, "dimensions past setup's are not counted");
  cr_assert_eq(count(2, 0xffffffffu, 0xffffffffu, 1, 1, 1, 1), 64, "capped at 64, without overflow");
  cr_assert_eq(count(1, 8, 1, 1, 0, 1, 1), 1, "a zero work-group size (refused later) wakes one");
}

Test(wake_count, other_packets_and_taken_slots_wake_one) {
  hsa_barrier_and_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  memcpy(ring + AQ_PACKET_SIZE, &b, sizeof(b));
  cr_assert_eq(aq_queue_wake_count(&queue, 1), 1);
  const uint32_t grid[3] = {32, 1, 1};
  const uint16_t wg[3] = {1, 1, 1};
  put_dispatch(2, 1, grid, wg);
  cr_assert_eq(aq_queue_wake_count(&queue, 2), 32);
  aq_queue_retire(&queue, 2); /* taken: the slot reads INVALID */
  cr_assert_eq(aq_queue_wake_count(&queue, 2), 1);
}
