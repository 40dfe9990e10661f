/* The cuda packet processor: one thread per AQL queue turns packets into
 * work on the queue's CUDA stream. Kernel dispatches become cuLaunchKernel
 * (the HSA grid counts work-items, CUDA counts blocks; the kernarg buffer
 * goes as one blob), barrier-AND packets become stream waits on the signals'
 * memory, completion signals become stream writes of their next value, so
 * GPU->GPU and CPU->GPU edges take no host round trip. A packet is retired
 * (its slot reusable) once it is on the stream. */
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "runtime/drivers/cuda.h"
#include "runtime/drivers/cuda_grid.h"
#include "runtime/fault.h"
#include "runtime/status.h"
#include "runtime/trace.h"

static uint32_t packet_fault(cuda_queue_t *cq, aq_status_t s, const char *what, const char *detail) {
  return aq_fault_record(s, "agent %s, queue %u: %s%s%s", cq->agent->agent->info.name, cq->queue->id, what,
                         detail ? ": " : "", detail ? detail : "");
}

/* A stream's write wakes nobody: host waiters of a GPU-written signal are
 * woken by the processor, which reaps what the stream owes (see
 * aq_cuda_queue_main). Only a completion it cannot track (more than
 * CUDA_PENDING_MAX owed) gets a host function queued after the write: CUDA
 * holds the stream behind a host function until its callback thread has run
 * it, 40-50 us on the H100 machine, which a training step's kernels spent
 * behind the wake-up of its batch loaders. */
static void notify_host(void *slot) { aq_signal_slot_notify(slot); }

/* The host has set the signal since the completion was owed (a graph's
 * next run stores it again): the write is past, or the host's store took
 * its place. Either way nobody waits for it, and left at the head it would
 * hold back every completion behind it. */
static int stale(const cuda_pending_t *p) {
  return p->host_sets != atomic_load_explicit(&p->slot->host_sets, memory_order_relaxed);
}

/* Forgets completions the stream has written, waking whoever sleeps on
 * them (a stream's write wakes nobody by itself); returns how many. */
static int reap(cuda_queue_t *cq) {
  int n = 0;
  while (cq->pending_count) {
    cuda_pending_t *p = &cq->pending[cq->pending_head];
    if (!stale(p) && atomic_load(&p->slot->value) > p->next) break;
    aq_signal_slot_notify(p->slot); /* a stale one's waiters look again */
    cq->pending_head = (cq->pending_head + 1) % CUDA_PENDING_MAX;
    cq->pending_count--;
    ++n;
  }
  return n;
}

/* After a sticky error the stream writes nothing more: fail what it owed. */
static void fail_pending(cuda_queue_t *cq, CUresult r) {
  atomic_store(&cq->agent->faulted, 1);
  cq->agent->agent->info.usable = 0;
  while (cq->pending_count) {
    cuda_pending_t *p = &cq->pending[cq->pending_head];
    if (!stale(p)) { /* a stale one was no packet of the failed stretch */
      uint32_t f = packet_fault(cq, AQ_ERROR_KERNEL_FAULT, p->what, aq_cuda_error(r));
      aq_signal_slot_fail(p->slot, f);
      aq_signal_slot_store(p->slot, p->next);
    }
    cq->pending_head = (cq->pending_head + 1) % CUDA_PENDING_MAX;
    cq->pending_count--;
  }
}

/* Reaps; after a while with completions still owed (check_errors), asks
 * the stream whether it died. Returns how many completions were reaped. */
static int watch_stream(cuda_queue_t *cq, int check_errors) {
  int n = reap(cq);
  if (!cq->pending_count || !check_errors) return n;
  CUresult r = aq_cu.cuStreamQuery(cq->stream);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) fail_pending(cq, r);
  return n;
}

/* A failed stream operation of a packet (call) as the packet's fault,
 * naming what the packet runs. */
static uint32_t check_agent(cuda_queue_t *cq, CUresult r, const char *call, const char *what) {
  if (r == CUDA_SUCCESS) return 0;
  /* Errors such as an illegal address are sticky: the context is lost. */
  if (aq_cuda_sticky(r)) {
    atomic_store(&cq->agent->faulted, 1);
    cq->agent->agent->info.usable = 0;
  }
  char detail[200];
  snprintf(detail, sizeof(detail), "%s: %s", what, aq_cuda_error(r));
  return packet_fault(cq, AQ_ERROR_KERNEL_FAULT, call, detail);
}

