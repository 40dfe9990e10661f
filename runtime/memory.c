/* Regions and allocations: every pointer handed out is registered, so a free
 * or a lookup of a foreign or already-freed pointer is an error, not a crash,
 * and each region keeps its usage statistics. */
#include "runtime/memory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/handle.h"
#include "runtime/status.h"
#include "runtime/trace.h"
#include "runtime/wake.h" /* aq_now_ns */

typedef struct allocation {
  uintptr_t base;
  size_t size;
  aq_region_impl_t *region;
} allocation_t;

static aq_handle_table_t regions;
static pthread_mutex_t alloc_mutex = PTHREAD_MUTEX_INITIALIZER;
static allocation_t *allocs; /* sorted by base */
static size_t alloc_count, alloc_capacity;

void aq_memory_module_init(void) { aq_handle_table_init(&regions, "region"); }

static void free_region(void *object, void *user) {
  (void)user;
  free(object);
}

void aq_memory_module_deinit(void) {
  /* Allocations still live at shutdown are released with their region. */
  pthread_mutex_lock(&alloc_mutex);
  for (size_t i = 0; i < alloc_count; ++i) {
    aq_region_impl_t *r = allocs[i].region;
    r->agent->driver->region_free(r, (void *)allocs[i].base, allocs[i].size);
  }
  free(allocs);
  allocs = NULL;
  alloc_count = alloc_capacity = 0;
  pthread_mutex_unlock(&alloc_mutex);
  aq_handle_for_each(&regions, free_region, NULL);
  aq_handle_table_deinit(&regions);
}

aq_status_t aq_region_register(aq_agent_impl_t *agent, const aq_region_info_t *info,
                               void *driver_data, aq_region_impl_t **out_region) {
  if (agent->region_count == AQ_AGENT_REGIONS_MAX)
    return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "agent %s has too many regions", agent->info.name);
  aq_region_impl_t *r = calloc(1, sizeof(*r));
  if (!r) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a region");
  r->info = *info;
  r->info.agent.handle = agent->handle;
  r->agent = agent;
  r->driver_data = driver_data;
  aq_status_t s = aq_handle_alloc(&regions, r, &r->handle);
  if (s != AQ_OK) {
    free(r);
    return s;
  }
  agent->regions[agent->region_count++] = r;
  if (out_region) *out_region = r;
  return AQ_OK;
}

AQ_API aq_status_t aq_agent_regions(aq_agent_t agent, aq_region_t *out, size_t capacity,
                                    size_t *count) {
  aq_agent_impl_t *a;
  if (!count) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_agent_regions: count is NULL");
  if (capacity && !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_agent_regions: regions is NULL with capacity %zu",
                    capacity);
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  for (uint32_t i = 0; i < a->region_count && i < capacity; ++i) out[i].handle = a->regions[i]->handle;
  *count = a->region_count;
  return AQ_OK;
}

static aq_status_t resolve(aq_region_t region, aq_region_impl_t **out) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  return aq_handle_resolve(&regions, region.handle, (void **)out);
}

AQ_API aq_status_t aq_region_get_info(aq_region_t region, aq_region_info_t *info) {
  aq_region_impl_t *r;
  if (!info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_region_get_info: info is NULL");
  AQ_RETURN_IF_ERROR(resolve(region, &r));
  *info = r->info;
  info->in_use = atomic_load(&r->in_use);
  info->peak = atomic_load(&r->peak);
  info->allocations = atomic_load(&r->allocations);
  info->total_allocations = atomic_load(&r->total_allocations);
  return AQ_OK;
}

/* Index of the first allocation whose base is > p. */
static size_t upper_bound(uintptr_t p) {
  size_t lo = 0, hi = alloc_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static aq_status_t registry_insert(allocation_t a) {
  if (alloc_count == alloc_capacity) {
    size_t cap = alloc_capacity ? alloc_capacity * 2 : 256;
    allocation_t *n = realloc(allocs, cap * sizeof(*n));
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for the allocation registry");
    allocs = n;
    alloc_capacity = cap;
  }
  size_t i = upper_bound(a.base);
  memmove(&allocs[i + 1], &allocs[i], (alloc_count - i) * sizeof(*allocs));
  allocs[i] = a;
  alloc_count++;
  return AQ_OK;
}

AQ_API aq_status_t aq_memory_allocate(aq_region_t region, size_t size, void **out_ptr) {
  aq_region_impl_t *r;
  if (!out_ptr) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_allocate: out_ptr is NULL");
  AQ_RETURN_IF_ERROR(resolve(region, &r));
  if (size == 0) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_allocate: size is 0");
  if (r->info.size && size > r->info.size)
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%zu bytes asked of region %s, which spans %llu", size,
                    r->info.name, (unsigned long long)r->info.size);
  void *p = NULL;
  AQ_RETURN_IF_ERROR(r->agent->driver->region_allocate(r, size, &p));
  pthread_mutex_lock(&alloc_mutex);
  aq_status_t s = registry_insert((allocation_t){(uintptr_t)p, size, r});
  pthread_mutex_unlock(&alloc_mutex);
  if (s != AQ_OK) {
    r->agent->driver->region_free(r, p, size);
    return s;
  }
  uint64_t now = atomic_fetch_add(&r->in_use, size) + size;
  uint64_t peak = atomic_load(&r->peak);
  while (now > peak && !atomic_compare_exchange_weak(&r->peak, &peak, now)) {
  }
  atomic_fetch_add(&r->allocations, 1);
  atomic_fetch_add(&r->total_allocations, 1);
  *out_ptr = p;
  return AQ_OK;
}

AQ_API aq_status_t aq_memory_free(void *ptr) {
  if (!ptr) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_free: ptr is NULL");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  pthread_mutex_lock(&alloc_mutex);
  size_t i = upper_bound((uintptr_t)ptr);
  if (i == 0 || allocs[i - 1].base != (uintptr_t)ptr) {
    int inside = i > 0 && (uintptr_t)ptr < allocs[i - 1].base + allocs[i - 1].size;
    pthread_mutex_unlock(&alloc_mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    inside ? "aq_memory_free(%p): points inside an allocation, not at its start"
                           : "aq_memory_free(%p): not allocated by Aquila, or already freed",
                    ptr);
  }
  allocation_t a = allocs[i - 1];
  memmove(&allocs[i - 1], &allocs[i], (alloc_count - i) * sizeof(*allocs));
  alloc_count--;
  pthread_mutex_unlock(&alloc_mutex);
  a.region->agent->driver->region_free(a.region, ptr, a.size);
  atomic_fetch_sub(&a.region->in_use, a.size);
  atomic_fetch_sub(&a.region->allocations, 1);
  return AQ_OK;
}

static int find(const void *ptr, allocation_t *out) {
  pthread_mutex_lock(&alloc_mutex);
  size_t i = upper_bound((uintptr_t)ptr);
  int hit = i > 0 && (uintptr_t)ptr < allocs[i - 1].base + allocs[i - 1].size;
  if (hit) *out = allocs[i - 1];
  pthread_mutex_unlock(&alloc_mutex);
  return hit;
}

int aq_memory_find(const void *ptr, aq_region_impl_t **out_region, uintptr_t *out_base,
                   size_t *out_size) {
  allocation_t a;
  if (!find(ptr, &a)) return 0;
  *out_region = a.region;
  *out_base = a.base;
  *out_size = a.size;
  return 1;
}

AQ_API aq_status_t aq_memory_lookup(const void *ptr, aq_region_t *out_region, void **out_base,
                                    size_t *out_size) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  allocation_t a;
  if (!find(ptr, &a))
    return aq_error(AQ_ERROR_NOT_FOUND, "%p is not inside any Aquila allocation", ptr);
  if (out_region) out_region->handle = a.region->handle;
  if (out_base) *out_base = (void *)a.base;
  if (out_size) *out_size = a.size;
  return AQ_OK;
}

