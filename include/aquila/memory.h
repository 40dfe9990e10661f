/* Memory regions and allocations.
 *
 * Each agent exposes the regions it can reach. A CPU agent has one global
 * region on its NUMA node (coarse-grained: for its own kernels' data) and a
 * fine-grained kernarg region; GPU agents add device, pinned-host and managed
 * regions. An allocation is bound to its region's NUMA node with libnuma
 * where the node exists on this machine (info.bound says whether it is).
 * Each region keeps usage statistics. Aquila knows every pointer it handed
 * out, so freeing a foreign or already-freed pointer is an error, not a crash.
 */
#ifndef AQUILA_MEMORY_H_
#define AQUILA_MEMORY_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_region { uint64_t handle; } aq_region_t;

#define AQ_REGION_COARSE_GRAINED (1u << 0) /* coherent at dispatch boundaries */
#define AQ_REGION_FINE_GRAINED (1u << 1)   /* coherent at any time */
#define AQ_REGION_KERNARG (1u << 2)        /* may hold kernel arguments */
#define AQ_REGION_HOST_ACCESSIBLE (1u << 3)/* the host may read and write it */
#define AQ_REGION_DEVICE (1u << 4)         /* GPU memory */
#define AQ_REGION_MANAGED (1u << 5)        /* unified: migrates on demand */
#define AQ_REGION_ZEROED (1u << 6)         /* a new allocation reads as zeros */

typedef struct aq_region_info {
  char name[AQ_NAME_MAX];      /* "cpu0.global", "cuda0.device" */
  aq_agent_t agent;
  uint32_t flags;              /* AQ_REGION_* */
  int32_t numa_node;           /* OS index, -1 for device memory */
  int bound;                   /* allocations really bound to numa_node */
  uint64_t size;               /* bytes the region spans */
  uint64_t alignment;          /* of every allocation */
  uint64_t in_use;             /* bytes allocated now */
  uint64_t peak;               /* most bytes allocated at once */
  uint64_t allocations;        /* live allocations */
  uint64_t total_allocations;  /* allocations ever made */
} aq_region_info_t;

aq_status_t aq_agent_regions(aq_agent_t agent, aq_region_t *regions, size_t capacity,
                             size_t *count);
aq_status_t aq_region_get_info(aq_region_t region, aq_region_info_t *info);

aq_status_t aq_memory_allocate(aq_region_t region, size_t size, void **out_ptr);
aq_status_t aq_memory_free(void *ptr);
/* Copies between any two host-accessible addresses (and, with GPU drivers,
 * any two allocations); synchronous. */
aq_status_t aq_memory_copy(void *dst, const void *src, size_t size);
/* The allocation that holds ptr: its region, base and size. */
aq_status_t aq_memory_lookup(const void *ptr, aq_region_t *out_region, void **out_base,
                             size_t *out_size);
/* Whether kernels of agent may read and write [ptr, ptr + size) in place: a
 * CPU agent reaches host memory (its own allocations, Aquila's
 * host-accessible regions, and memory Aquila did not allocate); a GPU
 * agent its own regions, and another GPU's where the driver made them
 * reachable (pinned host memory, managed memory, device memory over peer
 * access). A range that runs past its allocation is reached by no agent. */
aq_status_t aq_memory_reachable(aq_agent_t agent, const void *ptr, size_t size, int *out_reachable);
/* The same for a whole region, before anything is allocated from it. */
aq_status_t aq_region_reachable(aq_agent_t agent, aq_region_t region, int *out_reachable);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_MEMORY_H_ */
