/* The rocr driver's private state: one agent per AMD GPU that ROCr finds, a
 * hardware queue and a forwarding thread per Aquila queue, kernels of loaded
 * hsaco executables. None of it has run on AMD hardware (see rocr_agent.c). */
#ifndef AQ_RUNTIME_DRIVERS_ROCR_H_
#define AQ_RUNTIME_DRIVERS_ROCR_H_

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/processor.h"
#include "runtime/driver.h"
#include "runtime/drivers/rocr_api.h"
#include "runtime/drivers/rocr_packet.h"
#include "runtime/queue.h"

typedef struct rocr_agent {
  aq_agent_impl_t *agent;
  hsa_agent_t hsa;
  hsa_amd_memory_pool_t device_pool; /* coarse-grained GPU memory */
  _Atomic int faulted;               /* a queue error: the GPU needs a reset */
} rocr_agent_t;

/* The host side, shared by every GPU: fine-grained system memory and the
 * kernarg pool (both from ROCr's CPU agent), and every GPU agent, so host
 * memory can be opened to all of them. */
typedef struct aq_rocr_host {
  hsa_agent_t cpu;
  hsa_amd_memory_pool_t fine_pool, kernarg_pool;
  hsa_agent_t gpus[AQ_AGENTS_MAX];
  uint32_t gpu_count;
} rocr_host_t;

extern rocr_host_t aq_rocr_host;
extern rocr_agent_t *aq_rocr_agents[AQ_AGENTS_MAX];
extern uint32_t aq_rocr_agent_count;

enum { ROCR_KERNARG_SLOT = 4096 }; /* the largest kernarg segment forwarded */

typedef struct rocr_queue {
  aq_queue_impl_t *queue;
  rocr_agent_t *agent;
  hsa_queue_t *hw;
  void *kernargs;                    /* ROCR_INFLIGHT_MAX slots, kernarg pool */
  rocr_inflight_table_t inflight;
  aq_processor_t proc;               /* the forwarder; completions wake it too */
  _Atomic int dead;                  /* the hardware queue reported an error */
  _Atomic int handlers;              /* async handlers registered, not yet run */
} rocr_queue_t;

/* A kernel as one agent runs it: kernel_object is the real one (the packet
 * goes to the GPU unchanged), so the forwarder looks it up for its sizes. */
typedef struct rocr_kernel {
  const char *name;
  uint64_t kernel_object;
  rocr_agent_t *agent;
  uint32_t kernarg_size, kernarg_alignment, group_size, private_size;
} rocr_kernel_t;

const rocr_kernel_t *aq_rocr_kernel_lookup(uint64_t kernel_object);

aq_status_t aq_rocr_queue_attach(aq_agent_impl_t *agent, aq_queue_impl_t *queue);
void aq_rocr_queue_detach(aq_agent_impl_t *agent, aq_queue_impl_t *queue);

aq_status_t aq_rocr_memory_regions(rocr_agent_t *a);
aq_status_t aq_rocr_alloc(aq_region_impl_t *region, size_t size, void **out);
void aq_rocr_free(aq_region_impl_t *region, void *ptr, size_t size);
aq_status_t aq_rocr_copy(aq_region_impl_t *region, void *dst, const void *src, size_t size);
aq_status_t aq_rocr_prefetch(aq_region_impl_t *region, const void *ptr, size_t size, aq_agent_impl_t *dest,
                          aq_signal_slot_t *completion);
aq_status_t aq_rocr_advise(aq_region_impl_t *region, const void *ptr, size_t size, int advice, aq_agent_impl_t *agent);

int aq_rocr_co_recognizes(const void *bytes, size_t size);
aq_status_t aq_rocr_co_load(const char *path, const void *bytes, size_t size, void **out_module,
                         aq_code_object_info_t *info);
void aq_rocr_co_unload(void *module);
aq_status_t aq_rocr_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent, aq_kernel_info_t *out);
/* Why there is no agent (what aq-info shows), for code-object errors. */
const char *aq_rocr_unavailable_reason(void);

#endif