/* Returns a fault where the stream could not take the completion: the
 * caller then completes the packet on the host, failed (a signal never
 * written would hang its waiters). */
static uint32_t complete_on_stream(cuda_queue_t *cq, hsa_signal_t completion, const char *what) {
  if (!completion.handle) return 0;
  aq_signal_slot_t *s = aq_signal_slot(completion.handle);
  if (!s) return 0;
  /* The stream writes absolute values, so a decrement is computed here.
   * Packets of this queue that share the signal complete in order: count
   * from the value the last of them will write, not from the current one.
   * Unless the host has set the signal since (a graph's next run stores
   * it again): then the write it is owed is past. */
  uint32_t sets = atomic_load_explicit(&s->host_sets, memory_order_relaxed);
  int64_t next = atomic_load(&s->value);
  for (uint32_t i = cq->pending_count; i-- > 0;) {
    const cuda_pending_t *p = &cq->pending[(cq->pending_head + i) % CUDA_PENDING_MAX];
    if (p->slot != s) continue;
    if (p->host_sets == sets && p->next < next) next = p->next;
    break;
  }
  next -= 1;
  aq_signal_slot_mark_device_written(s);
  CUresult r = aq_cu.cuStreamWriteValue64(cq->stream, aq_cuda_signal_address(s), (uint64_t)next, 0);
  if (r != CUDA_SUCCESS) return check_agent(cq, r, "cuStreamWriteValue64 (completion signal)", what);
  aq_cuda_event_record(cq, s, sets);
  if (cq->pending_count == CUDA_PENDING_MAX) reap(cq);
  if (cq->pending_count < CUDA_PENDING_MAX) {
    cq->pending[(cq->pending_head + cq->pending_count++) % CUDA_PENDING_MAX] = (cuda_pending_t){s, next, sets, what};
    return 0;
  }
  r = aq_cu.cuLaunchHostFunc(cq->stream, notify_host, s);
  if (r == CUDA_SUCCESS) return 0;
  /* The write is on the stream but nobody would wake the waiters: wait
   * here, then wake them. */
  r = aq_cu.cuStreamSynchronize(cq->stream);
  if (r != CUDA_SUCCESS) return check_agent(cq, r, "cuStreamSynchronize (after cuLaunchHostFunc failed)", what);
  notify_host(s);
  return 0;
}

/* A packet's group_segment_size is the group memory (CUDA: dynamic shared
 * memory) each work-group gets. CUDA launches a block with at most 48 KB
 * unless the function's limit was raised, up to the device's opt-in
 * maximum: raised here, the first time a packet asks for more than the
 * kernel was allowed so far (a lock only then; the check is lock-free). */
static uint32_t fit_group_segment(cuda_queue_t *cq, cuda_kernel_t *k, uint32_t bytes) {
  static pthread_mutex_t raising = PTHREAD_MUTEX_INITIALIZER;
  if (bytes <= atomic_load_explicit(&k->group_limit, memory_order_acquire)) return 0;
  char detail[240];
  int most = 0;
  CUresult q = aq_cu.cuDeviceGetAttribute(&most, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, cq->agent->device);
  if (q != CUDA_SUCCESS) {
    snprintf(detail, sizeof(detail), "kernel '%s': cuDeviceGetAttribute(shared memory per block opt-in): %s", k->name,
             aq_cuda_error(q));
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "group_segment_size not checked", detail);
  }
  if ((int64_t)bytes > most) {
    snprintf(detail, sizeof(detail),
             "kernel '%s' asks for %u bytes of group segment a work-group; this GPU offers at most %d", k->name,
             bytes, most);
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "group_segment_size too large", detail);
  }
  pthread_mutex_lock(&raising);
  CUresult r = CUDA_SUCCESS;
  if (bytes > atomic_load(&k->group_limit)) { /* never lowered: another queue may have raised it further */
    r = aq_cu.cuFuncSetAttribute(k->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes);
    if (r == CUDA_SUCCESS) atomic_store_explicit(&k->group_limit, bytes, memory_order_release);
  }
  pthread_mutex_unlock(&raising);
  if (r == CUDA_SUCCESS) return 0;
  snprintf(detail, sizeof(detail), "kernel '%s', %u bytes of group segment (its static shared memory counts too): %s",
           k->name, bytes, aq_cuda_error(r));
  return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "group_segment_size not available", detail);
}

