/* GPU memory beyond plain copies (aquila/unified.h): asynchronous copies on
 * copy streams that wait for CPU tasks and GPU kernels, prefetch and advice on
 * managed memory, a fatbin with no code for this GPU, allocations left alive
 * at shutdown. Elsewhere each test says "skipped: no GPU". */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/common.h"

static aq_agent_t gpu, cpu;
static aq_code_object_t co;

static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  cpu = first_agent(AQ_AGENT_KIND_CPU);
  if (!gpu.handle) {
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
}
TestSuite(gpu_memory, .init = setup, .fini = teardown);

static aq_region_t region(aq_agent_t a, uint32_t flag) {
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(a, r, 8, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (info.flags & flag) return r[i];
  }
  cr_assert_fail("no region with flag 0x%x", flag);
  return r[0];
}

static void *alloc(uint32_t flag, size_t size) {
  void *p;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, flag), size, &p));
  return p;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static aq_status_t fill_later(void *ret, uint64_t n, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  usleep(50000); /* the copies must really wait */
  uint32_t *p = ret;
  for (uint64_t i = 0; i < n; ++i) p[i] = (uint32_t)(i * 3 + 1);
  return AQ_OK;
}

static void host_call(aq_queue_t q, void *fn, void *ret, uint64_t arg, aq_signal_t done) {
  hsa_agent_dispatch_packet_t h;
  memset(&h, 0, sizeof(h));
  h.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  h.type = AQ_AGENT_DISPATCH_HOST_CALL;
  h.arg[0] = (uint64_t)(uintptr_t)fn;
  h.arg[1] = arg;
  h.return_address = ret;
  h.completion_signal.handle = done.handle;
  AQ_ASSERT_OK(aq_queue_submit(q, &h, SEC, NULL));
}

/* CPU task -> copy to the GPU -> copy back, each waiting on the one before on
 * the GPU's copy streams; the calls return before the CPU task has run. */
Test(gpu_memory, async_copies_both_ways_wait_for_their_dependencies) {
  enum { N = 1 << 20 };
  uint32_t *src = alloc(AQ_REGION_KERNARG, N * 4), *dev = alloc(AQ_REGION_DEVICE, N * 4),
           *dst = alloc(AQ_REGION_KERNARG, N * 4);
  memset(src, 0, N * 4);
  memset(dst, 0xff, N * 4);
  aq_queue_t qc;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc));
  aq_signal_t filled, in, out;
  AQ_ASSERT_OK(aq_signal_create(1, &filled));
  AQ_ASSERT_OK(aq_signal_create(1, &in));
  AQ_ASSERT_OK(aq_signal_create(1, &out));
  double t0 = now_ms();
  host_call(qc, fill_later, src, N, filled);
  AQ_ASSERT_OK(aq_memory_copy_async(dev, src, N * 4, 1, &filled, in));
  AQ_ASSERT_OK(aq_memory_copy_async(dst, dev, N * 4, 1, &in, out));
  double issued = now_ms() - t0;
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_load(out, &v));
  cr_assert(issued < 40 && v == 1, "the copies were queued, not run: %.1f ms, out = %lld", issued, (long long)v);
  AQ_ASSERT_OK(aq_signal_wait(out, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_value_t vin;
  AQ_ASSERT_OK(aq_signal_load(in, &vin));
  cr_assert_eq(vin, 0);
  for (uint32_t i = 0; i < N; ++i) cr_assert_eq(dst[i], i * 3 + 1, "dst[%u] = %u", i, dst[i]);
  /* Pageable host memory on one side: synchronous, on the caller. */
  uint32_t *pageable = malloc(N * 4);
  AQ_ASSERT_OK(aq_memory_copy_async(pageable, dev, N * 4, 0, NULL, (aq_signal_t){0}));
  cr_assert_eq(memcmp(pageable, src, N * 4), 0);
  free(pageable);
  aq_signal_destroy(filled), aq_signal_destroy(in), aq_signal_destroy(out);
  aq_queue_destroy(qc);
  AQ_ASSERT_OK(aq_memory_free(src));
  AQ_ASSERT_OK(aq_memory_free(dev));
  AQ_ASSERT_OK(aq_memory_free(dst));
}

typedef struct { uint64_t *out; uint64_t value; } write_args_t;
typedef struct { float *p; uint32_t n; } add_one_args_t;

/* A kernel's completion signal gates a copy out of device memory: the GPU
 * waits for its own signal, the host only at the end. */
Test(gpu_memory, a_copy_waits_for_a_gpu_kernel) {
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_write", gpu, &k));
  uint64_t *dev = alloc(AQ_REGION_DEVICE, 64), *host = alloc(AQ_REGION_KERNARG, 64);
  *host = 0;
  aq_queue_t qg;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qg));
  aq_signal_t written, copied;
  AQ_ASSERT_OK(aq_signal_create(1, &written));
  AQ_ASSERT_OK(aq_signal_create(1, &copied));
  for (uint64_t round = 1; round <= 20; ++round) {
    AQ_ASSERT_OK(aq_signal_store(written, 1));
    AQ_ASSERT_OK(aq_signal_store(copied, 1));
    write_args_t a = {dev, round * 11};
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &a, 1, 1, written);
    AQ_ASSERT_OK(aq_queue_submit(qg, &p, SEC, NULL));
    AQ_ASSERT_OK(aq_memory_copy_async(host, dev, 8, 1, &written, copied));
    aq_status_t s = aq_signal_wait(copied, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL);
    if (s != AQ_OK) {
      aq_signal_value_t w;
      aq_signal_load(written, &w);
      aq_signal_store(written, 0); /* frees the copy stream, so shutdown can finish */
      cr_assert_fail("round %llu: the copy did not complete (%s), kernel's signal %lld", (unsigned long long)round,
                     aq_status_string(s), (long long)w);
    }
    cr_assert_eq(*host, round * 11);
  }
  aq_signal_destroy(written), aq_signal_destroy(copied);
  aq_queue_destroy(qg);
  AQ_ASSERT_OK(aq_memory_free(dev));
  AQ_ASSERT_OK(aq_memory_free(host));
}

