/* aquila/unified.h where no GPU is needed: bad input, host-side asynchronous
 * copies that wait for a CPU task, a failed dependency failing the copy.
 * (tests/gpu/memory.c covers copy streams, prefetch and advice on a GPU.) */
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

TEST_KERNELS_SUITE(unified);

static aq_region_t cpu_region(void) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(agent, r, 8, &n));
  return r[0];
}

Test(unified, bad_input_is_refused_with_a_message) {
  char host[64];
  void *p;
  AQ_ASSERT_OK(aq_memory_allocate(cpu_region(), 256, &p));
  aq_signal_t none = {0}, stale;
  AQ_ASSERT_OK(aq_signal_create(0, &stale));
  AQ_ASSERT_OK(aq_signal_destroy(stale));
  /* Hints are for managed memory only. */
  cr_assert_eq(aq_memory_prefetch(host, sizeof(host), agent, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "not managed memory"), "%s", aq_last_error());
  cr_assert_eq(aq_memory_prefetch(p, 256, agent, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_prefetch(NULL, 256, agent, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_advise(p, 256, AQ_ADVICE_READ_MOSTLY, agent), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_advise(p, 256, (aq_memory_advice_t)42, agent), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "unknown advice 42"), "%s", aq_last_error());
  /* Copies. */
  cr_assert_eq(aq_memory_copy_async(NULL, host, 8, 0, NULL, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_copy_async(host, p, 8, 2, NULL, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_copy_async(host, p, 8, 1, &stale, none), AQ_ERROR_INVALID_HANDLE);
  cr_assert(strstr(aq_last_error(), "deps[0]"), "%s", aq_last_error());
  cr_assert_eq(aq_memory_copy_async(host, p, 8, 0, NULL, stale), AQ_ERROR_INVALID_HANDLE);
  cr_assert_eq(aq_memory_copy_async(host, p, 257, 0, NULL, none), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "overrun"), "%s", aq_last_error());
  cr_assert_eq(aq_memory_copy_async((char *)p + 200, host, 64, 0, NULL, none), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_memory_free(p));
}

static aq_status_t fill_later(void *ret, uint64_t value, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  usleep(20000); /* the copy must really wait */
  uint64_t *p = ret;
  for (int i = 0; i < 64; ++i) p[i] = value + (uint64_t)i;
  return AQ_OK;
}

static hsa_agent_dispatch_packet_t host_call(void *fn, void *ret, uint64_t arg, aq_signal_t done) {
  hsa_agent_dispatch_packet_t h;
  memset(&h, 0, sizeof(h));
  h.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  h.type = AQ_AGENT_DISPATCH_HOST_CALL;
  h.arg[0] = (uint64_t)(uintptr_t)fn;
  h.arg[1] = arg;
  h.return_address = ret;
  h.completion_signal.handle = done.handle;
  return h;
}

Test(unified, a_host_copy_waits_for_its_dependency_and_completes_its_signal) {
  uint64_t *src, dst[64] = {0};
  AQ_ASSERT_OK(aq_memory_allocate(cpu_region(), 64 * 8, (void **)&src));
  memset(src, 0, 64 * 8);
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t filled, copied;
  AQ_ASSERT_OK(aq_signal_create(1, &filled));
  AQ_ASSERT_OK(aq_signal_create(1, &copied));
  hsa_agent_dispatch_packet_t h = host_call(fill_later, src, 1000, filled);
  AQ_ASSERT_OK(aq_queue_submit(q, &h, SEC, NULL));
  AQ_ASSERT_OK(aq_memory_copy_async(dst, src, sizeof(dst), 1, &filled, copied));
  AQ_ASSERT_OK(aq_signal_wait(copied, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  for (int i = 0; i < 64; ++i) cr_assert_eq(dst[i], 1000u + (uint64_t)i, "dst[%d] = %llu", i, (unsigned long long)dst[i]);
  /* Zero bytes: nothing to copy, the signal still completes. */
  AQ_ASSERT_OK(aq_signal_store(copied, 1));
  AQ_ASSERT_OK(aq_memory_copy_async(dst, src, 0, 0, NULL, copied));
  AQ_ASSERT_OK(aq_signal_wait(copied, AQ_SIGNAL_EQ, 0, SEC, NULL));
  aq_signal_destroy(filled), aq_signal_destroy(copied);
  aq_queue_destroy(q);
  AQ_ASSERT_OK(aq_memory_free(src));
}

Test(unified, a_failed_dependency_fails_the_copy) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t faulted, copied;
  AQ_ASSERT_OK(aq_signal_create(1, &faulted));
  AQ_ASSERT_OK(aq_signal_create(1, &copied));
  aq_kernel_info_t k = test_kernel(co, agent, "fault");
  fault_args_t fa = {3};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &fa, 1, 1, faulted);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  uint64_t src = 7, dst = 0;
  AQ_ASSERT_OK(aq_memory_copy_async(&dst, &src, 8, 1, &faulted, copied));
  cr_assert_eq(aq_signal_wait(copied, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_KERNEL_FAULT);
  cr_assert_eq(dst, 0, "the copy did not run");
  /* Without a completion signal the caller hears of it. */
  cr_assert_eq(aq_memory_copy_async(&dst, &src, 8, 1, &faulted, (aq_signal_t){0}), AQ_ERROR_KERNEL_FAULT);
  aq_signal_destroy(faulted), aq_signal_destroy(copied);
  aq_queue_destroy(q);
}
