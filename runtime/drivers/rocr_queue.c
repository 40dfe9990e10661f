/* rocr queues: each Aquila queue on an AMD GPU gets a hardware AQL queue
 * (hsa_queue_create) and a forwarding thread. Never run on AMD hardware
 * (rocr_agent.c says why).
 *
 * Why a thread between two AQL rings: Aquila's signals live in its own pool
 * (runtime/signal.c), not in ROCr's amd_signal_t, so the GPU can neither
 * wait on them nor decrement them. The forwarder copies each packet into the
 * hardware ring unchanged (header, setup, grid, segment sizes, kernel
 * object) except for what only ROCr memory can hold:
 * - the completion signal: an HSA signal from the queue's in-flight table
 *   (rocr_packet.h); ROCr's async handler mirrors its completion back to the
 *   Aquila signal, waking its waiters;
 * - the kernarg buffer: copied into the entry's slot of kernarg-pool memory;
 * - barrier dependencies: a dependency that one packet in flight on this
 *   queue will complete (its Aquila value is 1) is mapped to that packet's
 *   HSA signal, so GPU->GPU edges wait on the GPU; any other (a CPU task, a
 *   host store, another queue) is resolved on the host first, as the cuda
 *   driver does for barrier-OR. A barrier holds the queue in HSA anyway, so
 *   waiting before forwarding it delays nothing behind it.
 * A queue error (ROCr's queue callback: a kernel fault) fails every packet
 * in flight with the kernel's name, marks the agent unusable, and fails
 * every later packet of the queue on the host. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/drivers/rocr.h"
#include "runtime/fault.h"
#include "runtime/status.h"

/* In flight at once per queue: each entry holds an interrupt signal, and
 * the kernel driver has a few thousand of those for the whole process. */
enum { QUEUE_INFLIGHT = 64, HW_QUEUE_MIN = 1024 };
enum { IDLE, FORWARDED, BLOCKED };

static uint32_t packet_fault(rocr_queue_t *rq, aq_status_t s, const char *what, const char *detail) {
  return aq_fault_record(s, "agent %s, queue %u: %s%s%s", rq->agent->agent->info.name, rq->queue->id, what,
                         detail ? ": " : "", detail ? detail : "");
}

/* ROCr's async-handler thread: the GPU finished entry e's packet. Detach
 * waits for every handler to have run before it frees the queue. */
static bool on_complete(hsa_signal_value_t value, void *arg) {
  (void)value;
  rocr_inflight_t *e = arg;
  rocr_queue_t *rq = e->owner;
  int i = (int)(e - rq->inflight.e);
  if (aq_rocr_inflight_claim(&rq->inflight, i)) {
    /* On a dead queue the signal may be ours (release), not the GPU's. */
    uint32_t f = atomic_load(&rq->dead) ? packet_fault(rq, AQ_ERROR_KERNEL_FAULT, e->what ? e->what : "barrier packet",
                                                       "its GPU queue failed") : 0;
    aq_packet_complete((hsa_signal_t){e->aq_signal}, f);
    aq_rocr_inflight_release(&rq->inflight, i);
  }
  atomic_fetch_sub(&rq->handlers, 1); /* the last touch of rq */
  return false; /* one packet per registration */
}

/* ROCr's queue callback: the hardware queue is dead (a kernel fault, a bad
 * packet). What was in flight will never complete on the GPU: fail it. Its
 * entries stay DONE (never reused): the queue takes no more packets. */
static void on_queue_error(hsa_status_t status, hsa_queue_t *source, void *data) {
  (void)source;
  rocr_queue_t *rq = data;
  atomic_store(&rq->dead, 1);
  atomic_store(&rq->agent->faulted, 1);
  rq->agent->agent->info.usable = 0;
  for (int i = 0; i < (int)rq->inflight.count; ++i) {
    rocr_inflight_t *e = &rq->inflight.e[i];
    if (!aq_rocr_inflight_claim(&rq->inflight, i)) continue;
    uint32_t f = packet_fault(rq, AQ_ERROR_KERNEL_FAULT, e->what ? e->what : "barrier packet", aq_rocr_error(status));
    aq_packet_complete((hsa_signal_t){e->aq_signal}, f);
    /* Its async handler then fires, finds the entry claimed, deregisters. */
    aq_rocr.hsa_signal_store_screlease((hsa_signal_t){e->hsa_signal}, 0);
  }
  aq_wake_all(&rq->proc.wake);
}

