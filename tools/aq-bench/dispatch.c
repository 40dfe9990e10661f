/* aq-bench dispatch: GPU dispatch through Aquila's AQL queues against the
 * raw CUDA driver API in the same process.
 *   empty       an empty kernel, N launches back to back (per launch)
 *   gpu_pair    two dependent kernels, launch to completion seen by the host
 *   cpu_to_gpu  a CPU task, then a GPU kernel waiting on it (barrier-AND on
 *               the CPU task's signal), submit to completion
 * The raw peer loads libcuda itself (dlopen): libaquila is not involved. */
#include <dlfcn.h>
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

static aq_status_t host_nop(void *r, uint64_t a, uint64_t b, uint64_t c) {
  (void)r, (void)a, (void)b, (void)c;
  return AQ_OK;
}

int aq_bench_dispatch(int argc, char **argv) {
  int reps = (int)bench_arg_int(argc, argv, "reps", 5), n = (int)bench_arg_int(argc, argv, "n", 20000);
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
  double *lat = calloc(ITERS, sizeof(double));
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
  /* cpu_to_gpu: host task -> barrier-AND on the GPU queue -> kernel */
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
      hsa_agent_dispatch_packet_t h;
      memset(&h, 0, sizeof(h));
      h.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
      h.type = AQ_AGENT_DISPATCH_HOST_CALL;
      h.arg[0] = (uint64_t)(uintptr_t)host_nop;
      h.completion_signal.handle = s1.handle;
      uint64_t t0 = bench_now_ns();
      aq_queue_submit(qc, &h, AQ_TIMEOUT_INFINITE, NULL);
      aq_signal_wait(s2, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
      lat[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    a[rep] = bench_median(lat, ITERS);
  }
  emit("aquila", "cpu_to_gpu", bench_median(a, (size_t)reps), 0, reps);
  free(a), free(r), free(lat);
  aq_queue_wait_idle(qg, AQ_TIMEOUT_INFINITE);
  aq_shut_down();
  return 0;
}
