/* What a wait on a GPU costs the CPU. By default the waiter looks at a
 * GPU-written signal every 10 us and the queue's packet processor polls
 * what the stream owes, so the waiter hears of a completion soon; under
 * AQ_GPU_SPIN_US=0 and AQ_SPIN_US=0 both sleep between looks, and a
 * thread waiting for a long kernel leaves the cores nearly idle. Elsewhere
 * each test says "skipped: no GPU". */
#include <stdlib.h>
#include <time.h>

#include "../runtime/common.h"

typedef struct { uint64_t ns; } busy_args_t; /* kernels/cuda/noop.cu */

static double seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The process's CPU time over the wall time of one wait for a kernel that
 * runs 200 ms; -1 without a GPU. */
static double cpu_share_of_a_wait(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  aq_agent_t gpu = first_agent(AQ_AGENT_KIND_GPU);
  if (!gpu.handle) {
    aq_shut_down();
    return -1;
  }
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("kernels-cuda.fatbin", &co));
  aq_kernel_info_t k = test_kernel(co, gpu, "aq_busy_wait");
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  busy_args_t args = {200 * 1000 * 1000ull};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, 1, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  const double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_PROCESS_CPUTIME_ID);
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  const double share = (seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu) / (seconds(CLOCK_MONOTONIC) - wall);
  aq_status_t err;
  AQ_ASSERT_OK(aq_signal_get_error(done, 0, &err));
  cr_assert_eq(err, AQ_OK);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
  return share;
}

Test(gpu_waiting, nothing_spins_under_zero_spin_settings) {
  unsetenv("AQ_GPU_SPIN_US"); /* the defaults, whatever the suite runs under */
  unsetenv("AQ_SPIN_US");
  const double spinning = cpu_share_of_a_wait();
  if (spinning < 0) cr_skip_test("skipped: no GPU");
  setenv("AQ_GPU_SPIN_US", "0", 1);
  setenv("AQ_SPIN_US", "0", 1);
  const double frugal = cpu_share_of_a_wait();
  cr_log_info("CPU time / wall time during a 200 ms wait: %.3f by default, %.3f with nothing spinning", spinning,
              frugal);
  /* The measure tells the two apart: by default the waiter looks every
   * 10 us and the processor polls, about half a core on the H100 machine. */
  cr_assert_gt(spinning, 2 * frugal, "default %.3f against %.3f with nothing spinning", spinning, frugal);
  cr_assert_lt(frugal, 0.2, "with AQ_GPU_SPIN_US=0 AQ_SPIN_US=0 the wait took %.3f of a core", frugal);
}