static uint32_t prepare_dispatch(rocr_queue_t *rq, const uint8_t *p, rocr_inflight_t *e, rocr_patch_t *patch) {
  const hsa_kernel_dispatch_packet_t *d = (const void *)p;
  const rocr_kernel_t *k = aq_rocr_kernel_lookup(d->kernel_object);
  if (!k || k->agent != rq->agent)
    return packet_fault(rq, AQ_ERROR_INVALID_PACKET, "kernel_object is not a kernel loaded for this GPU", NULL);
  e->what = k->name;
  if (k->kernarg_size > ROCR_KERNARG_SLOT)
    return packet_fault(rq, AQ_ERROR_INVALID_PACKET, "kernarg segment larger than 4096 bytes", k->name);
  if (k->kernarg_size && !d->kernarg_address)
    return packet_fault(rq, AQ_ERROR_INVALID_PACKET, "kernarg_address is NULL", k->name);
  if (k->kernarg_size) memcpy(e->kernarg, d->kernarg_address, k->kernarg_size);
  patch->kernarg = k->kernarg_size ? e->kernarg : NULL;
  patch->min_group = k->group_size;
  patch->min_private = k->private_size;
  return 0;
}

static int barrier_met(void *arg) {
  uint32_t fault = 0;
  const uint8_t *p = arg;
  return aq_barrier_poll(p, (hsa_packet_type_t)(p[0] & 0xff), &fault) == AQ_BARRIER_MET;
}

/* Dependencies of barrier entry b: mapped to HSA signals where one packet
 * in flight here decides them, else waited for on the host. */
static uint32_t prepare_barrier(rocr_queue_t *rq, const uint8_t *p, hsa_packet_type_t type, int b,
                                rocr_patch_t *patch) {
  const hsa_barrier_and_packet_t *bp = (const void *)p;
  uint32_t fault = 0;
  int host = type == HSA_PACKET_TYPE_BARRIER_OR, mapped[5];
  for (int i = 0; i < 5; ++i) {
    mapped[i] = -1;
    if (!bp->dep_signal[i].handle) continue;
    aq_signal_slot_t *s = aq_signal_slot(bp->dep_signal[i].handle);
    if (!s) return packet_fault(rq, AQ_ERROR_INVALID_PACKET, "a barrier dep_signal is not a live signal", NULL);
    int64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v == 0 && !fault) fault = atomic_load(&s->fault);
    if (v == 0) continue;
    mapped[i] = v == 1 ? aq_rocr_inflight_find(&rq->inflight, bp->dep_signal[i].handle) : -1;
    if (mapped[i] < 0) host = 1;
  }
  if (host) {
    /* Completers wake the watcher; a signal another agent already watches
     * does not, hence the 50 us timeout (which also lets shutdown in). */
    aq_barrier_watch(p, &rq->proc.wake);
    fault = 0;
    while (aq_barrier_poll(p, type, &fault) != AQ_BARRIER_MET && atomic_load(&rq->proc.running)) {
      fault = 0;
      aq_wake_wait(&rq->proc.wake, barrier_met, (void *)p, 50000, aq_runtime_config()->spin_ns);
    }
    if (!atomic_load(&rq->proc.running))
      return packet_fault(rq, AQ_ERROR_UNAVAILABLE, "queue destroyed while a barrier waited", NULL);
    return fault;
  }
  for (int i = 0; i < 5; ++i)
    if (mapped[i] >= 0) {
      aq_rocr_inflight_hold(&rq->inflight, b, mapped[i]);
      patch->deps[i] = rq->inflight.e[mapped[i]].hsa_signal;
    }
  return fault;
}

