/* Topology and agents: this machine, and 2- and 4-node synthetic machines
 * (HWLOC_SYNTHETIC), so placement and binding decisions are testable here. */
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>

#include "common.h"

/* The CPU agents (a GPU, where there is one, is an agent too). */
static size_t agents_of(aq_agent_t *out, size_t cap) {
  aq_agent_t all[64];
  size_t n, k = 0;
  AQ_ASSERT_OK(aq_agents(all, 64, &n));
  for (size_t i = 0; i < n && i < 64; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(all[i], &info));
    if (info.kind == AQ_AGENT_KIND_CPU && k < cap) out[k++] = all[i];
  }
  return k;
}

/* A dispatch of the test kernels' noop over `grid` work-items completes
 * on agent. */
static void runs_a_noop(aq_agent_t agent, uint32_t grid) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_kernel_info_t k = test_kernel(co, agent, "noop");
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, grid, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(topology, this_machine_has_one_cpu_agent_per_numa_node) {
  AQ_ASSERT_OK(aq_init(NULL));
  aq_topology_info_t t;
  AQ_ASSERT_OK(aq_topology_get_info(&t));
  cr_assert_geq(t.cores, 1);
  cr_assert_geq(t.pus, t.cores);
  cr_assert_eq(t.synthetic, 0);
  cr_assert_str_eq(t.source, "this system");
  aq_agent_t a[64];
  size_t n = agents_of(a, 64), cpus = 0;
  uint32_t workers = 0;
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(a[i], &info));
    if (info.kind != AQ_AGENT_KIND_CPU) continue;
    cpus++;
    workers += info.compute_units;
    cr_assert_str_eq(info.driver, "cpu");
    cr_assert(info.features & AQ_FEATURE_KERNEL_DISPATCH);
    cr_assert_eq(info.index, i);
  }
  cr_assert_eq(cpus, t.numa_nodes ? t.numa_nodes : 1);
  cr_assert_eq(workers, t.cores, "one worker per core");
  aq_shut_down();
}

Test(topology, synthetic_two_node_machine) {
  setenv("HWLOC_SYNTHETIC", "pack:1 numa:2 core:2 pu:1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  aq_topology_info_t t;
  AQ_ASSERT_OK(aq_topology_get_info(&t));
  cr_assert_eq(t.numa_nodes, 2);
  cr_assert_eq(t.synthetic, 1);
  cr_assert_str_eq(t.source, "synthetic");
  aq_agent_t a[8];
  cr_assert_eq(agents_of(a, 8), 2);
  for (int i = 0; i < 2; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(a[i], &info));
    cr_assert_eq(info.numa_node, i);
    cr_assert_eq(info.compute_units, 2);
    aq_region_t r[4];
    size_t nr;
    AQ_ASSERT_OK(aq_agent_regions(a[i], r, 4, &nr));
    aq_region_info_t ri;
    AQ_ASSERT_OK(aq_region_get_info(r[0], &ri));
    cr_assert_eq(ri.numa_node, i);
    cr_assert_eq(ri.bound, 0, "a synthetic node is not this machine's: not bound");
  }
  runs_a_noop(a[1], 64); /* the agents still run work */
  aq_shut_down();
}

Test(topology, agent_splits) {
  setenv("HWLOC_SYNTHETIC", "pack:2 numa:2 core:2 pu:2", 1);
  aq_agent_t a[16];
  const struct { const char *how; size_t agents; uint32_t units; } cases[] = {
      {"numa", 4, 2}, {"package", 2, 4}, {"machine", 1, 8}, {"8", 8, 1}, {"3", 3, 0}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    aq_init_options_t o = {.cpu_agents = cases[c].how};
    AQ_ASSERT_OK(aq_init(&o));
    cr_assert_eq(agents_of(a, 16), cases[c].agents, "AQ_CPU_AGENTS=%s", cases[c].how);
    uint32_t total = 0;
    for (size_t i = 0; i < cases[c].agents; ++i) {
      aq_agent_info_t info;
      AQ_ASSERT_OK(aq_agent_get_info(a[i], &info));
      if (cases[c].units) cr_assert_eq(info.compute_units, cases[c].units, "%s", cases[c].how);
      total += info.compute_units;
    }
    cr_assert_eq(total, 8, "%s: every core belongs to one agent", cases[c].how);
    aq_shut_down();
  }
  setenv("AQ_CPU_WORKERS", "1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  aq_agent_info_t info;
  cr_assert_eq(agents_of(a, 16), 4);
  AQ_ASSERT_OK(aq_agent_get_info(a[0], &info));
  cr_assert_eq(info.compute_units, 1, "AQ_CPU_WORKERS caps workers");
  aq_shut_down();
}

/* Binds this thread to its last processor and returns it, or -1 where it
 * may run on one only. */
static int bind_to_last_processor(void) {
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) last = c;
  if (CPU_COUNT(&set) < 2) return -1;
  CPU_ZERO(&set);
  CPU_SET(last, &set);
  cr_assert_eq(sched_setaffinity(0, sizeof(set), &set), 0);
  return last;
}

/* The ids of this process's threads, into ids (up to cap); returns the count. */
static int thread_ids(int *ids, int cap) {
  DIR *d = opendir("/proc/self/task");
  cr_assert(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < cap;)
    if (e->d_name[0] != '.') ids[n++] = atoi(e->d_name);
  closedir(d);
  return n;
}

