/* A graph's plan: dependencies, a topological order and an agent per task. */
#ifndef AQ_SCHEDULER_PLAN_H_
#define AQ_SCHEDULER_PLAN_H_

#include "scheduler/graph_internal.h"

typedef struct plan_task {
  uint32_t *preds, npreds, cap_preds; /* task indices it must follow (all of) */
  uint32_t nsuccs;
  uint32_t agent;                     /* index into the exec's agents */
  double finish;                      /* eager's estimate */
} plan_task_t;

typedef struct plan {
  plan_task_t *tasks;
  uint32_t ntasks;
  uint32_t *order; /* topological */
} plan_t;

/* Checks the graph (reads before writes, cycles, pinned agents) and places
 * it. agent_node[i] is agent i's NUMA node. */
aq_status_t plan_build(plan_t *p, aq_graph_t *g, aq_sched_policy_t policy, uint32_t nagents,
                       const int32_t *agent_node);
void plan_free(plan_t *p);

#endif
