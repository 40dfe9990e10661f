/* GPU times of traced kernels, on the host clock.
 *
 * The processor thread records a CUDA event on the stream before and after
 * each traced launch. Once the end event has happened, cuEventElapsedTime
 * against a reference event gives the kernel's start and end on the GPU,
 * which the reference's host time (taken when the idle stream reached it)
 * turns into aq_now_ns() time. The error is the time the host takes to see
 * the reference complete: a microsecond or two. The reference is renewed
 * whenever the stream is idle and the last one is over a second old, so the
 * two clocks cannot drift apart over a long trace. A reference is only
 * taken on an idle stream (never blocking the processor); a kernel timed
 * before there is one keeps its GPU duration, placed after its launch and
 * the stream's previous timed kernel (a profile needs the duration only).
 *
 * Events are made once per queue, on first use, and reused round the ring:
 * nothing is created on the launch path. A GPU time is never put before the
 * host launched the kernel. The same times go to a queue's profile sink
 * while it has one (cuda_profile.c), traced or not. */
#include <pthread.h>
#include <sched.h>

#include "runtime/drivers/cuda.h"
#include "runtime/trace.h"

enum { RECALIBRATE_NS = 1000000000, FLUSH_WAIT_NS = 200000000 };

static pthread_mutex_t queues_mutex = PTHREAD_MUTEX_INITIALIZER;
static cuda_queue_t *queues;

static int calibrate(cuda_queue_t *cq) {
  cuda_timing_t *t = &cq->timing;
  int idle = aq_cu.cuStreamQuery(cq->stream) == CUDA_SUCCESS;
  if (!idle && t->ref_ns) return 0; /* keep the old one until the stream rests */
  if (!t->ref && aq_cu.cuEventCreate(&t->ref, 0) != CUDA_SUCCESS) return -1;
  uint64_t before = aq_now_ns();
  if (aq_cu.cuEventRecord(t->ref, cq->stream) != CUDA_SUCCESS || aq_cu.cuEventSynchronize(t->ref) != CUDA_SUCCESS)
    return -1;
  uint64_t after = aq_now_ns();
  /* On an idle stream the GPU reached the event between the two reads; on a
   * busy one, just before the host saw it. */
  t->ref_ns = idle ? before + (after - before) / 2 : after;
  return 0;
}

static int make_events(cuda_timed_t *s) {
  if (s->start) return 0;
  if (aq_cu.cuEventCreate(&s->start, 0) != CUDA_SUCCESS) return -1;
  if (aq_cu.cuEventCreate(&s->end, 0) != CUDA_SUCCESS) {
    aq_cuda_checked(aq_cu.cuEventDestroy(s->start), "cuEventDestroy", "a kernel timing event");
    s->start = NULL;
    return -1;
  }
  return 0;
}

static uint64_t on_host(const cuda_timing_t *t, CUevent e) {
  float ms = 0;
  if (aq_cu.cuEventElapsedTime(&ms, t->ref, e) != CUDA_SUCCESS) return 0;
  return t->ref_ns + (uint64_t)((double)ms * 1e6);
}

/* On an idle stream a start event fires at once, and the kernel arrives a
 * launch later (the processor's work and cuLaunchKernel): without the gate
 * a short kernel's time is mostly its launch's. */
static void close_gate(cuda_timing_t *t, CUstream stream) {
  if (!t->gate || t->gate_closed || aq_cu.cuStreamQuery(stream) != CUDA_SUCCESS) return;
  t->gate_closed = aq_cu.cuStreamWaitValue64(stream, t->gate_dev, t->gate_seq + 1, CU_STREAM_WAIT_VALUE_EQ) ==
                   CUDA_SUCCESS;
}

void aq_cuda_timing_open(cuda_queue_t *cq) {
  cuda_timing_t *t = &cq->timing;
  if (!t->gate_closed) return;
  __atomic_store_n(t->gate, ++t->gate_seq, __ATOMIC_RELEASE);
  t->gate_closed = 0;
}

/* A reference is taken only where it cannot block: on an idle stream
 * with nothing timed outstanding. */
void aq_cuda_timing_anchor(cuda_queue_t *cq) {
  cuda_timing_t *t = &cq->timing;
  if (!t->count && (!t->ref_ns || aq_now_ns() - t->ref_ns > RECALIBRATE_NS) &&
      aq_cu.cuStreamQuery(cq->stream) == CUDA_SUCCESS)
    calibrate(cq); /* a failure leaves the old reference, or none */
}

cuda_timed_t *aq_cuda_timing_begin(cuda_queue_t *cq, int gate) {
  cuda_timing_t *t = &cq->timing;
  if (t->count == CUDA_TIMED_MAX) aq_cuda_timing_resolve(cq, 0);
  if (t->count == CUDA_TIMED_MAX) return NULL; /* the GPU is far behind: this one goes untimed */
  /* Without a reference the kernel is timed all the same (unanchored, see
   * aq_cuda_timing_resolve): a busy stream is the common case at the first
   * timed kernel after untimed runs (the last run's host-function wake-up
   * is still on the stream when the host has seen its end and starts the
   * next run), and giving up there lost the first profiled run's first
   * kernel, so calibration got 2 samples of it instead of 3. */
  aq_cuda_timing_anchor(cq);
  cuda_timed_t *s = &t->ring[(t->head + t->count) % CUDA_TIMED_MAX];
  if (make_events(s)) return NULL;
  if (gate) close_gate(t, cq->stream);
  if (aq_cu.cuEventRecord(s->start, cq->stream) != CUDA_SUCCESS) return NULL;
  s->anchored = t->ref_ns != 0;
  return s;
}

