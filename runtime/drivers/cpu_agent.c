/* The CPU driver: one agent per NUMA node (or the split AQ_CPU_AGENTS asks
 * for), each a set of worker threads pinned to its cores. Workers take turns
 * owning a queue and draining it in order; a kernel dispatch's work-groups
 * are shared out to every worker of the agent. */
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/drivers/cpu.h"
#include "runtime/memory.h"
#include "runtime/status.h"

static cpu_agent_t *cpu_agents[AQ_AGENTS_MAX];
static uint32_t cpu_agent_count;

static uint64_t cpu_features(void) {
  uint64_t f = AQ_FEATURE_KERNEL_DISPATCH | AQ_FEATURE_AGENT_DISPATCH;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) f |= AQ_FEATURE_AVX2;
  if (__builtin_cpu_supports("fma")) f |= AQ_FEATURE_FMA;
  if (__builtin_cpu_supports("avx512f")) f |= AQ_FEATURE_AVX512F;
  if (__builtin_cpu_supports("avx512bw")) f |= AQ_FEATURE_AVX512BW;
#endif
  return f;
}

static void isa_name(uint64_t f, char *out, size_t size) {
  snprintf(out, size, "x86-64%s", (f & AQ_FEATURE_AVX512F) ? "-avx512"
                                  : (f & AQ_FEATURE_AVX2)  ? "-avx2"
                                                           : "");
}

static const char *cpu_model(hwloc_topology_t t) {
  hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
  const char *m = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
  return m ? m : "CPU";
}

/* The processors this process may run on: the binding of the thread that
 * starts the runtime (taskset, numactl, mpirun's --bind-to, a parent's
 * affinity), as OpenMP runtimes take their initial thread's. hwloc's allowed set follows cgroups
 * only, and a thread may be bound outside its process's mask: workers bound
 * by the topology alone put every rank's first worker on core 0. The whole
 * topology where the process is unbound, the binding cannot be read, or the
 * topology is not this machine's. */
static hwloc_cpuset_t usable_cpuset(hwloc_topology_t t) {
  hwloc_cpuset_t all = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(t));
  hwloc_cpuset_t bound = hwloc_bitmap_alloc();
  if (all && bound && hwloc_topology_is_thissystem(t) && !hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_THREAD) &&
      hwloc_bitmap_intersects(bound, all))
    hwloc_bitmap_and(all, all, bound);
  hwloc_bitmap_free(bound);
  return all;
}

/* Core i of those with a usable processor in set (the core's processors in
 * set), or NULL past the last. */
static hwloc_obj_t nth_core(hwloc_topology_t t, hwloc_const_cpuset_t set, int i) {
  hwloc_obj_t core = NULL;
  while ((core = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, core)))
    if (hwloc_bitmap_intersects(core->cpuset, set) && i-- == 0) return core;
  return NULL;
}

static int cores_in(hwloc_topology_t t, hwloc_const_cpuset_t set) {
  int n = 0;
  while (nth_core(t, set, n)) n++;
  return n;
}

/* The cpusets the agents will own, per AQ_CPU_AGENTS, within the usable
 * processors. */
static uint32_t split_cpusets(hwloc_topology_t t, hwloc_cpuset_t *sets, uint32_t max) {
  const char *how = aq_runtime_config()->cpu_agents;
  hwloc_cpuset_t usable = usable_cpuset(t);
  if (!usable) return 0;
  uint32_t n = 0;
  hwloc_obj_type_t type = !strcmp(how, "numa")      ? HWLOC_OBJ_NUMANODE
                          : !strcmp(how, "package") ? HWLOC_OBJ_PACKAGE
                                                    : HWLOC_OBJ_MACHINE;
  if (type != HWLOC_OBJ_MACHINE || !strcmp(how, "machine")) {
    int count = hwloc_get_nbobjs_by_type(t, type);
    for (int i = 0; i < count && n < max; ++i) {
      hwloc_obj_t o = hwloc_get_obj_by_type(t, type, (unsigned)i);
      /* A memory-only node, or one outside the binding. */
      if (!o->cpuset || !hwloc_bitmap_intersects(o->cpuset, usable)) continue;
      sets[n] = hwloc_bitmap_dup(o->cpuset);
      if (sets[n]) hwloc_bitmap_and(sets[n], sets[n], usable), n++;
    }
    if (n == 0) sets[n++] = hwloc_bitmap_dup(usable);
    hwloc_bitmap_free(usable);
    return n;
  }
  /* A count: consecutive cores, as evenly as they divide. */
  uint32_t want = (uint32_t)atoi(how);
  int cores = cores_in(t, usable);
  if (want > (uint32_t)cores) want = (uint32_t)cores;
  if (want > max) want = max;
  for (uint32_t a = 0; a < want; ++a) {
    sets[n] = hwloc_bitmap_alloc();
    for (int c = (int)(a * (uint32_t)cores / want); c < (int)((a + 1) * (uint32_t)cores / want); ++c)
      hwloc_bitmap_or(sets[n], sets[n], nth_core(t, usable, c)->cpuset);
    hwloc_bitmap_and(sets[n], sets[n], usable);
    n++;
  }
  hwloc_bitmap_free(usable);
  return n;
}

