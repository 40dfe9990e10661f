/* AQL queues as drivers see them: the ring, its indices, and the consumer's
 * side of the HSA protocol (take the packet at the read index once its header
 * is live, retire it when it completes). */
#ifndef AQ_RUNTIME_QUEUE_H_
#define AQ_RUNTIME_QUEUE_H_

#include <hsa/hsa.h>
#include <stdatomic.h>
#include <stdint.h>

#include "aquila/queue.h"
#include "runtime/runtime.h"
#include "runtime/signal.h"
#include "runtime/wake.h"

enum { AQ_PACKET_SIZE = 64 };

struct aq_queue_impl {
  /* Producers' line. */
  _Atomic uint64_t write_index __attribute__((aligned(64)));
  /* Consumer's line. */
  _Atomic uint64_t read_index __attribute__((aligned(64)));
  _Atomic uint64_t completed;
  _Atomic uint64_t graphed;       /* packets a driver ran inside a graph of them (CUDA graphs) */
  _Atomic uint32_t error;         /* last aq_status_t a packet failed with */
  _Atomic uint32_t error_fault;   /* its fault id */
  aq_wake_t space;                /* producers waiting for room */
  /* Read-mostly. */
  uint8_t *ring __attribute__((aligned(64)));
  uint32_t size, mask;
  uint32_t id;
  uint32_t flags; /* aq_queue_options_t's (AQ_QUEUE_HIGH_PRIORITY), for the driver */
  uint64_t handle;
  aq_signal_t doorbell;
  aq_signal_slot_t *doorbell_slot;
  aq_agent_impl_t *agent;
  void *driver_data;              /* the driver's per-queue state */
  /* Set by a driver while something is draining the queue: a producer that
   * rings the doorbell then wakes nobody, since the drainer will see its
   * packet (it re-checks after it lets go). NULL: always wake the agent. */
  _Atomic int *draining;
  /* Who sleeps waiting for this queue's doorbell: the agent's workers (CPU)
   * or the queue's own packet-processor thread (GPU drivers). */
  aq_wake_t *doorbell_wake;
};

static inline uint32_t *aq_queue_header_word(aq_queue_impl_t *q, uint64_t index) {
  return (uint32_t *)(q->ring + (index & q->mask) * AQ_PACKET_SIZE);
}

/* The packet type of the slot at index, INVALID until its header is live. */
static inline hsa_packet_type_t aq_queue_peek(aq_queue_impl_t *q, uint64_t index) {
  uint32_t w = __atomic_load_n(aq_queue_header_word(q, index), __ATOMIC_ACQUIRE);
  return (hsa_packet_type_t)((w >> HSA_PACKET_HEADER_TYPE) & 0xff);
}

/* How many sleepers the packet at index can keep busy: a kernel dispatch
 * one per work-group (up to 64; the futex wakes no more than sleep), any
 * other packet one. A CPU agent's workers then wake side by side, not
 * each only after the one before has been scheduled and has woken it (a
 * chain of wake-up latencies before a small product has all its cores).
 * The fields are read atomically: the slot is only a hint once the packet
 * has been taken (INVALID, or a later packet after the ring wrapped). */
static inline int aq_queue_wake_count(aq_queue_impl_t *q, uint64_t index) {
  if (aq_queue_peek(q, index) != HSA_PACKET_TYPE_KERNEL_DISPATCH) return 1;
  hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)aq_queue_header_word(q, index);
  uint32_t dims = (__atomic_load_n(&p->setup, __ATOMIC_RELAXED) >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
  uint32_t grid[3] = {__atomic_load_n(&p->grid_size_x, __ATOMIC_RELAXED),
                      __atomic_load_n(&p->grid_size_y, __ATOMIC_RELAXED),
                      __atomic_load_n(&p->grid_size_z, __ATOMIC_RELAXED)};
  uint16_t wg[3] = {__atomic_load_n(&p->workgroup_size_x, __ATOMIC_RELAXED),
                    __atomic_load_n(&p->workgroup_size_y, __ATOMIC_RELAXED),
                    __atomic_load_n(&p->workgroup_size_z, __ATOMIC_RELAXED)};
  uint64_t groups = 1;
  for (uint32_t i = 0; i < dims && i < 3 && groups < 64; ++i)
    if (wg[i]) groups *= ((uint64_t)grid[i] + wg[i] - 1) / wg[i];
  return groups < 1 ? 1 : groups > 64 ? 64 : (int)groups;
}

