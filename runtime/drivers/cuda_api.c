/* Loading the CUDA driver API at run time. */
#include "runtime/drivers/cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>

#include "runtime/symbols.h"

cuda_api_t cu;
static void *lib;

int cuda_api_load(char *why, size_t size) {
  if (lib) return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, size, "no CUDA driver: %s", dlerror());
    return -1;
  }
  /* Versioned names where the API has them, as cuda.h maps them. */
  static const aq_symbol_t syms[] = {
#define SYM(field, name) {offsetof(cuda_api_t, field), name}
      SYM(cuInit, "cuInit"), SYM(cuGetErrorString, "cuGetErrorString"),
      SYM(cuDeviceGetCount, "cuDeviceGetCount"), SYM(cuDeviceGet, "cuDeviceGet"),
      SYM(cuDeviceGetName, "cuDeviceGetName"), SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
      SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"), SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
      SYM(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer"), SYM(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
      SYM(cuMemGetInfo, "cuMemGetInfo_v2"), SYM(cuMemAlloc, "cuMemAlloc_v2"),
      SYM(cuMemAllocManaged, "cuMemAllocManaged"), SYM(cuMemAllocHost, "cuMemAllocHost_v2"),
      SYM(cuMemHostAlloc, "cuMemHostAlloc"),
      SYM(cuMemFree, "cuMemFree_v2"), SYM(cuMemFreeHost, "cuMemFreeHost"),
      SYM(cuMemHostRegister, "cuMemHostRegister_v2"), SYM(cuMemHostUnregister, "cuMemHostUnregister"),
      SYM(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"), SYM(cuMemcpy, "cuMemcpy"),
      SYM(cuMemcpyAsync, "cuMemcpyAsync"), SYM(cuMemPrefetchAsync, "cuMemPrefetchAsync_v2"),
      SYM(cuMemAdvise, "cuMemAdvise_v2"),
      SYM(cuStreamCreate, "cuStreamCreate"), SYM(cuStreamDestroy, "cuStreamDestroy_v2"),
      SYM(cuStreamSynchronize, "cuStreamSynchronize"), SYM(cuStreamQuery, "cuStreamQuery"),
      SYM(cuStreamWaitValue64, "cuStreamWaitValue64_v2"), SYM(cuStreamWriteValue64, "cuStreamWriteValue64_v2"),
      SYM(cuLaunchKernel, "cuLaunchKernel"), SYM(cuLaunchHostFunc, "cuLaunchHostFunc"),
      SYM(cuEventCreate, "cuEventCreate"), SYM(cuEventDestroy, "cuEventDestroy_v2"),
      SYM(cuEventRecord, "cuEventRecord"), SYM(cuEventQuery, "cuEventQuery"),
      SYM(cuEventSynchronize, "cuEventSynchronize"), SYM(cuEventElapsedTime, "cuEventElapsedTime"),
      SYM(cuModuleLoadData, "cuModuleLoadData"), SYM(cuModuleUnload, "cuModuleUnload"),
      SYM(cuModuleGetFunctionCount, "cuModuleGetFunctionCount"),
      SYM(cuModuleEnumerateFunctions, "cuModuleEnumerateFunctions"), SYM(cuFuncGetName, "cuFuncGetName"),
      SYM(cuFuncGetParamInfo, "cuFuncGetParamInfo"), SYM(cuFuncSetAttribute, "cuFuncSetAttribute"),
#undef SYM
  };
  const char *missing = aq_symbols_resolve(h, syms, sizeof(syms) / sizeof(syms[0]), &cu);
  if (missing) {
    snprintf(why, size, "libcuda.so.1 lacks %s (driver too old; CUDA 12.4 or newer needed)", missing);
    dlclose(h);
    return -1;
  }
  *(void **)&cu.cuFuncLoad = dlsym(h, "cuFuncLoad");
  *(void **)&cu.cuStreamBeginCapture = dlsym(h, "cuStreamBeginCapture_v2");
  *(void **)&cu.cuStreamEndCapture = dlsym(h, "cuStreamEndCapture");
  *(void **)&cu.cuGraphInstantiateWithFlags = dlsym(h, "cuGraphInstantiateWithFlags");
  *(void **)&cu.cuGraphLaunch = dlsym(h, "cuGraphLaunch");
  *(void **)&cu.cuGraphExecDestroy = dlsym(h, "cuGraphExecDestroy");
  *(void **)&cu.cuGraphDestroy = dlsym(h, "cuGraphDestroy");
  lib = h;
  return 0;
}

const char *cuda_error(CUresult r) {
  static _Thread_local char buf[160];
  const char *s = NULL;
  if (cu.cuGetErrorString) cu.cuGetErrorString(r, &s);
  snprintf(buf, sizeof(buf), "CUDA error %d%s%s", r, s ? ": " : "", s ? s : "");
  return buf;
}