static int numa_node_of(hwloc_topology_t t, hwloc_const_cpuset_t set) {
  hwloc_obj_t node = NULL;
  while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)))
    if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, set)) return (int)node->os_index;
  return -1;
}

static aq_status_t start_workers(cpu_agent_t *ca, hwloc_topology_t t) {
  int cores = cores_in(t, ca->cpuset);
  uint32_t n = cores > 0 ? (uint32_t)cores : 1;
  uint32_t cap = aq_runtime_config()->cpu_workers;
  if (cap && n > cap) n = cap;
  ca->workers = aligned_alloc(_Alignof(cpu_worker_t), n * sizeof(*ca->workers));
  if (!ca->workers) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for CPU workers");
  memset(ca->workers, 0, n * sizeof(*ca->workers));
  ca->worker_count = n;
  ca->watchers = aq_runtime_config()->cpu_watchers ? aq_runtime_config()->cpu_watchers : 1;
  atomic_store(&ca->running, 1);
  for (uint32_t i = 0; i < n; ++i) {
    cpu_worker_t *w = &ca->workers[i];
    w->agent = ca;
    w->index = i;
    hwloc_obj_t core = nth_core(t, ca->cpuset, (int)i);
    w->cpuset = hwloc_bitmap_dup(core ? core->cpuset : ca->cpuset);
    if (w->cpuset) hwloc_bitmap_and(w->cpuset, w->cpuset, ca->cpuset);
    if (pthread_create(&w->thread, NULL, aq_cpu_worker_main, w)) {
      atomic_store(&ca->running, 0);
      ca->worker_count = i;
      return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "cannot start CPU worker thread %u", i);
    }
  }
  return AQ_OK;
}

/* The loads are sequentially consistent, as the store that marked the
 * kernel's handle dead before them (kernel_dispatch's other half). */
int aq_cpu_kernel_running(uint64_t handle) {
  for (uint32_t a = 0; a < cpu_agent_count; ++a)
    for (uint32_t i = 0; i < cpu_agents[a]->worker_count; ++i)
      if (atomic_load(&cpu_agents[a]->workers[i].running_kernel) == handle) return 1;
  return 0;
}

static void stop_agent(cpu_agent_t *ca) {
  atomic_store(&ca->running, 0);
  aq_wake_slow(&ca->agent->doorbell, 0x7fffffff);
  aq_wake_slow(&ca->reserve, 0x7fffffff);
  for (uint32_t i = 0; i < ca->worker_count; ++i) {
    pthread_join(ca->workers[i].thread, NULL);
    hwloc_bitmap_free(ca->workers[i].cpuset);
    free(ca->workers[i].scratch);
  }
  free(ca->workers);
  for (uint32_t i = 0; i < CPU_QUEUES_MAX; ++i) free(atomic_load(&ca->queues[i]));
  while (ca->free_queues) {
    cpu_queue_t *next = ca->free_queues->next_free;
    free(ca->free_queues);
    ca->free_queues = next;
  }
  hwloc_bitmap_free(ca->cpuset);
  pthread_mutex_destroy(&ca->queue_mutex);
  free(ca);
}

static aq_status_t cpu_start(void) {
  hwloc_topology_t t = aq_topology();
  hwloc_cpuset_t sets[AQ_AGENTS_MAX];
  uint32_t n = split_cpusets(t, sets, AQ_AGENTS_MAX);
  uint64_t features = cpu_features();
  aq_status_t s = AQ_OK;
  aq_cpu_code_objects_init();
  for (uint32_t i = 0; i < n; ++i) {
    if (s != AQ_OK) {
      hwloc_bitmap_free(sets[i]);
      continue;
    }
    cpu_agent_t *ca = calloc(1, sizeof(*ca));
    if (!ca) {
      hwloc_bitmap_free(sets[i]);
      s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a CPU agent");
      continue;
    }
    ca->cpuset = sets[i];
    ca->numa_node = numa_node_of(t, ca->cpuset);
    ca->bind = hwloc_topology_is_thissystem(t);
    pthread_mutex_init(&ca->queue_mutex, NULL);
    aq_agent_info_t info = {.kind = AQ_AGENT_KIND_CPU,
                            .numa_node = ca->numa_node,
                            .queue_max_size = 1u << 20,
                            .queues_max = CPU_QUEUES_MAX,
                            .workgroup_max_size = 65535,
                            .features = features,
                            .usable = 1};
    snprintf(info.name, sizeof(info.name), "cpu%u", cpu_agent_count);
    snprintf(info.device, sizeof(info.device), "%s", cpu_model(t));
    snprintf(info.driver, sizeof(info.driver), "cpu");
    isa_name(features, info.isa, sizeof(info.isa));
    int cores = cores_in(t, ca->cpuset);
    uint32_t cap = aq_runtime_config()->cpu_workers;
    info.compute_units = cores > 0 ? (uint32_t)cores : 1;
    if (cap && info.compute_units > cap) info.compute_units = cap;
    s = aq_agent_register(&aq_driver_cpu, &info, ca, &ca->agent);
    if (s == AQ_OK) s = aq_cpu_regions_register(ca);
    if (s == AQ_OK) s = start_workers(ca, t);
    if (s == AQ_OK || ca->agent) cpu_agents[cpu_agent_count++] = ca;
    else {
      hwloc_bitmap_free(ca->cpuset);
      free(ca);
    }
  }
  return s;
}

