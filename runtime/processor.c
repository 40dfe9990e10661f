/* Packet-processor threads (processor.h). */
#include "runtime/processor.h"

#include "runtime/status.h"

aq_status_t aq_processor_start(aq_processor_t *p, aq_queue_impl_t *q, void *(*main)(void *), void *arg) {
  aq_wake_t *before = q->doorbell_wake;
  q->draining = &p->busy;
  q->doorbell_wake = &p->wake;
  atomic_store(&p->running, 1);
  if (pthread_create(&p->thread, NULL, main, arg) == 0) return AQ_OK;
  atomic_store(&p->running, 0);
  q->draining = NULL, q->doorbell_wake = before;
  return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "cannot start a packet processor thread for queue %u", q->id);
}

void aq_processor_stop(aq_processor_t *p) {
  atomic_store(&p->running, 0);
  aq_wake_all(&p->wake);
  pthread_join(p->thread, NULL);
}