/* Rings the doorbell for index: the value, then the agent (as many of its
 * sleepers as the packet can use) unless the queue is being drained. */
static inline void aq_queue_ring_doorbell(aq_queue_impl_t *q, uint64_t index) {
  atomic_store_explicit(&q->doorbell_slot->value, (int64_t)index, memory_order_seq_cst);
  aq_wake_all(&q->doorbell_slot->wake);
  if ((!q->draining || !atomic_load(q->draining)) && atomic_load(&q->doorbell_wake->sleepers))
    aq_wake_slow(q->doorbell_wake, aq_queue_wake_count(q, index));
}

/* Retires the packet at the read index: its slot becomes INVALID and
 * reusable, the read index moves on, producers waiting for room wake. */
static inline void aq_queue_retire(aq_queue_impl_t *q, uint64_t index) {
  __atomic_store_n(aq_queue_header_word(q, index),
                   (uint32_t)HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE, __ATOMIC_RELAXED);
  atomic_store_explicit(&q->read_index, index + 1, memory_order_release);
  atomic_fetch_add_explicit(&q->completed, 1, memory_order_relaxed);
  aq_wake_all(&q->space);
}

/* Completes a packet's signal: marks it failed first if fault_id != 0. */
static inline void aq_packet_complete(hsa_signal_t completion, uint32_t fault_id) {
  if (!completion.handle) return;
  aq_signal_slot_t *s = aq_signal_slot(completion.handle);
  if (!s) return; /* validated at launch; destroyed since by its owner */
  if (fault_id) aq_signal_slot_fail(s, fault_id);
  aq_signal_slot_subtract(s, 1);
}

void aq_queue_module_init(void);
void aq_queue_module_deinit(void);
void aq_queue_module_release_all(void);
uint32_t aq_queue_live_count(void);

/* The queue behind a handle (AQ_ERROR_INVALID_HANDLE if none). */
aq_status_t aq_queue_resolve(aq_queue_t queue, aq_queue_impl_t **out);

/* Records that a packet of q failed (the queue keeps going). */
void aq_queue_note_failure(aq_queue_impl_t *q, aq_status_t status, uint32_t fault_id);

/* A barrier-AND packet's reserved1, bit i: dep_signal[i] is written by
 * another stream of the GPU that runs the barrier (two lanes of one GPU,
 * lower.c). That GPU's packet processor never waits for such a dependency
 * with a stream memory wait: a stream waiting for a value another stream
 * of its device writes is an order CUDA cannot see, and the driver API's
 * stream memory operations warn that it may deadlock (streams that share a
 * hardware queue run in the order their work was enqueued, and the wait
 * may come first). It waits for an event the other stream records after
 * the completion (cuda_events.c), or on the host. */
static inline int aq_barrier_same_gpu_dep(const hsa_barrier_and_packet_t *b, int i) {
  return (b->reserved1 >> i) & 1;
}

/* State of a barrier packet's dependencies: met, failed (a dependency
 * carries a fault, returned through *fault_id), or still pending. */
typedef enum { AQ_BARRIER_PENDING, AQ_BARRIER_MET } aq_barrier_state_t;
aq_barrier_state_t aq_barrier_poll(const void *packet, hsa_packet_type_t type,
                                   uint32_t *fault_id);
/* Asks every pending dependency of a barrier to wake w when it changes. */
void aq_barrier_watch(const void *packet, aq_wake_t *w);

#endif /* AQ_RUNTIME_QUEUE_H_ */