int aq_cuda_launch_shape(const hsa_kernel_dispatch_packet_t *p, uint32_t blocks[3], uint32_t wg[3], char *why,
                         size_t room) {
  const uint32_t size[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
  const uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
  uint32_t dims = (p->setup >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
  for (uint32_t i = 0; i < 3; ++i) {
    uint64_t items = i < dims ? grid[i] : 1;
    wg[i] = i < dims ? size[i] : 1;
    if (!wg[i] || !items) return snprintf(why, room, "a zero grid or work-group size along %c", "xyz"[i]), 1;
    uint64_t b = aq_cuda_grid_blocks(items, wg[i], (int)i);
    if (!b)
      return snprintf(why, room, "%llu blocks along %c, past CUDA's %llu",
                      (unsigned long long)((items + wg[i] - 1) / wg[i]), "xyz"[i],
                      (unsigned long long)aq_cuda_grid_max_blocks((int)i)),
             1;
    blocks[i] = (uint32_t)b;
  }
  return 0;
}

uint32_t aq_cuda_dispatch(cuda_queue_t *cq, const hsa_kernel_dispatch_packet_t *p) {
  cuda_kernel_t *k = aq_cuda_kernel_lookup(p->kernel_object);
  if (!k || k->agent != cq->agent)
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "kernel_object is not a kernel loaded for this GPU", NULL);
  if (atomic_load(&cq->agent->faulted))
    return packet_fault(cq, AQ_ERROR_KERNEL_FAULT, "the GPU faulted earlier and needs a reset", k->name);
  uint32_t wg[3], blocks[3];
  char why[160];
  if (aq_cuda_launch_shape(p, blocks, wg, why, sizeof(why)))
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET, why, k->name);
  uint32_t fault = p->group_segment_size ? fit_group_segment(cq, k, p->group_segment_size) : 0;
  if (fault) return fault;
  size_t size = k->kernarg_size;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, p->kernarg_address, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUresult r = aq_cu.cuLaunchKernel(k->function, blocks[0], blocks[1], blocks[2], wg[0], wg[1], wg[2],
                                 p->group_segment_size, cq->stream, NULL, size ? extra : NULL);
  char what[96];
  snprintf(what, sizeof(what), "kernel '%s'", k->name);
  return check_agent(cq, r, "launch failed", what);
}

enum { POLL_MIN_NS = 4000, POLL_MAX_NS = 1000000, ERROR_CHECK_NS = 200000, FRUGAL_POLL_MAX_NS = 100000 };

/* AQ_GPU_SPIN_US=0: the processor never polls without sleeping. */
static int frugal(void) { return aq_runtime_config()->gpu_spin_ns == 0; }

/* Waits POLL_MIN_NS for ready(arg): asleep under AQ_GPU_SPIN_US=0, else
 * spinning and then yielding the core (wake.h: aq_wake_poll). */
static void poll_for(cuda_queue_t *cq, int (*ready)(void *), void *arg) {
  if (frugal()) aq_wake_wait(&cq->proc.wake, ready, arg, POLL_MIN_NS, 0);
  else aq_wake_poll(&cq->proc.wake, ready, arg, POLL_MIN_NS);
}

static int and_met(void *barrier) {
  uint32_t fault = 0;
  return aq_barrier_poll(barrier, HSA_PACKET_TYPE_BARRIER_AND, &fault) == AQ_BARRIER_MET;
}

/* A barrier-AND behind work still on the stream cannot pass before that
 * work ends, so the processor waits for its signals here meanwhile: one met
 * by then needs no stream wait. A stream wait on a host-completed signal
 * (a CPU task's) costs the GPU microseconds after the work before it, as it
 * reads the signal across the bus: at a training step's end, the waits for
 * the loaders behind the step's kernels. Once the stream has caught up, the
 * waits go on the stream, as the GPU would idle either way. The stream is
 * asked every few microseconds: asking also hands the GPU work the driver
 * still holds (with the processor only spinning after a graph launch, the
 * graph once started 45 us late). What the stream owes is reaped meanwhile,
 * so its waiters hear of it. */
