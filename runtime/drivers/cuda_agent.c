/* The cuda driver: NVIDIA GPUs through the CUDA driver API, loaded at run
 * time. One agent per device (its primary context), three regions (device,
 * pinned host, managed), queues drained by a packet-processor thread each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/drivers/cuda.h"
#include "runtime/memory.h"
#include "runtime/status.h"

enum { REGION_DEVICE = 1, REGION_PINNED = 2, REGION_MANAGED = 3 };

static cuda_agent_t *agents[AQ_AGENTS_MAX];
static uint32_t agent_count;
static CUdeviceptr pool_device;
static int pool_registered;

CUdeviceptr aq_cuda_signal_address(const aq_signal_slot_t *slot) {
  return pool_device + (CUdeviceptr)((const char *)slot - (const char *)aq_signal_pool.slots);
}

aq_status_t aq_cuda_bind(cuda_agent_t *a) {
  CUresult r = aq_cu.cuCtxSetCurrent(a->context);
  return r == CUDA_SUCCESS ? AQ_OK
                           : aq_error(AQ_ERROR_UNAVAILABLE, "%s: cuCtxSetCurrent: %s", a->agent->info.name, aq_cuda_error(r));
}
uint32_t aq_cuda_agent_count(void) { return agent_count; }
cuda_agent_t *aq_cuda_agent_at(uint32_t index) { return agents[index]; }

/* The NUMA node nearest the GPU, from its PCI address; -1 (unknown) if the
 * driver cannot say. */
static int numa_of(CUdevice d, const char *name) {
  int domain = 0, bus = 0, dev = 0;
  if (!aq_cuda_checked(aq_cu.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d),
                       "cuDeviceGetAttribute(PCI domain)", name) ||
      !aq_cuda_checked(aq_cu.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d),
                       "cuDeviceGetAttribute(PCI bus)", name) ||
      !aq_cuda_checked(aq_cu.cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d),
                       "cuDeviceGetAttribute(PCI device)", name))
    return -1;
  return aq_topology_pci_numa_node((unsigned)domain, (unsigned)bus, (unsigned)dev, 0);
}

/* What an agent is made from: without any of it, no agent. */
static aq_status_t describe(cuda_agent_t *a, int ordinal, int *sms, int *major, int *minor, size_t *total) {
  static const struct { int attr; const char *what; } q[] = {
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "concurrent managed access"},
  };
  int *out[] = {sms, major, minor, &a->concurrent_managed};
  CUresult r = aq_cu.cuCtxSetCurrent(a->context);
  if (r != CUDA_SUCCESS) return aq_error(AQ_ERROR_UNAVAILABLE, "GPU %d: cuCtxSetCurrent: %s", ordinal, aq_cuda_error(r));
  for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); ++i)
    if ((r = aq_cu.cuDeviceGetAttribute(out[i], q[i].attr, a->device)) != CUDA_SUCCESS)
      return aq_error(AQ_ERROR_UNAVAILABLE, "GPU %d: cuDeviceGetAttribute(%s): %s", ordinal, q[i].what,
                      aq_cuda_error(r));
  size_t free_bytes = 0;
  if ((r = aq_cu.cuMemGetInfo(&free_bytes, total)) != CUDA_SUCCESS)
    return aq_error(AQ_ERROR_UNAVAILABLE, "GPU %d: cuMemGetInfo: %s", ordinal, aq_cuda_error(r));
  return AQ_OK;
}

static aq_status_t add_regions(cuda_agent_t *a, size_t total) {
  static const struct { int kind; const char *suffix; uint32_t flags; } r[] = {
      {REGION_DEVICE, "device", AQ_REGION_DEVICE | AQ_REGION_COARSE_GRAINED},
      {REGION_PINNED, "pinned", AQ_REGION_HOST_ACCESSIBLE | AQ_REGION_FINE_GRAINED | AQ_REGION_KERNARG},
      {REGION_MANAGED, "managed", AQ_REGION_MANAGED | AQ_REGION_HOST_ACCESSIBLE | AQ_REGION_COARSE_GRAINED},
  };
  for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); ++i) {
    aq_region_info_t info = {.flags = r[i].flags, .numa_node = a->agent->info.numa_node,
                             .size = r[i].kind == REGION_PINNED ? 0 : total, .alignment = 256};
    snprintf(info.name, sizeof(info.name), "%s.%s", a->agent->info.name, r[i].suffix);
    AQ_RETURN_IF_ERROR(aq_region_register(a->agent, &info, (void *)(uintptr_t)r[i].kind, NULL));
  }
  return AQ_OK;
}

