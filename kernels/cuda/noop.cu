// aq_noop and aq_busy_wait: the kernels the benchmarks time the runtime with.
#include "common.cuh"

typedef struct { uint64_t ns; } busy_args_t;

AQ_KERNEL void aq_noop(void) {}

__device__ inline uint64_t now_ns() {
#ifdef AQ_HIP
  return wall_clock64() * 10; /* the 100 MHz constant clock of gfx9 GPUs */
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

AQ_KERNEL void aq_busy_wait(busy_args_t p) {
  uint64_t start = now_ns();
  while (now_ns() - start < p.ns) {
  }
}
