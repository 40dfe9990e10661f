/* A futex-backed wake-up word. Many things in the runtime are waited on
 * (signal values, queue space, an agent's doorbells); all of them pair a
 * condition with one of these. The waker changes its condition and then
 * calls aq_wake_all, which costs one load when nobody sleeps. A sleeper
 * announces itself, re-checks its condition and only then sleeps, so no
 * wake-up is lost (all four steps are sequentially consistent). */
#ifndef AQ_RUNTIME_WAKE_H_
#define AQ_RUNTIME_WAKE_H_

#include <stdatomic.h>
#include <stdint.h>

typedef struct aq_wake {
  _Atomic uint32_t epoch;
  _Atomic uint32_t sleepers;
} aq_wake_t;

void aq_wake_slow(aq_wake_t *w, int count);

/* Wakes up to count sleepers; costs one load when there are none. */
static inline void aq_wake_some(aq_wake_t *w, int count) {
  if (atomic_load(&w->sleepers) != 0) aq_wake_slow(w, count);
}
static inline void aq_wake_all(aq_wake_t *w) { aq_wake_some(w, 0x7fffffff); }
/* One sleeper is enough where any one of them can do the work. */
static inline void aq_wake_one(aq_wake_t *w) { aq_wake_some(w, 1); }

/* Sleep protocol: e = aq_wake_prepare(w); if (!condition) aq_wake_sleep(w, e,
 * ns); aq_wake_finish(w). Sleeps until woken, timed out (ns, 0 = forever) or
 * spuriously; the caller re-checks its condition. */
static inline uint32_t aq_wake_prepare(aq_wake_t *w) {
  atomic_fetch_add(&w->sleepers, 1);
  return atomic_load(&w->epoch);
}
void aq_wake_sleep(aq_wake_t *w, uint32_t epoch, uint64_t timeout_ns);
static inline void aq_wake_finish(aq_wake_t *w) { atomic_fetch_sub(&w->sleepers, 1); }

/* Waits until ready(arg) returns non-zero: spins for spin_ns, then sleeps on
 * w, until timeout_ns (UINT64_MAX: forever) has passed. Returns 1 if ready,
 * 0 on timeout. Every waiter in the runtime (signals, full queues, idle
 * queues) goes through this one loop. */
int aq_wake_wait(aq_wake_t *w, int (*ready)(void *arg), void *arg, uint64_t timeout_ns,
                 uint64_t spin_ns);

/* One look of a poller that looks every ns without sleeping (a GPU queue's
 * processor watching its stream): spins up to ns for ready(arg), then, if
 * not ready, yields the core once. A poller that only spun held its core
 * as long as the GPU ran, and the host thread the scheduler had put beside
 * it (still submitting a run's other lanes) waited for the whole run.
 * Returns 1 if ready. */
int aq_wake_poll(aq_wake_t *w, int (*ready)(void *arg), void *arg, uint64_t ns);

/* Monotonic clock in nanoseconds. */
uint64_t aq_now_ns(void);

static inline void aq_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#endif /* AQ_RUNTIME_WAKE_H_ */