static aq_status_t register_pool(void) {
  if (pool_registered) return AQ_OK;
  size_t bytes = (size_t)aq_signal_pool.capacity * sizeof(aq_signal_slot_t);
  CUresult r = aq_cu.cuMemHostRegister(aq_signal_pool.slots, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r == CUDA_SUCCESS) r = aq_cu.cuMemHostGetDevicePointer(&pool_device, aq_signal_pool.slots, 0);
  if (r != CUDA_SUCCESS)
    return aq_error(AQ_ERROR_UNAVAILABLE, "cannot map the signal pool for the GPU: %s", aq_cuda_error(r));
  pool_registered = 1;
  return AQ_OK;
}

static aq_status_t add_agent(int ordinal) {
  CUdevice d;
  CUresult r = aq_cu.cuDeviceGet(&d, ordinal);
  cuda_agent_t *a = calloc(1, sizeof(*a));
  if (!a) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a GPU agent");
  if (r == CUDA_SUCCESS) r = aq_cu.cuDevicePrimaryCtxRetain(&a->context, d);
  if (r != CUDA_SUCCESS) {
    free(a);
    return aq_error(AQ_ERROR_UNAVAILABLE, "GPU %d: %s", ordinal, aq_cuda_error(r));
  }
  a->device = d;
  int sms = 0, major = 0, minor = 0;
  size_t total = 0;
  aq_agent_info_t info = {.kind = AQ_AGENT_KIND_GPU, .queue_max_size = 1u << 16, .queues_max = 64,
                          .workgroup_max_size = 1024, .features = AQ_FEATURE_KERNEL_DISPATCH, .usable = 1};
  snprintf(info.name, sizeof(info.name), "cuda%d", ordinal);
  aq_status_t s = describe(a, ordinal, &sms, &major, &minor, &total);
  if (s == AQ_OK) s = aq_cuda_copy_streams_create(a);
  if (s == AQ_OK) {
    info.numa_node = numa_of(d, info.name), info.compute_units = (uint32_t)sms;
    if (!aq_cuda_checked(aq_cu.cuDeviceGetName(info.device, sizeof(info.device), d), "cuDeviceGetName", info.name))
      snprintf(info.device, sizeof(info.device), "NVIDIA GPU %d", ordinal);
    snprintf(info.driver, sizeof(info.driver), "cuda");
    snprintf(info.isa, sizeof(info.isa), "sm_%d%d", major, minor);
    s = aq_agent_register(&aq_driver_cuda, &info, a, &a->agent);
    if (s != AQ_OK) aq_cuda_copy_streams_destroy(a, info.name);
  }
  if (s != AQ_OK) {
    aq_cuda_checked(aq_cu.cuDevicePrimaryCtxRelease(d), "cuDevicePrimaryCtxRelease", info.name);
    free(a);
    return s;
  }
  a->index = agent_count;
  agents[agent_count++] = a;
  return add_regions(a, total);
}

/* Each GPU's kernels reach every other GPU's device memory where the pair
 * has peer access: a graph placed over several GPUs then reads a tensor
 * where it lives (over NVLink) instead of failing or copying. A pair
 * without it (PCIe without P2P) keeps its memory apart, and the scheduler
 * puts what both touch in pinned host memory (cuda_region_reachable). */
static aq_status_t enable_peers(void) {
  for (uint32_t i = 0; i < agent_count; ++i)
    for (uint32_t j = 0; j < agent_count; ++j) {
      int can = 0;
      if (i == j || aq_cu.cuDeviceCanAccessPeer(&can, agents[i]->device, agents[j]->device) != CUDA_SUCCESS || !can)
        continue;
      AQ_RETURN_IF_ERROR(aq_cuda_bind(agents[i]));
      CUresult r = aq_cu.cuCtxEnablePeerAccess(agents[j]->context, 0);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        return aq_error(AQ_ERROR_UNAVAILABLE, "%s cannot reach %s's memory: %s", agents[i]->agent->info.name,
                        agents[j]->agent->info.name, aq_cuda_error(r));
      agents[i]->peers |= 1ull << j;
    }
  return AQ_OK;
}

