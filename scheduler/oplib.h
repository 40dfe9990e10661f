/* The op library as the scheduler sees it: its code object and the
 * description it ships (kernel.h's aq_op_table_t), indexed by kernel name
 * once, so that placing, fusing, lowering and setting a learning rate ask
 * it rather than know any op. */
#ifndef AQ_SCHEDULER_OPLIB_H_
#define AQ_SCHEDULER_OPLIB_H_

#include <stdint.h>

#include "aquila/code_object.h"
#include "aquila/kernel.h"
#include "aquila/ops.h"

enum { OPLIB_ENTRIES_MAX = 128, OPLIB_SLOTS = 256 };

/* A kernel the description says something of: its op entry (or NULL),
 * and as bits the fusion rules it is the consumer of. */
typedef struct oplib_entry {
  const char *kernel;
  const aq_op_desc_t *op;
  uint32_t consumes;
} oplib_entry_t;

typedef struct oplib {
  aq_code_object_t co;        /* the CPU code object, the library's entry */
  const aq_op_table_t *table; /* NULL: it describes nothing (no fusion, no fields set) */
  uint32_t nentries;
  oplib_entry_t entries[OPLIB_ENTRIES_MAX];
  uint8_t slots[OPLIB_SLOTS]; /* open addressing over kernel names: entry + 1, 0 empty */
} oplib_t;

/* The one file the scheduler knows by name: everything else about the op
 * library, its other builds included, comes from its description. */
#define OPLIB_CODE_OBJECT "kernels-cpu.so"

/* Indexes the description code object co ships (none: lib describes
 * nothing). */
aq_status_t aq_oplib_index(oplib_t *lib, aq_code_object_t co);

/* The op library's code object for CPU or GPU agents, loaded at the first
 * call of each runtime (op_library.c); the execs share it and never unload
 * it. The GPU one is the file the CPU one's description names. */
typedef enum aq_op_library { AQ_OP_LIBRARY_CPU = 0, AQ_OP_LIBRARY_GPU = 1 } aq_op_library_t;
aq_status_t aq_op_library(aq_op_library_t which, aq_code_object_t *out);
/* The op library's description, indexed once a runtime beside its code
 * object (valid until aq_shut_down). */
aq_status_t aq_op_library_ops(const oplib_t **out);

/* The entry of a kernel, or NULL: one hash and one compare. */
const oplib_entry_t *aq_oplib_find(const oplib_t *lib, const char *kernel);
/* Fields of an op's kernarg (AQ_OP_FIELD_NONE where it has none). */
uint32_t aq_oplib_lr_offset(const oplib_t *lib, const char *kernel);
uint32_t aq_oplib_precision_offset(const oplib_t *lib, const char *kernel);
/* The library's code object for agents of a kind (aq_agent_kind_t), or
 * NULL where it has none. */
const char *aq_oplib_build(const oplib_t *lib, uint32_t agent_kind);
/* How a kernel launches on agents of a kind, by that build's rules: the
 * variant that suits its kernargs, its shape (cpu: the task's CPU one), the
 * group segment a packet of the variant asks for. Without rules: the
 * kernel itself, the CPU shape, 0. */
const char *aq_oplib_launch_kernel(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg);
aq_dispatch_shape_t aq_oplib_launch_shape(const oplib_t *lib, uint32_t agent_kind, const char *kernel,
                                          const void *kernarg, aq_dispatch_shape_t cpu);
uint32_t aq_oplib_group_segment(const oplib_t *lib, uint32_t agent_kind, const char *build, const void *kernarg);
/* Auto-tuning (kernel.h's aq_op_build_t hooks): the builds of kernel
 * worth timing for these kernargs, the launch rule's pick first (without
 * the hook: that pick alone); the shape of one of them as it runs; the
 * text that tells these kernargs' shapes apart (0: the kernel has none). */
uint32_t aq_oplib_builds(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg,
                         const char **names, uint32_t max);
aq_dispatch_shape_t aq_oplib_build_shape(const oplib_t *lib, uint32_t agent_kind, const char *kernel,
                                         const char *build, const void *kernarg, aq_dispatch_shape_t cpu);
int aq_oplib_tune_key(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg, char *buf,
                      size_t size);

#endif
