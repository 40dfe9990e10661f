/* Signals: the pool of slots and the public signal API. */
#include "runtime/signal.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/mman.h>

#include "runtime/fault.h"
#include "runtime/runtime.h"
#include "runtime/status.h"

aq_signal_pool_t aq_signal_pool;

static pthread_mutex_t pool_mutex = PTHREAD_MUTEX_INITIALIZER;
static uint32_t free_head; /* index + 1 */
static uint32_t used;      /* slots ever handed out */
static uint32_t live;

/* The pool's mapping outlives aq_shut_down (a call racing it reads a slot
 * and finds its handle stale, rather than unmapped memory); the next
 * aq_init reuses it under a new tag, or maps a larger one. */
static size_t mapped_slots;

aq_status_t aq_signal_pool_init(uint32_t capacity) {
  pthread_mutex_lock(&pool_mutex);
  if (capacity > mapped_slots) {
    void *p = mmap(NULL, (size_t)capacity * sizeof(aq_signal_slot_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      pthread_mutex_unlock(&pool_mutex);
      return aq_error(AQ_ERROR_OUT_OF_MEMORY, "cannot map a pool of %u signals", capacity);
    }
    if (aq_signal_pool.slots) munmap(aq_signal_pool.slots, mapped_slots * sizeof(aq_signal_slot_t));
    aq_signal_pool.slots = p;
    mapped_slots = capacity;
  }
  aq_signal_pool.capacity = capacity;
  __atomic_store_n(&aq_signal_pool.tag, aq_handle_new_tag(), __ATOMIC_RELAXED);
  free_head = used = live = 0;
  pthread_mutex_unlock(&pool_mutex);
  return AQ_OK;
}

void aq_signal_pool_deinit(void) {
  pthread_mutex_lock(&pool_mutex);
  __atomic_store_n(&aq_signal_pool.tag, 0, __ATOMIC_RELAXED); /* no handle has tag 0 */
  for (uint32_t i = 0; i < used; ++i) {
    aq_signal_slot_t *s = &aq_signal_pool.slots[i];
    uint32_t gen = atomic_load(&s->generation);
    if (gen & 1) atomic_store(&s->generation, gen + 1);
    aq_wake_all(&s->wake); /* a waiter on it wakes and finds it stale */
  }
  free_head = used = live = 0;
  pthread_mutex_unlock(&pool_mutex);
}

uint32_t aq_signal_pool_live(void) { return live; }

static aq_status_t resolve(aq_signal_t signal, aq_signal_slot_t **out) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  aq_signal_slot_t *s = aq_signal_slot(signal.handle);
  if (!s)
    return aq_error(AQ_ERROR_INVALID_HANDLE, "signal handle 0x%llx is %s",
                    (unsigned long long)signal.handle,
                    signal.handle ? "stale (destroyed) or foreign" : "null");
  *out = s;
  return AQ_OK;
}

/* A free slot, made live with `initial`, into *out; pool_mutex held. */
static int take_slot(aq_signal_value_t initial, aq_signal_t *out) {
  uint32_t index;
  if (free_head) {
    index = free_head - 1;
    free_head = aq_signal_pool.slots[index].next_free;
  } else if (used < aq_signal_pool.capacity) {
    index = used++;
  } else {
    return 0;
  }
  aq_signal_slot_t *s = &aq_signal_pool.slots[index];
  /* Release stores: whoever reads one of these (a stale handle's waiter)
   * also sees the generation give_slot retired, and on x86 they are plain
   * stores, where sequentially consistent ones were a locked instruction
   * each, a field a signal, an exec's tasks each. */
  atomic_store_explicit(&s->value, initial, memory_order_release);
  atomic_store_explicit(&s->fault, 0, memory_order_release);
  atomic_store_explicit(&s->notify, NULL, memory_order_release);
  atomic_store_explicit(&s->device_writes, 0, memory_order_release);
  atomic_store_explicit(&s->stream_waiters, 0, memory_order_release);
  atomic_store_explicit(&s->stream_event, 0, memory_order_release);
  uint32_t gen = atomic_load_explicit(&s->generation, memory_order_relaxed) + 1;
  atomic_store_explicit(&s->generation, gen, memory_order_release);
  live++;
  out->handle = aq_handle_make(aq_signal_pool.tag, gen, index);
  return 1;
}

