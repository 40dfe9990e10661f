/* Per-dispatch times (profile.h): the core's side, which finds the queue's
 * driver; the timing itself is the driver's. */
#include "runtime/profile.h"

#include "runtime/driver.h"
#include "runtime/queue.h"
#include "runtime/status.h"

aq_status_t aq_queue_profile(aq_queue_t queue, const aq_profile_sink_t *sink) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(aq_queue_resolve(queue, &q));
  const aq_driver_t *d = q->agent->driver;
  if (!d->queue_profile)
    return aq_error(AQ_ERROR_UNAVAILABLE, "queue %u on %s: driver %s does not time dispatches", q->id,
                    q->agent->info.name, d->name);
  return d->queue_profile(q, sink && sink->fn ? sink : NULL);
}

void aq_profile_flush(void) {
  for (unsigned i = 0; i < aq_driver_count; ++i)
    if (aq_drivers[i]->trace_flush) aq_drivers[i]->trace_flush();
}
