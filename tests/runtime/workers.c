/* How a CPU agent's workers share a dispatch: past AQ_CPU_WATCHERS the
 * reserve sleeps apart and a dispatch split wider wakes it; a grid of many
 * small groups, claimed several at a time, runs each work-item once. */
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

static aq_agent_t agent;
static aq_code_object_t co;
static void setup(void) {
  setenv("AQ_CPU_WATCHERS", "1", 1); /* every worker but the first is a reserve */
  AQ_ASSERT_OK(aq_init(NULL));
  agent = first_cpu_agent();
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
}
static void teardown(void) {
  aq_shut_down();
  unsetenv("AQ_CPU_WATCHERS");
}
TestSuite(workers, .init = setup, .fini = teardown);

static aq_status_t run(const hsa_kernel_dispatch_packet_t *p, aq_signal_t done) {
  aq_queue_t q;
  aq_status_t s = aq_queue_create(agent, NULL, &q);
  if (s != AQ_OK) return s;
  s = aq_queue_submit(q, p, SEC, NULL);
  if (s == AQ_OK) s = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 60 * SEC, NULL);
  aq_queue_destroy(q);
  return s;
}

Test(workers, a_split_dispatch_wakes_the_reserve) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(agent, &info));
  if (info.compute_units < 2) cr_skip_test("skipped: one worker, no reserve");
  usleep(50000); /* every worker asleep: the reserve on its own word */
  enum { GROUPS = 64 };
  uint32_t worker[GROUPS];
  for (int i = 0; i < GROUPS; ++i) worker[i] = UINT32_MAX;
  who_args_t args = {worker, 2000000};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  aq_kernel_info_t k = test_kernel(co, agent, "who");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, GROUPS, 1, done);
  AQ_ASSERT_OK(run(&p, done));
  uint32_t reserve = 0;
  for (int i = 0; i < GROUPS; ++i) {
    cr_assert_lt(worker[i], info.compute_units, "group %d ran on worker %u", i, worker[i]);
    reserve += worker[i] >= 1;
  }
  cr_assert_gt(reserve, 0, "the watcher ran all %d groups alone", GROUPS);
  aq_signal_destroy(done);
}

Test(workers, many_small_groups_of_a_3d_grid_run_once_each) {
  enum { X = 301, Y = 71, Z = 3 }; /* 101 x 36 x 3 groups, partial in x and y */
  _Atomic uint32_t *hits = calloc(X * Y * Z, sizeof(*hits));
  count_args_t args = {hits};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  aq_kernel_info_t k = test_kernel(co, agent, "count");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, X, 3, done);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.grid_size_y = Y, p.grid_size_z = Z, p.workgroup_size_y = 2, p.workgroup_size_z = 1;
  AQ_ASSERT_OK(run(&p, done));
  for (uint32_t i = 0; i < X * Y * Z; ++i)
    cr_assert_eq(atomic_load(&hits[i]), 1, "work-item %u ran %u times", i, atomic_load(&hits[i]));
  free(hits);
  aq_signal_destroy(done);
}
