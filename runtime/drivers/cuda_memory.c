/* aquila/unified.h on CUDA memory: asynchronous copies on the agent's copy
 * streams, prefetch and advice for managed memory; and aq_memory_copy,
 * which waits for its copy stream.
 *
 * A copy is three stream operations kept together under the agent's copy
 * mutex: a wait for each dependency's signal to reach 0 (on the signal
 * pool's device mapping), the copy, and a write of the completion signal's
 * next value, followed by a host function that wakes host waiters. Were two
 * threads' operations interleaved, one copy could wait on another's
 * dependencies, which may depend on the first copy: a deadlock. */
#include <string.h>

#include "runtime/driver.h"
#include "runtime/drivers/cuda.h"
#include "runtime/memory.h"
#include "runtime/status.h"

enum { TO_GPU = 0, FROM_GPU = 1 };

aq_status_t aq_cuda_copy_streams_create(cuda_agent_t *a) {
  /* a->agent is not registered yet: the caller made the context current. */
  for (int i = 0; i < 2; ++i) {
    CUresult r = aq_cu.cuStreamCreate(&a->copy_streams[i], CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
      if (i) aq_cuda_checked(aq_cu.cuStreamDestroy(a->copy_streams[0]), "cuStreamDestroy", "a copy stream");
      a->copy_streams[0] = NULL;
      return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "cannot create a copy stream: %s", aq_cuda_error(r));
    }
  }
  pthread_mutex_init(&a->copy_mutex, NULL);
  return AQ_OK;
}

void aq_cuda_copy_streams_destroy(cuda_agent_t *a, const char *name) {
  if (!a->copy_streams[0]) return;
  char where[64];
  aq_cuda_checked(aq_cu.cuCtxSetCurrent(a->context), "cuCtxSetCurrent", name);
  for (int i = 0; i < 2; ++i) {
    snprintf(where, sizeof(where), "%s, copy stream %s", name, i == TO_GPU ? "in" : "out");
    aq_cuda_checked(aq_cu.cuStreamSynchronize(a->copy_streams[i]), "cuStreamSynchronize", where);
    aq_cuda_checked(aq_cu.cuStreamDestroy(a->copy_streams[i]), "cuStreamDestroy", where);
    a->copy_streams[i] = NULL;
  }
  pthread_mutex_destroy(&a->copy_mutex);
}

static void notify_host(void *slot) { aq_signal_slot_notify(slot); }

/* After the work is on the stream (mutex held): the completion write, or
 * nothing when the caller waits for the stream itself. Where the stream
 * cannot take the write or the wake-up, the call fails (the signal
 * untouched, as on the other failures) once the stream is done with the
 * copy. */
static CUresult complete_on(CUstream stream, aq_signal_slot_t *done, const char **call) {
  if (!done) return CUDA_SUCCESS;
  int64_t next = atomic_load(&done->value) - 1;
  aq_signal_slot_mark_device_written(done);
  *call = "cuStreamWriteValue64 (completion signal)";
  CUresult r = aq_cu.cuStreamWriteValue64(stream, aq_cuda_signal_address(done), (uint64_t)next, 0);
  if (r != CUDA_SUCCESS) return r;
  *call = "cuLaunchHostFunc (waking the completion's waiters)";
  return aq_cu.cuLaunchHostFunc(stream, notify_host, done);
}

static aq_status_t finish(cuda_agent_t *a, CUstream stream, aq_signal_slot_t *done, const char *what) {
  const char *call = NULL;
  CUresult r = complete_on(stream, done, &call);
  pthread_mutex_unlock(&a->copy_mutex);
  if (done && r == CUDA_SUCCESS) return AQ_OK;
  if (r != CUDA_SUCCESS) {
    aq_status_t s = aq_error(AQ_ERROR_KERNEL_FAULT, "%s on %s: %s: %s", what, a->agent->info.name, call, aq_cuda_error(r));
    aq_error_saved_t first;
    aq_error_save(&first);
    aq_cuda_checked(aq_cu.cuStreamSynchronize(stream), "cuStreamSynchronize", a->agent->info.name);
    return aq_error_restore(s, &first);
  }
  r = aq_cu.cuStreamSynchronize(stream);
  return r == CUDA_SUCCESS ? AQ_OK
                           : aq_error(AQ_ERROR_KERNEL_FAULT, "%s on %s: %s", what, a->agent->info.name, aq_cuda_error(r));
}

static aq_status_t usable(cuda_agent_t *a, const char *what) {
  if (atomic_load(&a->faulted))
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s: GPU %s faulted earlier and needs a reset", what, a->agent->info.name);
  return AQ_OK;
}

