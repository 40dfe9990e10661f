/* Conformance: the same checks of queues, signals and memory against every
 * agent present, whatever its driver (as IREE's CTS runs one suite per
 * HAL driver). Here that is the CPU agents; on the GPU machine the GPU
 * agents too. A check names the agent it failed on. Each agent gets a
 * "mark" kernel from its test code object: test-kernels.so's count on a
 * CPU, test-kernels-gpu.fatbin's gpu_write on a GPU; both leave 1 in a word
 * of the agent's kernarg region (host memory every agent reaches). */
#include <time.h>

#include "common.h"

enum { TARGETS_MAX = 16 };

typedef struct target {
  aq_agent_t agent;
  aq_agent_info_t info;
  aq_kernel_info_t mark;
  uint64_t *word; /* where the mark goes */
} target_t;

typedef struct { uint64_t *out; uint64_t value; } write_args_t;
typedef union { count_args_t count; write_args_t write; } mark_args_t;

static target_t targets[TARGETS_MAX];
static size_t ntargets;

static void *kernarg_word(aq_agent_t agent) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(agent, r, 8, &n));
  for (size_t i = 0; i < n && i < 8; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (info.flags & AQ_REGION_KERNARG) {
      void *p;
      AQ_ASSERT_OK(aq_memory_allocate(r[i], 64, &p));
      return p;
    }
  }
  cr_assert_fail("an agent without a kernarg region");
  return NULL;
}

static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  aq_agent_t all[64];
  size_t n;
  AQ_ASSERT_OK(aq_agents(all, 64, &n));
  ntargets = 0;
  for (size_t i = 0; i < n && ntargets < TARGETS_MAX; ++i) {
    target_t *t = &targets[ntargets];
    t->agent = all[i];
    AQ_ASSERT_OK(aq_agent_get_info(all[i], &t->info));
    int gpu = t->info.kind == AQ_AGENT_KIND_GPU;
    if (!t->info.usable || (t->info.kind != AQ_AGENT_KIND_CPU && !gpu)) continue;
    aq_code_object_t co;
    AQ_ASSERT_OK(aq_code_object_load(gpu ? "test-kernels-gpu.fatbin" : "test-kernels.so", &co));
    t->mark = test_kernel(co, all[i], gpu ? "gpu_write" : "count");
    t->word = kernarg_word(all[i]);
    ntargets++;
  }
  cr_assert_geq(ntargets, 1, "no agent to test");
}
static void teardown(void) { aq_shut_down(); }
TestSuite(conformance, .init = setup, .fini = teardown);

/* The mark packet of t, completing `done`; its kernarg in args. */
static hsa_kernel_dispatch_packet_t mark_packet(target_t *t, mark_args_t *args, aq_signal_t done) {
  *t->word = 0;
  if (t->info.kind == AQ_AGENT_KIND_GPU) args->write = (write_args_t){t->word, 1};
  else args->count = (count_args_t){(_Atomic uint32_t *)t->word};
  return dispatch_packet(&t->mark, args, 1, 1, done);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static uint64_t word(const target_t *t) { return __atomic_load_n(t->word, __ATOMIC_ACQUIRE); }

Test(conformance, every_agent_runs_a_dispatch_and_completes_its_signal) {
  for (size_t i = 0; i < ntargets; ++i) {
    target_t *t = &targets[i];
    aq_queue_t q;
    aq_signal_t done;
    AQ_ASSERT_OK(aq_queue_create(t->agent, NULL, &q));
    aq_queue_info_t qi;
    AQ_ASSERT_OK(aq_queue_get_info(q, &qi));
    cr_assert(qi.size && !(qi.size & (qi.size - 1)), "%s: queue size %u is not a power of two", t->info.name, qi.size);
    AQ_ASSERT_OK(aq_signal_create(1, &done));
    mark_args_t args;
    hsa_kernel_dispatch_packet_t p = mark_packet(t, &args, done);
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL));
    cr_assert_eq(word(t), 1, "%s: the dispatch left %llu", t->info.name, (unsigned long long)word(t));
    AQ_ASSERT_OK(aq_queue_wait_idle(q, 10 * SEC));
    AQ_ASSERT_OK(aq_queue_destroy(q));
    AQ_ASSERT_OK(aq_signal_destroy(done));
  }
}

/* A barrier-AND (type AND) or -OR packet over two host-held signals, then
 * the mark: the mark must wait for both (AND) or either (OR). */
