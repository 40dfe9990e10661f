// aq_noop and aq_busy_wait: the kernels the benchmarks time the runtime with.
#include "common.cuh"

typedef struct { uint64_t ns; } busy_args_t;

AQ_KERNEL void aq_noop(void) {}

AQ_KERNEL void aq_busy_wait(busy_args_t p) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < p.ns);
}
