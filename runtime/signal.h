/* Signal slots, as drivers see them.
 *
 * All signals live in one pool of 64-byte slots mapped once at aq_init, so a
 * GPU driver can register the whole pool with its device and write a slot's
 * value directly (the value is the slot's first 8 bytes). A slot's handle is
 * encoded as every handle is (runtime/handle.h), with the pool's tag. */
#ifndef AQ_RUNTIME_SIGNAL_H_
#define AQ_RUNTIME_SIGNAL_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "aquila/signal.h"
#include "runtime/handle.h"
#include "runtime/wake.h"

typedef struct aq_signal_slot {
  _Atomic int64_t value;
  aq_wake_t wake;                /* waiters on this signal */
  _Atomic(aq_wake_t *) notify;   /* a second party to wake: an agent */
  _Atomic uint32_t generation;   /* odd while live */
  _Atomic uint32_t fault;        /* fault id, 0 if the signal has not failed */
  uint32_t next_free;
  /* Bumped by host stores, adds and exchanges: a GPU queue that computed a
   * pending write from the value can tell the host has since reset it. */
  _Atomic uint32_t host_sets;
  /* Set once a device has been given a write of this signal (a GPU
   * stream's completion): host waiters then look every few microseconds,
   * as that write wakes nobody until the queue's processor reaps it. */
  _Atomic uint32_t device_writes;
  /* Another stream of the GPU that completes this signal waits for it
   * (set when an exec is lowered): that GPU's driver records an event
   * after the completion, and the waiting stream waits for the event on
   * the GPU instead of for the value on the host. stream_event is the
   * driver's event, event_sets the host_sets it was recorded under (a
   * record of an earlier run is not this run's). */
  _Atomic uint32_t stream_waiters;
  _Atomic uint64_t stream_event;
  _Atomic uint32_t event_sets;
  uint32_t pad_[1];
} __attribute__((aligned(64))) aq_signal_slot_t;
_Static_assert(sizeof(aq_signal_slot_t) == 64, "a signal is one cache line: its waiters and writers share no other");

typedef struct aq_signal_pool {
  aq_signal_slot_t *slots; /* mmapped, capacity slots */
  uint32_t capacity;
  uint32_t tag;            /* of this aq_init's pool: older handles are stale */
} aq_signal_pool_t;

extern aq_signal_pool_t aq_signal_pool;

aq_status_t aq_signal_pool_init(uint32_t capacity);
void aq_signal_pool_deinit(void);
uint32_t aq_signal_pool_live(void);

/* n signals at once, under one lock (an exec has one a task): all, or
 * none and an error. */
aq_status_t aq_signal_create_many(aq_signal_value_t initial, uint32_t n, aq_signal_t *out);
/* Destroys the live ones among n signals (a handle of 0 is skipped). */
void aq_signal_destroy_many(const aq_signal_t *signals, uint32_t n);

static inline aq_signal_slot_t *aq_signal_slot(uint64_t handle) {
  uint32_t index = aq_handle_index1(handle);
  if (index == 0 || index > aq_signal_pool.capacity ||
      aq_handle_tag(handle) != __atomic_load_n(&aq_signal_pool.tag, __ATOMIC_RELAXED))
    return NULL;
  aq_signal_slot_t *s = &aq_signal_pool.slots[index - 1];
  return aq_handle_gen_matches(atomic_load_explicit(&s->generation, memory_order_acquire), handle) ? s : NULL;
}

/* After any change of value: wakes its waiters, and one worker of the agent
 * that watches it (any one can take the work that waited on it). */
static inline void aq_signal_slot_notify(aq_signal_slot_t *s) {
  aq_wake_all(&s->wake);
  aq_wake_t *n = atomic_load(&s->notify);
  if (n) aq_wake_one(n);
}

/* Another stream of the same GPU waits for signal's completion by that
 * GPU (lower.c): the driver orders the two streams with an event. */
void aq_signal_wait_on_device(aq_signal_t signal);

/* Called by a driver before it hands a device a write of s; the store is
 * skipped once made, as the line is read by every waiter. */
static inline void aq_signal_slot_mark_device_written(aq_signal_slot_t *s) {
  if (!atomic_load_explicit(&s->device_writes, memory_order_relaxed))
    atomic_store_explicit(&s->device_writes, 1, memory_order_relaxed);
}

static inline void aq_signal_slot_subtract(aq_signal_slot_t *s, int64_t v) {
  atomic_fetch_sub(&s->value, v);
  aq_signal_slot_notify(s);
}

static inline void aq_signal_slot_store(aq_signal_slot_t *s, int64_t v) {
  atomic_store(&s->value, v);
  aq_signal_slot_notify(s);
}

static inline int aq_signal_condition_holds(aq_signal_condition_t c, int64_t v, int64_t cmp) {
  switch (c) {
    case AQ_SIGNAL_EQ: return v == cmp;
    case AQ_SIGNAL_NE: return v != cmp;
    case AQ_SIGNAL_LT: return v < cmp;
    case AQ_SIGNAL_GTE: return v >= cmp;
  }
  return 0;
}

/* Marks a slot failed (first fault wins); the caller then decrements it. */
static inline void aq_signal_slot_fail(aq_signal_slot_t *s, uint32_t fault_id) {
  uint32_t none = 0;
  atomic_compare_exchange_strong(&s->fault, &none, fault_id);
}

#endif /* AQ_RUNTIME_SIGNAL_H_ */