static aq_status_t cuda_start(void) {
  char why[256];
  if (aq_cuda_api_load(why, sizeof(why))) return aq_error(AQ_ERROR_UNAVAILABLE, "%s", why);
  CUresult r = aq_cu.cuInit(0);
  int n = 0;
  if (r == CUDA_SUCCESS) r = aq_cu.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS) return aq_error(AQ_ERROR_UNAVAILABLE, "cuInit: %s", aq_cuda_error(r));
  if (n == 0) return aq_error(AQ_ERROR_UNAVAILABLE, "the CUDA driver sees no GPU");
  aq_cuda_code_objects_init();
  for (int i = 0; i < n && i < 64; ++i) AQ_RETURN_IF_ERROR(add_agent(i));
  AQ_RETURN_IF_ERROR(enable_peers());
  return register_pool();
}

static void cuda_stop(void) {
  /* Copies still in flight write signals: finish them before the pool goes. */
  for (uint32_t i = 0; i < agent_count; ++i) aq_cuda_copy_streams_destroy(agents[i], agents[i]->agent->info.name);
  if (pool_registered)
    aq_cuda_checked(aq_cu.cuMemHostUnregister(aq_signal_pool.slots), "cuMemHostUnregister", "the signal pool");
  pool_registered = 0;
  for (uint32_t i = 0; i < agent_count; ++i) {
    aq_cuda_checked(aq_cu.cuDevicePrimaryCtxRelease(agents[i]->device), "cuDevicePrimaryCtxRelease",
                    agents[i]->agent->info.name);
    free(agents[i]);
  }
  agent_count = 0;
  aq_cuda_code_objects_deinit();
}

/* A queue's stream; AQ_QUEUE_HIGH_PRIORITY: at the context's greatest
 * priority, where the driver has stream priorities. */
static CUresult create_stream(const aq_queue_impl_t *queue, CUstream *out) {
  int least, greatest;
  if ((queue->flags & AQ_QUEUE_HIGH_PRIORITY) && aq_cu.cuStreamCreateWithPriority && aq_cu.cuCtxGetStreamPriorityRange &&
      aq_cu.cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS)
    return aq_cu.cuStreamCreateWithPriority(out, CU_STREAM_NON_BLOCKING, greatest);
  return aq_cu.cuStreamCreate(out, CU_STREAM_NON_BLOCKING);
}

static aq_status_t cuda_queue_attach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  cuda_agent_t *a = agent->driver_data;
  cuda_queue_t *cq = calloc(1, sizeof(*cq));
  if (!cq) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a GPU queue");
  cq->queue = queue;
  cq->agent = a;
  CUresult r = aq_cu.cuCtxSetCurrent(a->context);
  if (r == CUDA_SUCCESS) r = create_stream(queue, &cq->stream);
  if (r != CUDA_SUCCESS) {
    free(cq);
    return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "%s: cannot create a stream: %s", agent->info.name, aq_cuda_error(r));
  }
  aq_status_t s = aq_cuda_graph_init(cq);
  if (s == AQ_OK) {
    queue->driver_data = cq;
    s = aq_processor_start(&cq->proc, queue, aq_cuda_queue_main, cq);
    if (s != AQ_OK) aq_cuda_graph_release(cq);
  }
  if (s != AQ_OK) {
    aq_cuda_checked(aq_cu.cuStreamDestroy(cq->stream), "cuStreamDestroy", agent->info.name);
    free(cq);
    return s;
  }
  aq_cuda_timing_track(cq);
  return AQ_OK;
}

