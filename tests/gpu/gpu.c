/* GPU agents, for real where a GPU is; elsewhere each test says
 * "skipped: no GPU". Dispatch, barriers between CPU and GPU queues,
 * GPU-written signals, copies both ways, managed memory, a planted fault,
 * and a training graph placed on the GPU. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "kernels/cuda/launch.h"

static aq_agent_t gpu, cpu;

static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  gpu = first_agent(AQ_AGENT_KIND_GPU);
  cpu = first_agent(AQ_AGENT_KIND_CPU);
  if (!gpu.handle) {
    const char *why = "";
    aq_driver_status("cuda", &why);
    cr_log_warn("skipped: no GPU (%s)", why);
    aq_shut_down();
    cr_skip_test("skipped: no GPU");
  }
}
static void teardown(void) {
  if (gpu.handle) aq_shut_down();
}
TestSuite(gpu, .init = setup, .fini = teardown);

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

Test(gpu, agent_info_and_regions) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  cr_assert_str_eq(info.driver, "cuda");
  cr_assert_gt(info.compute_units, 0);
  cr_assert(!strncmp(info.isa, "sm_", 3), "%s", info.isa);
  region(gpu, AQ_REGION_DEVICE);
  region(gpu, AQ_REGION_MANAGED);
  region(gpu, AQ_REGION_KERNARG);
}

Test(gpu, copies_both_ways_and_managed_memory) {
  enum { N = 1 << 20 };
  float *host = malloc(N * 4), *back = malloc(N * 4), *dev, *managed;
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_DEVICE), N * 4, (void **)&dev));
  AQ_ASSERT_OK(aq_memory_copy(dev, host, N * 4));
  AQ_ASSERT_OK(aq_memory_copy(back, dev, N * 4));
  cr_assert_eq(memcmp(host, back, N * 4), 0);
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), N * 4, (void **)&managed));
  AQ_ASSERT_OK(aq_memory_copy(managed, dev, N * 4));
  cr_assert_eq(managed[N - 1], (float)(N - 1));
  /* Managed memory beyond what the GPU has free is refused up front. */
  void *huge;
  cr_assert_eq(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), (size_t)1 << 42, &huge), AQ_ERROR_OUT_OF_MEMORY);
  AQ_ASSERT_OK(aq_memory_free(dev));
  AQ_ASSERT_OK(aq_memory_free(managed));
  free(host), free(back);
}

typedef struct { uint64_t *out; uint64_t value; } write_args_t;
typedef struct { int *p; } gpu_fault_args_t;

static hsa_kernel_dispatch_packet_t one_thread(const aq_kernel_info_t *k, void *args, aq_signal_t done) {
  return dispatch_packet(k, args, 1, 1, done);
}

Test(gpu, dispatch_and_a_gpu_written_signal) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_write", gpu, &k));
  cr_assert_eq(k.kernarg_size, sizeof(write_args_t));
  uint64_t *out;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), 64, (void **)&out));
  *out = 0;
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  for (uint64_t v = 1; v <= 100; ++v) {
    write_args_t a = {out, v * 7};
    hsa_kernel_dispatch_packet_t p = one_thread(&k, &a, done);
    AQ_ASSERT_OK(aq_signal_store(done, 1));
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
    cr_assert_eq(*out, v * 7);
  }
  /* A CPU code object has no code for a GPU agent. */
  aq_code_object_t cpu_co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &cpu_co));
  cr_assert_eq(aq_code_object_find_kernel(cpu_co, "noop", gpu, &k), AQ_ERROR_INCOMPATIBLE);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_memory_free(out);
}

/* CPU queue -> GPU queue -> CPU: barrier-AND packets over signals the other
 * side completes, the GPU waiting on its stream. */
static aq_status_t set_flag(void *ret, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  usleep(20000); /* the GPU must really wait */
  *(uint64_t *)ret = a1;
  return AQ_OK;
}