static void barrier_then_mark(hsa_packet_type_t type) {
  for (size_t i = 0; i < ntargets; ++i) {
    target_t *t = &targets[i];
    aq_queue_t q;
    aq_signal_t deps[2], done;
    AQ_ASSERT_OK(aq_queue_create(t->agent, NULL, &q));
    for (int d = 0; d < 2; ++d) AQ_ASSERT_OK(aq_signal_create(1, &deps[d]));
    AQ_ASSERT_OK(aq_signal_create(1, &done));
    hsa_barrier_and_packet_t b = barrier_packet(type, deps, 2, (aq_signal_t){0});
    AQ_ASSERT_OK(aq_queue_submit(q, &b, SEC, NULL));
    mark_args_t args;
    hsa_kernel_dispatch_packet_t p = mark_packet(t, &args, done);
    p.header |= 1 << HSA_PACKET_HEADER_BARRIER; /* after the barrier packet */
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    sleep_ms(20);
    cr_assert_eq(word(t), 0, "%s: the mark ran before any signal of its barrier", t->info.name);
    AQ_ASSERT_OK(aq_signal_store(deps[1], 0));
    if (type == HSA_PACKET_TYPE_BARRIER_AND) {
      sleep_ms(20);
      cr_assert_eq(word(t), 0, "%s: barrier-AND let the mark run on one signal of two", t->info.name);
      AQ_ASSERT_OK(aq_signal_store(deps[0], 0));
    }
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL));
    cr_assert_eq(word(t), 1, "%s: the mark did not run after its barrier", t->info.name);
    if (type == HSA_PACKET_TYPE_BARRIER_OR) AQ_ASSERT_OK(aq_signal_store(deps[0], 0));
    AQ_ASSERT_OK(aq_queue_wait_idle(q, 10 * SEC));
    AQ_ASSERT_OK(aq_queue_destroy(q));
    for (int d = 0; d < 2; ++d) AQ_ASSERT_OK(aq_signal_destroy(deps[d]));
    AQ_ASSERT_OK(aq_signal_destroy(done));
  }
}

Test(conformance, barrier_and_holds_a_dispatch_until_every_signal) { barrier_then_mark(HSA_PACKET_TYPE_BARRIER_AND); }

Test(conformance, barrier_or_releases_a_dispatch_on_one_signal) { barrier_then_mark(HSA_PACKET_TYPE_BARRIER_OR); }

/* Every region of every agent: it allocates, its agent reaches it, and
 * bytes copied in come back out unchanged (through aq_memory_copy, which
 * works whether or not the host may touch the region). */
Test(conformance, every_region_allocates_and_round_trips_bytes) {
  enum { BYTES = 1 << 16 };
  uint8_t *in = malloc(BYTES), *out = malloc(BYTES);
  cr_assert(in && out);
  for (int i = 0; i < BYTES; ++i) in[i] = (uint8_t)(i * 131 + 7);
  for (size_t i = 0; i < ntargets; ++i) {
    aq_region_t r[8];
    size_t n;
    AQ_ASSERT_OK(aq_agent_regions(targets[i].agent, r, 8, &n));
    cr_assert_geq(n, 1, "%s has no region", targets[i].info.name);
    for (size_t j = 0; j < n && j < 8; ++j) {
      aq_region_info_t ri;
      AQ_ASSERT_OK(aq_region_get_info(r[j], &ri));
      void *p;
      AQ_ASSERT_OK(aq_memory_allocate(r[j], BYTES, &p));
      cr_assert_eq((uintptr_t)p % (ri.alignment ? ri.alignment : 1), 0, "%s: %p is not %llu-aligned", ri.name, p,
                   (unsigned long long)ri.alignment);
      int reach = 0;
      AQ_ASSERT_OK(aq_region_reachable(targets[i].agent, r[j], &reach));
      cr_assert(reach, "%s cannot reach its own region %s", targets[i].info.name, ri.name);
      memset(out, 0, BYTES);
      AQ_ASSERT_OK(aq_memory_copy(p, in, BYTES));
      AQ_ASSERT_OK(aq_memory_copy(out, p, BYTES));
      cr_assert(!memcmp(in, out, BYTES), "%s: bytes copied in came back changed", ri.name);
      AQ_ASSERT_OK(aq_memory_free(p));
    }
  }
  free(in), free(out);
}