/* Moves the packet at the read index to the hardware ring. */
static int forward(rocr_queue_t *rq) {
  aq_queue_impl_t *q = rq->queue;
  uint64_t index = atomic_load_explicit(&q->read_index, memory_order_relaxed);
  hsa_packet_type_t type = aq_queue_peek(q, index);
  if (type == HSA_PACKET_TYPE_INVALID) return IDLE;
  const uint8_t *p = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  hsa_signal_t completion;
  memcpy(&completion, p + 56, sizeof(completion)); /* last in every format */
  uint32_t fault = 0;
  int b = -1;
  uint64_t w = aq_rocr.hsa_queue_load_write_index_relaxed(rq->hw);
  if (atomic_load(&rq->dead)) {
    fault = packet_fault(rq, AQ_ERROR_KERNEL_FAULT, "the GPU's queue failed earlier; it needs a reset", NULL);
  } else if (type != HSA_PACKET_TYPE_KERNEL_DISPATCH && type != HSA_PACKET_TYPE_BARRIER_AND &&
             type != HSA_PACKET_TYPE_BARRIER_OR) {
    fault = packet_fault(rq, AQ_ERROR_INVALID_PACKET, "GPU agents run kernel dispatch and barrier packets only", NULL);
  } else if (w - aq_rocr.hsa_queue_load_read_index_scacquire(rq->hw) >= rq->hw->size ||
             (b = aq_rocr_inflight_acquire(&rq->inflight, completion.handle)) < 0) {
    return BLOCKED; /* the GPU drains both on its own */
  }
  rocr_patch_t patch = {0};
  rocr_inflight_t *e = b >= 0 ? &rq->inflight.e[b] : NULL;
  if (e) fault = type == HSA_PACKET_TYPE_KERNEL_DISPATCH ? prepare_dispatch(rq, p, e, &patch)
                                                         : prepare_barrier(rq, p, type, b, &patch);
  if (e && !fault) {
    patch.completion = e->hsa_signal;
    aq_rocr.hsa_signal_store_relaxed((hsa_signal_t){e->hsa_signal}, 1);
    atomic_fetch_add(&rq->handlers, 1);
    hsa_status_t s = aq_rocr.hsa_amd_signal_async_handler((hsa_signal_t){e->hsa_signal}, HSA_SIGNAL_CONDITION_LT, 1,
                                                       on_complete, e);
    if (s != HSA_STATUS_SUCCESS) {
      atomic_fetch_sub(&rq->handlers, 1);
      fault = packet_fault(rq, AQ_ERROR_OUT_OF_RESOURCES, "no async signal handler", aq_rocr_error(s));
    }
  }
  if (fault) {
    if (e && aq_rocr_inflight_claim(&rq->inflight, b)) aq_rocr_inflight_release(&rq->inflight, b);
    aq_queue_retire(q, index);
    char msg[8];
    aq_queue_note_failure(q, aq_fault_message(fault, msg, sizeof(msg)), fault);
    aq_packet_complete(completion, fault);
    return FORWARDED;
  }
  /* HSA order: reserve the slot, write the body, the header last, then the
   * doorbell. This thread is the ring's only producer (a SINGLE queue). */
  aq_rocr.hsa_queue_store_write_index_relaxed(rq->hw, w + 1);
  aq_rocr_packet_forward(p, (uint8_t *)rq->hw->base_address + (w % rq->hw->size) * AQ_PACKET_SIZE, &patch);
  aq_rocr.hsa_signal_store_screlease(rq->hw->doorbell_signal, (hsa_signal_value_t)w);
  aq_queue_retire(q, index);
  return FORWARDED;
}

static int has_work(void *arg) {
  rocr_queue_t *rq = arg;
  return !atomic_load(&rq->proc.running) ||
         aq_queue_peek(rq->queue, atomic_load(&rq->queue->read_index)) != HSA_PACKET_TYPE_INVALID;
}

static int stopping(void *arg) { return !atomic_load(&((rocr_queue_t *)arg)->proc.running); }

static void *forward_main(void *arg) {
  rocr_queue_t *rq = arg;
  atomic_store(&rq->proc.busy, 1);
  while (atomic_load(&rq->proc.running)) {
    int r = forward(rq);
    if (r == FORWARDED) continue;
    if (r == BLOCKED) { /* a full ring or table: the GPU frees them without telling us */
      aq_wake_wait(&rq->proc.wake, stopping, rq, 50000, 0);
      continue;
    }
    atomic_store(&rq->proc.busy, 0);
    aq_wake_wait(&rq->proc.wake, has_work, rq, UINT64_MAX, aq_runtime_config()->spin_ns);
    atomic_store(&rq->proc.busy, 1);
  }
  return NULL;
}

