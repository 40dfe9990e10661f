/* Per-dispatch times for the scheduler's performance models, in the spirit
 * of hsa_amd_profiling_set_profiler_enabled / _get_dispatch_time.
 *
 * A consumer turns profiling on for one queue with a sink; from then on the
 * queue's driver times each kernel dispatch on the agent itself and hands
 * the sink the packet's tag (reserved2) with the kernel's start and end on
 * the host clock (aq_now_ns), from the driver's own thread, once the agent
 * has run it. aq_profile_flush returns once every dispatch timed so far has
 * reached its sink. Turning it off (a NULL sink) stops new timings; what is
 * timed already still reaches the old sink, so flush before the sink goes.
 *
 * Only drivers whose agents run kernels away from the host need this (CPU
 * tasks are timed by host-call stamps around them): the others answer
 * AQ_ERROR_UNAVAILABLE. Profiled dispatches launch one by one (no CUDA graph
 * replay), as traced ones do. */
#ifndef AQ_RUNTIME_PROFILE_H_
#define AQ_RUNTIME_PROFILE_H_

#include <stdint.h>

#include "aquila/queue.h"
#include "aquila/status.h"

typedef void (*aq_profile_fn)(void *user, uint64_t tag, uint64_t start_ns, uint64_t end_ns);

typedef struct aq_profile_sink {
  aq_profile_fn fn;
  void *user;
} aq_profile_sink_t;

/* sink NULL (or its fn NULL): off. The sink must outlive the timings. */
aq_status_t aq_queue_profile(aq_queue_t queue, const aq_profile_sink_t *sink);
/* Every dispatch timed so far has reached its sink (bounded wait per queue). */
void aq_profile_flush(void);

#endif /* AQ_RUNTIME_PROFILE_H_ */