Test(gpu, barriers_across_cpu_and_gpu_queues) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_write", gpu, &k));
  uint64_t *flag, *out;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), 64, (void **)&flag));
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), 64, (void **)&out));
  *flag = *out = 0;
  aq_queue_t qc, qg;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc));
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qg));
  aq_signal_t cpu_done, gpu_done, all_done;
  AQ_ASSERT_OK(aq_signal_create(1, &cpu_done));
  AQ_ASSERT_OK(aq_signal_create(1, &gpu_done));
  AQ_ASSERT_OK(aq_signal_create(1, &all_done));
  /* GPU: wait for the CPU's host call, then write 99. */
  hsa_barrier_and_packet_t b = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &cpu_done, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(qg, &b, SEC, NULL));
  write_args_t wa = {out, 99};
  hsa_kernel_dispatch_packet_t p = one_thread(&k, &wa, gpu_done);
  AQ_ASSERT_OK(aq_queue_submit(qg, &p, SEC, NULL));
  /* CPU: wait for the GPU in a barrier (submitted first), then finish. */
  hsa_barrier_and_packet_t b2 = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &gpu_done, 1, all_done);
  aq_queue_t qc2;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc2));
  AQ_ASSERT_OK(aq_queue_submit(qc2, &b2, SEC, NULL));
  hsa_agent_dispatch_packet_t h = {0};
  h.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  h.type = AQ_AGENT_DISPATCH_HOST_CALL;
  h.arg[0] = (uint64_t)(uintptr_t)set_flag;
  h.arg[1] = 5;
  h.return_address = flag;
  h.completion_signal.handle = cpu_done.handle;
  AQ_ASSERT_OK(aq_queue_submit(qc, &h, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(all_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(*flag, 5);
  cr_assert_eq(*out, 99);
  aq_signal_destroy(cpu_done), aq_signal_destroy(gpu_done), aq_signal_destroy(all_done);
  aq_queue_destroy(qc), aq_queue_destroy(qc2), aq_queue_destroy(qg);
}

static float train_loss(uint32_t kinds, int steps) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  enum { B = 64, IN = 40, H = 96, C = 10 };
  aq_tensor_t x, y, w1, b1, w2, b2, h, logits, loss;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &b1));
  AQ_ASSERT_OK(aq_tensor_init(g, b1, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, C}, &w2));
  AQ_ASSERT_OK(aq_tensor_create(g, "b2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){C}, &b2));
  AQ_ASSERT_OK(aq_tensor_init(g, b2, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT}));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, b1, 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, w2, b2, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t ps[4] = {w1, b1, w2, b2};
  aq_sgd_options_t o = {.lr = 0.2f, .momentum = 0.9f};
  for (int i = 0; i < 4; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(g, ps[i], &gr));
    AQ_ASSERT_OK(aq_op_sgd(g, ps[i], gr, &o));
  }
  aq_exec_t *e;
  aq_exec_options_t eo = {.kernel_agent_kinds = kinds};
  AQ_ASSERT_OK(aq_graph_instantiate(g, &eo, &e));
  static float xs[B * IN], w1s[IN * H], w2s[H * C];
  int32_t ys[B];
  unsigned seed = 7;
  for (int i = 0; i < B * IN; ++i) xs[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f;
  for (int i = 0; i < IN * H; ++i) w1s[i] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f - 0.5f) * 0.3f;
  for (int i = 0; i < H * C; ++i) w2s[i] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8 & 0xffff) / 65536.0f - 0.5f) * 0.3f;
  for (int i = 0; i < B; ++i) ys[i] = i % C;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  float l = 0;
  for (int s = 0; s < steps; ++s) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, loss, &l, sizeof(l)));
  }
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  return l;
}

