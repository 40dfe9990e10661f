/* Every AQ_* setting, in one table: its name, type, default, range or
 * values, and help. The runtime reads them once, at aq_init (an option of
 * aq_init_options_t first, then the environment, then the default), refuses
 * a bad value by name, and every module reads the parsed value here rather
 * than calling getenv. README.md's Environment table lists the same
 * settings (tests/runtime/settings.c checks it). */
#ifndef AQ_RUNTIME_SETTINGS_H_
#define AQ_RUNTIME_SETTINGS_H_

#include <stdint.h>

#include "aquila/kernel.h"
#include "aquila/runtime.h"
#include "aquila/status.h"

typedef enum aq_setting_type {
  AQ_SETTING_BOOL,  /* 0 or 1 */
  AQ_SETTING_UINT,  /* a whole number in [min, max] */
  AQ_SETTING_SIZE,  /* a size (2G, 512M, 4096), or agent=size,... */
  AQ_SETTING_ENUM,  /* one of `values` ("a|b|c"), read as its index */
  AQ_SETTING_TEXT,  /* anything; `values`, if set, names the check below */
  AQ_SETTING_PATH,  /* a file or directory (list) */
} aq_setting_type_t;

/* X(id, name, type, default, min, max, values, help). An enum's values are
 * listed in the order of the index its accessor returns; TEXT settings with
 * values "agents" or "cpu-agents" are checked by the rules of that name. */
#define AQ_SETTINGS_LIST(X)                                                                                         \
  X(AGENTS, "AQ_AGENTS", TEXT, "all", 0, 0, "agents", "drivers to start: all, or a list of cpu,cuda,rocr")          \
  X(CPU_AGENTS, "AQ_CPU_AGENTS", TEXT, "numa", 0, 0, "cpu-agents",                                                   \
    "how cores group into CPU agents: numa, package, machine, or a count")                                          \
  X(CPU_WORKERS, "AQ_CPU_WORKERS", UINT, "0", 0, 65536, NULL, "most worker threads per CPU agent (0: one per core)") \
  X(CPU_WATCHERS, "AQ_CPU_WATCHERS", UINT, "16", 1, 65536, NULL,                                                  \
    "idle CPU workers per agent that watch its queues (the rest wake for dispatches split wider)")                 \
  X(CPU_LANES, "AQ_CPU_LANES", UINT, "16", 1, 256, NULL,                                                          \
    "most lanes (queues) a graph gets on a CPU agent: tasks it runs side by side")                                 \
  X(SPIN_US, "AQ_SPIN_US", UINT, "200", 0, 60000000, NULL, "how long a waiter spins before it sleeps (us; CPU workers after a split dispatch 10x)") \
  X(GPU_SPIN_US, "AQ_GPU_SPIN_US", UINT, "200", 0, 60000000, NULL,                                                  \
    "how long a GPU queue's processor polls after its last work (us)")                                              \
  X(MAX_SIGNALS, "AQ_MAX_SIGNALS", UINT, "65536", 16, 16777216, NULL, "signals the process may hold at once")      \
  X(MEMORY_LIMIT, "AQ_MEMORY_LIMIT", SIZE, "", 0, 0, NULL,                                                          \
    "memory budgets: a size for every agent, or agent=size,... (K, M, G, T)")                                       \
  X(SHUTDOWN_TIMEOUT_MS, "AQ_SHUTDOWN_TIMEOUT_MS", UINT, "5000", 1, 86400000, NULL,                                 \
    "how long aq_shut_down waits for running packets (ms)")                                                         \
  X(COMM_TIMEOUT_MS, "AQ_COMM_TIMEOUT_MS", UINT, "300000", 1, 86400000, NULL,                                       \
    "how long a collective waits for its peers (ms)")                                                               \
  X(COMM_STREAM, "AQ_COMM_STREAM", BOOL, "1", 0, 1, NULL,                                                           \
    "a graph's NCCL collectives on a stream of their own beside the kernels'")                                      \
  X(CODE_OBJECT_PATH, "AQ_CODE_OBJECT_PATH", PATH, "", 0, 0, NULL,                                                  \
    "colon-separated directories searched for code objects before lib/aquila")                                     \
  X(SCHED, "AQ_SCHED", ENUM, "heft", 0, 0, "heft|eager|round-robin|pinned|locality", "graphs' placement policy")     \
  X(PERF_DIR, "AQ_PERF_DIR", PATH, "", 0, 0, NULL, "where HEFT keeps its performance models")                        \
  X(TUNE, "AQ_TUNE", BOOL, "1", 0, 1, NULL,                                                                         \
    "time each GPU build of an op once per shape and keep the fastest (AQ_PERF_DIR/tuned.tsv)")                     \
  X(TRACE, "AQ_TRACE", PATH, "", 0, 0, NULL, "write a Chrome trace of every packet to this file (%r: MPI rank)")     \
  X(TRACE_MAX_MB, "AQ_TRACE_MAX_MB", UINT, "2048", 1, 1048576, NULL, "trace buffer cap (MiB)")                      \
  X(CPU_ISA, "AQ_CPU_ISA", ENUM, "widest", 0, 0, "widest|avx512|avx2|generic", "cap the CPU kernels' vector ISA")   \
  X(CONV_ALGO, "AQ_CONV_ALGO", ENUM, "measured", 0, 0, "measured|gemm|direct", "the CPU convolution path")          \
  X(GEMM_SKIP_ZEROS, "AQ_GEMM_SKIP_ZEROS", BOOL, "1", 0, 1, NULL, "the AVX-512 CPU GEMM leaves out zeros of A")     \
  X(MEMORY, "AQ_MEMORY", ENUM, "pinned", 0, 0, "pinned|unified|replicate",                                          \
    "where a tensor CPU and GPU both touch lives")                                                                  \
  X(MEMORY_REUSE, "AQ_MEMORY_REUSE", BOOL, "1", 0, 1, NULL, "activations share buffers by lifetime")                \
  X(FUSION, "AQ_FUSION", ENUM, "gpu", 0, 0, "gpu|0|1", "epilogue fusion: on GPU agents, never (0), everywhere (1)") \
  X(MATMUL_PRECISION, "AQ_MATMUL_PRECISION", ENUM, "default", 0, 0, "default|exact",                               \
    "fp32 products on GPUs: 3xTF32 (default) or FFMA (exact)")                                                      \
  X(CUDA_GRAPHS, "AQ_CUDA_GRAPHS", ENUM, "1", 0, 0, "0|1|traced", "repeating GPU packet stretches as CUDA graphs")

