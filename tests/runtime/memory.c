/* Regions and allocations: placement, statistics, copies, and bad frees. */
#include <stdlib.h>

#include "common.h"

static aq_region_t global_region(aq_agent_t agent) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(agent, r, 8, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (info.flags & AQ_REGION_COARSE_GRAINED) return r[i];
  }
  cr_assert_fail("no global region");
  return r[0];
}

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(memory, .init = setup, .fini = teardown);

Test(memory, cpu_agents_have_global_and_kernarg_regions) {
  aq_agent_t a = first_cpu_agent();
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(a, r, 8, &n));
  cr_assert_eq(n, 2);
  int global = 0, kernarg = 0;
  for (size_t i = 0; i < n; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    cr_assert(info.flags & AQ_REGION_HOST_ACCESSIBLE);
    cr_assert_eq(info.agent.handle, a.handle);
    global += !!(info.flags & AQ_REGION_COARSE_GRAINED);
    kernarg += !!(info.flags & AQ_REGION_KERNARG);
    aq_agent_info_t ai;
    AQ_ASSERT_OK(aq_agent_get_info(a, &ai));
    cr_assert_eq(info.numa_node, ai.numa_node);
  }
  cr_assert(global == 1 && kernarg == 1);
}

Test(memory, allocations_are_counted_bound_and_usable) {
  aq_region_t r = global_region(first_cpu_agent());
  aq_region_info_t before, during, after;
  AQ_ASSERT_OK(aq_region_get_info(r, &before));
  cr_assert(before.bound, "this machine's NUMA node exists: allocations are bound");
  void *p, *q;
  AQ_ASSERT_OK(aq_memory_allocate(r, 1 << 20, &p));
  AQ_ASSERT_OK(aq_memory_allocate(r, 100, &q));
  cr_assert_eq((uintptr_t)p % 64, 0);
  memset(p, 0xab, 1 << 20);
  AQ_ASSERT_OK(aq_region_get_info(r, &during));
  cr_assert_eq(during.in_use, before.in_use + (1 << 20) + 100);
  cr_assert_eq(during.allocations, before.allocations + 2);
  AQ_ASSERT_OK(aq_memory_copy(q, p, 100));
  cr_assert_eq(((unsigned char *)q)[99], 0xab);
  aq_region_t found;
  void *base;
  size_t size;
  AQ_ASSERT_OK(aq_memory_lookup((char *)p + 12345, &found, &base, &size));
  cr_assert(found.handle == r.handle && base == p && size == (1 << 20));
  AQ_ASSERT_OK(aq_memory_free(p));
  AQ_ASSERT_OK(aq_memory_free(q));
  AQ_ASSERT_OK(aq_region_get_info(r, &after));
  cr_assert_eq(after.in_use, before.in_use);
  cr_assert_geq(after.peak, (1 << 20) + 100);
  cr_assert_eq(after.total_allocations, before.total_allocations + 2);
}

Test(memory, bad_frees_and_sizes_are_errors_that_lose_nothing) {
  aq_region_t r = global_region(first_cpu_agent());
  void *p;
  AQ_ASSERT_OK(aq_memory_allocate(r, 4096, &p));
  memset(p, 7, 4096);
  int on_stack;
  cr_assert_eq(aq_memory_free(&on_stack), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "not allocated by Aquila"), "%s", aq_last_error());
  cr_assert_eq(aq_memory_free((char *)p + 8), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "inside an allocation"), "%s", aq_last_error());
  cr_assert_eq(((char *)p)[4095], 7, "the allocation survived the bad frees");
  AQ_ASSERT_OK(aq_memory_free(p));
  cr_assert_eq(aq_memory_free(p), AQ_ERROR_INVALID_ARGUMENT, "double free");
  cr_assert(strstr(aq_last_error(), "already freed"), "%s", aq_last_error());
  cr_assert_eq(aq_memory_free(NULL), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_allocate(r, 0, &p), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_memory_allocate(r, (size_t)1 << 62, &p), AQ_ERROR_OUT_OF_MEMORY);
  cr_assert_eq(aq_memory_allocate((aq_region_t){77}, 64, &p), AQ_ERROR_INVALID_HANDLE);
  /* A copy that overruns its allocation is refused before it writes. */
  void *a, *b;
  AQ_ASSERT_OK(aq_memory_allocate(r, 64, &a));
  AQ_ASSERT_OK(aq_memory_allocate(r, 128, &b));
  cr_assert_eq(aq_memory_copy(a, b, 128), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "overrun"), "%s", aq_last_error());
  aq_memory_free(a);
  aq_memory_free(b);
}

/* Which memory a CPU agent's kernels reach in place: host memory, its own
 * regions; nothing past an allocation's end. */
Test(memory, a_cpu_agent_reaches_host_memory_and_not_past_an_allocation) {
  aq_agent_t cpu = first_cpu_agent();
  aq_region_t r = global_region(cpu);
  void *p;
  AQ_ASSERT_OK(aq_memory_allocate(r, 4096, &p));
  int yes = -1;
  AQ_ASSERT_OK(aq_memory_reachable(cpu, p, 4096, &yes));
  cr_expect_eq(yes, 1);
  AQ_ASSERT_OK(aq_memory_reachable(cpu, p, 4097, &yes));
  cr_expect_eq(yes, 0, "past the allocation's end");
  static char host[64];
  AQ_ASSERT_OK(aq_memory_reachable(cpu, host, sizeof(host), &yes));
  cr_expect_eq(yes, 1, "memory Aquila did not allocate is host memory");
  AQ_ASSERT_OK(aq_region_reachable(cpu, r, &yes));
  cr_expect_eq(yes, 1);
  cr_expect_eq(aq_memory_reachable(cpu, NULL, 1, &yes), AQ_ERROR_INVALID_ARGUMENT);
  cr_expect_eq(aq_memory_reachable((aq_agent_t){12345}, p, 1, &yes), AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_memory_free(p));
}
