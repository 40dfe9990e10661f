/* A queue's packet processor: the thread a GPU driver runs for each of its
 * queues to drain it (the CPU driver's workers drain theirs instead). The
 * core starts it once the driver has set up what the thread uses and stops
 * it before the driver lets go of that; in between the queue's doorbell
 * wakes it unless it is awake already (busy). */
#ifndef AQ_RUNTIME_PROCESSOR_H_
#define AQ_RUNTIME_PROCESSOR_H_

#include <pthread.h>
#include <stdatomic.h>

#include "aquila/status.h"
#include "runtime/queue.h"
#include "runtime/wake.h"

typedef struct aq_processor {
  pthread_t thread;
  _Atomic int running; /* cleared to stop: the thread's loop tests it */
  _Atomic int busy;    /* the thread is awake: producers need not wake it */
  aq_wake_t wake;      /* doorbells (and whatever else the driver says) wake it */
} aq_processor_t;

/* Points q's doorbell at p and runs main(arg) on p's thread. */
aq_status_t aq_processor_start(aq_processor_t *p, aq_queue_impl_t *q, void *(*main)(void *), void *arg);

/* Whether p should go on (main's loop condition). */
static inline int aq_processor_running(aq_processor_t *p) { return atomic_load(&p->running); }

/* Tells p's thread to stop, wakes it and waits for it to return. */
void aq_processor_stop(aq_processor_t *p);

#endif
