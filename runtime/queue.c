/* AQL queues: creation, the producer's side of the protocol, and the parts of
 * the consumer's side that every driver shares (barrier packets). */
#include "runtime/queue.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/fault.h"
#include "runtime/handle.h"
#include "runtime/status.h"

static aq_handle_table_t queues;
static _Atomic uint32_t next_queue_id;

/* Rings of destroyed queues, kept for the next queue of their size. A
 * fresh ring costs a page fault and a header store in every slot, which was
 * the largest part of instantiating a big graph after another (a new shape,
 * an evaluation graph, a benchmark's next graph). A drained ring is ready
 * as it is: retiring a packet stores INVALID in its header. */
enum { RING_CACHE_MAX = 32 }; /* an exec's lanes on a 16-core, two-node machine and its GPUs */
#define RING_CACHE_BYTES ((size_t)64 << 20)
static struct {
  void *ring;
  size_t bytes;
} ring_cache[RING_CACHE_MAX];
static size_t ring_cache_bytes;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;

static void *ring_take(size_t bytes) {
  void *ring = NULL;
  pthread_mutex_lock(&ring_lock);
  for (int i = 0; i < RING_CACHE_MAX && !ring; ++i)
    if (ring_cache[i].ring && ring_cache[i].bytes == bytes) {
      ring = ring_cache[i].ring, ring_cache[i].ring = NULL;
      ring_cache_bytes -= bytes;
    }
  pthread_mutex_unlock(&ring_lock);
  return ring;
}

static void ring_keep(void *ring, size_t bytes) {
  pthread_mutex_lock(&ring_lock);
  for (int i = 0; i < RING_CACHE_MAX && ring; ++i)
    if (!ring_cache[i].ring && ring_cache_bytes + bytes <= RING_CACHE_BYTES) {
      ring_cache[i].ring = ring, ring_cache[i].bytes = bytes, ring = NULL;
      ring_cache_bytes += bytes;
    }
  pthread_mutex_unlock(&ring_lock);
  free(ring); /* no room: NULL when kept */
}

static void ring_cache_drain(void) {
  pthread_mutex_lock(&ring_lock);
  for (int i = 0; i < RING_CACHE_MAX; ++i) free(ring_cache[i].ring), ring_cache[i].ring = NULL;
  ring_cache_bytes = 0;
  pthread_mutex_unlock(&ring_lock);
}

void aq_queue_module_init(void) { aq_handle_table_init(&queues, "queue"); }
/* Queues the program never destroyed go with the runtime: drained of
 * nothing, detached from their agents, freed. */
static void release_queue(void *object, void *user) {
  (void)user;
  aq_queue_impl_t *q = object;
  q->agent->driver->queue_detach(q->agent, q);
  aq_signal_destroy(q->doorbell);
  free(q->ring);
  free(q);
}

void aq_queue_module_release_all(void) { aq_handle_release_all(&queues, release_queue, NULL); }

void aq_queue_module_deinit(void) {
  aq_handle_table_deinit(&queues);
  ring_cache_drain();
}
uint32_t aq_queue_live_count(void) { return queues.live; }

static aq_status_t resolve(aq_queue_t queue, aq_queue_impl_t **out) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  return aq_handle_resolve(&queues, queue.handle, (void **)out);
}

aq_status_t aq_queue_resolve(aq_queue_t queue, aq_queue_impl_t **out) { return resolve(queue, out); }

/* Producers and readers hold a reference for the length of their call:
 * a queue destroyed meanwhile is freed only after they return. */
static aq_status_t acquire(aq_queue_t queue, aq_queue_impl_t **out) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  return aq_handle_resolve_ref(&queues, queue.handle, (void **)out);
}
static aq_status_t put(aq_queue_t queue, aq_status_t s) {
  aq_handle_put(&queues, queue.handle);
  return s;
}

