/* Unified (managed) memory hints and asynchronous copies.
 *
 * Concepts. Managed memory (regions with AQ_REGION_MANAGED) has one address
 * that the host and a GPU both use; its pages migrate to whoever touches
 * them. Migration on demand costs a page fault per page, so a program that
 * knows where data will be used next says so: a prefetch moves a range to an
 * agent ahead of time (a GPU agent: its memory; a CPU agent: host memory),
 * and advice describes how a range is used for as long as it stays in force
 * (read mostly: each reader keeps a copy; a preferred location: pages live
 * there and others map them; accessed by: an agent keeps a mapping so it does
 * not fault). Managed memory is only ever allocated within a GPU's free memory
 * (oversubscribing it can hang the GPU for everyone on the machine), so a
 * prefetch to a GPU always fits.
 *
 * An asynchronous copy is a task in the HSA sense (hsa_amd_memory_async_copy):
 * it starts once every dependency signal has reached 0 and decrements its
 * completion signal by one when done, so packets on any queue can depend on
 * it and it on them. Where both sides are GPU-known memory (device, pinned
 * or managed allocations of a GPU agent's regions) the copy runs on one of
 * the GPU's copy streams, apart from its kernel queues, and the GPU itself
 * waits for the dependencies and writes the completion: no host round trip.
 * Where either side is pageable host memory (a CPU region, malloc), the GPU
 * cannot copy it without the host, so the calling thread waits for the
 * dependencies, copies, and completes the signal before returning.
 *
 * A zero completion handle makes prefetch and copy synchronous: the call
 * returns when the work is done. */
#ifndef AQUILA_UNIFIED_H_
#define AQUILA_UNIFIED_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/memory.h"
#include "aquila/runtime.h"
#include "aquila/signal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aq_memory_advice {
  AQ_ADVICE_READ_MOSTLY = 1,           /* readers keep copies; a write invalidates them */
  AQ_ADVICE_UNSET_READ_MOSTLY = 2,
  AQ_ADVICE_PREFERRED_LOCATION = 3,    /* pages live on agent's memory */
  AQ_ADVICE_UNSET_PREFERRED_LOCATION = 4,
  AQ_ADVICE_ACCESSED_BY = 5,           /* agent keeps a mapping: no faults, no migration */
  AQ_ADVICE_UNSET_ACCESSED_BY = 6,
} aq_memory_advice_t;

/* Moves [ptr, ptr + size) of one managed allocation to destination's memory.
 * Completion (if nonzero) is decremented by one when the pages are there. */
aq_status_t aq_memory_prefetch(const void *ptr, size_t size, aq_agent_t destination,
                               aq_signal_t completion);

/* Advice about [ptr, ptr + size) of one managed allocation, for agent. */
aq_status_t aq_memory_advise(const void *ptr, size_t size, aq_memory_advice_t advice,
                             aq_agent_t agent);

/* Copies size bytes once every deps[i] is 0; completion (if nonzero) is
 * decremented by one when done, and fails (aq_signal_get_error) if a
 * dependency failed or the copy did. Each side may be any allocation of any
 * region, or host memory Aquila did not allocate. */
aq_status_t aq_memory_copy_async(void *dst, const void *src, size_t size, uint32_t num_deps,
                                 const aq_signal_t *deps, aq_signal_t completion);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_UNIFIED_H_ */
