/* Private to the exec's files (exec.c and the files beside it): the exec
 * itself, its per-lane packet streams, and the functions one of them gives
 * the others. */
#ifndef AQUILA_SCHEDULER_EXEC_INTERNAL_H
#define AQUILA_SCHEDULER_EXEC_INTERNAL_H

#include <stdint.h>

#include "aquila/aquila.h"
#include "runtime/profile.h"
#include "runtime/status.h"
#include "scheduler/fuse.h"
#include "scheduler/oplib.h"
#include "scheduler/perfmodel.h"
#include "scheduler/plan.h"
#include "scheduler/replica.h"

enum { EXEC_AGENTS_MAX = 64, EXEC_LANES_MAX = 256, PKT = 64 };

typedef struct stream {
  aq_queue_t queue;
  aq_signal_t done; /* the lane's last packet: 1 while a run is in it */
  uint8_t *ring;
  uint32_t size;
  uint8_t *packets; /* npackets * 64 bytes, headers included */
  uint32_t npackets, cap;
  /* The same stream with each CPU task between two time stamps (host
   * calls): what a profiled run copies in instead. */
  uint8_t *prof;
  uint32_t nprof;
} stream_t;

struct aq_exec {
  aq_graph_t *graph;
  plan_t plan;
  aq_code_object_t ops; /* the op library's CPU code object */
  const oplib_t *lib;   /* its description, indexed (op_library.c: shared, once a runtime) */
  uint32_t *lr_offset;  /* per task: its learning rate in its live kernarg, or AQ_OP_FIELD_NONE (made at the first
                           aq_exec_set_learning_rate) */
  uint32_t nagents;
  aq_agent_t agents[EXEC_AGENTS_MAX];
  char agent_names[EXEC_AGENTS_MAX][AQ_NAME_MAX];
  int32_t agent_node[EXEC_AGENTS_MAX];
  uint8_t agent_kind[EXEC_AGENTS_MAX];
  uint32_t agent_workers[EXEC_AGENTS_MAX]; /* a CPU agent's workers (its lanes share them); 0: a GPU */
  uint32_t nlanes;
  uint32_t lane_agent[EXEC_LANES_MAX];
  stream_t streams[EXEC_LANES_MAX]; /* one queue per lane */
  void **buffers;      /* per tensor id: carved from its agent's arena */
  void **kernargs;     /* per task: carved from its agent's kernarg arena */
  void *arenas[EXEC_AGENTS_MAX], *pinned_arenas[EXEC_AGENTS_MAX], *kernarg_arenas[EXEC_AGENTS_MAX];
  size_t kernarg_used[EXEC_AGENTS_MAX];
  size_t managed_size[EXEC_AGENTS_MAX]; /* a GPU arena in managed memory (AQ_MEMORY=unified): its size */
  aq_signal_t *signals;/* per task */
  uint8_t *watched;    /* per task: another lane waits for its signal */
  uint32_t queues_used, barriers, packets;
  uint8_t lane_kind[EXEC_LANES_MAX]; /* aq_agent_kind_t of the lane's agent */
  uint32_t lane_queue_flags[EXEC_LANES_MAX]; /* its queue's aq_queue_options_t.flags (a collectives lane's) */
  aq_code_object_t gpu_ops;          /* the CUDA op library, when a GPU agent exists */
  uint64_t runs, run_started_ns;
  uint64_t last_run_ns; /* the last run's start to its wait's end (spin_on_gpu_lanes) */
  uint32_t serial; /* this exec's number, in trace tags */
  /* The last kernel lowering looked up: graphs repeat a few kernels. */
  aq_kernel_info_t last_kernel;
  uint64_t last_kernel_co;
  uint32_t last_kernel_agent;
  char last_kernel_name[64];
  _Atomic int in_flight; /* -1 while a run starts (aq_exec_run), 1 while one is in flight */
  size_t bytes;
  aq_sched_policy_t policy;
  uint32_t kinds;                      /* aq_exec_options_t.kernel_agent_kinds */
  uint32_t flags;                      /* AQ_EXEC_* */
  int exact_matmul;                    /* AQ_EXEC_EXACT_MATMUL or AQ_MATMUL_PRECISION=exact */
  /* With replicas, graph is the exec's own (the user's tasks and the
   * copies); user_graph is the one it was made from. */
  aq_graph_t *user_graph;
  /* The graph instantiated: user_graph, or the step replicated per local
   * rank made from it (ranks.h), which the exec owns; then tensor x of
   * local rank k is x + k * rank_tensors. */
  aq_graph_t *source;
  uint32_t local_ranks, rank_tensors;
  replica_out_t replicas;
  char agent_arch[EXEC_AGENTS_MAX][PERF_ARCH_MAX]; /* performance models' key */
  uint32_t *reused_by;                 /* per tensor: a later tensor given its buffer */
  uint8_t *given;                      /* per tensor: the user gave it data (inputs) */
  uint32_t *first_reader;              /* per tensor: the task reading an input first, or UINT32_MAX */
  uint32_t unbound;                    /* inputs a task reads that were never given data */
  uint64_t *stamps;                    /* per task: start and end of a profiled run; then per lane,
                                          PROFILE_EMPTY_PAIRS pairs with nothing between */
  uint32_t profile_left;               /* runs still to profile (models short of samples) */
  int profiled;                        /* the run in flight is profiled */
  int warm_up;                         /* the next run is not profiled (calibrate.c) */
  uint32_t profile_from;               /* tasks below this index are run but not recorded (calibrate.c) */
  aq_profile_sink_t gpu_sink;          /* GPU lanes' kernel times into stamps (runtime/profile.h) */
  /* lowering's scratch: per lane, the last producer a task waits for */
  uint32_t lane_last_pred[EXEC_LANES_MAX], lane_stamp[EXEC_LANES_MAX], lane_touched[EXEC_LANES_MAX];
  uint32_t *covered; /* nlanes x nlanes: see other_lane_producers */
  uint32_t join_lane; /* its done signal is the whole run's */
  fusion_t fusion;    /* products run in their consumers' kernels (fuse.h) */
};

