/* aq_noop and aq_busy_wait: the kernels the benchmarks time the runtime with.
 * aq_noop does nothing, so a dispatch of it costs exactly the runtime's
 * overhead; aq_busy_wait spins for a given time, the calibrated task of
 * Task Bench's METG measurement. */
#include <time.h>

#include "kernels/cpu/table.h"

static int noop(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)kernarg;
  (void)ctx;
  return 0;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every work-group spins for the whole duration: a grid of G groups is G
 * tasks' worth of work. */
static int busy_wait(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)ctx;
  const aq_busy_wait_args_t *a = kernarg;
  uint64_t end = now_ns() + a->ns;
  while (now_ns() < end) {
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_noop_desc = {"aq_noop", noop, 0, 0, 0, 0};
const aq_kernel_desc_t aq_cpu_busy_wait_desc = {"aq_busy_wait", busy_wait, sizeof(aq_busy_wait_args_t), 8, 0, 0};
