/* aquila/unified.h: prefetch and advice on managed memory, asynchronous
 * copies. The core checks the arguments and finds the driver whose memory it
 * is; the driver does the work on its own streams. Copies the GPU cannot do
 * alone (a pageable host side) run here, on the calling thread. */
#include "aquila/unified.h"

#include <string.h>

#include "runtime/driver.h"
#include "runtime/memory.h"
#include "runtime/runtime.h"
#include "runtime/signal.h"
#include "runtime/status.h"

enum { DEPS_MAX = 64 };

typedef struct side {
  aq_region_impl_t *region; /* NULL: host memory Aquila did not allocate */
  uintptr_t base;
  size_t size;
} side_t;

static aq_status_t find_side(const char *what, const void *p, size_t size, side_t *out) {
  memset(out, 0, sizeof(*out));
  if (!aq_memory_find(p, &out->region, &out->base, &out->size)) return AQ_OK;
  if ((uintptr_t)p + size > out->base + out->size || (uintptr_t)p + size < (uintptr_t)p)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %zu bytes at %p overrun its allocation (%zu bytes at %p in %s)",
                    what, size, p, out->size, (void *)out->base, out->region->info.name);
  return AQ_OK;
}

static aq_status_t completion_slot(const char *what, aq_signal_t s, aq_signal_slot_t **out) {
  *out = NULL;
  if (!s.handle) return AQ_OK;
  *out = aq_signal_slot(s.handle);
  return *out ? AQ_OK
              : aq_error(AQ_ERROR_INVALID_HANDLE, "%s: completion signal 0x%llx is not a live signal", what,
                         (unsigned long long)s.handle);
}

/* A managed allocation holding [ptr, ptr + size), whose driver takes hints. */
static aq_status_t managed_range(const char *what, const void *ptr, size_t size, side_t *out) {
  if (!ptr || !size) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: ptr and size are required", what);
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  AQ_RETURN_IF_ERROR(find_side(what, ptr, size, out));
  if (!out->region || !(out->region->info.flags & AQ_REGION_MANAGED))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s(%p): not managed memory (allocate it from a region with AQ_REGION_MANAGED)",
                    what, ptr);
  return AQ_OK;
}

AQ_API aq_status_t aq_memory_prefetch(const void *ptr, size_t size, aq_agent_t destination, aq_signal_t completion) {
  side_t m;
  aq_agent_impl_t *dest;
  aq_signal_slot_t *done;
  AQ_RETURN_IF_ERROR(managed_range("aq_memory_prefetch", ptr, size, &m));
  AQ_RETURN_IF_ERROR(aq_agent_resolve(destination, &dest));
  AQ_RETURN_IF_ERROR(completion_slot("aq_memory_prefetch", completion, &done));
  const aq_driver_t *d = m.region->agent->driver;
  if (!d->prefetch)
    return aq_error(AQ_ERROR_UNAVAILABLE, "aq_memory_prefetch: driver %s cannot prefetch", d->name);
  return d->prefetch(m.region, ptr, size, dest, done);
}

AQ_API aq_status_t aq_memory_advise(const void *ptr, size_t size, aq_memory_advice_t advice, aq_agent_t agent) {
  side_t m;
  aq_agent_impl_t *a;
  if ((int)advice < AQ_ADVICE_READ_MOSTLY || (int)advice > AQ_ADVICE_UNSET_ACCESSED_BY)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_advise: unknown advice %d", (int)advice);
  AQ_RETURN_IF_ERROR(managed_range("aq_memory_advise", ptr, size, &m));
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  const aq_driver_t *d = m.region->agent->driver;
  if (!d->advise) return aq_error(AQ_ERROR_UNAVAILABLE, "aq_memory_advise: driver %s takes no advice", d->name);
  return d->advise(m.region, ptr, size, (int)advice, a);
}

/* Memory a driver can copy without the host: its own allocations. */
static int driver_side(const side_t *s) { return s->region && s->region->agent->driver->copy_async; }

AQ_API aq_status_t aq_memory_copy_async(void *dst, const void *src, size_t size, uint32_t num_deps,
                                        const aq_signal_t *deps, aq_signal_t completion) {
  static const char *what = "aq_memory_copy_async";
  if (!dst || !src) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: dst and src are required", what);
  if (num_deps && !deps) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %u deps and deps is NULL", what, num_deps);
  if (num_deps > DEPS_MAX)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %u deps, at most %d (chain a barrier packet for more)", what,
                    num_deps, DEPS_MAX);
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  aq_signal_slot_t *dep[DEPS_MAX], *done;
  for (uint32_t i = 0; i < num_deps; ++i)
    if (!(dep[i] = aq_signal_slot(deps[i].handle)))
      return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: deps[%u] (0x%llx) is not a live signal", what, i,
                      (unsigned long long)deps[i].handle);
  AQ_RETURN_IF_ERROR(completion_slot(what, completion, &done));
  side_t d, s;
  AQ_RETURN_IF_ERROR(find_side(what, dst, size, &d));
  AQ_RETURN_IF_ERROR(find_side(what, src, size, &s));
  if (size && driver_side(&d) && driver_side(&s) && d.region->agent->driver == s.region->agent->driver) {
    /* The device side's driver (GPU memory), else the destination's. */
    aq_region_impl_t *r = (s.region->info.flags & AQ_REGION_DEVICE) && !(d.region->info.flags & AQ_REGION_DEVICE)
                              ? s.region : d.region;
    return r->agent->driver->copy_async(r, dst, src, size, dep, num_deps, done);
  }
  /* Pageable host memory on a side: here, once the dependencies are met. */
  uint32_t fault = 0;
  for (uint32_t i = 0; i < num_deps; ++i) {
    aq_status_t st = aq_signal_wait(deps[i], AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL);
    if (st == AQ_ERROR_INVALID_HANDLE) return st;
    if (!fault) fault = atomic_load(&dep[i]->fault);
  }
  aq_status_t st = fault ? AQ_ERROR_KERNEL_FAULT : aq_memory_copy(dst, src, size);
  if (done) {
    if (fault) aq_signal_slot_fail(done, fault);
    aq_signal_slot_subtract(done, 1);
  }
  /* With a completion signal, a failed dependency is the signal's news. */
  if (fault && !done) return aq_error(st, "%s: a dependency failed; the copy did not run", what);
  return fault ? AQ_OK : st;
}
