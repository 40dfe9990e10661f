/* rocr regions: ROCr memory pools, and SVM for unified memory. Never run on
 * AMD hardware (rocr_agent.c says why).
 *
 * Each GPU agent has a device region (its coarse-grained global pool), a
 * host region (the fine-grained system pool, opened to every GPU; kernargs
 * may live there too) and, where ROCr supports SVM, a managed region: plain
 * host pages made GPU-accessible with hsa_amd_svm_attributes_set, which then
 * migrate on demand and take prefetches and advice. Copies use
 * hsa_memory_copy; asynchronous copies are left to the core (it runs them on
 * the caller's thread once their dependencies are met). */
#include <string.h>
#include <sys/mman.h>

#include "aquila/unified.h"
#include "runtime/drivers/rocr.h"
#include "runtime/memory.h"
#include "runtime/status.h"

enum { REGION_DEVICE = 1, REGION_HOST = 2, REGION_MANAGED = 3 };

typedef struct pool_search {
  uint32_t want;             /* a global flag the pool must have */
  hsa_amd_memory_pool_t found;
} pool_search_t;

static hsa_status_t find_pool(hsa_amd_memory_pool_t pool, void *data) {
  pool_search_t *ps = data;
  hsa_amd_segment_t segment = HSA_AMD_SEGMENT_GROUP;
  uint32_t flags = 0;
  bool alloc = false;
  aq_rocr.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  aq_rocr.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  aq_rocr.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
  if (segment != HSA_AMD_SEGMENT_GLOBAL || !alloc || !(flags & ps->want)) return HSA_STATUS_SUCCESS;
  ps->found = pool;
  return HSA_STATUS_INFO_BREAK;
}

static hsa_amd_memory_pool_t pool_of(hsa_agent_t agent, uint32_t flag) {
  pool_search_t ps = {.want = flag};
  aq_rocr.hsa_amd_agent_iterate_memory_pools(agent, find_pool, &ps);
  return ps.found;
}

