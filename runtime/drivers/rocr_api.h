/* The slice of the HSA runtime (ROCr) the rocr driver uses, resolved from
 * libhsa-runtime64.so.1 at run time: libaquila never links ROCr, so one
 * binary runs with or without an AMD GPU. The headers give the types; each
 * field has the exact type of the function it holds (__typeof__), so a call
 * through the table is checked like a direct one. */
#ifndef AQ_RUNTIME_DRIVERS_ROCR_API_H_
#define AQ_RUNTIME_DRIVERS_ROCR_API_H_

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stddef.h>

#define ROCR_API(X)                                                                                \
  X(hsa_init) X(hsa_shut_down) X(hsa_status_string) X(hsa_system_get_info) X(hsa_iterate_agents)  \
  X(hsa_agent_get_info) X(hsa_queue_create) X(hsa_queue_destroy)                                  \
  X(hsa_queue_load_read_index_scacquire) X(hsa_queue_load_write_index_relaxed)                    \
  X(hsa_queue_store_write_index_relaxed) X(hsa_signal_create) X(hsa_signal_destroy)               \
  X(hsa_signal_store_relaxed) X(hsa_signal_store_screlease) X(hsa_signal_wait_scacquire)          \
  X(hsa_amd_signal_async_handler) X(hsa_amd_agent_iterate_memory_pools)                           \
  X(hsa_amd_memory_pool_get_info) X(hsa_amd_memory_pool_allocate) X(hsa_amd_memory_pool_free)     \
  X(hsa_amd_agents_allow_access) X(hsa_memory_copy) X(hsa_amd_svm_attributes_set)                 \
  X(hsa_amd_svm_prefetch_async) X(hsa_code_object_reader_create_from_memory)                      \
  X(hsa_code_object_reader_destroy) X(hsa_executable_create_alt)                                  \
  X(hsa_executable_load_agent_code_object) X(hsa_executable_freeze) X(hsa_executable_destroy)     \
  X(hsa_executable_iterate_agent_symbols) X(hsa_executable_symbol_get_info)

typedef struct rocr_api {
#define ROCR_FIELD(f) __typeof__(&f) f;
  ROCR_API(ROCR_FIELD)
#undef ROCR_FIELD
} rocr_api_t;

extern rocr_api_t aq_rocr;

/* dlopens libhsa-runtime64.so.1 and resolves aq_rocr; 0 on success, else -1
 * with why. */
int aq_rocr_api_load(char *why, size_t size);
/* "HSA_STATUS_...: text (0x...)" for a status. */
const char *aq_rocr_error(hsa_status_t s);

#endif