static void cpu_stop(void) {
  for (uint32_t i = 0; i < cpu_agent_count; ++i) stop_agent(cpu_agents[i]);
  cpu_agent_count = 0;
  aq_cpu_code_objects_deinit();
}

static aq_status_t cpu_queue_attach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  cpu_agent_t *ca = agent->driver_data;
  pthread_mutex_lock(&ca->queue_mutex);
  cpu_queue_t *cq = ca->free_queues;
  if (cq) ca->free_queues = cq->next_free;
  else cq = calloc(1, sizeof(*cq));
  if (!cq) {
    pthread_mutex_unlock(&ca->queue_mutex);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a queue");
  }
  cq->queue = queue;
  cq->next_free = NULL;
  atomic_store(&cq->detaching, 0);
  queue->driver_data = cq;
  queue->draining = &cq->owner;
  for (uint32_t i = 0; i < CPU_QUEUES_MAX; ++i) {
    if (atomic_load(&ca->queues[i])) continue;
    atomic_store(&cq->owner, 0); /* held since its last detach */
    atomic_store(&ca->queues[i], cq);
    if (i + 1 > atomic_load(&ca->queue_slots)) atomic_store(&ca->queue_slots, i + 1);
    pthread_mutex_unlock(&ca->queue_mutex);
    return AQ_OK;
  }
  cq->next_free = ca->free_queues;
  ca->free_queues = cq;
  pthread_mutex_unlock(&ca->queue_mutex);
  return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "agent %s already has %d queues", agent->info.name,
                  CPU_QUEUES_MAX);
}

static void cpu_queue_detach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  cpu_agent_t *ca = agent->driver_data;
  cpu_queue_t *cq = queue->driver_data;
  pthread_mutex_lock(&ca->queue_mutex);
  for (uint32_t i = 0; i < CPU_QUEUES_MAX; ++i)
    if (atomic_load(&ca->queues[i]) == cq) atomic_store(&ca->queues[i], NULL);
  pthread_mutex_unlock(&ca->queue_mutex);
  /* Take ownership for good: no worker drains it from here on. A worker that
   * picked it up before it left the list is done with it once its reference
   * is dropped; the state itself is recycled, never freed while workers run. */
  atomic_store(&cq->detaching, 1); /* a worker holding it lets go */
  /* The waits yield: the worker they wait for may be pinned to this core
   * (under SCHED_FIFO a pure spin here never let it run). */
  int expected = 0;
  while (!atomic_compare_exchange_weak(&cq->owner, &expected, 1)) {
    expected = 0;
    sched_yield();
  }
  while (atomic_load(&cq->refs) != 0) sched_yield();
  pthread_mutex_lock(&ca->queue_mutex);
  cq->queue = NULL;
  cq->next_free = ca->free_queues;
  ca->free_queues = cq;
  pthread_mutex_unlock(&ca->queue_mutex);
}

static int cpu_running(char *what, size_t size) {
  for (uint32_t a = 0; a < cpu_agent_count; ++a) {
    cpu_agent_t *ca = cpu_agents[a];
    for (uint32_t i = 0; i < atomic_load(&ca->queue_slots); ++i) {
      cpu_queue_t *cq = atomic_load(&ca->queues[i]);
      const char *k = cq ? atomic_load(&cq->running) : NULL;
      aq_queue_impl_t *q = cq ? cq->queue : NULL;
      if (!k || !q) continue;
      snprintf(what, size, "kernel '%s' on agent %s, queue %u, packet %llu", k, ca->agent->info.name, q->id,
               (unsigned long long)atomic_load(&cq->running_packet));
      return 1;
    }
  }
  return 0;
}

const aq_driver_t aq_driver_cpu = {
    .running = cpu_running,
    .name = "cpu",
    .start = cpu_start,
    .stop = cpu_stop,
    .queue_attach = cpu_queue_attach,
    .queue_detach = cpu_queue_detach,
    .region_allocate = aq_cpu_region_allocate,
    .region_free = aq_cpu_region_free,
    .copy = NULL,
    .co_recognizes = aq_cpu_co_recognizes,
    .co_load = aq_cpu_co_load,
    .co_unload = aq_cpu_co_unload,
    .co_busy = aq_cpu_co_busy,
    .co_kernel_at = aq_cpu_co_kernel_at,
    .co_op_table = aq_cpu_co_op_table,
};