static void settle_on_host(cuda_queue_t *cq, const void *b) {
  if (and_met((void *)b)) return;
  reap(cq);
  if (!cq->pending_count && !cq->tail_untracked) return; /* known to have caught up */
  do {
    CUresult r = aq_cu.cuStreamQuery(cq->stream);
    if (r == CUDA_SUCCESS) {
      cq->tail_untracked = 0;
      return;
    }
    if (r != CUDA_ERROR_NOT_READY) {
      fail_pending(cq, r);
      return;
    }
    poll_for(cq, and_met, (void *)b);
    reap(cq);
  } while (atomic_load(&cq->proc.running) && !and_met((void *)b));
}

/* Whether every dependency that another stream of this GPU writes is
 * done or has its event recorded (cuda_events.c; queue.h:
 * aq_barrier_same_gpu_dep). */
static int same_gpu_deps_ordered(void *barrier) {
  const hsa_barrier_and_packet_t *b = barrier;
  for (int i = 0; i < 5; ++i) {
    aq_signal_slot_t *s = b->dep_signal[i].handle ? aq_signal_slot(b->dep_signal[i].handle) : NULL;
    if (s && aq_barrier_same_gpu_dep(b, i) && !aq_cuda_event_ready(s)) return 0;
  }
  return 1;
}

/* Waits on the host until the dependencies another stream of this GPU
 * writes can order our stream: their events are recorded (when their
 * tasks are launched) or, for one that got no event, they are done. That
 * stream's processor wakes us at either; we look every POLL_MIN_NS all the
 * same. */
static void wait_for_same_gpu_deps(cuda_queue_t *cq, const hsa_barrier_and_packet_t *b) {
  aq_barrier_watch(b, &cq->proc.wake);
  while (atomic_load(&cq->proc.running) && !same_gpu_deps_ordered((void *)b)) {
    reap(cq);
    poll_for(cq, same_gpu_deps_ordered, (void *)b);
  }
}

/* Whether every dependency still unmet is another stream's of this GPU:
 * an event orders it at no cost to the GPU, so there is nothing to settle
 * on the host (a collectives' stream held its next all-reduce back until
 * the last one ended). */
static int only_same_gpu_deps_left(const hsa_barrier_and_packet_t *b) {
  for (int i = 0; i < 5; ++i) {
    aq_signal_slot_t *s = b->dep_signal[i].handle ? aq_signal_slot(b->dep_signal[i].handle) : NULL;
    if (s && !aq_barrier_same_gpu_dep(b, i) && atomic_load_explicit(&s->value, memory_order_acquire) != 0) return 0;
  }
  return 1;
}

/* barrier-AND: the stream waits for every dependency to reach zero. One
 * already there needs no wait; if it failed, the barrier fails with it (a
 * dependency that fails later, while the stream waits, reaches zero all the
 * same: the stream cannot tell). */
static uint32_t barrier_and(cuda_queue_t *cq, const hsa_barrier_and_packet_t *b) {
  uint32_t fault = 0;
  if (b->reserved1) wait_for_same_gpu_deps(cq, b);
  if (!only_same_gpu_deps_left(b)) settle_on_host(cq, b); /* (all met: nothing to settle either) */
  for (int i = 0; i < 5; ++i) {
    if (!b->dep_signal[i].handle) continue;
    aq_signal_slot_t *s = aq_signal_slot(b->dep_signal[i].handle);
    if (!s)
      return aq_fault_record(AQ_ERROR_INVALID_PACKET, "barrier dep_signal[%d] 0x%llx is not a live signal", i,
                             (unsigned long long)b->dep_signal[i].handle);
    if (atomic_load_explicit(&s->value, memory_order_acquire) == 0) {
      if (!fault) fault = atomic_load(&s->fault);
      continue;
    }
    /* Untaken, the work after the barrier would run before its dependency. */
    int same_gpu = aq_barrier_same_gpu_dep(b, i); /* its event, or unmet only as the processor stops */
    CUdeviceptr at = aq_cuda_signal_address(s);
    CUresult r = same_gpu ? aq_cuda_event_wait(cq, s) : aq_cu.cuStreamWaitValue64(cq->stream, at, 0, CU_STREAM_WAIT_VALUE_EQ);
    if (r != CUDA_SUCCESS) {
      char what[48];
      snprintf(what, sizeof(what), "barrier-AND dep_signal[%d]", i);
      return check_agent(cq, r, same_gpu ? "cuStreamWaitEvent" : "cuStreamWaitValue64", what);
    }
    cq->tail_untracked = 1;
  }
  return fault;
}

