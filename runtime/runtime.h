/* The process-wide runtime state that every module reads: configuration in
 * force, the hwloc topology, the agents the drivers registered. */
#ifndef AQ_RUNTIME_RUNTIME_H_
#define AQ_RUNTIME_RUNTIME_H_

#include <hwloc.h>
#include <stdatomic.h>
#include <stdint.h>

#include "aquila/runtime.h"
#include "runtime/wake.h"

typedef struct aq_runtime_config {
  uint64_t spin_ns;
  uint64_t gpu_spin_ns; /* how long a GPU queue's processor polls after its last work */
  uint32_t max_signals;
  uint32_t cpu_workers;     /* 0 = one per core */
  uint32_t cpu_watchers;    /* idle workers per CPU agent that watch its queues */
  uint32_t cpu_lanes;       /* most lanes an exec gives a CPU agent */
  char cpu_agents[32];      /* "numa", "package", "machine" or a count */
  char drivers[64];         /* "" = all */
  char sched[32];           /* the graphs' default placement: AQ_SCHED (settings.h) */
  uint64_t shutdown_timeout_ns;
} aq_runtime_config_t;


typedef struct aq_region_impl aq_region_impl_t;
typedef struct aq_queue_impl aq_queue_impl_t;
struct aq_driver;

enum { AQ_AGENT_REGIONS_MAX = 4, AQ_AGENTS_MAX = 64 };

typedef struct aq_agent_impl {
  uint64_t handle;
  aq_agent_info_t info;
  const struct aq_driver *driver;
  void *driver_data;
  aq_region_impl_t *regions[AQ_AGENT_REGIONS_MAX];
  uint32_t region_count;
  aq_wake_t doorbell;       /* every queue of the agent rings this */
  uint64_t memory_budget;   /* AQ_MEMORY_LIMIT for this agent, 0 = none */
  _Atomic uint64_t memory_in_use; /* over all its regions */
} aq_agent_impl_t;

extern _Atomic int aq_runtime_refs;
static inline int aq_runtime_ready(void) {
  return atomic_load_explicit(&aq_runtime_refs, memory_order_acquire) > 0;
}
const aq_runtime_config_t *aq_runtime_config(void);
/* Which aq_init this is (1, 2, ... after each shut-down and init again):
 * what a module caches of one runtime's objects (handles) is stale in the next. */
uint64_t aq_runtime_epoch(void);
hwloc_topology_t aq_topology(void);
/* The NUMA node (OS index) nearest a PCI device, such as a GPU, from
 * hwloc's I/O objects; -1 where hwloc cannot tell (runtime/topology.c). */
int aq_topology_pci_numa_node(unsigned domain, unsigned bus, unsigned dev, unsigned func);
/* Says on stderr when the process may run on one processor of several:
 * Open MPI binds each rank to one core by default, and a rank's workers
 * and GPU queue threads then share it (a data-parallel H100 step took
 * 686 us instead of 143). */
void aq_topology_check_binding(hwloc_topology_t topology);

/* Drivers call this from start() for each agent they offer. */
aq_status_t aq_agent_register(const struct aq_driver *driver, const aq_agent_info_t *info,
                              void *driver_data, aq_agent_impl_t **out_agent);
aq_status_t aq_agent_resolve(aq_agent_t agent, aq_agent_impl_t **out_agent);
uint32_t aq_agent_count(void);
aq_agent_impl_t *aq_agent_at(uint32_t index);

#endif /* AQ_RUNTIME_RUNTIME_H_ */
