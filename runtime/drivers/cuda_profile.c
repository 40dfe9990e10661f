/* Per-dispatch times of a GPU queue for a profile sink (runtime/profile.h).
 * The processor times kernels with the trace's CUDA events (cuda_timing.c)
 * while a sink is set; each timed kernel keeps the sink it was launched
 * under, so turning profiling off never loses or misroutes a time. */
#include "runtime/drivers/cuda.h"

aq_status_t aq_cuda_queue_profile(aq_queue_impl_t *queue, const aq_profile_sink_t *sink) {
  cuda_queue_t *cq = queue->driver_data;
  /* user first: the processor reads fn, then user */
  if (sink) atomic_store_explicit(&cq->timing.profile_user, sink->user, memory_order_relaxed);
  atomic_store_explicit(&cq->timing.profile_fn, sink ? sink->fn : NULL, memory_order_release);
  return AQ_OK;
}
