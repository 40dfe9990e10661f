/* The CPU code-object ABI: what a kernel author writes against.
 *
 * A CPU code object is an ELF shared object that exports one symbol,
 * AQ_CODE_OBJECT_SYMBOL, pointing at an aq_code_object_table_t: a magic number,
 * the ABI version, the ISA it was built for and a table of kernel descriptors.
 * The runtime loads Aquila's own op library and a user's kernels the same way.
 *
 * A kernel dispatch packet's grid is cut into work-groups as the HSA spec says
 * (the last group along a dimension may be partial). The CPU agent calls the
 * kernel's function once per work-group, on one of its worker threads; the
 * function loops over the group's work-items itself, which is what lets it
 * vectorise. A non-zero return is a kernel fault: the packet's completion
 * signal is marked failed, and the kernel's name goes into the error message.
 */
#ifndef AQUILA_KERNEL_H_
#define AQUILA_KERNEL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AQ_CODE_OBJECT_MAGIC 0x54514B41u /* "AKQT" little-endian */
#define AQ_CODE_OBJECT_VERSION 1u
#define AQ_CODE_OBJECT_SYMBOL "aq_code_object_table"

/* The ISA a code object's functions were compiled for. */
typedef enum aq_isa {
  AQ_ISA_NONE = 0,
  AQ_ISA_X86_64 = 1,
  AQ_ISA_AARCH64 = 2,
} aq_isa_t;

#if defined(__x86_64__)
#define AQ_ISA_NATIVE AQ_ISA_X86_64
#elif defined(__aarch64__)
#define AQ_ISA_NATIVE AQ_ISA_AARCH64
#else
#define AQ_ISA_NATIVE AQ_ISA_NONE
#endif

/* The settings that concern kernels (the runtime's AQ_* table, read at
 * aq_init), so that a code object never reads the environment itself. */
typedef struct aq_kernel_settings {
  uint32_t cpu_isa;         /* AQ_CPU_ISA: 0 widest, 1 avx512, 2 avx2, 3 generic */
  uint32_t conv_algo;       /* AQ_CONV_ALGO: 0 measured, 1 gemm, 2 direct */
  uint32_t gemm_skip_zeros; /* AQ_GEMM_SKIP_ZEROS: 1 on, 0 off */
  uint32_t reserved_;
} aq_kernel_settings_t;

/* What one work-group call sees. */
typedef struct aq_dispatch_ctx {
  uint32_t dims;            /* 1, 2 or 3 */
  uint32_t group_id[3];     /* this work-group's coordinates */
  uint32_t group_size[3];   /* work-items in this group (partial at the edge) */
  uint32_t workgroup_size[3]; /* the packet's nominal work-group size */
  uint32_t grid_size[3];    /* work-items in the whole grid */
  uint32_t group_count[3];  /* work-groups along each dimension */
  uint32_t worker_index;    /* which of the agent's workers runs this call */
  uint32_t worker_count;    /* how many workers the agent has */
  void *group_segment;      /* group_segment_size bytes of scratch, 64-byte
                               aligned, private to this call */
  uint32_t group_segment_size;
  uint32_t reserved_;
  const aq_kernel_settings_t *settings; /* NULL: every setting's default */
} aq_dispatch_ctx_t;

typedef int (*aq_cpu_kernel_fn_t)(const void *kernarg, const aq_dispatch_ctx_t *ctx);

/* One kernel: the same descriptor (name, kernarg layout, work-group rules)
 * describes it in every build, so a caller dispatches every variant alike. */
typedef struct aq_kernel_desc {
  const char *name;
  aq_cpu_kernel_fn_t fn;
  uint32_t kernarg_size;    /* bytes the kernarg buffer must hold */
  uint32_t kernarg_align;   /* power of two; 0 means 8 */
  uint32_t group_segment_size; /* per-call scratch the kernel needs */
  uint32_t flags;           /* reserved, 0 */
} aq_kernel_desc_t;

typedef struct aq_code_object_table {
  uint32_t magic;           /* AQ_CODE_OBJECT_MAGIC */
  uint32_t version;         /* AQ_CODE_OBJECT_VERSION */
  uint32_t isa;             /* aq_isa_t */
  uint32_t kernel_count;
  const aq_kernel_desc_t *kernels;
  const char *producer;     /* free text: who built it */
} aq_code_object_table_t;

/* Defines the exported table of a code object from an array of descriptors:
 *   static const aq_kernel_desc_t k[] = {{"add", add_fn, 24, 8, 0, 0}};
 *   AQ_DEFINE_CODE_OBJECT("my kernels", k);                                 */
#define AQ_DEFINE_CODE_OBJECT(producer_, kernels_)                            \
  __attribute__((visibility("default")))                                      \
  const aq_code_object_table_t aq_code_object_table = {                       \
      AQ_CODE_OBJECT_MAGIC, AQ_CODE_OBJECT_VERSION, AQ_ISA_NATIVE,            \
      (uint32_t)(sizeof(kernels_) / sizeof((kernels_)[0])), (kernels_),       \
      (producer_)}

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_KERNEL_H_ */
