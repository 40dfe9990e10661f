/* cuda code objects: cubins (ELF, machine EM_CUDA) or fatbins, loaded as a
 * CUDA module on every GPU; a kernel per function and GPU, its handle the
 * packets' kernel_object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/drivers/cuda.h"
#include "runtime/handle.h"
#include "runtime/status.h"

typedef struct cuda_module {
  CUmodule modules[AQ_AGENTS_MAX];
  uint32_t count; /* kernels per device */
  cuda_kernel_t *kernels; /* agents * count */
} cuda_module_t;

static aq_handle_table_t kernel_table;

void aq_cuda_code_objects_init(void) { aq_handle_table_init(&kernel_table, "kernel"); }
void aq_cuda_code_objects_deinit(void) { aq_handle_table_deinit(&kernel_table); }

cuda_kernel_t *aq_cuda_kernel_lookup(uint64_t kernel_object) { return aq_handle_get(&kernel_table, kernel_object); }

int aq_cuda_co_recognizes(const void *bytes, size_t size) {
  const uint8_t *b = bytes;
  static const uint8_t fatbin[4] = {0x50, 0xed, 0x55, 0xba};
  if (size >= 4 && !memcmp(b, fatbin, 4)) return 1;
  return size >= 20 && !memcmp(b, "\177ELF", 4) && b[18] == 190; /* EM_CUDA */
}

aq_status_t aq_cuda_co_load(const char *path, const void *bytes, size_t size, void **out, aq_code_object_info_t *info) {
  (void)size;
  if (!aq_cuda_agent_count()) return aq_error(AQ_ERROR_UNAVAILABLE, "%s: a CUDA code object, and no CUDA agent here", path);
  cuda_module_t *m = calloc(1, sizeof(*m));
  if (!m) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a code object");
  aq_status_t s = AQ_OK;
  for (uint32_t a = 0; s == AQ_OK && a < aq_cuda_agent_count(); ++a) {
    s = aq_cuda_bind(aq_cuda_agent_at(a));
    if (s != AQ_OK) break;
    CUresult r = aq_cu.cuModuleLoadData(&m->modules[a], bytes);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
      s = aq_error(AQ_ERROR_INCOMPATIBLE, "%s has no code for %s (%s)", path, aq_cuda_agent_at(a)->agent->info.isa,
                   aq_cuda_agent_at(a)->agent->info.device);
    else if (r != CUDA_SUCCESS)
      s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: cuModuleLoadData: %s", path, aq_cuda_error(r));
    unsigned n = 0;
    if (s == AQ_OK && aq_cu.cuModuleGetFunctionCount(&n, m->modules[a]) != CUDA_SUCCESS) n = 0;
    if (s == AQ_OK && a == 0) {
      m->count = n;
      m->kernels = calloc((size_t)aq_cuda_agent_count() * (n ? n : 1), sizeof(cuda_kernel_t));
      if (!m->kernels) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for kernels");
    }
    CUfunction *fns = s == AQ_OK ? calloc(n ? n : 1, sizeof(CUfunction)) : NULL;
    if (s == AQ_OK && n && aq_cu.cuModuleEnumerateFunctions(fns, n, m->modules[a]) != CUDA_SUCCESS)
      s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: cannot list its kernels", path);
    for (unsigned i = 0; s == AQ_OK && i < n; ++i) {
      cuda_kernel_t *k = &m->kernels[a * m->count + i];
      size_t off = 0, psize = 0;
      k->function = fns[i];
      k->agent = aq_cuda_agent_at(a);
      /* Load every kernel now: under lazy loading (CUDA's default) a
       * kernel's first launch synchronizes the context, and would wait for
       * any stream blocked in a barrier's wait on a signal that only this
       * kernel's completion satisfies: a deadlock. */
      if (aq_cu.cuFuncLoad && aq_cu.cuFuncLoad(fns[i]) != CUDA_SUCCESS)
        s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: cannot load kernel %u", path, i);
      if (s != AQ_OK) break;
      /* Clusters past 8 blocks (a kernel's __cluster_dims__) launch only
       * where allowed; GPUs without clusters refuse, which is no matter. */
      (void)aq_cu.cuFuncSetAttribute(fns[i], CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
      CUresult r = aq_cu.cuFuncGetName(&k->name, fns[i]);
      if (r != CUDA_SUCCESS || !k->name) {
        s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel %u: cuFuncGetName: %s", path, i, aq_cuda_error(r));
        break;
      }
      if (aq_cu.cuFuncGetParamInfo(fns[i], 0, &off, &psize) == CUDA_SUCCESS) k->kernarg_size = (uint32_t)(off + psize);
      s = aq_handle_alloc(&kernel_table, k, &k->handle);
    }
    free(fns);
  }
  if (s != AQ_OK) {
    aq_cuda_co_unload(m);
    return s;
  }
  snprintf(info->format, sizeof(info->format), "cuda-fatbin");
  snprintf(info->producer, sizeof(info->producer), "nvcc");
  info->kernel_count = m->count;
  *out = m;
  return AQ_OK;
}

void aq_cuda_co_unload(void *module) {
  cuda_module_t *m = module;
  for (uint32_t i = 0; m->kernels && i < aq_cuda_agent_count() * m->count; ++i)
    if (m->kernels[i].handle) aq_handle_release(&kernel_table, m->kernels[i].handle);
  for (uint32_t a = 0; a < aq_cuda_agent_count(); ++a)
    if (m->modules[a]) {
      cuda_agent_t *agent = aq_cuda_agent_at(a);
      aq_cuda_checked(aq_cu.cuCtxSetCurrent(agent->context), "cuCtxSetCurrent", agent->agent->info.name);
      aq_cuda_checked(aq_cu.cuModuleUnload(m->modules[a]), "cuModuleUnload", agent->agent->info.name);
    }
  free(m->kernels);
  free(m);
}

aq_status_t aq_cuda_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent, aq_kernel_info_t *out) {
  cuda_module_t *m = module;
  cuda_agent_t *a = agent->driver_data;
  uint32_t ai = 0;
  while (ai < aq_cuda_agent_count() && aq_cuda_agent_at(ai) != a) ++ai;
  if (ai == aq_cuda_agent_count()) return aq_error(AQ_ERROR_INVALID_HANDLE, "not a CUDA agent");
  const cuda_kernel_t *k = &m->kernels[ai * m->count + index];
  *out = (aq_kernel_info_t){.name = k->name ? k->name : "", .kernel_object = k->handle,
                            .kernarg_size = k->kernarg_size, .kernarg_alignment = 8};
  return AQ_OK;
}
