/* Barrier packets on GPU queues beyond the AND of gpu.c: barrier-OR over
 * host- and GPU-completed signals, and a failed CPU task failing the GPU
 * barrier that depends on it. Elsewhere each test says "skipped: no GPU". */
#include <unistd.h>

#include "../runtime/common.h"

static aq_agent_t gpu, cpu;
static aq_code_object_t co;
static aq_kernel_info_t write_k;

static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  cpu = first_agent(AQ_AGENT_KIND_CPU);
  if (!gpu.handle) {
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_write", gpu, &write_k));
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
}
TestSuite(gpu_barriers, .init = setup, .fini = teardown);

typedef struct { uint64_t *out; uint64_t value; } write_args_t;

static uint64_t *pinned_word(void) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(gpu, r, 8, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (info.flags & AQ_REGION_KERNARG) {
      uint64_t *p;
      AQ_ASSERT_OK(aq_memory_allocate(r[i], 64, (void **)&p));
      *p = 0;
      return p;
    }
  }
  cr_assert_fail("no pinned region");
  return NULL;
}

static void submit_write(aq_queue_t q, uint64_t *out, uint64_t value, aq_signal_t done) {
  static write_args_t args[16];
  static int next;
  write_args_t *a = &args[next++ % 16];
  *a = (write_args_t){out, value};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&write_k, a, 1, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
}

Test(gpu_barriers, barrier_or_waits_for_one_host_completed_signal) {
  uint64_t *out = pinned_word();
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t deps[2], done;
  AQ_ASSERT_OK(aq_signal_create(1, &deps[0]));
  AQ_ASSERT_OK(aq_signal_create(1, &deps[1]));
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_OR, deps, 2, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(q, &b, SEC, NULL));
  submit_write(q, out, 42, done);
  usleep(30000);
  cr_assert_eq(*(volatile uint64_t *)out, 0, "the kernel waited behind the barrier-OR");
  AQ_ASSERT_OK(aq_signal_store(deps[1], 0));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(*out, 42);
  aq_signal_destroy(deps[0]), aq_signal_destroy(deps[1]), aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(gpu_barriers, barrier_or_sees_a_gpu_written_signal) {
  uint64_t *first = pinned_word(), *second = pinned_word();
  aq_queue_t qa, qb;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qa));
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qb));
  aq_signal_t deps[2], done;
  AQ_ASSERT_OK(aq_signal_create(1, &deps[0])); /* never completes */
  AQ_ASSERT_OK(aq_signal_create(1, &deps[1])); /* the kernel on qa completes it */
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_OR, deps, 2, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(qb, &b, SEC, NULL));
  submit_write(qb, second, 2, done);
  usleep(20000);
  submit_write(qa, first, 1, deps[1]);
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(*first, 1);
  cr_assert_eq(*second, 2);
  aq_signal_store(deps[0], 0); /* lets the packet processor go at shutdown */
  aq_signal_destroy(deps[0]), aq_signal_destroy(deps[1]), aq_signal_destroy(done);
  aq_queue_destroy(qa), aq_queue_destroy(qb);
}

Test(gpu_barriers, a_failed_cpu_task_fails_the_gpu_barrier_after_it) {
  aq_code_object_t cco;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &cco));
  aq_kernel_info_t fk = test_kernel(cco, cpu, "fault");
  aq_queue_t qc, qg;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc));
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qg));
  aq_signal_t failed, barrier_done;
  AQ_ASSERT_OK(aq_signal_create(1, &failed));
  AQ_ASSERT_OK(aq_signal_create(1, &barrier_done));
  fault_args_t fa = {5};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&fk, &fa, 1, 1, failed);
  AQ_ASSERT_OK(aq_queue_submit(qc, &p, SEC, NULL));
  cr_assert_eq(aq_signal_wait(failed, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_KERNEL_FAULT);
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &failed, 1, barrier_done);
  AQ_ASSERT_OK(aq_queue_submit(qg, &b, SEC, NULL));
  aq_status_t s = aq_signal_wait(barrier_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL);
  cr_assert_eq(s, AQ_ERROR_KERNEL_FAULT, "%s", aq_status_string(s));
  /* The GPU itself is fine: the next dispatch runs. */
  uint64_t *out = pinned_word();
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  submit_write(qg, out, 9, done);
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(*out, 9);
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  cr_assert_eq(info.usable, 1);
  aq_signal_destroy(failed), aq_signal_destroy(barrier_done), aq_signal_destroy(done);
  aq_queue_destroy(qc), aq_queue_destroy(qg);
}

/* A high-priority queue (AQ_QUEUE_HIGH_PRIORITY: the stream's greatest
 * priority) runs its kernels and orders against a normal queue through a
 * barrier like any other. */
Test(gpu_barriers, a_high_priority_queue_runs_and_waits_for_another) {
  uint64_t *first = pinned_word(), *second = pinned_word();
  aq_queue_t normal, high;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &normal));
  AQ_ASSERT_OK(aq_queue_create(gpu, &(aq_queue_options_t){.flags = AQ_QUEUE_HIGH_PRIORITY}, &high));
  aq_signal_t gate, a_done, b_done;
  AQ_ASSERT_OK(aq_signal_create(1, &gate));
  AQ_ASSERT_OK(aq_signal_create(1, &a_done));
  AQ_ASSERT_OK(aq_signal_create(1, &b_done));
  hsa_barrier_and_packet_t g = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &gate, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(normal, &g, SEC, NULL));
  submit_write(normal, first, 7, a_done);
  hsa_barrier_and_packet_t w = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &a_done, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(high, &w, SEC, NULL));
  submit_write(high, second, 8, b_done);
  usleep(30000);
  cr_assert_eq(*(volatile uint64_t *)second, 0, "the high-priority queue's kernel waited for the other queue's");
  AQ_ASSERT_OK(aq_signal_store(gate, 0));
  AQ_ASSERT_OK(aq_signal_wait(b_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(*first, 7);
  cr_assert_eq(*second, 8);
  aq_signal_destroy(gate), aq_signal_destroy(a_done), aq_signal_destroy(b_done);
  aq_queue_destroy(normal), aq_queue_destroy(high);
}