aq_status_t aq_rocr_memory_regions(rocr_agent_t *a) {
  if (!aq_rocr_host.fine_pool.handle) {
    aq_rocr_host.fine_pool = pool_of(aq_rocr_host.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
    aq_rocr_host.kernarg_pool = pool_of(aq_rocr_host.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT);
  }
  a->device_pool = pool_of(a->hsa, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
  if (!a->device_pool.handle || !aq_rocr_host.fine_pool.handle || !aq_rocr_host.kernarg_pool.handle)
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s: ROCr reports no device, host or kernarg memory pool",
                    a->agent->info.name);
  size_t total = 0;
  bool svm = false;
  aq_rocr.hsa_amd_memory_pool_get_info(a->device_pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &total);
  aq_rocr.hsa_system_get_info((hsa_system_info_t)HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED, &svm);
  static const struct { int kind; const char *suffix; uint32_t flags; } r[] = {
      {REGION_DEVICE, "device", AQ_REGION_DEVICE | AQ_REGION_COARSE_GRAINED},
      {REGION_HOST, "host", AQ_REGION_HOST_ACCESSIBLE | AQ_REGION_FINE_GRAINED | AQ_REGION_KERNARG},
      {REGION_MANAGED, "managed", AQ_REGION_MANAGED | AQ_REGION_HOST_ACCESSIBLE | AQ_REGION_COARSE_GRAINED},
  };
  for (size_t i = 0; i < sizeof(r) / sizeof(r[0]) - !svm; ++i) {
    aq_region_info_t info = {.flags = r[i].flags, .numa_node = a->agent->info.numa_node,
                             .size = r[i].kind == REGION_HOST ? 0 : total, .alignment = 4096};
    snprintf(info.name, sizeof(info.name), "%s.%s", a->agent->info.name, r[i].suffix);
    AQ_RETURN_IF_ERROR(aq_region_register(a->agent, &info, (void *)(uintptr_t)r[i].kind, NULL));
  }
  return AQ_OK;
}

/* Managed memory: ordinary pages that every GPU may touch, coarse-grained
 * (coherent at dispatch boundaries, as CUDA's managed memory). */
static hsa_status_t svm_open(void *p, size_t size) {
  hsa_amd_svm_attribute_pair_t attrs[1 + AQ_AGENTS_MAX] = {
      {HSA_AMD_SVM_ATTRIB_GLOBAL_FLAG, HSA_AMD_SVM_GLOBAL_FLAG_COARSE_GRAINED}};
  for (uint32_t i = 0; i < aq_rocr_host.gpu_count; ++i)
    attrs[1 + i] = (hsa_amd_svm_attribute_pair_t){HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE, aq_rocr_host.gpus[i].handle};
  return aq_rocr.hsa_amd_svm_attributes_set(p, size, attrs, 1 + aq_rocr_host.gpu_count);
}

aq_status_t aq_rocr_alloc(aq_region_impl_t *region, size_t size, void **out) {
  rocr_agent_t *a = region->agent->driver_data;
  hsa_status_t s;
  switch ((int)(uintptr_t)region->driver_data) {
    case REGION_DEVICE:
      s = aq_rocr.hsa_amd_memory_pool_allocate(a->device_pool, size, 0, out);
      break;
    case REGION_HOST:
      s = aq_rocr.hsa_amd_memory_pool_allocate(aq_rocr_host.fine_pool, size, 0, out);
      if (s == HSA_STATUS_SUCCESS) {
        s = aq_rocr.hsa_amd_agents_allow_access(aq_rocr_host.gpu_count, aq_rocr_host.gpus, NULL, *out);
        if (s != HSA_STATUS_SUCCESS) aq_rocr.hsa_amd_memory_pool_free(*out);
      }
      break;
    default:
      *out = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (*out == MAP_FAILED) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: %zu bytes: mmap failed", region->info.name, size);
      s = svm_open(*out, size);
      if (s != HSA_STATUS_SUCCESS) munmap(*out, size);
  }
  if (s != HSA_STATUS_SUCCESS)
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: %zu bytes: %s", region->info.name, size, aq_rocr_error(s));
  return AQ_OK;
}

void aq_rocr_free(aq_region_impl_t *region, void *ptr, size_t size) {
  if ((int)(uintptr_t)region->driver_data == REGION_MANAGED) munmap(ptr, size);
  else aq_rocr.hsa_amd_memory_pool_free(ptr);
}

aq_status_t aq_rocr_copy(aq_region_impl_t *region, void *dst, const void *src, size_t size) {
  (void)region;
  hsa_status_t s = aq_rocr.hsa_memory_copy(dst, src, size);
  return s == HSA_STATUS_SUCCESS ? AQ_OK
                                 : aq_error(AQ_ERROR_INVALID_ARGUMENT, "GPU copy of %zu bytes %p -> %p: %s", size,
                                            src, dst, aq_rocr_error(s));
}

static hsa_agent_t hsa_agent_of(const aq_agent_impl_t *agent) {
  return agent->driver == &aq_driver_rocr ? ((const rocr_agent_t *)agent->driver_data)->hsa : aq_rocr_host.cpu;
}

/* The prefetch is waited for here, then the completion signal is set on the
 * host: simpler than mapping it, and prefetches are rare (a graph's head). */
aq_status_t aq_rocr_prefetch(aq_region_impl_t *region, const void *ptr, size_t size, aq_agent_impl_t *dest,
                          aq_signal_slot_t *completion) {
  (void)region;
  hsa_signal_t done;
  hsa_status_t s = aq_rocr.hsa_signal_create(1, 0, NULL, &done);
  if (s == HSA_STATUS_SUCCESS) {
    s = aq_rocr.hsa_amd_svm_prefetch_async((void *)ptr, size, hsa_agent_of(dest), 0, NULL, done);
    if (s == HSA_STATUS_SUCCESS)
      aq_rocr.hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    aq_rocr.hsa_signal_destroy(done);
  }
  if (s != HSA_STATUS_SUCCESS)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_prefetch of %zu bytes at %p to %s: %s", size, ptr,
                    dest->info.name, aq_rocr_error(s));
  if (completion) aq_signal_slot_subtract(completion, 1);
  return AQ_OK;
}

/* aq_memory_advice_t (CUDA's numbering, 1..6) as SVM attributes: UINT64_MAX
 * stands for the agent, attribute 0 for a gap (SVM has no "no preferred
 * location" to set). */
aq_status_t aq_rocr_advise(aq_region_impl_t *region, const void *ptr, size_t size, int advice, aq_agent_impl_t *agent) {
  (void)region;
  static const hsa_amd_svm_attribute_pair_t table[7] = {
      [AQ_ADVICE_READ_MOSTLY] = {HSA_AMD_SVM_ATTRIB_READ_MOSTLY, 1},
      [AQ_ADVICE_UNSET_READ_MOSTLY] = {HSA_AMD_SVM_ATTRIB_READ_MOSTLY, 0},
      [AQ_ADVICE_PREFERRED_LOCATION] = {HSA_AMD_SVM_ATTRIB_PREFERRED_LOCATION, UINT64_MAX},
      [AQ_ADVICE_ACCESSED_BY] = {HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE_IN_PLACE, UINT64_MAX},
      [AQ_ADVICE_UNSET_ACCESSED_BY] = {HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE, UINT64_MAX}, /* may migrate again */
  };
  if (advice < 1 || advice > 6 || !table[advice].attribute)
    return aq_error(AQ_ERROR_UNAVAILABLE, "aq_memory_advise: advice %d is not supported on AMD GPUs", advice);
  hsa_amd_svm_attribute_pair_t attr = table[advice];
  if (attr.value == UINT64_MAX) attr.value = hsa_agent_of(agent).handle;
  hsa_status_t s = aq_rocr.hsa_amd_svm_attributes_set((void *)ptr, size, &attr, 1);
  return s == HSA_STATUS_SUCCESS ? AQ_OK
                                 : aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_advise(%p, %zu, %d) for %s: %s", ptr,
                                            size, advice, agent->info.name, aq_rocr_error(s));
}
