/* Futex sleeping and waking behind aq_wake_t. */
#include "runtime/wake.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t aq_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void aq_wake_slow(aq_wake_t *w, int count) {
  atomic_fetch_add(&w->epoch, 1);
  syscall(SYS_futex, &w->epoch, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

void aq_wake_sleep(aq_wake_t *w, uint32_t epoch, uint64_t timeout_ns) {
  struct timespec ts, *tsp = NULL;
  if (timeout_ns) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    tsp = &ts;
  }
  syscall(SYS_futex, &w->epoch, FUTEX_WAIT_PRIVATE, epoch, tsp, NULL, 0);
}

enum { AQ_WAKE_YIELD_AFTER_NS = 5000 };

int aq_wake_poll(aq_wake_t *w, int (*ready)(void *arg), void *arg, uint64_t ns) {
  if (aq_wake_wait(w, ready, arg, ns, ns)) return 1;
  sched_yield();
  return 0;
}

int aq_wake_wait(aq_wake_t *w, int (*ready)(void *arg), void *arg, uint64_t timeout_ns,
                 uint64_t spin_ns) {
  if (ready(arg)) return 1;
  uint64_t start = aq_now_ns();
  uint64_t deadline = timeout_ns == UINT64_MAX || timeout_ns > UINT64_MAX - start ? UINT64_MAX
                                                                                  : start + timeout_ns;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready(arg)) return 1;
      aq_cpu_relax();
    }
    uint64_t now = aq_now_ns();
    if (now >= deadline) return ready(arg);
    if (now - start < spin_ns) {
      /* Past its first microseconds the spin yields each pass: the waiter
       * is often the host of the work it waits for (a dispatch on a CPU
       * agent), and a pure spin held a core that a worker needed, or kept
       * a woken worker off it, for the whole spin. With nothing else to
       * run, sched_yield returns at once and the spin goes on. */
      if (now - start > AQ_WAKE_YIELD_AFTER_NS) sched_yield();
      continue;
    }
    uint32_t e = aq_wake_prepare(w);
    if (!ready(arg)) {
      /* Bounded sleeps: a waker that changes its condition without this
       * wake word (a GPU writing memory) is still seen within 100 ms. */
      uint64_t left = deadline - now;
      aq_wake_sleep(w, e, left > 100000000ull ? 100000000ull : left);
    }
    aq_wake_finish(w);
  }
}