/* Managed memory: advice, a prefetch to the GPU, a kernel, a prefetch back. */
Test(gpu_memory, prefetch_and_advice_on_managed_memory) {
  enum { N = 4 << 20 };
  float *m = alloc(AQ_REGION_MANAGED, N * 4);
  for (uint32_t i = 0; i < N; ++i) m[i] = (float)(i % 1000);
  AQ_ASSERT_OK(aq_memory_advise(m, N * 4, AQ_ADVICE_PREFERRED_LOCATION, gpu));
  AQ_ASSERT_OK(aq_memory_advise(m, N * 4, AQ_ADVICE_ACCESSED_BY, cpu));
  aq_signal_t there, done;
  AQ_ASSERT_OK(aq_signal_create(1, &there));
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  AQ_ASSERT_OK(aq_memory_prefetch(m, N * 4, gpu, there));
  /* The kernel waits for the prefetch on the GPU (barrier-AND). */
  aq_queue_t qg;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qg));
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &there, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(qg, &b, SEC, NULL));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_add_one", gpu, &k));
  cr_assert_eq(k.kernarg_size, sizeof(add_one_args_t));
  add_one_args_t a = {m, N};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &a, N, 256, done);
  AQ_ASSERT_OK(aq_queue_submit(qg, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  AQ_ASSERT_OK(aq_memory_advise(m, N * 4, AQ_ADVICE_UNSET_PREFERRED_LOCATION, gpu));
  AQ_ASSERT_OK(aq_memory_prefetch(m, N * 4, cpu, (aq_signal_t){0})); /* synchronous */
  for (uint32_t i = 0; i < N; ++i) cr_assert_eq(m[i], (float)(i % 1000) + 1.0f, "m[%u] = %g", i, m[i]);
  AQ_ASSERT_OK(aq_memory_advise(m, N * 4, AQ_ADVICE_READ_MOSTLY, gpu));
  AQ_ASSERT_OK(aq_memory_advise(m, N * 4, AQ_ADVICE_UNSET_READ_MOSTLY, gpu));
  /* Bad input: beyond the allocation, and device memory is not managed. */
  cr_assert_eq(aq_memory_prefetch(m + 1, N * 4, gpu, (aq_signal_t){0}), AQ_ERROR_INVALID_ARGUMENT);
  float *dev = alloc(AQ_REGION_DEVICE, 4096);
  cr_assert_eq(aq_memory_advise(dev, 4096, AQ_ADVICE_READ_MOSTLY, gpu), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "not managed memory"), "%s", aq_last_error());
  aq_signal_destroy(there), aq_signal_destroy(done);
  aq_queue_destroy(qg);
  AQ_ASSERT_OK(aq_memory_free(m));
  AQ_ASSERT_OK(aq_memory_free(dev));
}

