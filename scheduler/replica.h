/* Replicas: a tensor has a copy per memory domain (a CPU agent's NUMA node,
 * a GPU's device memory) with an MSI-like state, and the planner inserts copy
 * tasks only where a task needs data its domain does not hold.
 *
 * Walking the placed graph in plan order, each tensor has a set of domains
 * holding it valid (Shared) and, after a write, exactly one (Modified): a
 * kernel task on domain d that reads a tensor d does not hold gets a copy
 * task before it (pinned to d's agent, from a valid domain, the home one
 * first) and then reads the replica; a write makes the writer's domain the
 * only valid one. A tensor's home is the domain of the first CPU agent
 * touching it, else of the first agent; host tasks always see the home copy
 * (their functions reach tensors through aq_exec_tensor_data). At the end of
 * the run what must persist (parameters, state, inputs, and anything a run
 * reads before writing it) is copied back home if its home copy is stale;
 * other tensors are read from where they were last written.
 *
 * GPUs (gpus set): a GPU task reads and writes its GPU's replica. A GPU
 * copies only to or from the home replica, which the exec then keeps in
 * pinned host memory the GPU reaches in place: both directions are the op
 * library's aq_copy kernel on the GPU's queue, ordered like any task, and a
 * CPU replica away from home is filled from home. A tensor two GPUs touch
 * is left to the exec's memory scheme (one buffer), as every GPU tensor is
 * when gpus is not set.
 *
 * Unified memory (prefetch set): no replicas. A tensor a GPU touches lives
 * in managed memory, where its pages sit in one place at a time; before a
 * task whose domain (a GPU, or the host) is not where the walk last left
 * them, a prefetch task (a host task calling prefetch_fn) moves them there.
 * A run begins where the last one ended: with the pages where its last
 * toucher left them.
 *
 * The result is a new graph (the exec's own): the user's tasks in plan
 * order with the copies between them, every task pinned to the agent it
 * was placed on, replicas as extra tensors "name@agent". Its dependencies
 * are inferred again, so copies order like any task (a prefetch reads and
 * writes its tensor: it waits for whatever touched it before, and what
 * touches it after waits for it). */
#ifndef AQ_SCHEDULER_REPLICA_H_
#define AQ_SCHEDULER_REPLICA_H_

#include "scheduler/plan.h"

typedef struct replica_in {
  const aq_graph_t *graph;
  const plan_t *plan;         /* placed */
  const uint32_t *lane_agent; /* lane -> agent */
  uint32_t nagents;           /* at most 64 */
  const uint8_t *agent_gpu;   /* agent -> 1 if a GPU */
  const char (*agent_names)[64];
  aq_host_call_fn_t copy_fn;  /* copy_fn(copy_user, dst tensor, src tensor, bytes) */
  void *copy_user;
  uint8_t gpus;               /* GPUs are domains too (device replicas, aq_copy on the GPU) */
  uint8_t prefetch;           /* unified memory: prefetch tasks instead of replicas */
  aq_host_call_fn_t prefetch_fn; /* prefetch_fn(copy_user, tensor, destination agent, bytes) */
} replica_in_t;

typedef struct replica_out {
  aq_graph_t *graph;          /* the exec's graph; aq_graph_destroy frees it */
  uint32_t *final;            /* per tensor id of the user's graph: the tensor holding it after a run */
  uint32_t *origin;           /* per task of the new graph: the user's task id + 1, 0 for a copy */
  uint32_t copies;            /* copy (or prefetch) tasks inserted */
  uint8_t prefetch;           /* the tasks are prefetches (unified memory) */
} replica_out_t;

/* Whether an exec on these agents walks its graph, and how: replicas when
 * asked (AQ_EXEC_REPLICATE, AQ_MEMORY=replicate) and there are two CPU
 * agents, or a CPU and a GPU (*gpus); prefetches under AQ_MEMORY=unified
 * when there are both CPU and GPU agents (*prefetch). */
int aq_replica_wanted(int replicate_flag, const uint8_t *agent_gpu, uint32_t nagents, uint8_t *gpus, uint8_t *prefetch);
aq_status_t aq_replica_build(const replica_in_t *in, replica_out_t *out);
void aq_replica_free(replica_out_t *out);

#endif