/* Every thread started since `before` was taken may run on cpu alone. */
static void assert_new_threads_on(int cpu, const int *before, int nbefore) {
  int ids[256], n = thread_ids(ids, 256), started = 0;
  for (int i = 0; i < n; ++i) {
    int old = 0;
    for (int j = 0; j < nbefore; ++j) old |= ids[i] == before[j];
    if (old) continue;
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(ids[i], sizeof(set), &set), 0);
    cr_assert(CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set), "thread %d may run on %d processors, not processor %d alone",
              ids[i], CPU_COUNT(&set), cpu);
    started++;
  }
  cr_assert_geq(started, 1, "the runtime started its workers");
}

/* A process bound to one processor (taskset, numactl, mpirun's default
 * --bind-to core) gets one worker there: none is bound outside the
 * process's mask (onto core 0, as every rank's would be), and work runs. */
Test(topology, workers_stay_within_the_process_binding) {
  int cpu = bind_to_last_processor();
  if (cpu < 0) cr_skip_test("skipped: this process may run on one processor only");
  int before[256], nbefore = thread_ids(before, 256); /* the test runner's own */
  const char *how[] = {"numa", "machine", "2"};
  for (int c = 0; c < 3; ++c) {
    aq_init_options_t o = {.cpu_agents = how[c]};
    AQ_ASSERT_OK(aq_init(&o));
    aq_agent_t a[8];
    cr_assert_eq(agents_of(a, 8), 1, "AQ_CPU_AGENTS=%s: one agent for one processor", how[c]);
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(a[0], &info));
    cr_assert_eq(info.compute_units, 1, "AQ_CPU_AGENTS=%s", how[c]);
    assert_new_threads_on(cpu, before, nbefore);
    runs_a_noop(a[0], 256);
    aq_shut_down();
  }
}

Test(topology, bad_options_fail_init_cleanly) {
  aq_init_options_t o = {.cpu_agents = "sideways"};
  cr_assert_eq(aq_init(&o), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "sideways"), "%s", aq_last_error());
  o = (aq_init_options_t){.max_signals = 3};
  cr_assert_eq(aq_init(&o), AQ_ERROR_INVALID_ARGUMENT);
  setenv("HWLOC_XMLFILE", "/nonexistent/topology.xml", 1);
  aq_status_t s = aq_init(NULL);
  unsetenv("HWLOC_XMLFILE");
  if (s == AQ_OK) aq_shut_down();
  /* After all that, a plain init works. */
  AQ_ASSERT_OK(aq_init(NULL));
  aq_agent_t a[4];
  cr_assert_geq(agents_of(a, 4), 1);
  const char *msg;
  AQ_ASSERT_OK(aq_driver_status("cpu", &msg));
  cr_assert_str_eq(msg, "");
  cr_assert_eq(aq_driver_status("warp-drive", &msg), AQ_ERROR_NOT_FOUND);
  aq_shut_down();
}

Test(topology, init_is_reference_counted) {
  AQ_ASSERT_OK(aq_init(NULL));
  AQ_ASSERT_OK(aq_init(NULL));
  AQ_ASSERT_OK(aq_shut_down());
  aq_agent_t a[4];
  cr_assert_geq(agents_of(a, 4), 1, "still up after one of two shut-downs");
  AQ_ASSERT_OK(aq_shut_down());
  size_t n;
  cr_assert_eq(aq_agents(a, 4, &n), AQ_ERROR_NOT_INITIALIZED);
}

/* The named setting as aq_settings reports it. */
static aq_setting_t setting(const char *name) {
  aq_setting_t all[32];
  size_t n;
  AQ_ASSERT_OK(aq_settings(all, 32, &n));
  for (size_t i = 0; i < n && i < 32; ++i)
    if (!strcmp(all[i].name, name)) return all[i];
  cr_assert_fail("aq_settings has no %s", name);
  return all[0];
}

Test(topology, settings_say_the_value_in_force_and_where_it_came_from) {
  unsetenv("AQ_GPU_SPIN_US");
  AQ_ASSERT_OK(aq_init(NULL));
  aq_setting_t s = setting("AQ_GPU_SPIN_US");
  cr_assert_str_eq(s.value, "200");
  cr_assert_str_eq(s.source, "default");
  aq_shut_down();
  AQ_ASSERT_OK(aq_init(&(aq_init_options_t){.gpu_spin_us = 50, .spin_us = 7}));
  s = setting("AQ_GPU_SPIN_US");
  cr_assert_str_eq(s.value, "50");
  cr_assert_str_eq(s.source, "options");
  cr_assert_str_eq(setting("AQ_SPIN_US").value, "7");
  aq_shut_down();
  setenv("AQ_GPU_SPIN_US", "0", 1); /* never stay awake: sleep at once */
  AQ_ASSERT_OK(aq_init(NULL));
  unsetenv("AQ_GPU_SPIN_US");
  s = setting("AQ_GPU_SPIN_US");
  cr_assert_str_eq(s.value, "0");
  cr_assert_str_eq(s.source, "environment");
  cr_assert_eq(aq_settings(NULL, 4, &(size_t){0}), AQ_ERROR_INVALID_ARGUMENT);
  aq_shut_down();
  /* Not a number: refused by name, not read as 0; the next init works. */
  const char *bad[] = {"abc", "12x", "-5"};
  for (int i = 0; i < 3; ++i) {
    setenv("AQ_GPU_SPIN_US", bad[i], 1);
    cr_assert_eq(aq_init(NULL), AQ_ERROR_INVALID_ARGUMENT, "AQ_GPU_SPIN_US=%s", bad[i]);
    cr_assert(strstr(aq_last_error(), "AQ_GPU_SPIN_US") && strstr(aq_last_error(), bad[i]), "%s", aq_last_error());
  }
  unsetenv("AQ_GPU_SPIN_US");
  AQ_ASSERT_OK(aq_init(NULL));
  aq_shut_down();
}
