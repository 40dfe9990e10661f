/* Helpers the runtime tests share: start the runtime, load the test kernels,
 * build and submit packets. */
#ifndef AQ_TESTS_RUNTIME_COMMON_H_
#define AQ_TESTS_RUNTIME_COMMON_H_

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"

#define SEC 1000000000ull

#define AQ_ASSERT_OK(expr)                                                                 \
  do {                                                                                     \
    aq_status_t s_ = (expr);                                                               \
    cr_assert_eq(s_, AQ_OK, "%s -> %s: %s", #expr, aq_status_string(s_), aq_last_error()); \
  } while (0)

/* expr fails with status, and the error message says text. */
#define AQ_ASSERT_FAILS(expr, status, text)                                                               \
  do {                                                                                                    \
    aq_status_t s_ = (expr);                                                                              \
    cr_assert_eq(s_, status, "%s -> %s (%s), expected %s", #expr, aq_status_string(s_), aq_last_error(),  \
                 aq_status_string(status));                                                               \
    cr_assert(strstr(aq_last_error(), text), "%s: '%s' does not say '%s'", #expr, aq_last_error(), text); \
  } while (0)

static inline aq_agent_t first_cpu_agent(void) {
  aq_agent_t agents[64];
  size_t n = 0;
  AQ_ASSERT_OK(aq_agents(agents, 64, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(agents[i], &info));
    if (info.kind == AQ_AGENT_KIND_CPU) return agents[i];
  }
  cr_assert_fail("no CPU agent");
  return agents[0];
}

static inline aq_kernel_info_t test_kernel(aq_code_object_t co, aq_agent_t agent, const char *name) {
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, name, agent, &k));
  return k;
}

/* The first agent of a kind, or a zero handle if the machine has none. */
static inline aq_agent_t first_agent(aq_agent_kind_t kind) {
  aq_agent_t all[64], none = {0};
  size_t n;
  AQ_ASSERT_OK(aq_agents(all, 64, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(all[i], &info));
    if (info.kind == kind) return all[i];
  }
  return none;
}

static inline hsa_kernel_dispatch_packet_t dispatch_packet(const aq_kernel_info_t *k, const void *kernarg,
                                                           uint32_t grid, uint16_t wg, aq_signal_t done) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM,
                              HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = wg;
  p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = grid;
  p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = k->kernel_object;
  p.kernarg_address = (void *)kernarg;
  p.completion_signal.handle = done.handle;
  return p;
}

/* Dispatches kernel `name` of `co` on `queue` with a 3-D shape and waits
 * for `done`: the wait's status, or else the error the packet reported. */
static inline aq_status_t dispatch_and_wait(aq_code_object_t co, aq_agent_t agent, aq_queue_t queue, aq_signal_t done,
                                            const char *name, const void *kernarg, aq_dispatch_shape_t s) {
  aq_kernel_info_t k = test_kernel(co, agent, name);
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, kernarg, s.grid[0], s.workgroup[0], done);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_y = s.workgroup[1], p.workgroup_size_z = s.workgroup[2];
  p.grid_size_y = s.grid[1], p.grid_size_z = s.grid[2];
  AQ_ASSERT_OK(aq_signal_store(done, 1));
  AQ_ASSERT_OK(aq_queue_submit(queue, &p, SEC, NULL));
  aq_status_t st = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 60 * SEC, NULL), err = AQ_OK;
  aq_signal_get_error(done, 1, &err);
  return st != AQ_OK ? st : err;
}

static inline hsa_barrier_and_packet_t barrier_packet(hsa_packet_type_t type, const aq_signal_t *deps,
                                                      int ndeps, aq_signal_t done) {
  hsa_barrier_and_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = aq_packet_header(type, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  for (int i = 0; i < ndeps; ++i) b.dep_signal[i].handle = deps[i].handle;
  b.completion_signal.handle = done.handle;
  return b;
}

/* Kernarg layouts of tests/data/test_kernels.c. */
typedef struct { _Atomic uint32_t *hits; } count_args_t;
typedef struct { _Atomic uint32_t *cursor; uint32_t *log; uint32_t tag; uint32_t sleep_us; } log_args_t;
typedef struct { int code; } fault_args_t;
typedef struct { uint64_t ns; } spin_args_t;
typedef struct { _Atomic uint64_t *items; } tally_args_t;
typedef struct { volatile int *where; } poke_args_t;
typedef struct { _Atomic int *started; uint64_t ns; } busy_flag_args_t;
typedef struct { uint32_t *worker; uint64_t ns; } who_args_t;

/* Settings are read at aq_init: set (value NULL: unset) one and start the
 * runtime again, from a test that holds one aq_init. */
static inline void restart_with(const char *name, const char *value) {
  aq_shut_down();
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  AQ_ASSERT_OK(aq_init(NULL));
}

/* The suite most runtime tests share: the runtime up, its first CPU agent
 * in `agent` and the test kernels (test-kernels.so) in `co`. */
#define TEST_KERNELS_SUITE(name)                                  \
  static aq_agent_t agent;                                        \
  static aq_code_object_t co;                                     \
  static void setup(void) {                                       \
    AQ_ASSERT_OK(aq_init(NULL));                                  \
    agent = first_cpu_agent();                                    \
    AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));    \
  }                                                               \
  static void teardown(void) { aq_shut_down(); }                  \
  TestSuite(name, .init = setup, .fini = teardown)

/* A fresh AQ_PERF_DIR (dir: /tmp/aq-<what>-XXXXXX, at least 64 bytes) and
 * the path of `file` in it (path, unless NULL: at least 128 bytes); then
 * removed with what the runtime wrote there (perf_dir_remove). */
static inline void perf_dir_make(char *dir, const char *what, char *path, const char *file) {
  snprintf(dir, 64, "/tmp/aq-%s-XXXXXX", what);
  cr_assert(mkdtemp(dir));
  if (path) snprintf(path, 128, "%s/%s", dir, file);
  setenv("AQ_PERF_DIR", dir, 1);
}
static inline void perf_dir_remove(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
  unsetenv("AQ_PERF_DIR");
}

#endif
