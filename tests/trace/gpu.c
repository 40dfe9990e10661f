/* GPU kernels in a trace carry the GPU's own start and end, mapped onto the
 * host clock: busy-wait kernels of known length show that length, in queue
 * order, never before the host launched them. Without a GPU the test says
 * "skipped: no GPU". */
#include "helpers.h"
#include "../runtime/common.h"
#include "tools/aq-trace/trace_file.h"

typedef struct { uint64_t ns; } busy_args_t;

Test(trace_gpu, kernels_carry_gpu_times_on_the_host_clock) {
  AQ_ASSERT_OK(aq_init(NULL));
  aq_agent_t gpu = first_agent(AQ_AGENT_KIND_GPU);
  if (!gpu.handle) {
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("kernels-cuda.fatbin", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "aq_busy_wait", gpu, &k));
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  char path[128];
  temp_path(path, sizeof(path), "gpu.json");
  aq_trace_options_t o = {.path = path};
  AQ_ASSERT_OK(aq_trace_start(&o));
  enum { K = 4 };
  static busy_args_t args[K] = {{300000}, {100000}, {500000}, {200000}};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(K, &done));
  for (int i = 0; i < K; ++i) {
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args[i], 1, 1, done);
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  }
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  AQ_ASSERT_OK(aq_trace_stop()); /* no wait: the stop collects what the GPU timed */

  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  const tevent_t *ev[K];
  int found = 0;
  for (size_t i = 0; i < t.count; ++i)
    if (!strcmp(t.events[i].name, "aq_busy_wait")) {
      cr_assert_lt(found, K, "more busy-wait events than kernels");
      cr_assert_str_eq(t.events[i].cat, "kernel", "timed on the GPU, not at launch");
      ev[found++] = &t.events[i];
    }
  cr_assert_eq(found, K, "%d of %d kernels in the trace", found, K);
  for (int i = 0; i < K; ++i) {
    double want = (double)args[i].ns / 1e3;
    cr_assert(ev[i]->dur >= want * 0.98 && ev[i]->dur <= want + 100.0, "kernel %d ran %.1f us, asked %.1f", i,
              ev[i]->dur, want);
    if (ev[i]->ready == ev[i]->ready) cr_assert_geq(ev[i]->ts, ev[i]->ready - 1e-3, "started before its launch");
    if (i) cr_assert_geq(ev[i]->ts, ev[i - 1]->ts + ev[i - 1]->dur - 1.0, "kernel %d overlaps the one before", i);
  }
  tfile_free(&t);
  unlink(path);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_shut_down();
}
