/* aq-bench dispatch: GPU dispatch through Aquila's AQL queues against the
 * raw CUDA driver API in the same process.
 *   empty       an empty kernel, N launches back to back (per launch)
 *   gpu_pair    two dependent kernels, launch to completion seen by the host
 *   cpu_to_gpu  a CPU task, then a GPU kernel waiting on it (barrier-AND on
 *               the CPU task's signal), submit to completion (median_us) and
 *               CPU task's end to completion (edge_us); the raw peer: a
 *               stream waiting on a host word the host then sets
 * The raw peer loads libcuda itself (dlopen): libaquila is not involved. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "bench.h"

static struct {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*ctx_retain)(void **, int);
  int (*ctx_set)(void *);
  int (*module_load)(void **, const void *);
  int (*get_function)(void **, void *, const char *);
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
  int (*host_register)(void *, size_t, unsigned);
  int (*host_device_pointer)(uint64_t *, void *, unsigned);
  int (*wait_value)(void *, uint64_t, uint64_t, unsigned);
  int (*write_value)(void *, uint64_t, uint64_t, unsigned);
} raw;

static int load_raw(const char *fatbin_path, void **fn, void **stream) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  *(void **)&raw.init = dlsym(h, "cuInit");
  *(void **)&raw.device_get = dlsym(h, "cuDeviceGet");
  *(void **)&raw.ctx_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&raw.ctx_set = dlsym(h, "cuCtxSetCurrent");
  *(void **)&raw.module_load = dlsym(h, "cuModuleLoadData");
  *(void **)&raw.get_function = dlsym(h, "cuModuleGetFunction");
  *(void **)&raw.launch = dlsym(h, "cuLaunchKernel");
  *(void **)&raw.stream_create = dlsym(h, "cuStreamCreate");
  *(void **)&raw.stream_sync = dlsym(h, "cuStreamSynchronize");
  *(void **)&raw.host_register = dlsym(h, "cuMemHostRegister_v2");
  *(void **)&raw.host_device_pointer = dlsym(h, "cuMemHostGetDevicePointer_v2");
  *(void **)&raw.wait_value = dlsym(h, "cuStreamWaitValue64_v2");
  *(void **)&raw.write_value = dlsym(h, "cuStreamWriteValue64_v2");
  FILE *f = fopen(fatbin_path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *bytes = malloc((size_t)n);
  if (fread(bytes, 1, (size_t)n, f) != (size_t)n) n = 0;
  fclose(f);
  int dev;
  void *ctx, *mod;
  if (!n || raw.init(0) || raw.device_get(&dev, 0) || raw.ctx_retain(&ctx, dev) || raw.ctx_set(ctx) ||
      raw.module_load(&mod, bytes) || raw.get_function(fn, mod, "aq_noop") || raw.stream_create(stream, 1))
    return -1;
  return 0;
}

static void emit(const char *impl, const char *c, double us, double ratio, int reps) {
  bench_json_t j;
  bench_json_begin(&j, "dispatch", impl);
  bench_json_str(&j, "case", c);
  bench_json_num(&j, "median_us", us);
  if (ratio > 0) bench_json_num(&j, "ratio", ratio);
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
}

/* The CPU task: notes when it ran, so the edge itself (CPU task done -> GPU
 * kernel done, seen by the host) is measured beside the whole chain. */
static _Atomic uint64_t cpu_task_ns;
static aq_status_t host_nop(void *r, uint64_t a, uint64_t b, uint64_t c) {
  (void)r, (void)a, (void)b, (void)c;
  atomic_store(&cpu_task_ns, bench_now_ns());
  return AQ_OK;
}

/* The raw peer of a CPU -> GPU edge: the stream waits on a host word, runs
 * the kernel and writes a second word; the host sets the first and polls the
 * second. Median microseconds, 0 if the stream memory operations are missing. */