Test(gpu, a_training_graph_on_the_gpu_matches_the_cpu) {
  float on_cpu = train_loss(1u << AQ_AGENT_KIND_CPU, 30), on_gpu = train_loss(1u << AQ_AGENT_KIND_GPU, 30);
  cr_assert(fabsf(on_cpu - on_gpu) < 1e-3f * (1 + on_cpu), "loss after 30 steps: cpu %g, gpu %g", on_cpu, on_gpu);
  cr_assert(on_gpu < 1.5f, "the GPU run learned: loss %g", on_gpu);
}

static uint32_t region_flags_of(aq_exec_t *e, aq_tensor_t t) {
  void *p;
  aq_region_t r;
  aq_region_info_t ri;
  AQ_ASSERT_OK(aq_exec_tensor_data(e, t, &p));
  AQ_ASSERT_OK(aq_memory_lookup(p, &r, NULL, NULL));
  AQ_ASSERT_OK(aq_region_get_info(r, &ri));
  return ri.flags;
}

/* The host reads a loss after every step: a small GPU result that no task
 * reads lives in pinned host memory (a load, not a copy, to read); the
 * parameters stay in device memory. */
Test(gpu, a_small_result_nothing_reads_is_in_pinned_memory) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w, logits, loss, grad;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){32, 64}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){32}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){64, 10}, &w));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  AQ_ASSERT_OK(aq_graph_gradient(g, w, &grad));
  AQ_ASSERT_OK(aq_op_sgd(g, w, grad, &(aq_sgd_options_t){.lr = 0.1f}));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU}, &e));
  cr_assert(region_flags_of(e, loss) & AQ_REGION_HOST_ACCESSIBLE, "the loss is in host-visible memory");
  cr_assert(!(region_flags_of(e, w) & AQ_REGION_HOST_ACCESSIBLE), "the parameter is in device memory");
  static float xs[32 * 64], ws[64 * 10];
  int32_t ys[32];
  for (int i = 0; i < 32 * 64; ++i) xs[i] = (float)(i % 7) / 7.0f;
  for (int i = 0; i < 64 * 10; ++i) ws[i] = (float)(i % 5) / 50.0f;
  for (int i = 0; i < 32; ++i) ys[i] = i % 10;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w, ws, sizeof(ws)));
  float first = 0, last = 0;
  for (int s = 0; s < 20; ++s) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, loss, s ? &last : &first, sizeof(float)));
  }
  cr_assert(first > 1.0f && last < first, "the loss read back each step falls: %g -> %g", first, last);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* AQ_MEMORY=unified: the GPU's tensors in managed memory, advised to live
 * on the GPU and prefetched around every host read and write; the same
 * training as in device memory. */
Test(gpu, a_training_graph_in_unified_memory_matches_device_memory) {
  float in_device = train_loss(1u << AQ_AGENT_KIND_GPU, 20);
  restart_with("AQ_MEMORY", "unified");
  gpu = first_agent(AQ_AGENT_KIND_GPU), cpu = first_agent(AQ_AGENT_KIND_CPU);
  float unified = train_loss(1u << AQ_AGENT_KIND_GPU, 20);
  restart_with("AQ_MEMORY", NULL);
  gpu = first_agent(AQ_AGENT_KIND_GPU), cpu = first_agent(AQ_AGENT_KIND_CPU);
  cr_assert(fabsf(in_device - unified) < 1e-5f * (1 + in_device), "loss after 20 steps: device %g, unified %g",
            in_device, unified);
  aq_region_info_t ri;
  aq_region_t r[8];
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(gpu, r, 8, &n));
  for (size_t i = 0; i < n; ++i) {
    AQ_ASSERT_OK(aq_region_get_info(r[i], &ri));
    cr_assert_eq(ri.in_use, 0, "region %s: %zu bytes still in use after the execs went", ri.name, (size_t)ri.in_use);
  }
}