static void cuda_queue_detach(aq_agent_impl_t *agent, aq_queue_impl_t *queue) {
  (void)agent;
  cuda_queue_t *cq = queue->driver_data;
  aq_processor_stop(&cq->proc);
  char where[64];
  snprintf(where, sizeof(where), "%s, queue %u", cq->agent->agent->info.name, queue->id);
  aq_cuda_checked(aq_cu.cuCtxSetCurrent(cq->agent->context), "cuCtxSetCurrent", where);
  aq_cuda_timing_release(cq);
  aq_cuda_checked(aq_cu.cuStreamSynchronize(cq->stream), "cuStreamSynchronize", where);
  aq_cuda_graph_release(cq);
  aq_cuda_events_release(cq);
  aq_cuda_checked(aq_cu.cuStreamDestroy(cq->stream), "cuStreamDestroy", where);
  free(cq);
}

static aq_status_t cuda_alloc(aq_region_impl_t *region, size_t size, void **out) {
  cuda_agent_t *a = region->agent->driver_data;
  AQ_RETURN_IF_ERROR(aq_cuda_bind(a));
  int kind = (int)(uintptr_t)region->driver_data;
  CUresult r;
  CUdeviceptr p = 0;
  if (kind == REGION_PINNED) {
    /* Portable: pinned and mapped for every GPU's context, not just this
     * one's, so a tensor two GPUs touch may live here. */
    r = aq_cu.cuMemHostAlloc(out, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  } else {
    if (kind == REGION_MANAGED) {
      /* Never beyond free memory: oversubscribed managed memory can hang
       * the GPU for everyone on the machine. */
      size_t free_bytes = 0, total = 0;
      r = aq_cu.cuMemGetInfo(&free_bytes, &total);
      if (r != CUDA_SUCCESS)
        return aq_error(AQ_ERROR_UNAVAILABLE, "%s: cuMemGetInfo before %zu bytes of managed memory: %s",
                        region->info.name, size, aq_cuda_error(r));
      if (size > free_bytes / 10 * 9)
        return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: %zu bytes of managed memory asked, %zu free on the GPU",
                        region->info.name, size, free_bytes);
      r = aq_cu.cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL);
    } else {
      r = aq_cu.cuMemAlloc(&p, size);
    }
    *out = (void *)(uintptr_t)p;
  }
  if (r != CUDA_SUCCESS)
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: %zu bytes: %s", region->info.name, size, aq_cuda_error(r));
  return AQ_OK;
}

static void cuda_free(aq_region_impl_t *region, void *ptr, size_t size) {
  (void)size;
  cuda_agent_t *a = region->agent->driver_data;
  aq_cuda_checked(aq_cu.cuCtxSetCurrent(a->context), "cuCtxSetCurrent", region->info.name);
  if ((int)(uintptr_t)region->driver_data == REGION_PINNED)
    aq_cuda_checked(aq_cu.cuMemFreeHost(ptr), "cuMemFreeHost", region->info.name);
  else
    aq_cuda_checked(aq_cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr), "cuMemFree", region->info.name);
}

/* Whether agent's kernels reach region's memory (another GPU's): pinned
 * host memory is portable, managed memory migrates on demand, device
 * memory takes peer access. */
static int cuda_region_reachable(aq_region_impl_t *region, aq_agent_impl_t *agent) {
  if (agent->driver != &aq_driver_cuda) return 0;
  int kind = (int)(uintptr_t)region->driver_data;
  const cuda_agent_t *owner = region->agent->driver_data, *a = agent->driver_data;
  if (kind == REGION_DEVICE) return (a->peers >> owner->index) & 1;
  return kind == REGION_PINNED || a->concurrent_managed;
}

const aq_driver_t aq_driver_cuda = {
    .name = "cuda",
    .start = cuda_start,
    .stop = cuda_stop,
    .queue_attach = cuda_queue_attach,
    .queue_detach = cuda_queue_detach,
    .region_allocate = cuda_alloc,
    .region_free = cuda_free,
    .copy = aq_cuda_copy,
    .co_recognizes = aq_cuda_co_recognizes,
    .co_load = aq_cuda_co_load,
    .co_unload = aq_cuda_co_unload,
    .co_kernel_at = aq_cuda_co_kernel_at,
    .copy_async = aq_cuda_copy_async,
    .prefetch = aq_cuda_prefetch,
    .advise = aq_cuda_advise,
    .trace_flush = aq_cuda_timing_flush_all,
    .queue_profile = aq_cuda_queue_profile,
    .region_reachable = cuda_region_reachable,
};