static int any_met(void *arg) {
  uint32_t fault = 0;
  return aq_barrier_poll(arg, HSA_PACKET_TYPE_BARRIER_OR, &fault) == AQ_BARRIER_MET;
}

/* barrier-OR: no stream primitive waits for one of several values, so the
 * processor waits on the host, then the stream goes on. A host completer
 * wakes it (it watches the signals); a GPU's stream write wakes nobody, so it
 * also looks every 20 us. */
static uint32_t barrier_or(cuda_queue_t *cq, const void *p) {
  uint32_t fault = 0;
  uint64_t spin = aq_runtime_config()->spin_ns; /* the first time only */
  aq_barrier_watch(p, &cq->proc.wake);
  while (aq_barrier_poll(p, HSA_PACKET_TYPE_BARRIER_OR, &fault) != AQ_BARRIER_MET) {
    if (!atomic_load(&cq->proc.running)) return 0; /* shutting down */
    fault = 0;
    reap(cq); /* a waiter of what the stream owes may be what this barrier waits for */
    aq_wake_wait(&cq->proc.wake, any_met, (void *)p, spin + 20000, spin);
    spin = 0;
  }
  return fault;
}

/* AQ_AGENT_DISPATCH_STREAM_CALL: a function that puts work of its own (a
 * NCCL collective) on the stream, where it follows this queue's packets
 * like a kernel. */
static uint32_t stream_call(cuda_queue_t *cq, const hsa_agent_dispatch_packet_t *p) {
  if (p->type != AQ_AGENT_DISPATCH_STREAM_CALL)
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET,
                        "agent dispatch type unknown to GPU agents (they run 0x8001, stream call)", NULL);
  aq_stream_call_fn_t fn = (aq_stream_call_fn_t)(uintptr_t)p->arg[0];
  if (!fn) return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "stream call with a NULL function in arg[0]", NULL);
  if (atomic_load(&cq->agent->faulted))
    return packet_fault(cq, AQ_ERROR_KERNEL_FAULT, "the GPU faulted earlier and needs a reset", "stream call");
  aq_status_t s = fn(p, cq->stream);
  return s == AQ_OK ? 0 : packet_fault(cq, s, "stream call failed", aq_last_error());
}

/* A timed launch's record: the GPU's times fill start and end later. */
static aq_trace_event_t kernel_event(cuda_queue_t *cq, const char *name, uint64_t t0, uint64_t index, const void *p) {
  aq_queue_impl_t *q = cq->queue;
  return (aq_trace_event_t){.name = name, .category = "kernel", .ready_ns = t0, .start_ns = t0, .end_ns = t0,
                            .packet = index, .tag = aq_trace_tag_of(p), .agent = cq->agent->agent->info.index,
                            .queue = q->id, .depth = (uint32_t)(atomic_load(&q->write_index) - index)};
}

