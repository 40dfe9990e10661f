/* Loading the CUDA driver API at run time. */
#include "runtime/drivers/cuda_api.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

#include "runtime/symbols.h"

cuda_api_t aq_cu;
static void *lib;

int aq_cuda_api_load(char *why, size_t size) {
  if (lib) return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, size, "no CUDA driver: %s", dlerror());
    return -1;
  }
  static const aq_symbol_t required[] = {
#define CUDA_API_SYM_(field, symbol, params) {offsetof(cuda_api_t, field), symbol},
#define CUDA_API_NONE_(field, symbol, params)
      CUDA_API_LIST(CUDA_API_SYM_, CUDA_API_NONE_)
#undef CUDA_API_NONE_
#undef CUDA_API_SYM_
  };
  const char *missing = aq_symbols_resolve(h, required, sizeof(required) / sizeof(required[0]), &aq_cu);
  if (missing) {
    snprintf(why, size, "libcuda.so.1 lacks %s (driver too old; CUDA 12.4 or newer needed)", missing);
    dlclose(h);
    return -1;
  }
#define CUDA_API_NONE_(field, symbol, params)
#define CUDA_API_OPT_(field, symbol, params) *(void **)&aq_cu.field = dlsym(h, symbol);
  CUDA_API_LIST(CUDA_API_NONE_, CUDA_API_OPT_)
#undef CUDA_API_OPT_
#undef CUDA_API_NONE_
  lib = h;
  return 0;
}

const char *aq_cuda_error(CUresult r) {
  static _Thread_local char buf[160];
  const char *s = NULL;
  if (aq_cu.cuGetErrorString && aq_cu.cuGetErrorString(r, &s) != CUDA_SUCCESS) s = NULL; /* an unknown code */
  snprintf(buf, sizeof(buf), "CUDA error %d%s%s", r, s ? ": " : "", s ? s : "");
  return buf;
}

int aq_cuda_sticky(CUresult r) { return r == 700 || r == 719 || r == 999 || r == 214; }

int aq_cuda_checked(CUresult r, const char *call, const char *where) {
  static _Atomic int last_sticky; /* the sticky error said last */
  if (r == CUDA_SUCCESS) return 1;
  if (aq_cuda_sticky(r) && atomic_exchange(&last_sticky, (int)r) == (int)r) return 0;
  fprintf(stderr, "aquila: %s: %s: %s%s\n", where, call, aq_cuda_error(r),
          aq_cuda_sticky(r) ? " (the GPU's context is lost: the same error from the rest of its teardown is not shown)"
                            : "");
  return 0;
}
