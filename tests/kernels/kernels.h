/* What the CPU kernel suites share: one CPU agent, the op library loaded as
 * the scheduler loads it, a queue, and deterministic random inputs. */
#ifndef AQ_TESTS_KERNELS_KERNELS_H_
#define AQ_TESTS_KERNELS_KERNELS_H_

#include <stdlib.h>

#include "../runtime/common.h"
#include "aquila/ops.h"

static aq_agent_t agent;
static aq_code_object_t co;
static aq_queue_t queue;
static aq_signal_t done;

static void open_objects(void) {
  agent = first_cpu_agent();
  AQ_ASSERT_OK(aq_code_object_load("kernels-cpu.so", &co));
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &queue));
  AQ_ASSERT_OK(aq_signal_create(0, &done));
}
static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  open_objects();
}
static void teardown(void) { aq_shut_down(); }

/* The kernels read settings from their dispatch context, which the runtime
 * fills from what aq_init read: set one and start everything again. */
static inline void kernels_restart_with(const char *name, const char *value) {
  restart_with(name, value);
  open_objects();
}

/* One kernel through the CPU agent's queue, as the scheduler dispatches it. */
static aq_status_t run(const char *name, const void *args, aq_dispatch_shape_t s) {
  return dispatch_and_wait(co, agent, queue, done, name, args, s);
}

/* n floats in [-1, 1), the same for the same seed. */
static float *rnd(size_t n, unsigned seed) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return x;
}

#endif