/* Last: a faulting kernel makes the GPU unusable; the CPU agents go on. */
Test(gpu, a_planted_fault_fails_its_dependents_and_spares_the_cpu) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_fault", gpu, &k));
  aq_queue_t qg, qc;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &qg));
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &qc));
  aq_signal_t s1, s2;
  AQ_ASSERT_OK(aq_signal_create(1, &s1));
  AQ_ASSERT_OK(aq_signal_create(1, &s2));
  gpu_fault_args_t fa = {(int *)(uintptr_t)0x10};
  hsa_kernel_dispatch_packet_t p = one_thread(&k, &fa, s1);
  AQ_ASSERT_OK(aq_queue_submit(qg, &p, SEC, NULL));
  /* The illegal address surfaces at the next launch on that GPU. */
  usleep(200000);
  p = one_thread(&k, &fa, s2);
  AQ_ASSERT_OK(aq_queue_submit(qg, &p, SEC, NULL));
  aq_status_t st = aq_signal_wait(s2, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL);
  cr_assert_eq(st, AQ_ERROR_KERNEL_FAULT, "%s: %s", aq_status_string(st), aq_last_error());
  cr_assert(strstr(aq_last_error(), "gpu_fault"), "%s", aq_last_error());
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  cr_assert_eq(info.usable, 0, "the GPU is reported unusable until reset");
  /* The CPU agent still works. */
  aq_code_object_t cco;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &cco));
  aq_kernel_info_t noop;
  AQ_ASSERT_OK(aq_code_object_find_kernel(cco, "noop", cpu, &noop));
  aq_signal_t s3;
  AQ_ASSERT_OK(aq_signal_create(1, &s3));
  p = dispatch_packet(&noop, NULL, 1, 1, s3);
  AQ_ASSERT_OK(aq_queue_submit(qc, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(s3, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
}

/* A packet's group_segment_size is the work-group's dynamic shared memory:
 * past CUDA's default 48 KB the driver raises the kernel's limit; past what
 * the GPU offers, the packet fails naming the kernel and the GPU stays
 * usable. */
Test(gpu, group_segments_past_48k_and_too_large) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-gpu.fatbin", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "gpu_group_size", gpu, &k));
  uint32_t *out;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), 64, (void **)&out));
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(gpu, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  const uint32_t sizes[] = {1024, 100 * 1024, 64 << 20, 2048};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    *out = 1;
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &out, 64, 64, done);
    p.group_segment_size = sizes[i];
    AQ_ASSERT_OK(aq_signal_store(done, 1));
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    aq_status_t st = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL);
    if (sizes[i] == 64 << 20) {
      cr_assert_eq(st, AQ_ERROR_INVALID_PACKET, "%s: %s", aq_status_string(st), aq_last_error());
      cr_assert(strstr(aq_last_error(), "gpu_group_size") && strstr(aq_last_error(), "group segment"), "%s",
                aq_last_error());
      cr_assert_eq(*out, 1, "the kernel did not run");
      aq_status_t err;
      AQ_ASSERT_OK(aq_signal_get_error(done, 1, &err)); /* the failure is reset: the next packet stands alone */
    } else {
      cr_assert_eq(st, AQ_OK, "%u bytes: %s", sizes[i], aq_last_error());
      cr_assert_eq(*out, sizes[i]);
    }
  }
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(gpu, &info));
  cr_assert(info.usable, "a refused packet leaves the GPU usable");
  aq_signal_destroy(done);
  aq_queue_destroy(q);
  aq_memory_free(out);
}

/* The op library on the GPU against the CPU's, kernel by kernel, on the
 * same inputs (managed memory, reachable from both). */
static float *managed(size_t n) {
  float *p;
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_MANAGED), n * 4, (void **)&p));
  return p;
}

