/* The internal driver interface: what differs between agent families.
 *
 * Everything an agent family shares (queues and their producer side, signals,
 * regions' bookkeeping, handle checks, code-object file checks) lives in the
 * core; a driver supplies only what it must: discovering its agents, draining
 * queues, allocating and copying its memory, loading its code-object format.
 * Optional entries are NULL. */
#ifndef AQ_RUNTIME_DRIVER_H_
#define AQ_RUNTIME_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/code_object.h"
#include "runtime/runtime.h"

struct aq_signal_slot; /* runtime/signal.h */
struct aq_profile_sink; /* runtime/profile.h */

typedef struct aq_driver {
  const char *name;
  /* Registers the driver's agents (aq_agent_register). AQ_ERROR_UNAVAILABLE
   * with a message when the machine has none: the message is what aq-info
   * shows for the driver. */
  aq_status_t (*start)(void);
  /* Stops every agent; queues are already destroyed. */
  void (*stop)(void);

  /* Begins / ends draining a queue created on one of its agents. */
  aq_status_t (*queue_attach)(aq_agent_impl_t *agent, aq_queue_impl_t *queue);
  void (*queue_detach)(aq_agent_impl_t *agent, aq_queue_impl_t *queue);

  /* Memory of the driver's regions. */
  aq_status_t (*region_allocate)(aq_region_impl_t *region, size_t size, void **out_ptr);
  void (*region_free)(aq_region_impl_t *region, void *ptr, size_t size);
  /* Copies where either side is the driver's own (device) memory, region
   * that side's; NULL if all its memory is host-accessible. Returns when
   * the bytes are there. */
  aq_status_t (*copy)(aq_region_impl_t *region, void *dst, const void *src, size_t size);

  /* Code objects in the driver's format. recognizes() looks at the first
   * bytes; load() turns a whole file into a module; find() resolves a kernel
   * of the module for one agent. */
  int (*co_recognizes)(const void *bytes, size_t size);
  aq_status_t (*co_load)(const char *path, const void *bytes, size_t size, void **out_module,
                         aq_code_object_info_t *info);
  void (*co_unload)(void *module);
  /* Optional: the name of a kernel of the module that is running now, else
   * NULL; unloading such a module is refused (its code would be unmapped). */
  const char *(*co_busy)(void *module);
  aq_status_t (*co_kernel_at)(void *module, uint32_t index, aq_agent_impl_t *agent,
                              aq_kernel_info_t *out);
  /* Optional: the module's op description (kernel.h's aq_op_table_t, checked
   * at load), else NULL. */
  const aq_op_table_t *(*co_op_table)(void *module);

  /* Optional: asynchronous work on the driver's own allocations (region is
   * the one holding the side the driver acts for; aquila/unified.h). A NULL
   * completion means: return when done. copy_async starts once every dep is
   * 0 and decrements completion by one when done; prefetch moves a managed
   * range to dest (an agent of any driver); advise is an aq_memory_advice_t. */
  aq_status_t (*copy_async)(aq_region_impl_t *region, void *dst, const void *src, size_t size,
                            struct aq_signal_slot *const *deps, uint32_t num_deps,
                            struct aq_signal_slot *completion);
  aq_status_t (*prefetch)(aq_region_impl_t *region, const void *ptr, size_t size,
                          aq_agent_impl_t *dest, struct aq_signal_slot *completion);
  aq_status_t (*advise)(aq_region_impl_t *region, const void *ptr, size_t size, int advice,
                        aq_agent_impl_t *agent);

  /* Optional: whether a packet is running on one of the driver's agents
   * now; if so, what (kernel, agent, queue, packet) into what. aq_shut_down
   * waits for none to be, a bounded time. */
  int (*running)(char *what, size_t size);

  /* Optional: records what the driver still holds for the trace and hands
   * profile sinks what they are owed (GPU times of finished kernels that it
   * has not read back yet). Any thread. */
  void (*trace_flush)(void);
  /* Optional: per-dispatch times of a queue's kernels to a sink, NULL: off
   * (runtime/profile.h). */
  aq_status_t (*queue_profile)(aq_queue_impl_t *queue, const struct aq_profile_sink *sink);
  /* Optional: whether kernels of agent (another of the driver's agents than
   * the region's) reach the region's memory; NULL: none does. */
  int (*region_reachable)(aq_region_impl_t *region, aq_agent_impl_t *agent);
} aq_driver_t;

extern const aq_driver_t aq_driver_cpu;
extern const aq_driver_t aq_driver_cuda;
extern const aq_driver_t aq_driver_rocr;

/* Every driver compiled in, in start order. */
extern const aq_driver_t *const aq_drivers[];
extern const unsigned aq_driver_count;

#endif /* AQ_RUNTIME_DRIVER_H_ */
