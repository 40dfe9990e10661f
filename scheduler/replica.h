/* Replicas: a tensor has a copy per memory domain (here, per CPU agent: a
 * NUMA node) with an MSI-like state, and the planner inserts copy tasks only
 * where a task needs data its domain does not hold.
 *
 * Walking the placed graph in plan order, each tensor has a set of domains
 * holding it valid (Shared) and, after a write, exactly one (Modified): a
 * kernel task on domain d that reads a tensor d does not hold gets a copy
 * task before it (pinned to d's agent, from a valid domain, the home one
 * first) and then reads the replica; a write makes the writer's domain the
 * only valid one. A tensor's home is the domain of the first task touching
 * it; host tasks always see the home copy (their functions reach tensors
 * through aq_exec_tensor_data), and tensors a GPU task touches are left to
 * the exec's GPU memory scheme (pinned or device memory). At the end of the
 * run what must persist (parameters, state, inputs, and anything a run
 * reads before writing it) is copied back home if its home copy is stale;
 * other tensors are read from where they were last written.
 *
 * The result is a new graph (the exec's own): the user's tasks in plan
 * order with the copies between them, every task pinned to the agent it
 * was placed on, replicas as extra tensors "name@agent". Its dependencies
 * are inferred again, so copies order like any task. */
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
} replica_in_t;

typedef struct replica_out {
  aq_graph_t *graph;          /* the exec's graph; aq_graph_destroy frees it */
  uint32_t *final;            /* per tensor id of the user's graph: the tensor holding it after a run */
  uint32_t *origin;           /* per task of the new graph: the user's task id + 1, 0 for a copy */
  uint32_t copies;            /* copy tasks inserted */
} replica_out_t;

aq_status_t replica_build(const replica_in_t *in, replica_out_t *out);
void replica_free(replica_out_t *out);

#endif