static void run_on(aq_agent_t agent, aq_code_object_t co, const char *name, const void *args, aq_dispatch_shape_t s,
                   int is_gpu) {
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, name, agent, &k));
  if (is_gpu) s = aq_gpu_shape(name, args, s);
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, args, s.grid[0], s.workgroup[0], done);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.grid_size_y = s.grid[1], p.grid_size_z = s.grid[2];
  p.workgroup_size_y = s.workgroup[1], p.workgroup_size_z = s.workgroup[2];
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(gpu, op_kernels_agree_with_the_cpu_ones) {
  aq_code_object_t cco, gco;
  AQ_ASSERT_OK(aq_code_object_load("kernels-cpu.so", &cco));
  AQ_ASSERT_OK(aq_code_object_load("kernels-cuda.fatbin", &gco));
  enum { N = 4096, R = 16, C = 256 };
  float *x = managed(N), *dy = managed(N), *yc = managed(N), *yg = managed(N);
  for (int i = 0; i < N; ++i) x[i] = (float)((i * 37) % 101) / 25.0f - 2.0f, dy[i] = (float)((i * 11) % 13) / 6.0f - 1.0f;
  const char *unary[] = {AQ_KERNEL_SIGMOID, AQ_KERNEL_TANH, AQ_KERNEL_GELU, AQ_KERNEL_RELU, AQ_KERNEL_GELU_BWD,
                         AQ_KERNEL_TANH_BWD, AQ_KERNEL_SIGMOID_BWD, AQ_KERNEL_RELU_BWD};
  for (size_t u = 0; u < sizeof(unary) / sizeof(unary[0]); ++u) {
    aq_unary_args_t ac = {x, dy, yc, N}, ag = {x, dy, yg, N};
    run_on(cpu, cco, unary[u], &ac, aq_elementwise_grid(N), 0);
    run_on(gpu, gco, unary[u], &ag, aq_elementwise_grid(N), 1);
    for (int i = 0; i < N; ++i) cr_assert(fabsf(yc[i] - yg[i]) < 1e-5f * (1 + fabsf(yc[i])), "%s[%d]: cpu %g gpu %g", unary[u], i, yc[i], yg[i]);
  }
  const char *rows[] = {AQ_KERNEL_SOFTMAX, AQ_KERNEL_LOG_SOFTMAX};
  for (int k = 0; k < 2; ++k) {
    aq_softmax_args_t ac = {x, NULL, NULL, yc, R, C}, ag = {x, NULL, NULL, yg, R, C};
    run_on(cpu, cco, rows[k], &ac, aq_rows_grid(R), 0);
    run_on(gpu, gco, rows[k], &ag, aq_rows_grid(R), 1);
    for (int i = 0; i < R * C; ++i) cr_assert(fabsf(yc[i] - yg[i]) < 1e-5f * (1 + fabsf(yc[i])), "%s[%d]", rows[k], i);
  }
  aq_dropout_args_t dc = {x, yc, N, 77, 0.25f, 0}, dg = {x, yg, N, 77, 0.25f, 0};
  run_on(cpu, cco, AQ_KERNEL_DROPOUT, &dc, aq_elementwise_grid(N), 0);
  run_on(gpu, gco, AQ_KERNEL_DROPOUT, &dg, aq_elementwise_grid(N), 1);
  for (int i = 0; i < N; ++i) cr_assert_eq(yc[i], yg[i], "dropout[%d]: the same seed drops the same elements", i);
  float *mc = managed(R), *rc = managed(R), *mg = managed(R), *rg = managed(R);
  aq_layer_norm_args_t lc = {x, NULL, NULL, yc, mc, rc, NULL, NULL, NULL, NULL, R, C, 1e-5f, 0};
  aq_layer_norm_args_t lg = {x, NULL, NULL, yg, mg, rg, NULL, NULL, NULL, NULL, R, C, 1e-5f, 0};
  run_on(cpu, cco, AQ_KERNEL_LAYER_NORM, &lc, aq_rows_grid(R), 0);
  run_on(gpu, gco, AQ_KERNEL_LAYER_NORM, &lg, aq_rows_grid(R), 1);
  for (int i = 0; i < R * C; ++i) cr_assert(fabsf(yc[i] - yg[i]) < 1e-4f, "layer_norm[%d]", i);
  uint16_t *bc = (uint16_t *)managed(N), *bg = (uint16_t *)managed(N);
  aq_cast_args_t cc = {x, bc, N}, cg = {x, bg, N};
  run_on(cpu, cco, AQ_KERNEL_CAST_F32_BF16, &cc, aq_elementwise_grid(N), 0);
  run_on(gpu, gco, AQ_KERNEL_CAST_F32_BF16, &cg, aq_elementwise_grid(N), 1);
  cr_assert_eq(memcmp(bc, bg, N * 2), 0, "bf16 casts agree bit for bit");
}

