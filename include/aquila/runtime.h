/* Runtime lifetime, topology and agents.
 *
 * The runtime is process-wide, as in HSA: aq_init() counts references and the
 * matching aq_shut_down() releases them; the last one stops every agent. An
 * agent is something that drains AQL queues: a CPU agent is a set of worker
 * threads pinned to the cores of one NUMA node (by default), a GPU agent is a
 * device behind a driver (cuda, rocr). Topology comes from hwloc, so
 * HWLOC_SYNTHETIC or HWLOC_XMLFILE give any machine shape on any machine.
 *
 * Handles (aq_agent_t, aq_queue_t, aq_signal_t, ...) are 64-bit values that
 * carry a generation: a handle to a destroyed object is reported as stale
 * rather than followed. Zero is never a valid handle.
 */
#ifndef AQUILA_RUNTIME_H_
#define AQUILA_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_agent { uint64_t handle; } aq_agent_t;

/* Zero in every field means "default"; AQ_* environment variables override
 * defaults but never an explicit field. */
typedef struct aq_init_options {
  /* How CPU cores are grouped into agents: "numa" (one per NUMA node, the
   * default), "package", "machine" (one agent of all cores), or "N" (N agents
   * of consecutive cores). Environment: AQ_CPU_AGENTS. */
  const char *cpu_agents;
  /* Most worker threads per CPU agent; 0 = one per core. AQ_CPU_WORKERS. */
  uint32_t cpu_workers;
  /* Signals the process may hold at once; 0 = 65536. AQ_MAX_SIGNALS. */
  uint32_t max_signals;
  /* Comma-separated drivers to start ("cpu,cuda,rocr"); NULL = all.
   * AQ_AGENTS. */
  const char *drivers;
  /* How long a waiter spins before it sleeps, in µs; 0 = 200. AQ_SPIN_US. */
  uint32_t spin_us;
  /* How long a GPU queue's packet processor keeps polling for packets after
   * its last work before it sleeps, in µs; 0 = 200. AQ_GPU_SPIN_US. While a
   * thread waits for a completion the GPU still owes, it polls regardless,
   * unless AQ_GPU_SPIN_US=0 (environment): then it sleeps between looks. */
  uint32_t gpu_spin_us;
  /* Memory budgets per agent: "cpu0=2G,cuda0=40G" (K, M, G, T: powers of
   * 1024; no suffix: bytes), or one size for every agent; NULL = none but
   * the regions' own sizes. Allocations past an agent's budget or a
   * region's size fail with AQ_ERROR_OUT_OF_MEMORY. AQ_MEMORY_LIMIT. */
  const char *memory_limit;
  /* How long aq_shut_down waits for packets still running before it gives
   * up with AQ_ERROR_BUSY naming them, in ms; 0 = 5000.
   * AQ_SHUTDOWN_TIMEOUT_MS. */
  uint32_t shutdown_timeout_ms;
} aq_init_options_t;

aq_status_t aq_init(const aq_init_options_t *options);
aq_status_t aq_shut_down(void);

typedef enum aq_agent_kind {
  AQ_AGENT_KIND_CPU = 1,
  AQ_AGENT_KIND_GPU = 2,
} aq_agent_kind_t;

enum { AQ_NAME_MAX = 64 };

typedef struct aq_agent_info {
  char name[AQ_NAME_MAX];        /* "cpu0", "cuda0" */
  char device[128];              /* "Intel Xeon ...", "NVIDIA H100 80GB HBM3" */
  char driver[16];               /* "cpu", "cuda", "rocr" */
  aq_agent_kind_t kind;
  uint32_t index;                /* position in aq_agents order */
  int32_t numa_node;             /* OS index of the nearest NUMA node, -1 if none */
  uint32_t compute_units;        /* worker threads (CPU) or SMs/CUs (GPU) */
  uint32_t queue_max_size;       /* packets in the largest queue it accepts */
  uint32_t queues_max;           /* queues it accepts at once */
  uint32_t workgroup_max_size;
  uint64_t features;             /* AQ_FEATURE_* bits */
  char isa[32];                  /* "x86-64-avx512", "sm_90" */
  int usable;                    /* 0 after a fault that needs a reset */
} aq_agent_info_t;

#define AQ_FEATURE_AVX2 (1ull << 0)
#define AQ_FEATURE_FMA (1ull << 1)
#define AQ_FEATURE_AVX512F (1ull << 2)
#define AQ_FEATURE_AVX512BW (1ull << 3)
#define AQ_FEATURE_AVX512BF16 (1ull << 4)
#define AQ_FEATURE_AMX (1ull << 5)
#define AQ_FEATURE_KERNEL_DISPATCH (1ull << 16)
#define AQ_FEATURE_AGENT_DISPATCH (1ull << 17)

/* Fills agents[0..capacity) and sets *count to how many exist (which may be
 * larger than capacity: call with capacity 0 to size the array). */
aq_status_t aq_agents(aq_agent_t *agents, size_t capacity, size_t *count);
aq_status_t aq_agent_get_info(aq_agent_t agent, aq_agent_info_t *info);

/* The machine as hwloc sees it. */
typedef struct aq_topology_info {
  uint32_t packages, numa_nodes, cores, pus;
  uint64_t l1d_bytes, l2_bytes, l3_bytes;   /* per instance, 0 if unknown */
  int synthetic;                            /* HWLOC_SYNTHETIC / XML: not this system */
  char source[32];                          /* "this system", "synthetic", "xml" */
} aq_topology_info_t;

aq_status_t aq_topology_get_info(aq_topology_info_t *info);

/* Why a driver offers no agents ("libcuda.so.1: cannot open shared object"),
 * or "" when it started. */
aq_status_t aq_driver_status(const char *driver, const char **message);

/* One configuration setting in force, for tools such as aq-info. */
typedef struct aq_setting {
  const char *name;      /* the environment variable: "AQ_CPU_AGENTS" */
  char value[64];        /* the value in force */
  const char *source;    /* "default", "environment" or "options" */
  const char *help;      /* one line on what it does */
} aq_setting_t;

/* The settings of the running runtime (capacity 0 sizes the array). */
aq_status_t aq_settings(aq_setting_t *settings, size_t capacity, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_RUNTIME_H_ */
