/* How many lanes (queues) an exec gives an agent: a CPU agent one per
 * worker, at most AQ_CPU_LANES; checked on this machine and on hwloc's
 * synthetic 64 cores, where the lanes past the 16 watchers' count are
 * drained by reserve workers (AQ_CPU_WATCHERS). */
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "scheduler/exec_internal.h"
#include "units.h"

static void teardown(void) {
  aq_shut_down();
  unsetenv("AQ_CPU_LANES"), unsetenv("HWLOC_SYNTHETIC"), unsetenv("AQ_AGENTS");
}
TestSuite(lanes, .fini = teardown);

static aq_status_t count_call(void *user, uint64_t us, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  usleep((useconds_t)us);
  atomic_fetch_add((_Atomic uint32_t *)user, 1);
  return AQ_OK;
}

/* n independent host tasks of us each, run once; the lanes they used. */
static uint32_t run_independent(uint32_t n, uint64_t us) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  _Atomic uint32_t ran = 0;
  for (uint32_t i = 0; i < n; ++i) {
    aq_host_task_t h = {.name = "side_by_side", .fn = count_call, .user = (void *)&ran, .args = {us}, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  }
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU}, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 60 * SEC));
  cr_assert_eq(atomic_load(&ran), n, "%u of %u tasks ran", atomic_load(&ran), n);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  return info.queues;
}

static uint32_t cpu_workers(void) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(first_cpu_agent(), &info));
  return info.compute_units;
}

Test(lanes, a_cpu_agent_gets_a_lane_a_worker_up_to_aq_cpu_lanes) {
  setenv("AQ_CPU_LANES", "1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_eq(run_independent(8, 1000), 1, "AQ_CPU_LANES=1: one lane");
  aq_shut_down();
  unsetenv("AQ_CPU_LANES");
  AQ_ASSERT_OK(aq_init(NULL));
  uint32_t w = cpu_workers(), want = w < 8 ? w : 8;
  cr_assert_eq(run_independent(8, 1000), want, "8 independent tasks on %u workers", w);
}

Test(lanes, sixty_four_cores_run_sixty_four_tasks_side_by_side_if_asked) {
  setenv("HWLOC_SYNTHETIC", "package:1 core:64 pu:1", 1);
  setenv("AQ_AGENTS", "cpu", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_eq(cpu_workers(), 64);
  cr_assert_eq(run_independent(64, 2000), 16, "by default a CPU agent gets 16 lanes");
  aq_shut_down();
  setenv("AQ_CPU_LANES", "64", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_eq(run_independent(64, 2000), 64, "AQ_CPU_LANES=64");
}

/* The run ends on the lane whose work the plan expects to end last, not on
 * the lane of the plan's last task: a cheap task ranked last (a batch
 * loader beside a GPU's step) made a CPU worker's wake-up the end of every
 * run. Eager placement's estimates count work-groups: a 64-group task
 * first, a one-group task beside it on the other lane. */
Test(lanes, a_run_ends_on_the_lane_expected_to_end_last) {
  AQ_ASSERT_OK(aq_init(NULL));
  if (cpu_workers() < 2) {
    printf("skipped: one CPU lane here\n");
    return;
  }
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_task_t task[2];
  for (int i = 0; i < 2; ++i) {
    aq_kernel_task_t k = {.name = i ? "short" : "long", .kernel = "aq_noop", .agent = -1,
                          .shape = {{i ? 1 : 64, 1, 1}, {1, 1, 1}}};
    AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, &task[i]));
  }
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.policy = AQ_SCHED_EAGER, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU}, &e));
  const plan_task_t *longer = &e->plan.tasks[task[0].id - 1], *shorter = &e->plan.tasks[task[1].id - 1];
  cr_assert_neq(longer->lane, shorter->lane, "eager put both tasks on lane %u", longer->lane);
  cr_assert_eq(e->plan.order[1], task[1].id - 1, "the short task is not the plan's last");
  cr_assert_eq(e->join_lane, longer->lane, "the run joins on lane %u, the short task's (%u), not the long one's (%u)",
               e->join_lane, shorter->lane, longer->lane);
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 60 * SEC));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
