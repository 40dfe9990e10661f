/* The cuda packet processor: one thread per AQL queue turns packets into
 * work on the queue's CUDA stream. Kernel dispatches become cuLaunchKernel
 * (the HSA grid counts work-items, CUDA counts blocks; the kernarg buffer
 * goes as one blob), barrier-AND packets become stream waits on the signals'
 * memory, completion signals become stream writes of their next value, so
 * GPU->GPU and CPU->GPU edges take no host round trip. A packet is retired
 * (its slot reusable) once it is on the stream. */
#include <stdio.h>
#include <string.h>

#include "runtime/drivers/cuda.h"
#include "runtime/fault.h"
#include "runtime/status.h"
#include "runtime/trace.h"

static uint32_t packet_fault(cuda_queue_t *cq, aq_status_t s, const char *what, const char *detail) {
  return aq_fault_record(s, "agent %s, queue %u: %s%s%s", cq->agent->agent->info.name, cq->queue->id, what,
                         detail ? ": " : "", detail ? detail : "");
}

/* Host waiters of a GPU-written signal are woken by a host function queued
 * after the write: only when someone already waits, or for barrier packets
 * (the ends of a graph's streams), to keep it off the per-kernel path. */
static void notify_host(void *slot) { aq_signal_slot_notify(slot); }

/* Forgets completions the stream has written. */
static void reap(cuda_queue_t *cq) {
  while (cq->pending_count) {
    cuda_pending_t *p = &cq->pending[cq->pending_head];
    if (atomic_load(&p->slot->value) > p->next) break;
    cq->pending_head = (cq->pending_head + 1) % CUDA_PENDING_MAX;
    cq->pending_count--;
  }
}

/* After a sticky error the stream writes nothing more: fail what it owed. */
static void fail_pending(cuda_queue_t *cq, CUresult r) {
  atomic_store(&cq->agent->faulted, 1);
  cq->agent->agent->info.usable = 0;
  while (cq->pending_count) {
    cuda_pending_t *p = &cq->pending[cq->pending_head];
    uint32_t f = packet_fault(cq, AQ_ERROR_KERNEL_FAULT, p->what, cuda_error(r));
    aq_signal_slot_fail(p->slot, f);
    aq_signal_slot_store(p->slot, p->next);
    cq->pending_head = (cq->pending_head + 1) % CUDA_PENDING_MAX;
    cq->pending_count--;
  }
}

static void watch_stream(cuda_queue_t *cq) {
  reap(cq);
  if (!cq->pending_count) return;
  CUresult r = cu.cuStreamQuery(cq->stream);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) fail_pending(cq, r);
}

static void complete_on_stream(cuda_queue_t *cq, hsa_signal_t completion, int always_notify, const char *what) {
  if (!completion.handle) return;
  aq_signal_slot_t *s = aq_signal_slot(completion.handle);
  if (!s) return;
  /* One completer per signal in flight: its next value is known now. */
  int64_t next = atomic_load(&s->value) - 1;
  cu.cuStreamWriteValue64(cq->stream, cuda_signal_address(s), (uint64_t)next, 0);
  if (cq->pending_count == CUDA_PENDING_MAX) reap(cq);
  if (cq->pending_count < CUDA_PENDING_MAX) {
    cq->pending[(cq->pending_head + cq->pending_count++) % CUDA_PENDING_MAX] = (cuda_pending_t){s, next, what};
  }
  if (always_notify || atomic_load(&s->wake.sleepers) || atomic_load(&s->notify))
    cu.cuLaunchHostFunc(cq->stream, notify_host, s);
}

static uint32_t check_agent(cuda_queue_t *cq, CUresult r, const char *kernel) {
  if (r == CUDA_SUCCESS) return 0;
  /* Errors such as an illegal address are sticky: the context is lost. */
  if (r == 700 || r == 719 || r == 999 || r == 214) {
    atomic_store(&cq->agent->faulted, 1);
    cq->agent->agent->info.usable = 0;
  }
  char detail[200];
  snprintf(detail, sizeof(detail), "kernel '%s': %s", kernel, cuda_error(r));
  return packet_fault(cq, AQ_ERROR_KERNEL_FAULT, "launch failed", detail);
}

static uint32_t dispatch(cuda_queue_t *cq, const hsa_kernel_dispatch_packet_t *p) {
  const cuda_kernel_t *k = cuda_kernel_lookup(p->kernel_object);
  if (!k || k->agent != cq->agent)
    return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "kernel_object is not a kernel loaded for this GPU", NULL);
  if (atomic_load(&cq->agent->faulted))
    return packet_fault(cq, AQ_ERROR_KERNEL_FAULT, "the GPU faulted earlier and needs a reset", k->name);
  uint32_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
  uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z}, blocks[3];
  uint32_t dims = (p->setup >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
  for (uint32_t i = 0; i < 3; ++i) {
    if (i >= dims) wg[i] = grid[i] = 1;
    if (!wg[i] || !grid[i]) return packet_fault(cq, AQ_ERROR_INVALID_PACKET, "a zero grid or work-group size", k->name);
    blocks[i] = (grid[i] + wg[i] - 1) / wg[i];
  }
  size_t size = k->kernarg_size;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, p->kernarg_address, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUresult r = cu.cuLaunchKernel(k->function, blocks[0], blocks[1], blocks[2], wg[0], wg[1], wg[2],
                                 p->group_segment_size, cq->stream, NULL, size ? extra : NULL);
  return check_agent(cq, r, k->name);
}