/* Makes a live signal's slot free again; pool_mutex held. 0 if it was not live. */
static int give_slot(aq_signal_t signal) {
  aq_signal_slot_t *s = aq_signal_slot(signal.handle);
  if (!s || !aq_handle_gen_matches(atomic_load(&s->generation), signal.handle)) return 0;
  atomic_fetch_add(&s->generation, 1);
  /* Anyone still asleep on it wakes, re-checks and finds it stale. */
  aq_wake_all(&s->wake);
  uint32_t index = aq_handle_index1(signal.handle) - 1;
  s->next_free = free_head;
  free_head = index + 1;
  live--;
  return 1;
}

static aq_status_t out_of_signals(void) {
  return aq_error(AQ_ERROR_OUT_OF_RESOURCES,
                  "all %u signals are in use (raise aq_init_options_t.max_signals or AQ_MAX_SIGNALS)",
                  aq_signal_pool.capacity);
}

AQ_API aq_status_t aq_signal_create(aq_signal_value_t initial, aq_signal_t *out_signal) {
  return aq_signal_create_many(initial, 1, out_signal);
}

aq_status_t aq_signal_create_many(aq_signal_value_t initial, uint32_t n, aq_signal_t *out) {
  if (!out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_signal_create: out_signal is NULL");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  pthread_mutex_lock(&pool_mutex);
  uint32_t k = 0;
  while (k < n && take_slot(initial, &out[k])) ++k;
  if (k < n)
    while (k > 0) give_slot(out[--k]), out[k].handle = 0;
  pthread_mutex_unlock(&pool_mutex);
  return k == n ? AQ_OK : out_of_signals();
}

AQ_API aq_status_t aq_signal_destroy(aq_signal_t signal) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  pthread_mutex_lock(&pool_mutex);
  int was_live = give_slot(signal);
  pthread_mutex_unlock(&pool_mutex);
  return was_live ? AQ_OK
                  : aq_error(AQ_ERROR_INVALID_HANDLE, "signal 0x%llx was destroyed twice",
                             (unsigned long long)signal.handle);
}

void aq_signal_destroy_many(const aq_signal_t *signals, uint32_t n) {
  if (!aq_runtime_ready()) return;
  pthread_mutex_lock(&pool_mutex);
  for (uint32_t i = 0; i < n; ++i)
    if (signals[i].handle) give_slot(signals[i]);
  pthread_mutex_unlock(&pool_mutex);
}

AQ_API aq_status_t aq_signal_load(aq_signal_t signal, aq_signal_value_t *out_value) {
  aq_signal_slot_t *s;
  if (!out_value) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_signal_load: out_value is NULL");
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  *out_value = atomic_load_explicit(&s->value, memory_order_acquire);
  return AQ_OK;
}

AQ_API aq_status_t aq_signal_store(aq_signal_t signal, aq_signal_value_t value) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  atomic_fetch_add_explicit(&s->host_sets, 1, memory_order_relaxed);
  aq_signal_slot_store(s, value);
  return AQ_OK;
}

AQ_API aq_status_t aq_signal_add(aq_signal_t signal, aq_signal_value_t value) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  atomic_fetch_add_explicit(&s->host_sets, 1, memory_order_relaxed);
  atomic_fetch_add(&s->value, value);
  aq_signal_slot_notify(s);
  return AQ_OK;
}

AQ_API aq_status_t aq_signal_subtract(aq_signal_t signal, aq_signal_value_t value) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  aq_signal_slot_subtract(s, value);
  return AQ_OK;
}

AQ_API aq_status_t aq_signal_exchange(aq_signal_t signal, aq_signal_value_t value,
                                      aq_signal_value_t *out_old) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  atomic_fetch_add_explicit(&s->host_sets, 1, memory_order_relaxed);
  aq_signal_value_t old = atomic_exchange(&s->value, value);
  aq_signal_slot_notify(s);
  if (out_old) *out_old = old;
  return AQ_OK;
}

AQ_API aq_status_t aq_signal_cas(aq_signal_t signal, aq_signal_value_t expected,
                                 aq_signal_value_t desired, aq_signal_value_t *out_observed) {
  aq_signal_slot_t *s;
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  aq_signal_value_t seen = expected;
  atomic_fetch_add_explicit(&s->host_sets, 1, memory_order_relaxed);
  if (atomic_compare_exchange_strong(&s->value, &seen, desired)) aq_signal_slot_notify(s);
  if (out_observed) *out_observed = seen;
  return AQ_OK;
}

