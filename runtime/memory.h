/* Regions as drivers see them, and the registry of live allocations. */
#ifndef AQ_RUNTIME_MEMORY_H_
#define AQ_RUNTIME_MEMORY_H_

#include <stdatomic.h>

#include "aquila/memory.h"
#include "runtime/runtime.h"

struct aq_region_impl {
  uint64_t handle;
  aq_region_info_t info;   /* statistics fields are kept in the atomics below */
  aq_agent_impl_t *agent;
  _Atomic uint64_t in_use, peak, allocations, total_allocations;
  void *driver_data;
};

void aq_memory_module_init(void);
void aq_memory_module_deinit(void);

/* The live allocation that holds ptr: 1 with its region, base and size, or 0. */
int aq_memory_find(const void *ptr, aq_region_impl_t **out_region, uintptr_t *out_base,
                   size_t *out_size);

/* Drivers describe each region once; the core owns its bookkeeping. */
aq_status_t aq_region_register(aq_agent_impl_t *agent, const aq_region_info_t *info,
                               void *driver_data, aq_region_impl_t **out_region);

#endif /* AQ_RUNTIME_MEMORY_H_ */