void aq_cuda_timing_end(cuda_queue_t *cq, cuda_timed_t *s, const aq_trace_event_t *ev) {
  if (aq_cu.cuEventRecord(s->end, cq->stream) != CUDA_SUCCESS) return;
  s->ev = *ev;
  s->sink.fn = atomic_load_explicit(&cq->timing.profile_fn, memory_order_acquire);
  s->sink.user = s->sink.fn ? atomic_load_explicit(&cq->timing.profile_user, memory_order_relaxed) : NULL;
  cq->timing.count++;
}

int aq_cuda_timing_resolve(cuda_queue_t *cq, int block) {
  cuda_timing_t *t = &cq->timing;
  int n = 0;
  while (t->count) {
    cuda_timed_t *s = &t->ring[t->head];
    CUresult r = block ? aq_cu.cuEventSynchronize(s->end) : aq_cu.cuEventQuery(s->end);
    if (r == CUDA_ERROR_NOT_READY) break;
    if (r == CUDA_SUCCESS) {
      uint64_t start = 0, end = 0;
      if (s->anchored) {
        start = on_host(t, s->start), end = on_host(t, s->end);
      } else {
        /* No reference yet: the GPU's own duration, placed where the
         * kernel can have started at the earliest (launched, and after the
         * last timed kernel of this in-order stream). */
        float ms = 0;
        if (aq_cu.cuEventElapsedTime(&ms, s->start, s->end) == CUDA_SUCCESS && ms >= 0) {
          start = s->ev.ready_ns > t->last_end_ns ? s->ev.ready_ns : t->last_end_ns;
          end = start + (uint64_t)((double)ms * 1e6);
        }
      }
      if (end > t->last_end_ns) t->last_end_ns = end;
      /* The profile gets the GPU's own times; the trace's start is never
       * put before the host launched the kernel. */
      if (start && end && s->sink.fn) s->sink.fn(s->sink.user, s->ev.tag, start, end > start ? end : start);
      if (start && end) {
        if (start < s->ev.ready_ns) start = s->ev.ready_ns;
        s->ev.start_ns = start;
        s->ev.end_ns = end > start ? end : start;
      }
      aq_trace_record(&s->ev);
    } /* else the stream died: the kernel's fault is reported elsewhere */
    t->head = (t->head + 1) % CUDA_TIMED_MAX;
    t->count--;
    ++n;
  }
  uint64_t req = atomic_load(&t->flush_req);
  if (block && atomic_load(&t->flush_ack) != req) atomic_store(&t->flush_ack, req);
  return n;
}

int aq_cuda_timing_owed(const cuda_queue_t *cq) {
  const cuda_timing_t *t = &cq->timing;
  if (atomic_load(&t->flush_req) != atomic_load(&t->flush_ack)) return 1;
  return t->count && aq_cu.cuEventQuery(t->ring[t->head].end) != CUDA_ERROR_NOT_READY;
}

void aq_cuda_timing_track(cuda_queue_t *cq) {
  cuda_timing_t *t = &cq->timing;
  void *gate = NULL;
  if (aq_cu.cuMemHostAlloc(&gate, sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS &&
      aq_cu.cuMemHostGetDevicePointer(&t->gate_dev, gate, 0) == CUDA_SUCCESS) {
    t->gate = gate;
    *t->gate = 0;
  } else if (gate) {
    aq_cuda_checked(aq_cu.cuMemFreeHost(gate), "cuMemFreeHost", "a timing gate");
  }
  pthread_mutex_lock(&queues_mutex);
  cq->next_traced = queues;
  queues = cq;
  pthread_mutex_unlock(&queues_mutex);
}

/* After the processor thread has ended: what is still owed is recorded,
 * then the events go. */
void aq_cuda_timing_release(cuda_queue_t *cq) {
  pthread_mutex_lock(&queues_mutex);
  for (cuda_queue_t **p = &queues; *p; p = &(*p)->next_traced)
    if (*p == cq) {
      *p = cq->next_traced;
      break;
    }
  pthread_mutex_unlock(&queues_mutex);
  aq_cuda_timing_resolve(cq, 1);
  cuda_timing_t *t = &cq->timing;
  char where[64];
  snprintf(where, sizeof(where), "%s, queue %u: timing", cq->agent->agent->info.name, cq->queue->id);
  for (uint32_t i = 0; i < CUDA_TIMED_MAX; ++i)
    if (t->ring[i].start) {
      aq_cuda_checked(aq_cu.cuEventDestroy(t->ring[i].start), "cuEventDestroy", where);
      aq_cuda_checked(aq_cu.cuEventDestroy(t->ring[i].end), "cuEventDestroy", where);
    }
  if (t->ref) aq_cuda_checked(aq_cu.cuEventDestroy(t->ref), "cuEventDestroy", where);
  if (t->gate) aq_cuda_checked(aq_cu.cuMemFreeHost((void *)t->gate), "cuMemFreeHost", where);
  t->gate = NULL;
}

void aq_cuda_timing_flush_all(void) {
  pthread_mutex_lock(&queues_mutex);
  for (cuda_queue_t *cq = queues; cq; cq = cq->next_traced) {
    uint64_t req = atomic_fetch_add(&cq->timing.flush_req, 1) + 1;
    aq_wake_all(&cq->proc.wake);
    uint64_t deadline = aq_now_ns() + FLUSH_WAIT_NS;
    while (atomic_load(&cq->timing.flush_ack) < req && atomic_load(&cq->proc.running) && aq_now_ns() < deadline)
      sched_yield();
  }
  pthread_mutex_unlock(&queues_mutex);
}