AQ_API aq_status_t aq_queue_create(aq_agent_t agent, const aq_queue_options_t *options,
                                   aq_queue_t *out_queue) {
  aq_agent_impl_t *a;
  if (!out_queue) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_create: out_queue is NULL");
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  uint32_t size = options && options->size ? options->size : 4096;
  if (size < 2 || (size & (size - 1)) || size > a->info.queue_max_size)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "queue size %u on agent %s: must be a power of two in [2, %u]", size,
                    a->info.name, a->info.queue_max_size);
  uint32_t unknown = options ? options->flags & ~(uint32_t)AQ_QUEUE_HIGH_PRIORITY : 0;
  if (unknown) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_create: unknown flags 0x%x", unknown);

  aq_queue_impl_t *q = aligned_alloc(64, sizeof(*q));
  void *ring = q ? ring_take((size_t)size * AQ_PACKET_SIZE) : NULL;
  int fresh = !ring;
  if (!q || (fresh && posix_memalign(&ring, 4096, (size_t)size * AQ_PACKET_SIZE))) {
    free(q);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a queue of %u packets", size);
  }
  memset(q, 0, sizeof(*q));
  q->ring = ring;
  q->size = size;
  q->mask = size - 1;
  q->agent = a;
  q->id = atomic_fetch_add(&next_queue_id, 1);
  q->flags = options ? options->flags : 0;
  for (uint32_t i = 0; fresh && i < size; ++i)
    *aq_queue_header_word(q, i) = (uint32_t)HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE;

  aq_status_t s = aq_signal_create(0, &q->doorbell);
  if (s == AQ_OK) {
    q->doorbell_slot = aq_signal_slot(q->doorbell.handle);
    q->doorbell_wake = &a->doorbell;
    s = aq_handle_alloc(&queues, q, &q->handle);
  }
  if (s == AQ_OK) {
    s = a->driver->queue_attach(a, q); /* may point doorbell_wake elsewhere */
    if (s != AQ_OK) aq_handle_release(&queues, q->handle);
    else atomic_store(&q->doorbell_slot->notify, q->doorbell_wake);
  }
  if (s != AQ_OK) {
    if (q->doorbell.handle) aq_signal_destroy(q->doorbell);
    free(ring);
    free(q);
    return s;
  }
  out_queue->handle = q->handle;
  return AQ_OK;
}

AQ_API aq_status_t aq_queue_destroy(aq_queue_t queue) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(resolve(queue, &q));
  uint64_t r = atomic_load(&q->read_index), w = atomic_load(&q->write_index);
  if (r != w)
    return aq_error(AQ_ERROR_BUSY, "queue %u still has %llu packets in flight; wait for them first",
                    q->id, (unsigned long long)(w - r));
  AQ_RETURN_IF_ERROR(aq_handle_release(&queues, q->handle));
  /* A producer that held the queue as it was released may have added a
   * packet: it runs before the queue goes (for a second at most: a slot
   * reserved and never published would hold it forever). */
  for (uint64_t t0 = aq_now_ns(); atomic_load(&q->read_index) != atomic_load(&q->write_index) &&
                                  aq_now_ns() - t0 < 1000000000ull;)
    sched_yield();
  int drained = atomic_load(&q->read_index) == atomic_load(&q->write_index);
  q->agent->driver->queue_detach(q->agent, q);
  aq_signal_destroy(q->doorbell);
  if (drained) ring_keep(q->ring, (size_t)q->size * AQ_PACKET_SIZE);
  else free(q->ring);
  free(q);
  return AQ_OK;
}

