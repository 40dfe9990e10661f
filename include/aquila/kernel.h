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
#include <stddef.h>

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

/* Bytes of dispatch_shared (below). */
#define AQ_DISPATCH_SHARED_BYTES 128u

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
  /* AQ_DISPATCH_SHARED_BYTES bytes, 64-byte aligned, that every group of
   * this dispatch sees: zero before its first group starts, live until its
   * last ends. Groups may run one after another or side by side, so one
   * group must never wait for another to start; what they share there
   * (work already done, such as a product's packed panels) is taken or
   * redone, never waited for. NULL where the runtime gives none. */
  void *dispatch_shared;
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

/* ---- An op library's description of itself ------------------------------
 * Beside its kernel table, an op library (Aquila's own, or anyone's built
 * the same way) exports AQ_OP_TABLE_SYMBOL: what the scheduler may know of
 * its kernels and do with them. The scheduler knows ops only through it, so
 * a new op, a new optimizer or a new fused build is a change to the library
 * alone. Kernarg layouts are the op's, the same in every build (CPU, CUDA),
 * so the description shipped in the CPU code object holds for all of them;
 * which builds exist on an agent is still asked of its code object. */
#define AQ_OP_TABLE_MAGIC 0x504F5141u /* "AQOP" little-endian */
#define AQ_OP_TABLE_VERSION 2u /* 2: aq_op_build_t's tuning hooks */
#define AQ_OP_TABLE_SYMBOL "aq_op_table"
#define AQ_OP_FIELD_NONE 0xFFFFFFFFu /* the kernel has no such field */

/* What a kernel is, as bits of aq_op_desc_t.flags. */
enum {
  AQ_OP_OPTIMIZER = 1u << 0, /* updates parameters from gradients: a float learning rate at lr_offset */
  AQ_OP_MATMUL = 1u << 1,    /* a product whose int32 aq_matmul_precision_t sits at precision_offset */
};

typedef struct aq_op_desc {
  const char *kernel;        /* a name of the kernel table */
  uint32_t flags;            /* AQ_OP_* */
  uint32_t lr_offset;        /* the float aq_exec_set_learning_rate rewrites, or AQ_OP_FIELD_NONE */
  uint32_t precision_offset; /* the int32 an exact exec sets to exact, or AQ_OP_FIELD_NONE */
  uint32_t reserved_;
} aq_op_desc_t;

/* Both take kernargs as a dispatch would see them: tensor slots filled in
 * (with some non-null address while the scheduler only plans). */
typedef int (*aq_op_fuse_accepts_fn)(const void *product_args, const void *consumer_args);
typedef void (*aq_op_fuse_merge_fn)(const void *product_args, const void *consumer_args, void *fused_args);

/* How a fusion's product may look, as bits of aq_op_fusion_t.flags. */
enum {
  /* The product may write other tensors beside the one the consumer takes
   * in (a batch norm's statistics): the fused kernel still writes them,
   * where the product's kernarg says. Without it, the product must write
   * that one tensor alone. */
  AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS = 1u << 0,
  /* The fused kernel saves a pass over memory on CPUs too (an elementwise
   * consumer, not a GEMM's epilogue): the exec fuses it on CPU agents by
   * default, where the others wait for AQ_FUSION=1. */
  AQ_OP_FUSE_ON_CPUS = 1u << 1,
};

/* An epilogue fusion: a task of `product` whose output only a task of
 * `consumer` reads (at consumer_slot of its kernarg) may run with it as one
 * `fused` kernel, where accepts says so. The fused kernarg starts with the
 * product's (its offsets hold there) and has the product's grid; merge
 * writes it from both. */
typedef struct aq_op_fusion {
  const char *product, *consumer, *fused;
  uint32_t consumer_slot;   /* where the consumer's kernarg points at the product's output */
  uint32_t kernarg_size;    /* the fused kernel's kernarg bytes */
  uint32_t lr_offset;       /* the learning rate in the fused kernarg, or AQ_OP_FIELD_NONE */
  uint32_t flags;           /* AQ_OP_FUSE_* (0 in a table of before they existed) */
  aq_op_fuse_accepts_fn accepts;
  aq_op_fuse_merge_fn merge;
} aq_op_fusion_t;

/* The library's code object for another kind of agent (aq_agent_kind_t),
 * by file name (searched as aq_code_object_load does), and how its kernels
 * launch there, where that differs from the CPU build (each hook may be
 * NULL: the kernel's own name, the CPU grid, no group segment). */
typedef struct aq_op_build {
  uint32_t agent_kind;
  uint32_t reserved_;
  const char *code_object;
  /* The build of kernel that suits these kernargs (a variant's name, or kernel). */
  const char *(*kernel)(const char *kernel, const void *kernarg);
  /* The launch shape in work-items, in place of the CPU one given. */
  void (*shape)(const char *kernel, const void *kernarg, uint32_t grid[3], uint32_t workgroup[3]);
  /* The group segment (bytes) a packet of the build must ask for. */
  uint32_t (*group_segment)(const char *build, const void *kernarg);
  /* Auto-tuning (each may be NULL: nothing is tuned). The builds of kernel
   * worth timing against each other for these kernargs, the kernel hook's
   * pick first: at most max names, and how many (1: nothing to choose). */
  uint32_t (*builds)(const char *kernel, const void *kernarg, const char **names, uint32_t max);
  /* The launch shape of build, one of kernel's builds, as that build runs
   * (the shape hook gives the kernel hook's pick's). */
  void (*build_shape)(const char *kernel, const char *build, const void *kernarg, uint32_t grid[3],
                      uint32_t workgroup[3]);
  /* The fields of these kernargs that tell shapes apart for tuning, as text
   * without white space, into buf; 0 where kernel has no such key. */
  int (*tune_key)(const char *kernel, const void *kernarg, char *buf, size_t size);
} aq_op_build_t;

typedef struct aq_op_table {
  uint32_t magic;           /* AQ_OP_TABLE_MAGIC */
  uint32_t version;         /* AQ_OP_TABLE_VERSION */
  uint32_t op_count, fusion_count;
  const aq_op_desc_t *ops;
  const aq_op_fusion_t *fusions;
  uint32_t build_count, reserved_;
  const aq_op_build_t *builds;
} aq_op_table_t;

#define AQ_OP_COUNT_(a_) ((uint32_t)(sizeof(a_) / sizeof((a_)[0])))
/* Defines the exported description from arrays of aq_op_desc_t,
 * aq_op_fusion_t and aq_op_build_t (each at least one entry). */
#define AQ_DEFINE_OP_TABLE(ops_, fusions_, builds_)                                           \
  __attribute__((visibility("default")))                                                   \
  const aq_op_table_t aq_op_table = {AQ_OP_TABLE_MAGIC, AQ_OP_TABLE_VERSION, AQ_OP_COUNT_(ops_), \
                                     AQ_OP_COUNT_(fusions_), (ops_), (fusions_), AQ_OP_COUNT_(builds_), 0, (builds_)}

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_KERNEL_H_ */