static int process(cuda_queue_t *cq) {
  aq_queue_impl_t *q = cq->queue;
  uint64_t index = atomic_load_explicit(&q->read_index, memory_order_relaxed);
  hsa_packet_type_t type = aq_queue_peek(q, index);
  if (type == HSA_PACKET_TYPE_INVALID) return 0;
  const uint8_t *p = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  uint32_t fault = 0;
  hsa_signal_t completion = {0};
  uint64_t t0 = aq_trace_on() || cuda_profiling(cq) ? aq_now_ns() : 0; /* timed: one launch each */
  const char *what = "barrier packet";
  int timed = 0;
  /* A stretch of kernels seen before, as one CUDA graph launch (cuda_graph.c):
   * untraced, or traced under AQ_CUDA_GRAPHS=traced (one slice a graph);
   * never while profiling, which needs each kernel's time. */
  int graphs = !t0 || (aq_cuda_graph_traced(cq) && !cuda_profiling(cq));
  uint32_t replayed = 0;
  if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH && graphs) {
    cuda_timed_t *slot = t0 ? aq_cuda_timing_begin(cq, 0) : NULL; /* unused (not counted) if nothing replays */
    const char *label = NULL;
    replayed = aq_cuda_graph_replay(cq, index, &what, &label);
    if (replayed && slot) {
      aq_trace_event_t ev = kernel_event(cq, label, t0, index, p);
      aq_cuda_timing_end(cq, slot, &ev);
      timed = 1;
    }
  }
  if (replayed) {
    for (uint32_t i = 1; i < replayed; ++i) aq_queue_retire(q, index++);
    const uint8_t *last = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
    completion = ((const hsa_kernel_dispatch_packet_t *)(const void *)last)->completion_signal;
  } else switch (type) {
    case HSA_PACKET_TYPE_KERNEL_DISPATCH: {
      completion = ((const hsa_kernel_dispatch_packet_t *)p)->completion_signal;
      const cuda_kernel_t *k = aq_cuda_kernel_lookup(((const hsa_kernel_dispatch_packet_t *)p)->kernel_object);
      what = k && k->name ? k->name : "kernel";
      cuda_timed_t *slot = t0 ? aq_cuda_timing_begin(cq, 1) : NULL;
      fault = aq_cuda_dispatch(cq, (const void *)p);
      aq_cuda_timing_open(cq);
      if (slot && !fault) {
        aq_trace_event_t ev = kernel_event(cq, what, t0, index, p);
        aq_cuda_timing_end(cq, slot, &ev);
        timed = 1;
      }
      break;
    }
    case HSA_PACKET_TYPE_BARRIER_AND:
      completion = ((const hsa_barrier_and_packet_t *)p)->completion_signal;
      if (t0) aq_cuda_timing_anchor(cq); /* before its waits make the stream busy */
      fault = barrier_and(cq, (const void *)p);
      break;
    case HSA_PACKET_TYPE_BARRIER_OR:
      completion = ((const hsa_barrier_or_packet_t *)p)->completion_signal;
      fault = barrier_or(cq, (const void *)p);
      break;
    case HSA_PACKET_TYPE_AGENT_DISPATCH: {
      completion = ((const hsa_agent_dispatch_packet_t *)p)->completion_signal;
      what = "stream call";
      /* Traced, a stream call (a collective) is its GPU time, as a kernel
       * is: the host's call only queues it, and where a bucket's all-reduce
       * waits for a peer is what a trace of several GPUs is read for. Never
       * a profile's sample: that time is the slowest rank's. */
      cuda_timed_t *slot = aq_trace_on() ? aq_cuda_timing_begin(cq, 0) : NULL;
      fault = stream_call(cq, (const void *)p);
      if (slot && !fault) {
        aq_trace_event_t ev = kernel_event(cq, what, t0, index, p);
        ev.category = "stream";
        aq_cuda_timing_end(cq, slot, &ev);
        slot->sink.fn = NULL;
        timed = 1;
      }
      break;
    }
    default:
      completion = ((const hsa_agent_dispatch_packet_t *)p)->completion_signal;
      fault = packet_fault(cq, AQ_ERROR_INVALID_PACKET,
                           "GPU agents run kernel dispatch, barrier and stream-call packets only", NULL);
  }
  if (t0 && !timed) {
    /* Barriers, and kernels the GPU could not time: when they went onto the
     * stream, on the host. */
    uint64_t now = aq_now_ns();
    aq_trace_event_t ev = {.name = what, .category = "gpu launch", .ready_ns = t0, .start_ns = t0, .end_ns = now,
                           .packet = index, .tag = aq_trace_tag_of(p), .agent = cq->agent->agent->info.index,
                           .queue = q->id,
                           .status = fault ? AQ_ERROR_KERNEL_FAULT : 0};
    aq_trace_record(&ev);
  }
  if (!replayed)
    aq_cuda_graph_observe(cq, type == HSA_PACKET_TYPE_KERNEL_DISPATCH && !fault && graphs ? (const void *)p : NULL);
  hsa_signal_t done = completion;
  aq_queue_retire(q, index);
  if (fault) {
    char msg[8];
    aq_queue_note_failure(q, aq_fault_message(fault, msg, sizeof(msg)), fault);
    aq_packet_complete(done, fault); /* failed packets complete on the host, at once */
  } else {
    if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH || done.handle) cq->tail_untracked = !done.handle;
    fault = complete_on_stream(cq, done, what);
    if (fault) {
      char msg[8];
      aq_queue_note_failure(q, aq_fault_message(fault, msg, sizeof(msg)), fault);
      aq_packet_complete(done, fault);
    }
  }
  return 1;
}

/* Work for the processor: a packet, a completion the stream has written
 * (its waiters need waking), or the end. */
