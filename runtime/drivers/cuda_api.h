/* The slice of the CUDA driver API the cuda driver uses, declared here and
 * resolved from libcuda.so.1 at run time: libaquila never links against
 * CUDA, so one binary runs with or without an NVIDIA GPU. */
#ifndef AQ_RUNTIME_DRIVERS_CUDA_API_H_
#define AQ_RUNTIME_DRIVERS_CUDA_API_H_

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef uint64_t CUdeviceptr;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *user);
typedef struct CUmemLocation {
  int type; /* CU_MEM_LOCATION_TYPE_* */
  int id;
} CUmemLocation;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CU_STREAM_NON_BLOCKING = 1,
  CU_STREAM_WAIT_VALUE_EQ = 1,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CU_MEMHOSTREGISTER_PORTABLE = 1,
  CU_MEMHOSTALLOC_PORTABLE = 1,
  CU_MEMHOSTALLOC_DEVICEMAP = 2,
  CU_MEMHOSTREGISTER_DEVICEMAP = 2,
  CU_MEM_ATTACH_GLOBAL = 1,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_LOCATION_TYPE_HOST = 2,
};
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* Every entry point, listed once: REQ(field, symbol, (parameters)) must
 * resolve or the driver does not start; OPT(...) may be missing (NULL). The
 * symbol is the versioned name where the API has one, as cuda.h maps it.
 * The struct below and the loader in cuda_api.c are generated from it. */
#define CUDA_API_LIST(REQ, OPT)                                                                                       \
  REQ(cuInit, "cuInit", (unsigned))                                                                                   \
  REQ(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))                                                \
  REQ(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                                                  \
  REQ(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                                                  \
  REQ(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                                                    \
  REQ(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))                                           \
  REQ(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))                                  \
  REQ(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                                          \
  REQ(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                                                \
  REQ(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", (int *, CUdevice, CUdevice))                                    \
  REQ(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", (CUcontext, unsigned))                                          \
  REQ(cuMemGetInfo, "cuMemGetInfo_v2", (size_t *, size_t *))                                                          \
  REQ(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                                           \
  REQ(cuMemAllocManaged, "cuMemAllocManaged", (CUdeviceptr *, size_t, unsigned))                                      \
  REQ(cuMemAllocHost, "cuMemAllocHost_v2", (void **, size_t))                                                         \
  REQ(cuMemHostAlloc, "cuMemHostAlloc", (void **, size_t, unsigned))                                                  \
  REQ(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                                                       \
  REQ(cuMemFreeHost, "cuMemFreeHost", (void *))                                                                       \
  REQ(cuMemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned))                                          \
  REQ(cuMemHostUnregister, "cuMemHostUnregister", (void *))                                                           \
  REQ(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", (CUdeviceptr *, void *, unsigned))                   \
  REQ(cuMemcpy, "cuMemcpy", (CUdeviceptr, CUdeviceptr, size_t))                                                       \
  REQ(cuMemcpyAsync, "cuMemcpyAsync", (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                   \
  REQ(cuMemPrefetchAsync, "cuMemPrefetchAsync_v2", (CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream))          \
  REQ(cuMemAdvise, "cuMemAdvise_v2", (CUdeviceptr, size_t, int, CUmemLocation))                                       \
  REQ(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned))                                                       \
  REQ(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                                                              \
  REQ(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                                                         \
  REQ(cuStreamQuery, "cuStreamQuery", (CUstream))                                                                     \
  REQ(cuStreamWaitValue64, "cuStreamWaitValue64_v2", (CUstream, CUdeviceptr, uint64_t, unsigned))                     \
  REQ(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned))                                          \
  REQ(cuStreamWriteValue64, "cuStreamWriteValue64_v2", (CUstream, CUdeviceptr, uint64_t, unsigned))                   \
  REQ(cuLaunchKernel, "cuLaunchKernel",                                                                               \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **)) \
  REQ(cuLaunchHostFunc, "cuLaunchHostFunc", (CUstream, CUhostFn, void *))                                             \
  REQ(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                                                          \
  REQ(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                                                                 \
  REQ(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                                                            \
  REQ(cuEventQuery, "cuEventQuery", (CUevent))                                                                        \
  REQ(cuEventSynchronize, "cuEventSynchronize", (CUevent))                                                            \
  REQ(cuEventElapsedTime, "cuEventElapsedTime", (float *, CUevent, CUevent))                                          \
  REQ(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                                               \
  REQ(cuModuleUnload, "cuModuleUnload", (CUmodule))                                                                   \
  REQ(cuModuleGetFunctionCount, "cuModuleGetFunctionCount", (unsigned *, CUmodule))                                   \
  REQ(cuModuleEnumerateFunctions, "cuModuleEnumerateFunctions", (CUfunction *, unsigned, CUmodule))                   \
  REQ(cuFuncGetName, "cuFuncGetName", (const char **, CUfunction))                                                    \
  REQ(cuFuncGetParamInfo, "cuFuncGetParamInfo", (CUfunction, size_t, size_t *, size_t *))                             \
  REQ(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction, int /* CUfunction_attribute */, int))                    \
  /* Optional: NULL on drivers before CUDA 12.4. */                                                                   \
  OPT(cuFuncLoad, "cuFuncLoad", (CUfunction))                                                                         \
  /* Optional: stream priorities (AQ_QUEUE_HIGH_PRIORITY); without them, one priority. */                            \
  OPT(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", (CUstream *, unsigned, int))                          \
  OPT(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", (int *, int *))                                     \
  /* Optional: CUDA graphs (cuda_graph.c); without them, no graphs. */                                                \
  OPT(cuStreamBeginCapture, "cuStreamBeginCapture_v2", (CUstream, int /* CUstreamCaptureMode */))                     \
  OPT(cuStreamEndCapture, "cuStreamEndCapture", (CUstream, CUgraph *))                                                \
  OPT(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", (CUgraphExec *, CUgraph, unsigned long long))       \
  OPT(cuGraphLaunch, "cuGraphLaunch", (CUgraphExec, CUstream))                                                        \
  OPT(cuGraphExecDestroy, "cuGraphExecDestroy", (CUgraphExec))                                                        \
  OPT(cuGraphDestroy, "cuGraphDestroy", (CUgraph))

typedef struct cuda_api {
#define CUDA_API_FIELD_(field, symbol, params) CUresult(*field) params;
  CUDA_API_LIST(CUDA_API_FIELD_, CUDA_API_FIELD_)
#undef CUDA_API_FIELD_
} cuda_api_t;

extern cuda_api_t aq_cu;

/* dlopens libcuda.so.1 and resolves aq_cu; 0 on success, else -1 with why. */
int aq_cuda_api_load(char *why, size_t size);
/* "CUDA_ERROR_...: text" for a result. */
const char *aq_cuda_error(CUresult r);
/* Whether r is one of the errors that lose the context (an illegal address,
 * a failed launch, ...): every later call on it fails alike. */
int aq_cuda_sticky(CUresult r);
/* A CUDA call on a path that cannot fail its caller (a release, a destroy,
 * a query with a fallback): a failure is said on stderr with the call and
 * where (agent, queue), and this thread's message, the first error, is
 * left as it was. A context's sticky error is said once: after it, every
 * release of the context's resources fails the same way. Returns whether
 * the call succeeded. */
int aq_cuda_checked(CUresult r, const char *call, const char *where);

#endif