static aq_status_t fault_status(aq_signal_slot_t *s) {
  uint32_t id = atomic_load(&s->fault);
  if (!id) return AQ_OK;
  char msg[256];
  aq_status_t st = aq_fault_message(id, msg, sizeof(msg));
  return aq_error(st, "%s", msg);
}

typedef struct wait {
  aq_signal_slot_t *s;
  uint32_t generation;
  aq_signal_condition_t condition;
  aq_signal_value_t compare, seen;
} wait_t;

/* Ready when the condition holds, or when the signal is destroyed under us. */
static int condition_met(void *arg) {
  wait_t *w = arg;
  w->seen = atomic_load(&w->s->value);
  return aq_signal_condition_holds(w->condition, w->seen, w->compare) ||
         atomic_load(&w->s->generation) != w->generation;
}

void aq_signal_wait_on_device(aq_signal_t signal) {
  aq_signal_slot_t *s = aq_signal_slot(signal.handle);
  if (s) atomic_store_explicit(&s->stream_waiters, 1, memory_order_relaxed);
}

AQ_API aq_status_t aq_signal_wait(aq_signal_t signal, aq_signal_condition_t condition,
                                  aq_signal_value_t compare, uint64_t timeout_ns,
                                  aq_signal_value_t *out_observed) {
  aq_signal_slot_t *s;
  if ((unsigned)condition > AQ_SIGNAL_GTE)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_signal_wait: unknown condition %d", (int)condition);
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  wait_t w = {s, atomic_load(&s->generation), condition, compare, 0};
  int met;
  /* Only a signal a device writes needs the short sleeps below: on a
   * machine with a GPU, waiters of CPU-written signals (the lanes of a graph
   * of CPU tasks) napping in 10 us steps took cores from the workers. A
   * signal first handed to a GPU after the wait began still wakes us: the
   * queue's processor reaps the write and wakes its sleepers. */
  if (!atomic_load_explicit(&s->device_writes, memory_order_relaxed)) {
    met = aq_wake_wait(&s->wake, condition_met, &w, timeout_ns, aq_runtime_config()->spin_ns);
  } else {
    /* A GPU may write the value without a wake-up: sleep in 10 us steps,
     * with the timer slack at 1 us while we do (Linux's default of 50 us
     * would make each step 60: the end of every GPU run would be seen late).
     * Under AQ_GPU_SPIN_US=0, in 1 ms steps: the queue's processor wakes us
     * when it sees the write, and 10 us steps, with the processor's
     * polling, cost over half a core while a long kernel runs. */
    uint64_t start = aq_now_ns(), spin = aq_runtime_config()->spin_ns;
    const uint64_t nap = aq_runtime_config()->gpu_spin_ns ? 10000 : 1000000;
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 1000) prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
    for (;;) {
      uint64_t now = aq_now_ns(), used = now - start;
      if (timeout_ns != AQ_TIMEOUT_INFINITE && used >= timeout_ns) {
        met = condition_met(&w);
        break;
      }
      uint64_t step = used < spin ? spin : nap;
      if (timeout_ns != AQ_TIMEOUT_INFINITE && timeout_ns - used < step) step = timeout_ns - used;
      if ((met = aq_wake_wait(&s->wake, condition_met, &w, step, used < spin ? spin : 0))) break;
    }
    if (slack > 1000) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
  }
  if (out_observed) *out_observed = w.seen;
  if (atomic_load(&s->generation) != w.generation)
    return aq_error(AQ_ERROR_INVALID_HANDLE, "signal 0x%llx was destroyed while waited on",
                    (unsigned long long)signal.handle);
  if (!met)
    return aq_error(AQ_ERROR_TIMEOUT,
                    "signal 0x%llx: value %lld did not meet the condition within %llu ns",
                    (unsigned long long)signal.handle, (long long)w.seen,
                    (unsigned long long)timeout_ns);
  return fault_status(s);
}

AQ_API aq_status_t aq_signal_get_error(aq_signal_t signal, int reset, aq_status_t *out_error) {
  aq_signal_slot_t *s;
  if (!out_error) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_signal_get_error: out_error is NULL");
  AQ_RETURN_IF_ERROR(resolve(signal, &s));
  uint32_t id = reset ? atomic_exchange(&s->fault, 0) : atomic_load(&s->fault);
  char msg[8];
  *out_error = id ? aq_fault_message(id, msg, sizeof(msg)) : AQ_OK;
  return AQ_OK;
}