typedef enum aq_setting_id {
#define AQ_SETTING_ID_(id, ...) AQ_SET_##id,
  AQ_SETTINGS_LIST(AQ_SETTING_ID_)
#undef AQ_SETTING_ID_
      AQ_SET_COUNT
} aq_setting_id_t;

/* Enum indexes, in the order of the values above. */
enum { AQ_MEMORY_PINNED, AQ_MEMORY_UNIFIED, AQ_MEMORY_REPLICATE };
enum { AQ_FUSION_GPU, AQ_FUSION_OFF, AQ_FUSION_ON };
enum { AQ_PRECISION_DEFAULT, AQ_PRECISION_EXACT };
enum { AQ_CUDA_GRAPHS_OFF, AQ_CUDA_GRAPHS_ON, AQ_CUDA_GRAPHS_TRACED };

/* Reads every setting (options first, then the environment, then the
 * default) and checks it; a bad one is refused by name and the values in
 * force stay as they were. */
aq_status_t aq_settings_load(const aq_init_options_t *options);

uint64_t aq_setting_u64(aq_setting_id_t id);  /* UINT, BOOL, ENUM (index) */
const char *aq_setting_text(aq_setting_id_t id); /* the value as given, "" if none */
const char *aq_setting_name(aq_setting_id_t id);

/* What the CPU worker hands kernels in aq_dispatch_ctx_t.settings. */
const aq_kernel_settings_t *aq_kernel_settings(void);

/* The budget AQ_MEMORY_LIMIT gives agent `name` (0: none). */
uint64_t aq_settings_memory_limit(const char *name);

#endif /* AQ_RUNTIME_SETTINGS_H_ */