/* Frees what attach made once the GPU and ROCr's handlers are done with
 * it; never if they are not within 10 s (a hung GPU: a late handler would
 * touch freed memory). A dead queue's signals are never decremented: set to
 * 0, their handlers fire and fail what is left. */
static void release(rocr_queue_t *rq) {
  for (int tries = 0;; ++tries) {
    int dead = atomic_load(&rq->dead);
    for (uint32_t i = 0; dead && i < rq->inflight.count; ++i)
      aq_rocr.hsa_signal_store_screlease((hsa_signal_t){rq->inflight.e[i].hsa_signal}, 0);
    if ((dead || !aq_rocr_inflight_busy(&rq->inflight)) && !atomic_load(&rq->handlers)) break;
    if (tries == 100000) return;
    usleep(100);
  }
  if (rq->hw) aq_rocr.hsa_queue_destroy(rq->hw);
  for (uint32_t i = 0; i < rq->inflight.count; ++i)
    if (rq->inflight.e[i].hsa_signal) aq_rocr.hsa_signal_destroy((hsa_signal_t){rq->inflight.e[i].hsa_signal});
  if (rq->kernargs) aq_rocr.hsa_amd_memory_pool_free(rq->kernargs);
  free(rq);
}

aq_status_t aq_rocr_queue_attach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  rocr_agent_t *a = agent->driver_data;
  if (atomic_load(&a->faulted))
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s faulted earlier and needs a reset", agent->info.name);
  rocr_queue_t *rq = calloc(1, sizeof(*rq));
  if (!rq) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a GPU queue");
  rq->queue = queue;
  rq->agent = a;
  uint32_t size = queue->size < HW_QUEUE_MIN ? HW_QUEUE_MIN : queue->size;
  if (size > agent->info.queue_max_size) size = agent->info.queue_max_size;
  hsa_status_t s = aq_rocr.hsa_queue_create(a->hsa, size, HSA_QUEUE_TYPE_SINGLE, on_queue_error, rq, UINT32_MAX,
                                         UINT32_MAX, &rq->hw);
  if (s == HSA_STATUS_SUCCESS)
    s = aq_rocr.hsa_amd_memory_pool_allocate(aq_rocr_host.kernarg_pool, (size_t)QUEUE_INFLIGHT * ROCR_KERNARG_SLOT, 0,
                                          &rq->kernargs);
  if (s == HSA_STATUS_SUCCESS) s = aq_rocr.hsa_amd_agents_allow_access(1, &a->hsa, NULL, rq->kernargs);
  for (uint32_t i = 0; s == HSA_STATUS_SUCCESS && i < QUEUE_INFLIGHT; ++i) {
    rocr_inflight_t *e = &rq->inflight.e[i];
    hsa_signal_t sig;
    s = aq_rocr.hsa_signal_create(1, 0, NULL, &sig);
    if (s != HSA_STATUS_SUCCESS) break;
    e->hsa_signal = sig.handle;
    e->kernarg = (uint8_t *)rq->kernargs + (size_t)i * ROCR_KERNARG_SLOT;
    e->owner = rq;
    rq->inflight.count = i + 1;
  }
  if (s != HSA_STATUS_SUCCESS) {
    release(rq);
    return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "%s: cannot create a hardware queue of %u packets: %s",
                    agent->info.name, size, aq_rocr_error(s));
  }
  queue->driver_data = rq;
  aq_status_t st = aq_processor_start(&rq->proc, queue, forward_main, rq);
  if (st != AQ_OK) release(rq);
  return st;
}

void aq_rocr_queue_detach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  (void)agent;
  rocr_queue_t *rq = queue->driver_data;
  aq_processor_stop(&rq->proc);
  /* Aquila's ring is empty, the GPU's may not be: release waits for it. */
  release(rq);
}