AQ_API aq_status_t aq_queue_get_info(aq_queue_t queue, aq_queue_info_t *info) {
  aq_queue_impl_t *q;
  if (!info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_get_info: info is NULL");
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  *info = (aq_queue_info_t){
      .agent = {q->agent->handle},
      .size = q->size,
      .id = q->id,
      .base_address = q->ring,
      .doorbell = q->doorbell,
      .read_index = atomic_load(&q->read_index),
      .write_index = atomic_load(&q->write_index),
      .packets_completed = atomic_load(&q->completed),
      .packets_in_graphs = atomic_load(&q->graphed),
      .error = (aq_status_t)atomic_load(&q->error),
  };
  return put(queue, AQ_OK);
}

typedef struct room {
  aq_queue_impl_t *q;
  uint32_t count;
} room_t;

static int has_room(void *arg) {
  room_t *r = arg;
  return atomic_load(&r->q->write_index) + r->count - atomic_load(&r->q->read_index) <= r->q->size;
}

/* Reserves count slots, waiting (spin, then sleep on q->space) for room. */
static aq_status_t reserve(aq_queue_impl_t *q, uint32_t count, uint64_t timeout_ns,
                           uint64_t *out_index) {
  uint64_t w = atomic_load_explicit(&q->write_index, memory_order_relaxed);
  for (;;) {
    uint64_t r = atomic_load_explicit(&q->read_index, memory_order_acquire);
    if (w + count - r <= q->size) {
      if (atomic_compare_exchange_weak(&q->write_index, &w, w + count)) break;
      continue;
    }
    room_t room = {q, count};
    if (!aq_wake_wait(&q->space, has_room, &room, timeout_ns, aq_runtime_config()->spin_ns))
      return aq_error(AQ_ERROR_TIMEOUT,
                      "queue %u on agent %s stayed full (%u packets) for %llu ns; nothing was "
                      "reserved",
                      q->id, q->agent->info.name, q->size, (unsigned long long)timeout_ns);
    w = atomic_load_explicit(&q->write_index, memory_order_relaxed);
  }
  *out_index = w;
  return AQ_OK;
}

AQ_API aq_status_t aq_queue_reserve(aq_queue_t queue, uint32_t count, uint64_t timeout_ns,
                                    uint64_t *out_first_index) {
  aq_queue_impl_t *q;
  if (!out_first_index)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_reserve: out_first_index is NULL");
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  if (count == 0 || count > q->size)
    return put(queue, aq_error(AQ_ERROR_INVALID_ARGUMENT, "cannot reserve %u slots in queue %u of %u", count,
                               q->id, q->size));
  return put(queue, reserve(q, count, timeout_ns, out_first_index));
}

static aq_status_t check_reserved(aq_queue_impl_t *q, uint64_t index) {
  uint64_t w = atomic_load(&q->write_index), r = atomic_load(&q->read_index);
  if (index >= w || index < r)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "index %llu of queue %u is not reserved (read %llu, write %llu)",
                    (unsigned long long)index, q->id, (unsigned long long)r,
                    (unsigned long long)w);
  return AQ_OK;
}

AQ_API aq_status_t aq_queue_slot(aq_queue_t queue, uint64_t index, void **out_packet) {
  aq_queue_impl_t *q;
  if (!out_packet) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_slot: out_packet is NULL");
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  aq_status_t s = check_reserved(q, index);
  if (s == AQ_OK) *out_packet = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  return put(queue, s);
}

AQ_API aq_status_t aq_queue_publish(aq_queue_t queue, uint64_t index, uint16_t header,
                                    uint16_t setup) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  aq_status_t s = check_reserved(q, index);
  if (s == AQ_OK)
    __atomic_store_n(aq_queue_header_word(q, index), header | ((uint32_t)setup << 16), __ATOMIC_RELEASE);
  return put(queue, s);
}

AQ_API aq_status_t aq_queue_ring(aq_queue_t queue, uint64_t index) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  aq_queue_ring_doorbell(q, index);
  return put(queue, AQ_OK);
}

static aq_status_t check_packet(aq_queue_impl_t *q, const uint8_t *p) {
  uint16_t header;
  memcpy(&header, p, sizeof(header));
  unsigned type = (header >> HSA_PACKET_HEADER_TYPE) & 0xff;
  hsa_signal_t completion;
  switch (type) {
    case HSA_PACKET_TYPE_KERNEL_DISPATCH:
      completion = ((const hsa_kernel_dispatch_packet_t *)p)->completion_signal;
      break;
    case HSA_PACKET_TYPE_AGENT_DISPATCH:
      completion = ((const hsa_agent_dispatch_packet_t *)p)->completion_signal;
      break;
    case HSA_PACKET_TYPE_BARRIER_AND:
    case HSA_PACKET_TYPE_BARRIER_OR: {
      const hsa_barrier_and_packet_t *b = (const void *)p;
      completion = b->completion_signal;
      for (int i = 0; i < 5; ++i)
        if (b->dep_signal[i].handle && !aq_signal_slot(b->dep_signal[i].handle))
          return aq_error(AQ_ERROR_INVALID_PACKET,
                          "barrier packet for queue %u: dep_signal[%d] 0x%llx is stale or foreign",
                          q->id, i, (unsigned long long)b->dep_signal[i].handle);
      break;
    }
    default:
      return aq_error(AQ_ERROR_INVALID_PACKET,
                      "packet for queue %u has type %u: not kernel dispatch, agent dispatch, "
                      "barrier-AND or barrier-OR",
                      q->id, type);
  }
  if (completion.handle && !aq_signal_slot(completion.handle))
    return aq_error(AQ_ERROR_INVALID_PACKET,
                    "packet for queue %u: completion signal 0x%llx is stale or foreign", q->id,
                    (unsigned long long)completion.handle);
  return AQ_OK;
}