/* Whether kernels of agent a reach region r's memory (memory.h). */
static int reaches(const aq_agent_impl_t *a, aq_region_impl_t *r) {
  if (r->agent == a) return 1;
  if (a->info.kind == AQ_AGENT_KIND_CPU) return (r->info.flags & AQ_REGION_HOST_ACCESSIBLE) != 0;
  return r->agent->driver == a->driver && a->driver->region_reachable &&
         a->driver->region_reachable(r, (aq_agent_impl_t *)a);
}

AQ_API aq_status_t aq_region_reachable(aq_agent_t agent, aq_region_t region, int *out) {
  if (!out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_region_reachable: out is NULL");
  aq_agent_impl_t *a;
  aq_region_impl_t *r;
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  AQ_RETURN_IF_ERROR(resolve(region, &r));
  *out = reaches(a, r);
  return AQ_OK;
}

AQ_API aq_status_t aq_memory_reachable(aq_agent_t agent, const void *ptr, size_t size, int *out) {
  if (!ptr || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_reachable: ptr and out are required");
  aq_agent_impl_t *a;
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  allocation_t m;
  if (!find(ptr, &m)) *out = a->info.kind == AQ_AGENT_KIND_CPU; /* not Aquila's: plain host memory */
  else if ((uintptr_t)ptr + size < (uintptr_t)ptr || (uintptr_t)ptr + size > m.base + m.size) *out = 0;
  else *out = reaches(a, m.region);
  return AQ_OK;
}

static aq_status_t copy(void *dst, const void *src, size_t size) {
  allocation_t a;
  /* A driver with device memory copies whenever either side is its own. */
  for (int side = 0; side < 2; ++side) {
    const void *p = side ? src : dst;
    if (find(p, &a) && !(a.region->info.flags & AQ_REGION_HOST_ACCESSIBLE)) {
      if ((uintptr_t)p + size > a.base + a.size)
        return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_copy: %zu bytes at %p overrun its allocation",
                        size, p);
      return a.region->agent->driver->copy(a.region, dst, src, size);
    }
  }
  for (int side = 0; side < 2; ++side) {
    const void *p = side ? src : dst;
    if (find(p, &a) && (uintptr_t)p + size > a.base + a.size)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                      "aq_memory_copy: %zu bytes at %p overrun its allocation (%zu bytes at %p)",
                      size, p, a.size, (void *)a.base);
  }
  memmove(dst, src, size);
  return AQ_OK;
}

/* A traced copy is a span of category "copy" with its bytes, on the
 * calling thread's time (it returns when the data has landed). */
AQ_API aq_status_t aq_memory_copy(void *dst, const void *src, size_t size) {
  if (!dst || !src) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_copy: dst and src are required");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  if (size == 0) return AQ_OK;
  const uint64_t t0 = aq_trace_on() ? aq_now_ns() : 0;
  const aq_status_t s = copy(dst, src, size);
  if (t0 && s == AQ_OK)
    aq_trace_record(&(aq_trace_event_t){.name = "memcpy", .category = "copy", .ready_ns = t0, .start_ns = t0,
                                        .end_ns = aq_now_ns(), .bytes = size, .queue = UINT32_MAX});
  return s;
}