static aq_status_t copy_on_stream(aq_region_impl_t *region, void *dst, const void *src, size_t size,
                                  aq_signal_slot_t *const *deps, uint32_t num_deps, aq_signal_slot_t *done,
                                  const char *what) {
  cuda_agent_t *a = region->agent->driver_data;
  AQ_RETURN_IF_ERROR(usable(a, what));
  uintptr_t d = (uintptr_t)dst, base = 0;
  size_t bytes = 0;
  aq_region_impl_t *dr = NULL;
  /* The core passes the GPU side's region: a destination there is inbound. */
  int from_gpu = !(aq_memory_find(dst, &dr, &base, &bytes) && dr == region);
  CUstream stream = a->copy_streams[from_gpu ? FROM_GPU : TO_GPU];
  AQ_RETURN_IF_ERROR(aq_cuda_bind(a));
  pthread_mutex_lock(&a->copy_mutex);
  CUresult r = CUDA_SUCCESS;
  /* A wait the stream did not take would let the copy run before its
   * dependencies: no copy then. */
  for (uint32_t i = 0; i < num_deps && r == CUDA_SUCCESS; ++i)
    r = aq_cu.cuStreamWaitValue64(stream, aq_cuda_signal_address(deps[i]), 0, CU_STREAM_WAIT_VALUE_EQ);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&a->copy_mutex);
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s on %s: cuStreamWaitValue64 (a dependency): %s", what,
                    a->agent->info.name, aq_cuda_error(r));
  }
  r = aq_cu.cuMemcpyAsync((CUdeviceptr)d, (CUdeviceptr)(uintptr_t)src, size, stream);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&a->copy_mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s of %zu bytes %p -> %p on %s: %s", what, size, src, dst,
                    a->agent->info.name, aq_cuda_error(r));
  }
  return finish(a, stream, done, what);
}

aq_status_t aq_cuda_copy_async(aq_region_impl_t *region, void *dst, const void *src, size_t size,
                            aq_signal_slot_t *const *deps, uint32_t num_deps, aq_signal_slot_t *done) {
  return copy_on_stream(region, dst, src, size, deps, num_deps, done, "aq_memory_copy_async");
}

/* aq_memory_copy: on a copy stream too, waiting for that stream alone. Not
 * cuMemcpy: the legacy stream it runs on held up the packet processors'
 * launches while it copied (a training step's batch copy held its kernels
 * back 50-80 us on the H100 machine). From pageable memory the stream
 * wait covers the DMA after the staging, so no kernel reads half-old data. */
aq_status_t aq_cuda_copy(aq_region_impl_t *region, void *dst, const void *src, size_t size) {
  return copy_on_stream(region, dst, src, size, NULL, 0, NULL, "aq_memory_copy");
}

/* Where a managed range should go for an agent: a GPU's memory, or the host. */
static CUmemLocation location_of(const aq_agent_impl_t *agent) {
  if (agent->driver == &aq_driver_cuda)
    return (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, ((const cuda_agent_t *)agent->driver_data)->device};
  return (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST, 0};
}

static aq_status_t managed_ok(cuda_agent_t *a, const char *what) {
  AQ_RETURN_IF_ERROR(usable(a, what));
  if (!a->concurrent_managed)
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s: GPU %s has no concurrent managed access (prefetch and advice)", what,
                    a->agent->info.name);
  return AQ_OK;
}

aq_status_t aq_cuda_prefetch(aq_region_impl_t *region, const void *ptr, size_t size, aq_agent_impl_t *dest,
                          aq_signal_slot_t *done) {
  cuda_agent_t *a = region->agent->driver_data;
  AQ_RETURN_IF_ERROR(managed_ok(a, "aq_memory_prefetch"));
  CUmemLocation loc = location_of(dest);
  CUstream stream = a->copy_streams[loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? TO_GPU : FROM_GPU];
  AQ_RETURN_IF_ERROR(aq_cuda_bind(a));
  pthread_mutex_lock(&a->copy_mutex);
  CUresult r = aq_cu.cuMemPrefetchAsync((CUdeviceptr)(uintptr_t)ptr, size, loc, 0, stream);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&a->copy_mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_prefetch of %zu bytes at %p to %s: %s", size, ptr,
                    dest->info.name, aq_cuda_error(r));
  }
  return finish(a, stream, done, "aq_memory_prefetch");
}

aq_status_t aq_cuda_advise(aq_region_impl_t *region, const void *ptr, size_t size, int advice, aq_agent_impl_t *agent) {
  cuda_agent_t *a = region->agent->driver_data;
  AQ_RETURN_IF_ERROR(managed_ok(a, "aq_memory_advise"));
  AQ_RETURN_IF_ERROR(aq_cuda_bind(a));
  /* aq_memory_advice_t takes CUDA's numbering (CU_MEM_ADVISE_*). */
  CUresult r = aq_cu.cuMemAdvise((CUdeviceptr)(uintptr_t)ptr, size, advice, location_of(agent));
  return r == CUDA_SUCCESS ? AQ_OK
                           : aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_memory_advise(%p, %zu, %d) for %s: %s", ptr, size,
                                      advice, agent->info.name, aq_cuda_error(r));
}
