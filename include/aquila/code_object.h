/* Code objects: loading kernels and finding them by name.
 *
 * A code object is a file of kernels for one kind of agent: for CPU agents an
 * ELF shared object exporting an aq_code_object_table_t (see kernel.h). A
 * name without a '/' is searched for in AQ_CODE_OBJECT_PATH (colon-separated)
 * and then in the directory of Aquila's own kernels (lib/aquila beside
 * libaquila.so). Before anything is mapped, the file is checked: a missing,
 * truncated, corrupt, wrong-architecture or wrong-version file gets an error
 * that says which of these it is.
 *
 * A code object is executable code, so the loader trusts only what nobody
 * else could have written: it refuses anything but a regular file (a
 * directory, device or FIFO is named as such), a world-writable file, and a
 * file in a world-writable directory without the sticky bit (/tmp, sticky,
 * is allowed). A relative AQ_CODE_OBJECT_PATH entry follows the working
 * directory; it is searched, with a warning on stderr once per process. A
 * CPU code object's ELF structure and kernel table are checked by reading
 * the file, before it is dlopen'ed and any of its code (constructors) runs.
 *
 * A kernel is found by name for one agent. Its kernel_object goes into the
 * kernel dispatch packet as the HSA spec says; kernarg_size and
 * kernarg_alignment say how to lay out the kernarg buffer.
 */
#ifndef AQUILA_CODE_OBJECT_H_
#define AQUILA_CODE_OBJECT_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/kernel.h"
#include "aquila/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_code_object { uint64_t handle; } aq_code_object_t;

typedef struct aq_code_object_info {
  char path[512];           /* the file it was loaded from */
  char format[16];          /* "cpu-elf", "cuda-fatbin", "amdgcn-hsaco" */
  char producer[128];
  uint32_t kernel_count;
} aq_code_object_info_t;

typedef struct aq_kernel_info {
  const char *name;         /* valid while the code object is loaded */
  uint64_t kernel_object;   /* for hsa_kernel_dispatch_packet_t.kernel_object */
  uint32_t kernarg_size;
  uint32_t kernarg_alignment;
  uint32_t group_segment_size;
} aq_kernel_info_t;

aq_status_t aq_code_object_load(const char *path, aq_code_object_t *out_code_object);
aq_status_t aq_code_object_unload(aq_code_object_t code_object);
aq_status_t aq_code_object_get_info(aq_code_object_t code_object,
                                    aq_code_object_info_t *info);
/* The kernel called name, as dispatched on agent. */
aq_status_t aq_code_object_find_kernel(aq_code_object_t code_object, const char *name,
                                       aq_agent_t agent, aq_kernel_info_t *out_kernel);
/* The op description the code object ships beside its kernel table
 * (kernel.h's aq_op_table_t, checked at load; valid while it is loaded):
 * AQ_ERROR_NOT_FOUND where it has none. */
aq_status_t aq_code_object_op_table(aq_code_object_t code_object, const aq_op_table_t **out_table);
/* The index-th kernel, for listing. */
aq_status_t aq_code_object_kernel_at(aq_code_object_t code_object, uint32_t index,
                                     aq_agent_t agent, aq_kernel_info_t *out_kernel);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_CODE_OBJECT_H_ */