/* aq_exec_bind with a GPU reader: memory from the GPU's own regions, one
 * buffer and then another (double-buffering with no copy in the graph);
 * host memory the GPU cannot reach, and device memory for a CPU reader, are
 * refused by name and change nothing. */
Test(gpu, an_input_bound_to_gpu_buffers_in_turn_is_read_in_place) {
  enum { N = 1024 };
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){N}, &x));
  AQ_ASSERT_OK(aq_op_relu(g, x, &y));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU}, &e));
  aq_region_t r[8], device = {0};
  size_t n;
  AQ_ASSERT_OK(aq_agent_regions(gpu, r, 8, &n));
  for (size_t i = 0; i < n && !device.handle; ++i) {
    aq_region_info_t info;
    AQ_ASSERT_OK(aq_region_get_info(r[i], &info));
    if (!(info.flags & AQ_REGION_HOST_ACCESSIBLE)) device = r[i];
  }
  cr_assert(device.handle, "no device region");
  static float host[2][N], out[N];
  float *d[2], *pinned, *small;
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < N; ++i) host[k][i] = (float)(k ? -i : i);
    AQ_ASSERT_OK(aq_memory_allocate(device, sizeof(host[k]), (void **)&d[k]));
    AQ_ASSERT_OK(aq_memory_copy(d[k], host[k], sizeof(host[k])));
  }
  AQ_ASSERT_OK(aq_memory_allocate(region(gpu, AQ_REGION_HOST_ACCESSIBLE), sizeof(host[0]), (void **)&pinned));
  AQ_ASSERT_OK(aq_memory_allocate(device, sizeof(host[0]) / 2, (void **)&small));
  float *plain = aligned_alloc(64, sizeof(host[0]));
  cr_assert_eq(aq_exec_bind(e, x, plain, sizeof(host[0])), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "reaches only memory allocated from its regions"), "%s", aq_last_error());
  cr_assert_eq(aq_exec_bind(e, x, small, sizeof(host[0])), AQ_ERROR_INVALID_ARGUMENT, "past the allocation's end");
  for (int round = 0; round < 3; ++round) {
    int k = round % 2;
    AQ_ASSERT_OK(aq_exec_bind(e, x, d[k], sizeof(host[k])));
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
    cr_assert_eq(out[100], k ? 0.0f : 100.0f, "round %d reads buffer %d: %g", round, k, out[100]);
  }
  for (int i = 0; i < N; ++i) pinned[i] = 3.0f;
  AQ_ASSERT_OK(aq_exec_bind(e, x, pinned, sizeof(host[0])));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert_eq(out[N - 1], 3.0f, "pinned memory, read in place");
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* Read on the CPU, device memory is refused; pinned memory is host memory. */
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU}, &e));
  cr_assert_eq(aq_exec_bind(e, x, d[0], sizeof(host[0])), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "on CPU agent") && strstr(aq_last_error(), "device memory"), "%s",
            aq_last_error());
  AQ_ASSERT_OK(aq_exec_bind(e, x, pinned, sizeof(host[0])));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, y, out, sizeof(out)));
  cr_assert_eq(out[0], 3.0f, "pinned memory, read in place by the CPU");
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  for (int k = 0; k < 2; ++k) aq_memory_free(d[k]);
  aq_memory_free(pinned), aq_memory_free(small), free(plain);
}
