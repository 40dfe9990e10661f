/* Order between two streams of one GPU by CUDA events.
 *
 * Two lanes of a GPU (its kernels and its NCCL collectives, AQ_COMM_STREAM)
 * are two streams. Where one waits for a task of the other, the producer's
 * processor records an event on its stream after the task's completion
 * write, and the consumer's stream waits for that event on the GPU: the
 * host only waits until the event is recorded, which happens when the
 * producer is launched, not when it ends. A stream memory wait on the
 * other stream's write could deadlock (queue.h: aq_barrier_same_gpu_dep),
 * and a wait on the host for the value cost each such edge the producer's
 * whole run plus a poll.
 *
 * Each queue keeps the events it records, one per signal, in a small
 * table; a signal it cannot give an event (table full, no event) keeps the
 * host wait for its value. */
#include <stdlib.h>

#include "runtime/drivers/cuda.h"

enum { EVENTS_MAX = 256, CU_EVENT_DISABLE_TIMING = 2 };

struct cuda_events {
  struct {
    const aq_signal_slot_t *slot;
    CUevent event;
  } e[EVENTS_MAX];
};

/* The queue's event for slot s, made on first use; NULL if none can be. */
static CUevent event_of(cuda_queue_t *cq, const aq_signal_slot_t *s) {
  if (!cq->events && !(cq->events = calloc(1, sizeof(*cq->events)))) return NULL;
  uint32_t h = (uint32_t)(((uintptr_t)s / sizeof(*s)) * 2654435761u) % EVENTS_MAX;
  for (uint32_t k = 0; k < EVENTS_MAX; ++k) {
    uint32_t i = (h + k) % EVENTS_MAX;
    if (cq->events->e[i].slot == s) return cq->events->e[i].event;
    if (cq->events->e[i].slot) continue;
    CUevent ev;
    if (aq_cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return NULL;
    cq->events->e[i].slot = s, cq->events->e[i].event = ev;
    return ev;
  }
  return NULL;
}

void aq_cuda_event_record(cuda_queue_t *cq, aq_signal_slot_t *s, uint32_t sets) {
  if (!atomic_load_explicit(&s->stream_waiters, memory_order_relaxed)) return;
  CUevent ev = event_of(cq, s);
  if (!ev || aq_cu.cuEventRecord(ev, cq->stream) != CUDA_SUCCESS) return; /* its waiter waits for the value */
  atomic_store_explicit(&s->stream_event, (uint64_t)(uintptr_t)ev, memory_order_relaxed);
  atomic_store_explicit(&s->event_sets, sets, memory_order_release);
  aq_signal_slot_notify(s); /* the waiting stream's processor looks again */
}

/* The event recorded for s's completion in this run, or NULL. */
static CUevent recorded(const aq_signal_slot_t *s) {
  uint32_t sets = atomic_load_explicit(&s->event_sets, memory_order_acquire);
  if (!atomic_load_explicit(&s->stream_event, memory_order_relaxed) ||
      sets != atomic_load_explicit(&s->host_sets, memory_order_relaxed))
    return NULL;
  return (CUevent)(uintptr_t)atomic_load_explicit(&s->stream_event, memory_order_relaxed);
}

int aq_cuda_event_ready(const aq_signal_slot_t *s) {
  return atomic_load_explicit(&s->value, memory_order_acquire) == 0 || recorded(s) != NULL;
}

CUresult aq_cuda_event_wait(cuda_queue_t *cq, const aq_signal_slot_t *s) {
  CUevent ev = recorded(s);
  if (!ev || atomic_load_explicit(&s->value, memory_order_acquire) == 0) return CUDA_SUCCESS;
  return aq_cu.cuStreamWaitEvent(cq->stream, ev, 0);
}

void aq_cuda_events_release(cuda_queue_t *cq) {
  if (!cq->events) return;
  for (uint32_t i = 0; i < EVENTS_MAX; ++i)
    if (cq->events->e[i].slot)
      aq_cuda_checked(aq_cu.cuEventDestroy(cq->events->e[i].event), "cuEventDestroy", "a stream's events");
  free(cq->events);
  cq->events = NULL;
}