static double raw_host_to_gpu(void *fn, void *stream, double *lat, int iters, int reps) {
  static _Alignas(64) volatile uint64_t words[8];
  uint64_t dev = 0;
  if (!raw.host_register || !raw.wait_value || !raw.write_value ||
      raw.host_register((void *)words, sizeof(words), 2 /* DEVICEMAP */) ||
      raw.host_device_pointer(&dev, (void *)words, 0))
    return 0;
  double *med = calloc((size_t)reps, sizeof(double));
  for (int rep = 0; rep < reps; ++rep) {
    for (int i = 0; i < iters; ++i) {
      words[0] = 1, words[1] = 1;
      raw.wait_value(stream, dev, 0, 1 /* EQ */);
      raw.launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
      raw.write_value(stream, dev + 8, 0, 0);
      uint64_t t0 = bench_now_ns();
      __atomic_store_n(&words[0], 0, __ATOMIC_RELEASE);
      while (__atomic_load_n(&words[1], __ATOMIC_ACQUIRE) != 0) {
      }
      lat[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    raw.stream_sync(stream);
    med[rep] = bench_median(lat, (size_t)iters);
  }
  double m = bench_median(med, (size_t)reps);
  free(med);
  return m;
}

static const cli_option_t dispatch_options[] = {
    BENCH_REPS(5),
    {"n", 0, CLI_INT, "N", "kernels per measurement (default 20000)", 1, 1e9},
};

int aq_bench_dispatch(int argc, char **argv) {
  BENCH_OPTIONS("dispatch", dispatch_options, argc, argv);
  int reps = (int)bench_arg_int("reps", 5), n = (int)bench_arg_int("n", 20000);
  if (aq_init(NULL) != AQ_OK) return fprintf(stderr, "aq-bench dispatch: %s\n", aq_last_error()), 1;
  aq_agent_t all[64], gpu = {0}, cpu = {0};
  size_t na;
  aq_agents(all, 64, &na);
  for (size_t i = 0; i < na; ++i) {
    aq_agent_info_t info;
    aq_agent_get_info(all[i], &info);
    if (info.kind == AQ_AGENT_KIND_GPU && !gpu.handle) gpu = all[i];
    if (info.kind == AQ_AGENT_KIND_CPU && !cpu.handle) cpu = all[i];
  }
  if (!gpu.handle) {
    const char *why = "";
    aq_driver_status("cuda", &why);
    fprintf(stderr, "aq-bench dispatch: no GPU agent (%s)\n", why);
    return 2;
  }
  aq_code_object_t co;
  aq_kernel_info_t k;
  aq_code_object_info_t coi;
  if (aq_code_object_load("kernels-cuda.fatbin", &co) || aq_code_object_find_kernel(co, "aq_noop", gpu, &k) ||
      aq_code_object_get_info(co, &coi))
    return fprintf(stderr, "aq-bench dispatch: %s\n", aq_last_error()), 1;
  void *rfn, *rstream;
  if (load_raw(coi.path, &rfn, &rstream)) return fprintf(stderr, "aq-bench dispatch: raw CUDA failed\n"), 1;
  aq_queue_t qg, qc;
  aq_queue_options_t qo = {.size = 32768};
  aq_queue_create(gpu, &qo, &qg);
  aq_queue_create(cpu, NULL, &qc);
  aq_signal_t s1, s2;
  aq_signal_create(0, &s1);
  aq_signal_create(0, &s2);
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1;
  p.workgroup_size_x = p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = k.kernel_object;
  double *a = calloc((size_t)reps, sizeof(double)), *r = calloc((size_t)reps, sizeof(double));
  /* empty: throughput of N launches */
  for (int rep = -1; rep < reps; ++rep) {
    aq_signal_store(s1, 1);
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < n; ++i) {
      p.completion_signal.handle = i == n - 1 ? s1.handle : 0;
      aq_queue_submit(qg, &p, AQ_TIMEOUT_INFINITE, NULL);
    }
    aq_signal_wait(s1, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
    if (rep >= 0) a[rep] = (double)(bench_now_ns() - t0) / 1e3 / n;
    t0 = bench_now_ns();
    for (int i = 0; i < n; ++i) raw.launch(rfn, 1, 1, 1, 1, 1, 1, 0, rstream, NULL, NULL);
    raw.stream_sync(rstream);
    if (rep >= 0) r[rep] = (double)(bench_now_ns() - t0) / 1e3 / n;
  }
  double ma = bench_median(a, (size_t)reps), mr = bench_median(r, (size_t)reps);
  emit("cuda", "empty", mr, 0, reps);
  emit("aquila", "empty", ma, ma / mr, reps);
  /* gpu_pair: two dependent kernels (in order on one queue / stream) */
  enum { ITERS = 2000 };
  double *lat = calloc(ITERS, sizeof(double)), *edge = calloc(ITERS, sizeof(double));
  for (int rep = 0; rep < reps; ++rep) {
    for (int i = 0; i < ITERS; ++i) {
      aq_signal_store(s1, 1);
      uint64_t t0 = bench_now_ns();
      p.completion_signal.handle = 0;
      aq_queue_submit(qg, &p, AQ_TIMEOUT_INFINITE, NULL);
      p.header |= 1 << HSA_PACKET_HEADER_BARRIER;
      p.completion_signal.handle = s1.handle;
      aq_queue_submit(qg, &p, AQ_TIMEOUT_INFINITE, NULL);
      p.header &= (uint16_t)~(1 << HSA_PACKET_HEADER_BARRIER);
      aq_signal_wait(s1, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
      lat[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    a[rep] = bench_median(lat, ITERS);
    for (int i = 0; i < ITERS; ++i) {
      uint64_t t0 = bench_now_ns();
      raw.launch(rfn, 1, 1, 1, 1, 1, 1, 0, rstream, NULL, NULL);
      raw.launch(rfn, 1, 1, 1, 1, 1, 1, 0, rstream, NULL, NULL);
      raw.stream_sync(rstream);
      lat[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    r[rep] = bench_median(lat, ITERS);
  }
  ma = bench_median(a, (size_t)reps), mr = bench_median(r, (size_t)reps);
  emit("cuda", "gpu_pair", mr, 0, reps);
  emit("aquila", "gpu_pair", ma, ma / mr, reps);
  /* cpu_to_gpu: host task -> barrier-AND on the GPU queue -> kernel. Two
   * ways: "racing", all three packets submitted back to back (the GPU queue's
   * processor is still putting the barrier and kernel on the stream when the
   * CPU task ends), and "prequeued", the CPU task submitted once the GPU side
   * is on the stream (as in a graph whose CPU task takes a while). */
  for (int prequeued = 0; prequeued < 2; ++prequeued) {
    for (int rep = 0; rep < reps; ++rep) {
      for (int i = 0; i < ITERS; ++i) {
        aq_signal_store(s1, 1);
        aq_signal_store(s2, 1);
        hsa_barrier_and_packet_t b;
        memset(&b, 0, sizeof(b));
        b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
        b.dep_signal[0].handle = s1.handle;
        aq_queue_submit(qg, &b, AQ_TIMEOUT_INFINITE, NULL);
        p.completion_signal.handle = s2.handle;
        aq_queue_submit(qg, &p, AQ_TIMEOUT_INFINITE, NULL);
        if (prequeued) aq_queue_wait_idle(qg, AQ_TIMEOUT_INFINITE);
        hsa_agent_dispatch_packet_t h;
        memset(&h, 0, sizeof(h));
        h.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
        h.type = AQ_AGENT_DISPATCH_HOST_CALL;
        h.arg[0] = (uint64_t)(uintptr_t)host_nop;
        h.completion_signal.handle = s1.handle;
        uint64_t t0 = bench_now_ns();
        aq_queue_submit(qc, &h, AQ_TIMEOUT_INFINITE, NULL);
        aq_signal_wait(s2, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
        uint64_t t1 = bench_now_ns();
        lat[i] = (double)(t1 - t0) / 1e3;
        edge[i] = (double)(t1 - atomic_load(&cpu_task_ns)) / 1e3;
      }
      a[rep] = bench_median(lat, ITERS);
      r[rep] = bench_median(edge, ITERS);
    }
    /* median_us: CPU task submitted -> GPU kernel's completion seen by the
     * host; edge_us: from the end of the CPU task to the same point. */
    double peer = prequeued ? raw_host_to_gpu(rfn, rstream, lat, ITERS, reps) : 0;
    bench_json_t j;
    if (peer > 0) {
      bench_json_begin(&j, "dispatch", "cuda");
      bench_json_str(&j, "case", "cpu_to_gpu");
      bench_json_str(&j, "gpu_side", "prequeued");
      bench_json_num(&j, "median_us", peer);
      bench_json_num(&j, "edge_us", peer);
      bench_json_int(&j, "reps", reps);
      bench_json_end(&j);
    }
    bench_json_begin(&j, "dispatch", "aquila");
    bench_json_str(&j, "case", "cpu_to_gpu");
    bench_json_str(&j, "gpu_side", prequeued ? "prequeued" : "racing");
    bench_json_num(&j, "median_us", bench_median(a, (size_t)reps));
    bench_json_num(&j, "edge_us", bench_median(r, (size_t)reps));
    if (peer > 0) bench_json_num(&j, "ratio", bench_median(r, (size_t)reps) / peer);
    bench_json_int(&j, "reps", reps);
    bench_json_end(&j);
  }
  free(a), free(r), free(lat), free(edge);
  aq_queue_wait_idle(qg, AQ_TIMEOUT_INFINITE);
  aq_shut_down();
  return 0;
}
