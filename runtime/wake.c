/* Futex sleeping and waking behind aq_wake_t. */
#include "runtime/wake.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
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
