/* CPU regions: a coarse-grained global region on the agent's NUMA node and a
 * fine-grained kernarg region. Global allocations are bound to the node with
 * libnuma where the node exists on this machine (not so under a synthetic
 * hwloc topology, where the region says bound = 0). */
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/drivers/cpu.h"
#include "runtime/memory.h"
#include "runtime/status.h"

enum { REGION_GLOBAL = 1, REGION_KERNARG = 2 };

static int node_exists(int node) {
  return node >= 0 && numa_available() >= 0 && node <= numa_max_node() &&
         numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node);
}

static uint64_t node_bytes(int node) {
  hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(aq_topology(), (unsigned)node);
  return o && o->attr ? o->attr->numanode.local_memory : 0;
}

aq_status_t aq_cpu_regions_register(cpu_agent_t *a) {
  aq_region_info_t g = {.flags = AQ_REGION_COARSE_GRAINED | AQ_REGION_HOST_ACCESSIBLE,
                        .numa_node = a->numa_node,
                        .bound = a->bind && node_exists(a->numa_node),
                        .size = a->numa_node >= 0 ? node_bytes(a->numa_node) : 0,
                        .alignment = 64};
  if (g.bound) g.flags |= AQ_REGION_ZEROED; /* numa_alloc_onnode maps fresh pages */
  snprintf(g.name, sizeof(g.name), "%s.global", a->agent->info.name);
  AQ_RETURN_IF_ERROR(aq_region_register(a->agent, &g, (void *)(uintptr_t)REGION_GLOBAL, NULL));
  aq_region_info_t k = g;
  k.flags = AQ_REGION_FINE_GRAINED | AQ_REGION_KERNARG | AQ_REGION_HOST_ACCESSIBLE; /* posix_memalign'd */
  k.bound = 0;
  snprintf(k.name, sizeof(k.name), "%s.kernarg", a->agent->info.name);
  return aq_region_register(a->agent, &k, (void *)(uintptr_t)REGION_KERNARG, NULL);
}

aq_status_t aq_cpu_region_allocate(aq_region_impl_t *r, size_t size, void **out_ptr) {
  void *p = NULL;
  if (r->info.bound) {
    p = numa_alloc_onnode(size, r->info.numa_node);
  } else if (posix_memalign(&p, 64, size)) {
    p = NULL;
  }
  if (!p) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "region %s: cannot allocate %zu bytes", r->info.name, size);
  *out_ptr = p;
  return AQ_OK;
}

void aq_cpu_region_free(aq_region_impl_t *r, void *ptr, size_t size) {
  if (r->info.bound) numa_free(ptr, size);
  else free(ptr);
}