Test(gpu_memory, a_fatbin_without_code_for_this_gpu_is_refused_clearly) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  if (!strcmp(info.isa, "sm_80")) cr_skip_test("this GPU runs sm_80 code");
  aq_code_object_t other;
  aq_status_t s = aq_code_object_load("test-kernels-gpu-sm80.fatbin", &other);
  cr_assert_eq(s, AQ_ERROR_INCOMPATIBLE, "%s: %s", aq_status_string(s), aq_last_error());
  cr_assert(strstr(aq_last_error(), "has no code for") && strstr(aq_last_error(), info.isa), "%s", aq_last_error());
}

/* Allocations and queues a program forgets are released at shutdown while
 * the GPU's context still exists; the runtime starts again cleanly. */
Test(gpu_memory, what_is_left_alive_is_released_at_shutdown) {
  for (int round = 0; round < 2; ++round) {
    uint32_t *d = alloc(AQ_REGION_DEVICE, 1 << 20), *p = alloc(AQ_REGION_KERNARG, 1 << 20);
    float *m = alloc(AQ_REGION_MANAGED, 1 << 20);
    m[0] = 1;
    p[0] = 2;
    AQ_ASSERT_OK(aq_memory_copy(d, p, 4));
    aq_queue_t q;
    AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
    AQ_ASSERT_OK(aq_shut_down());
    AQ_ASSERT_OK(aq_init(NULL));
    aq_agent_t all[64];
    size_t n;
    AQ_ASSERT_OK(aq_agents(all, 64, &n));
    gpu.handle = 0;
    for (size_t i = 0; i < n; ++i) {
      aq_agent_info_t info;
      AQ_ASSERT_OK(aq_agent_get_info(all[i], &info));
      if (info.kind == AQ_AGENT_KIND_GPU && !gpu.handle) gpu = all[i];
    }
    cr_assert(gpu.handle, "the GPU agent is back after aq_init");
  }
}

/* HSA's rule: a completion signal is decremented once per packet. Packets
 * of one GPU queue that share it, all in flight at once, must each take one
 * off, and the signal reaches 0 only when the last has run. */
Test(gpu_memory, packets_in_flight_share_one_completion_signal) {
  enum { N = 1 << 16, K = 16 };
  float *m = alloc(AQ_REGION_MANAGED, N * 4);
  for (uint32_t i = 0; i < N; ++i) m[i] = 0;
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t gate, done;
  AQ_ASSERT_OK(aq_signal_create(1, &gate));
  AQ_ASSERT_OK(aq_signal_create(K, &done));
  /* A barrier holds the stream so every packet is processed before any runs. */
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &gate, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(q, &b, SEC, NULL));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_add_one", gpu, &k));
  add_one_args_t a = {m, N};
  for (int i = 0; i < K; ++i) {
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &a, N, 256, done);
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  }
  usleep(20000);
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_load(done, &v));
  cr_assert_eq(v, K, "nothing ran behind the barrier");
  aq_signal_store(gate, 0);
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  for (uint32_t i = 0; i < N; i += 997) cr_assert_eq(m[i], (float)K, "m[%u] = %g after %d kernels", i, m[i], K);
  aq_signal_destroy(gate), aq_signal_destroy(done);
  aq_queue_destroy(q);
  AQ_ASSERT_OK(aq_memory_free(m));
}