static int has_work(void *arg) {
  cuda_queue_t *cq = arg;
  if (!atomic_load(&cq->proc.running) ||
      aq_queue_peek(cq->queue, atomic_load(&cq->queue->read_index)) != HSA_PACKET_TYPE_INVALID)
    return 1;
  if (aq_cuda_timing_owed(cq)) return 1;
  if (!cq->pending_count) return 0;
  const cuda_pending_t *p = &cq->pending[cq->pending_head];
  return stale(p) || atomic_load(&p->slot->value) <= p->next;
}

/* Someone waits for a completion the stream still owes: a host thread
 * asleep on it, or another agent's barrier watching it. */
static int owed_to_a_waiter(const cuda_queue_t *cq) {
  for (uint32_t i = 0; i < cq->pending_count; ++i) {
    aq_signal_slot_t *s = cq->pending[(cq->pending_head + i) % CUDA_PENDING_MAX].slot;
    if (atomic_load_explicit(&s->wake.sleepers, memory_order_relaxed) ||
        atomic_load_explicit(&s->notify, memory_order_relaxed))
      return 1;
  }
  return 0;
}

/* The processor stands in for a GPU's command processor and its completion
 * interrupt. While someone waits for what the stream owes, it looks without
 * sleeping, so the waiter hears of the write at once (the end of a training
 * step is one; a timed sleep of a few microseconds overslept by tens on the
 * H100 machine's virtual CPUs). Otherwise it looks at owed completions less
 * and less often, and after its last work it keeps polling for packets for
 * the GPU spin time (AQ_GPU_SPIN_US; a training loop's next step comes tens
 * of microseconds after the last one ended) before it sleeps until a
 * doorbell. The stream's health is asked about every ERROR_CHECK_NS.
 * AQ_GPU_SPIN_US=0 trades that latency for a core (a shared machine's
 * choice): owed completions are looked at after sleeps that grow from 4 to
 * 100 us even while someone waits, and nothing spins. */
void *aq_cuda_queue_main(void *arg) {
  cuda_queue_t *cq = arg;
  /* Unbound, every launch fails and says so, packet by packet. */
  char where[64];
  snprintf(where, sizeof(where), "%s, queue %u: packet processor", cq->agent->agent->info.name, cq->queue->id);
  aq_cuda_checked(aq_cu.cuCtxSetCurrent(cq->agent->context), "cuCtxSetCurrent", where);
  /* Our sleeps are short polls of GPU-written signals: keep them short
   * (Linux lets a 20 us sleep run 50 us late by default). */
  prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
  atomic_store(&cq->proc.busy, 1);
  const uint64_t idle_spin = aq_runtime_config()->gpu_spin_ns;
  uint64_t poll = POLL_MIN_NS, checked = aq_now_ns(), active = checked;
  while (atomic_load(&cq->proc.running)) {
    int flush = atomic_load(&cq->timing.flush_req) != atomic_load(&cq->timing.flush_ack);
    if (process(cq)) {
      /* A host task may wait on a completion the stream wrote while we were
       * launching a long stretch (a training step's loader waits for the
       * batch copy at the step's head): wake it now, not after the stretch. */
      if (cq->pending_count) reap(cq);
      if (flush) aq_cuda_timing_resolve(cq, 1);
      poll = POLL_MIN_NS, active = aq_now_ns();
      continue;
    }
    /* Idle: let producers know they must wake us. */
    atomic_store(&cq->proc.busy, 0);
    uint64_t now = aq_now_ns();
    int check = now - checked >= ERROR_CHECK_NS;
    if (check) checked = now;
    if (watch_stream(cq, check)) poll = POLL_MIN_NS, active = now;
    aq_cuda_timing_resolve(cq, flush);
    int owed = cq->pending_count || cq->timing.count;
    uint64_t spin = now - active < idle_spin ? idle_spin - (now - active) : 0;
    if (owed && owed_to_a_waiter(cq)) {
      if (idle_spin) aq_wake_poll(&cq->proc.wake, has_work, cq, POLL_MIN_NS);
      else aq_wake_wait(&cq->proc.wake, has_work, cq, poll < FRUGAL_POLL_MAX_NS ? poll : FRUGAL_POLL_MAX_NS, 0);
    } else
      aq_wake_wait(&cq->proc.wake, has_work, cq, owed ? spin + poll : UINT64_MAX, spin);
    if (owed) poll = poll * 2 < POLL_MAX_NS ? poll * 2 : POLL_MAX_NS;
    atomic_store(&cq->proc.busy, 1);
  }
  return NULL;
}