static aq_status_t submit(aq_queue_impl_t *q, const void *packet, uint64_t timeout_ns, uint64_t *out_index);

AQ_API aq_status_t aq_queue_submit(aq_queue_t queue, const void *packet, uint64_t timeout_ns,
                                   uint64_t *out_index) {
  aq_queue_impl_t *q;
  if (!packet) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_queue_submit: packet is NULL");
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  return put(queue, submit(q, packet, timeout_ns, out_index));
}

static aq_status_t submit(aq_queue_impl_t *q, const void *packet, uint64_t timeout_ns, uint64_t *out_index) {
  AQ_RETURN_IF_ERROR(check_packet(q, packet));
  uint64_t index;
  AQ_RETURN_IF_ERROR(reserve(q, 1, timeout_ns, &index));
  uint8_t *slot = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  memcpy(slot + 4, (const uint8_t *)packet + 4, AQ_PACKET_SIZE - 4);
  uint32_t word;
  memcpy(&word, packet, sizeof(word));
  __atomic_store_n((uint32_t *)slot, word, __ATOMIC_RELEASE);
  aq_queue_ring_doorbell(q, index);
  if (out_index) *out_index = index;
  return AQ_OK;
}

typedef struct idle {
  aq_queue_impl_t *q;
  uint64_t target;
} idle_t;

static int reached(void *arg) {
  idle_t *i = arg;
  return atomic_load(&i->q->read_index) >= i->target;
}

AQ_API aq_status_t aq_queue_wait_idle(aq_queue_t queue, uint64_t timeout_ns) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(acquire(queue, &q));
  idle_t idle = {q, atomic_load(&q->write_index)};
  if (!aq_wake_wait(&q->space, reached, &idle, timeout_ns, aq_runtime_config()->spin_ns))
    return put(queue, aq_error(AQ_ERROR_TIMEOUT, "queue %u: %llu packets still in flight after %llu ns", q->id,
                               (unsigned long long)(idle.target - atomic_load(&q->read_index)),
                               (unsigned long long)timeout_ns));
  return put(queue, AQ_OK);
}

void aq_queue_note_failure(aq_queue_impl_t *q, aq_status_t status, uint32_t fault_id) {
  atomic_store(&q->error_fault, fault_id);
  atomic_store(&q->error, (uint32_t)status);
}

/* ---- barrier packets: shared by every driver that evaluates them on the host */

aq_barrier_state_t aq_barrier_poll(const void *packet, hsa_packet_type_t type,
                                   uint32_t *fault_id) {
  const hsa_barrier_and_packet_t *b = packet;
  int any = 0, pending = 0;
  for (int i = 0; i < 5; ++i) {
    uint64_t h = b->dep_signal[i].handle;
    if (!h) continue;
    any = 1;
    aq_signal_slot_t *s = aq_signal_slot(h);
    if (!s) {
      *fault_id = aq_fault_record(AQ_ERROR_INVALID_PACKET,
                                  "barrier dep_signal[%d] 0x%llx was destroyed while waited on", i,
                                  (unsigned long long)h);
      return AQ_BARRIER_MET;
    }
    if (atomic_load_explicit(&s->value, memory_order_acquire) == 0) {
      uint32_t f = atomic_load(&s->fault);
      if (f && !*fault_id) *fault_id = f;
      if (type == HSA_PACKET_TYPE_BARRIER_OR) return AQ_BARRIER_MET;
    } else {
      pending = 1;
    }
  }
  if (type == HSA_PACKET_TYPE_BARRIER_OR)
    return any ? AQ_BARRIER_PENDING : AQ_BARRIER_MET; /* no dependency: nothing to wait for */
  return pending ? AQ_BARRIER_PENDING : AQ_BARRIER_MET;
}

void aq_barrier_watch(const void *packet, aq_wake_t *w) {
  const hsa_barrier_and_packet_t *b = packet;
  for (int i = 0; i < 5; ++i) {
    aq_signal_slot_t *s = b->dep_signal[i].handle ? aq_signal_slot(b->dep_signal[i].handle) : NULL;
    if (!s) continue;
    aq_wake_t *none = NULL;
    /* One watcher per signal; a second agent falls back to timed polling. */
    atomic_compare_exchange_strong(&s->notify, &none, w);
  }
}
