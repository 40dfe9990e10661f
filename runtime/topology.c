/* aq_topology_get_info: the machine as hwloc sees it; where a PCI device sits. */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/status.h"

static uint64_t cache_size(hwloc_topology_t t, hwloc_obj_type_t type) {
  hwloc_obj_t o = hwloc_get_obj_by_type(t, type, 0);
  return o && o->attr ? o->attr->cache.size : 0;
}

int aq_topology_pci_numa_node(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  hwloc_obj_t pci = hwloc_get_pcidev_by_busid(aq_topology(), domain, bus, dev, func);
  hwloc_obj_t parent = pci ? hwloc_get_non_io_ancestor_obj(aq_topology(), pci) : NULL;
  return parent && parent->nodeset ? hwloc_bitmap_first(parent->nodeset) : -1;
}

void aq_topology_check_binding(hwloc_topology_t t) {
  hwloc_bitmap_t bound = hwloc_bitmap_alloc();
  int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  if (bound && !hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_THREAD) && hwloc_bitmap_weight(bound) == 1 && pus > 2)
    fprintf(stderr,
            "aquila: this process is bound to 1 of the machine's %d processors: its CPU agent gets one worker, "
            "and GPU queue threads share that processor with it (mpirun binds each rank to a core by default: run it with --bind-to none, or "
            "--map-by slot:PE=N)\n",
            pus);
  hwloc_bitmap_free(bound);
}

AQ_API aq_status_t aq_topology_get_info(aq_topology_info_t *info) {
  if (!info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_topology_get_info: info is NULL");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  hwloc_topology_t t = aq_topology();
  memset(info, 0, sizeof(*info));
  info->packages = (uint32_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  info->numa_nodes = (uint32_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  info->cores = (uint32_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  info->pus = (uint32_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  info->l1d_bytes = cache_size(t, HWLOC_OBJ_L1CACHE);
  info->l2_bytes = cache_size(t, HWLOC_OBJ_L2CACHE);
  info->l3_bytes = cache_size(t, HWLOC_OBJ_L3CACHE);
  info->synthetic = !hwloc_topology_is_thissystem(t);
  hwloc_obj_t root = hwloc_get_root_obj(t);
  const char *backend = hwloc_obj_get_info_by_name(root, "Backend");
  strcpy(info->source, !info->synthetic ? "this system"
                       : backend && !strcmp(backend, "Synthetic") ? "synthetic"
                                                                 : "xml");
  return AQ_OK;
}
