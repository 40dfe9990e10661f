/* Sizes at the edge of what a packet can say: grids near 2^32 and products
 * past 2^64 are run in full or refused, never wrapped into something else. */
#include <stdatomic.h>
#include <stdint.h>

#include "common.h"

TEST_KERNELS_SUITE(limits);

Test(limits, a_grid_of_2_32_minus_1_runs_every_work_item) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  _Atomic uint64_t items = 0;
  tally_args_t args = {&items};
  aq_kernel_info_t k = test_kernel(co, agent, "tally");
  /* (grid + wg - 1) / wg in 32 bits is 0 groups here. */
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, UINT32_MAX, 1024, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 120 * SEC, NULL));
  cr_assert_eq(atomic_load(&items), (uint64_t)UINT32_MAX, "ran %llu work-items",
               (unsigned long long)atomic_load(&items));
  aq_signal_destroy(done);
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

Test(limits, a_grid_of_more_than_2_64_groups_is_refused) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  aq_kernel_info_t k = test_kernel(co, agent, "noop");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, UINT32_MAX, 1, done);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.grid_size_y = p.grid_size_z = UINT32_MAX;
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "2^64 work-groups"), "%s", aq_last_error());
  aq_signal_destroy(done);
  AQ_ASSERT_OK(aq_queue_destroy(q));
}