static inline uint16_t exec_packet_header(hsa_packet_type_t type, int barrier) {
  return aq_packet_header(type, barrier, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
}

/* exec.c */
int aq_exec_finished(aq_exec_t *e);

/* exec_place.c */
aq_status_t aq_exec_pick_agents(aq_exec_t *e);
aq_status_t aq_exec_load_gpu_ops(aq_exec_t *e);
uint8_t *aq_exec_eligibility(aq_exec_t *e, uint32_t kinds);
aq_sched_policy_t aq_exec_policy_from(const aq_exec_options_t *o);
void aq_exec_task_key(aq_exec_t *e, uint32_t t, uint32_t a, perf_key_t *k, double *bytes);
/* Task t's estimate on agent a (ns): its model's, or a guess from its
 * work-groups; *samples: what the model rests on (0: a guess). */
double aq_exec_cost_of(aq_exec_t *e, uint32_t t, uint32_t a, uint32_t *samples);
aq_status_t aq_exec_heft_costs(aq_exec_t *e, const uint8_t *eligible, double **out);
aq_status_t aq_exec_heft_links(aq_exec_t *e, double **out);
aq_status_t aq_exec_fuse(aq_exec_t *e);
aq_status_t aq_exec_collective_lanes(aq_exec_t *e);
/* exec_tune.c: times the builds of the kernels that may run on a GPU and
 * have several for their shape, where no choice is kept (tune.h); never
 * fails the instantiation. */
aq_status_t aq_exec_tune(aq_exec_t *e, const uint8_t *eligible);
/* SGD updates one lane queues together, as one dispatch each group, where
 * the lane's agent fuses (exec_place.c; fuse.h: aq_fuse_groups). Last of
 * the planning passes: it reads the final lane order. */
aq_status_t aq_exec_group_updates(aq_exec_t *e);
/* Whether lane `other` is another lane of lane `mine`'s GPU: a barrier there
 * waits for it by an event, not a stream memory wait (runtime/queue.h:
 * aq_barrier_same_gpu_dep). */
int aq_exec_same_gpu_lanes(const aq_exec_t *e, uint32_t mine, uint32_t other);

/* exec_replica.c */
aq_status_t aq_exec_replica_copy(void *user, uint64_t dst, uint64_t src, uint64_t bytes);
aq_status_t aq_exec_replica_prefetch(void *user, uint64_t x, uint64_t agent, uint64_t bytes);
aq_status_t aq_exec_replicate(aq_exec_t *e, const uint8_t *eligible);

/* exec_memory.c */
aq_status_t aq_exec_memory_hint(aq_status_t s);
aq_status_t aq_exec_plan_memory(aq_exec_t *e);
size_t aq_exec_kernarg_bytes(const aq_exec_t *e, uint32_t t);
aq_status_t aq_exec_plan_kernargs(aq_exec_t *e);

/* lower.c */
aq_status_t aq_exec_lower(aq_exec_t *e, uint32_t queue_size);

/* exec_profile.c */
/* A profiled CPU lane opens with this many pairs of stamps with nothing
 * between: what a pair costs by itself, taken off its tasks' times. */
enum { PROFILE_EMPTY_PAIRS = 3 };
static inline size_t exec_stamp_slots(const aq_exec_t *e) {
  return 2 * ((size_t)e->graph->ntasks + (size_t)PROFILE_EMPTY_PAIRS * e->nlanes);
}
aq_status_t aq_exec_profile_stream(aq_exec_t *e, stream_t *st);
void aq_exec_profile_gpu_lanes(aq_exec_t *e, int on);
void aq_exec_profile_record(aq_exec_t *e);

/* exec_io.c */
aq_status_t aq_exec_find_inputs(aq_exec_t *e);

#endif