/* barrier-AND: the stream waits for every dependency to reach zero. */
static void barrier_and(cuda_queue_t *cq, const hsa_barrier_and_packet_t *b) {
  for (int i = 0; i < 5; ++i) {
    aq_signal_slot_t *s = b->dep_signal[i].handle ? aq_signal_slot(b->dep_signal[i].handle) : NULL;
    if (s) cu.cuStreamWaitValue64(cq->stream, cuda_signal_address(s), 0, CU_STREAM_WAIT_VALUE_EQ);
  }
}

static int any_met(void *arg) {
  uint32_t fault = 0;
  return aq_barrier_poll(arg, HSA_PACKET_TYPE_BARRIER_OR, &fault) == AQ_BARRIER_MET;
}

static int process(cuda_queue_t *cq) {
  aq_queue_impl_t *q = cq->queue;
  uint64_t index = atomic_load_explicit(&q->read_index, memory_order_relaxed);
  hsa_packet_type_t type = aq_queue_peek(q, index);
  if (type == HSA_PACKET_TYPE_INVALID) return 0;
  const uint8_t *p = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  uint32_t fault = 0;
  hsa_signal_t completion = {0};
  int is_barrier = 0;
  uint64_t t0 = aq_trace_on() ? aq_now_ns() : 0;
  const char *what = "barrier packet";
  switch (type) {
    case HSA_PACKET_TYPE_KERNEL_DISPATCH: {
      completion = ((const hsa_kernel_dispatch_packet_t *)p)->completion_signal;
      const cuda_kernel_t *k = cuda_kernel_lookup(((const hsa_kernel_dispatch_packet_t *)p)->kernel_object);
      what = k && k->name ? k->name : "kernel";
      fault = dispatch(cq, (const void *)p);
      break;
    }
    case HSA_PACKET_TYPE_BARRIER_AND:
      completion = ((const hsa_barrier_and_packet_t *)p)->completion_signal;
      barrier_and(cq, (const void *)p);
      is_barrier = 1;
      break;
    case HSA_PACKET_TYPE_BARRIER_OR:
      /* No stream primitive waits for one of several values: the processor
       * waits on the host, then the stream goes on. */
      completion = ((const hsa_barrier_or_packet_t *)p)->completion_signal;
      aq_wake_wait(&cq->wake, any_met, (void *)p, UINT64_MAX, aq_runtime_config()->spin_ns);
      is_barrier = 1;
      break;
    default:
      completion = ((const hsa_agent_dispatch_packet_t *)p)->completion_signal;
      fault = packet_fault(cq, AQ_ERROR_INVALID_PACKET, "GPU agents run kernel dispatch and barrier packets only",
                           NULL);
  }
  if (aq_trace_on()) {
    /* The host side of a GPU packet: when it went onto the stream. */
    uint64_t now = aq_now_ns();
    aq_trace_event_t ev = {.name = what, .category = "gpu launch", .ready_ns = t0, .start_ns = t0, .end_ns = now,
                           .packet = index, .tag = aq_trace_tag_of(p), .agent = cq->agent->agent->info.index,
                           .queue = q->id,
                           .status = fault ? AQ_ERROR_KERNEL_FAULT : 0};
    aq_trace_record(&ev);
  }
  hsa_signal_t done = completion;
  aq_queue_retire(q, index);
  if (fault) {
    char msg[8];
    aq_queue_note_failure(q, aq_fault_message(fault, msg, sizeof(msg)), fault);
    aq_packet_complete(done, fault); /* failed packets complete on the host, at once */
  } else {
    complete_on_stream(cq, done, is_barrier, what);
  }
  return 1;
}

static int has_packet(void *arg) {
  cuda_queue_t *cq = arg;
  return !atomic_load(&cq->running) ||
         aq_queue_peek(cq->queue, atomic_load(&cq->queue->read_index)) != HSA_PACKET_TYPE_INVALID;
}

void *cuda_queue_main(void *arg) {
  cuda_queue_t *cq = arg;
  cuda_bind(cq->agent);
  atomic_store(&cq->busy, 1);
  while (atomic_load(&cq->running)) {
    if (process(cq)) continue;
    /* Idle: let producers know they must wake us, then sleep on our word,
     * looking at the stream every millisecond while it owes completions. */
    atomic_store(&cq->busy, 0);
    watch_stream(cq);
    aq_wake_wait(&cq->wake, has_packet, cq, cq->pending_count ? 1000000ull : UINT64_MAX,
                 aq_runtime_config()->spin_ns);
    atomic_store(&cq->busy, 1);
  }
  return NULL;
}
