/* The NCCL watchdog: a NCCL collective whose peer died or stalls never
 * ends, and its GPU queue with it. Each local rank's stream writes how many
 * of its collectives have ended into a signal; a thread looks every
 * WATCH_PERIOD_NS, and once the oldest unfinished one is older than the
 * communicator's timeout, or NCCL reports an asynchronous error, it aborts
 * the communicator's NCCL communicators (their kernels return, the queues
 * go on) and fails every unfinished collective's completion signal with an
 * error naming the rank and the collective. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"
#include "runtime/drivers/cuda.h"
#include "runtime/fault.h"
#include "runtime/signal.h"
#include "runtime/status.h"
#include "runtime/wake.h"

enum { WATCH_RING = 256, WATCH_PERIOD_NS = 50000000 };

typedef struct issued {
  uint64_t ns, completion;
  uint32_t kind;
  uint64_t bytes;
} issued_t;

struct comm_watch {
  aq_comm_t *comm;
  pthread_t thread;
  _Atomic int running;
  pthread_mutex_t lock[COMM_GPUS_MAX]; /* a local rank's NCCL calls, against the abort */
  aq_signal_t done[COMM_GPUS_MAX];     /* collectives ended, written by each stream */
  _Atomic uint64_t issued[COMM_GPUS_MAX];
  issued_t ring[COMM_GPUS_MAX][WATCH_RING];
};

static const char *kind_name(uint32_t k) {
  static const char *names[] = {"collective", "allreduce", "broadcast", "allgather", "reduce_scatter"};
  return names[k < 5 ? k : 0];
}

/* Fails what is unfinished, then aborts: the aborted kernels end, and the
 * streams write the completions, which are failed already. */
static void abort_all(struct comm_watch *w, aq_status_t s, const char *why) {
  aq_comm_t *c = w->comm;
  if (!atomic_exchange(&c->broken, 1)) snprintf(c->broken_why, sizeof(c->broken_why), "%s", why);
  uint32_t fault = aq_fault_record(s, "%s", why);
  for (uint32_t k = 0; k < c->ngpus; ++k) {
    pthread_mutex_lock(&w->lock[k]);
    aq_signal_slot_t *d = aq_signal_slot(w->done[k].handle);
    uint64_t done = d ? (uint64_t)atomic_load(&d->value) : 0, last = atomic_load(&w->issued[k]);
    for (uint64_t q = done + 1; q <= last && last - q < WATCH_RING; ++q) {
      aq_signal_slot_t *slot = aq_signal_slot(w->ring[k][q % WATCH_RING].completion);
      if (slot) aq_signal_slot_fail(slot, fault);
    }
    if (c->nccl[k]) aq_nccl.CommAbort(c->nccl[k]);
    c->nccl[k] = NULL;
    pthread_mutex_unlock(&w->lock[k]);
  }
}

/* A reason to abort, in why; 0 if none. */
static int trouble(struct comm_watch *w, aq_status_t *s, char *why, size_t size) {
  aq_comm_t *c = w->comm;
  uint64_t now = aq_now_ns();
  for (uint32_t k = 0; k < c->ngpus; ++k) {
    ncclResult_t r = NCCL_SUCCESS;
    if (aq_nccl.CommGetAsyncError(c->nccl[k], &r) == NCCL_SUCCESS && r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) {
      snprintf(why, size, "rank %u of %u: NCCL error %d: %s", c->rank + k, c->size, r, aq_nccl.GetErrorString(r));
      *s = AQ_ERROR_IO;
      return 1;
    }
    aq_signal_slot_t *d = aq_signal_slot(w->done[k].handle);
    uint64_t done = d ? (uint64_t)atomic_load(&d->value) : 0, last = atomic_load(&w->issued[k]);
    if (done >= last) continue;
    const issued_t *e = &w->ring[k][(done + 1) % WATCH_RING];
    if (now - e->ns < c->timeout_ns) continue;
    snprintf(why, size,
             "rank %u of %u: NCCL %s (%llu bytes) did not end after %.1f s: a peer rank did not join (dead or "
             "stalled); the communicator was aborted",
             c->rank + k, c->size, kind_name(e->kind), (unsigned long long)e->bytes, (double)c->timeout_ns / 1e9);
    *s = AQ_ERROR_TIMEOUT;
    return 1;
  }
  return 0;
}

static void *watch_main(void *arg) {
  struct comm_watch *w = arg;
  while (atomic_load(&w->running)) {
    struct timespec ts = {0, WATCH_PERIOD_NS};
    nanosleep(&ts, NULL);
    aq_status_t s = AQ_OK;
    char why[sizeof(w->comm->broken_why)];
    if (atomic_load(&w->running) && trouble(w, &s, why, sizeof(why))) {
      abort_all(w, s, why);
      break;
    }
  }
  return NULL;
}

aq_status_t aq_comm_watch_start(aq_comm_t *c) {
  struct comm_watch *w = calloc(1, sizeof(*w));
  if (!w) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for the NCCL watchdog");
  w->comm = c;
  for (uint32_t k = 0; k < COMM_GPUS_MAX; ++k) pthread_mutex_init(&w->lock[k], NULL);
  aq_status_t s = AQ_OK;
  for (uint32_t k = 0; k < c->ngpus && s == AQ_OK; ++k) s = aq_signal_create(0, &w->done[k]);
  atomic_store(&w->running, 1);
  if (s == AQ_OK && pthread_create(&w->thread, NULL, watch_main, w))
    s = aq_error(AQ_ERROR_OUT_OF_RESOURCES, "cannot start the NCCL watchdog thread");
  if (s != AQ_OK) {
    for (uint32_t k = 0; k < c->ngpus; ++k)
      if (w->done[k].handle) aq_signal_destroy(w->done[k]);
    free(w);
    return s;
  }
  c->watch = w;
  return AQ_OK;
}

void aq_comm_watch_stop(aq_comm_t *c) {
  struct comm_watch *w = c->watch;
  if (!w) return;
  atomic_store(&w->running, 0);
  pthread_join(w->thread, NULL);
  for (uint32_t k = 0; k < c->ngpus; ++k) aq_signal_destroy(w->done[k]);
  free(w);
  c->watch = NULL;
}

void aq_comm_watch_lock(aq_comm_t *c, uint32_t local) { pthread_mutex_lock(&c->watch->lock[local]); }
void aq_comm_watch_unlock(aq_comm_t *c, uint32_t local) { pthread_mutex_unlock(&c->watch->lock[local]); }

void aq_comm_watch_issued(aq_comm_t *c, uint32_t local, void *stream, uint64_t completion, uint32_t kind, uint64_t bytes) {
  struct comm_watch *w = c->watch;
  uint64_t q = atomic_load(&w->issued[local]) + 1;
  w->ring[local][q % WATCH_RING] = (issued_t){aq_now_ns(), completion, kind, bytes};
  atomic_store(&w->issued[local], q);
  aq_signal_slot_t *d = aq_signal_slot(w->done[local].handle);
  /* Unwritten, the watchdog would take the collective for hung: say why. */
  if (d && !aq_cuda_checked(aq_cu.cuStreamWriteValue64((CUstream)stream, aq_cuda_signal_address(d), q, 0),
                            "cuStreamWriteValue64", "NCCL watchdog: a collective's end marker"))
    return;
}
