/* A graph's plan: dependencies, a topological order and a lane per task.
 * A lane is one queue of one agent; a CPU agent gets a lane per worker, so
 * independent tasks run side by side while a chain stays in one queue. */
#ifndef AQ_SCHEDULER_PLAN_H_
#define AQ_SCHEDULER_PLAN_H_

#include "scheduler/graph_internal.h"

typedef struct plan_task {
  /* task indices it must follow (all of): in the plan's pred_pool, or
   * (cap_preds > 0) an array of its own once an edge was appended */
  uint32_t *preds, npreds, cap_preds;
  uint32_t nsuccs;
  uint32_t lane;                      /* index into the exec's lanes */
  uint32_t seq;                       /* position in its lane's stream (plan order) */
  double finish;                      /* the placement's estimate (heft: ns from the start) */
  double cost_ns;                     /* heft: the estimate of the task itself on its agent */
} plan_task_t;

typedef struct plan {
  plan_task_t *tasks;
  uint32_t ntasks;
  uint32_t *order; /* topological */
  uint32_t *pred_pool;
  /* heft: the estimated makespan (ns) of the placement kept, of the best
   * over all agents, and of the best single agent (which; -1: none ran
   * everything, or there is one agent), and of one lane of a CPU agent
   * (which; -1: not tried, its tasks' work alone too long); heft_dominant:
   * the agent placed alone from the start, the others taking every kernel
   * at least as long and too little of the work for any split to be kept
   * (-1: all were tried together) */
  double heft_ns, heft_mixed_ns, heft_single_ns, heft_one_lane_ns;
  int32_t heft_single_agent, heft_one_lane_agent, heft_dominant;
} plan_t;

typedef struct plan_lanes {
  uint32_t nlanes, nagents;
  const uint32_t *lane_agent; /* lane -> agent index */
  const uint8_t *lane_kind;   /* lane -> aq_agent_kind_t */
  const int32_t *agent_node;  /* agent -> NUMA node */
  const uint8_t *eligible;    /* task -> mask of agent kinds that can run it (1 << kind) */
  /* heft: per task x agent, the estimated ns (ntasks * nagents) */
  const double *cost_ns;
  /* heft: per agent x agent, an edge's latency (a == b: a lane hop) and ns
   * per byte, measured (linkcal.h); NULL: round figures */
  const double *link_ns, *link_ns_per_byte;
  /* heft: per agent, the CPU workers that all of its lanes share (a CPU
   * kernel's work-groups are split across them: heft.c); NULL or 0: each
   * lane a processor of its own */
  const uint32_t *agent_workers;
  /* heft: per agent, what a barrier packet costs the lane it is in (a CPU
   * worker processes it), measured (linkcal.h); NULL: round figures */
  const double *barrier_ns;
} plan_lanes_t;

/* Whether a run may read a tensor of this role before any task writes it
 * (it holds data from the user or from the last run). */
int aq_plan_readable_without_writer(aq_tensor_role_t role);
/* Checks the graph (reads before writes, cycles, pinned agents) and places
 * it on lanes. */
aq_status_t aq_plan_build(plan_t *p, aq_graph_t *g, aq_sched_policy_t policy, const plan_lanes_t *lanes);
void aq_plan_free(plan_t *p);
/* Adds an edge to a planned task (fusion's): append always, add only
 * where the task does not have it yet. */
/* Task i's predecessors as its lane's queue orders them: its plan edges,
 * then its after-any edges (which order tasks as ordinary ones do in the
 * plan's topological order): aq_plan_waits of them, the j-th by
 * aq_plan_wait. */
static inline uint32_t aq_plan_waits(const plan_t *p, const aq_graph_t *g, uint32_t i) {
  return p->tasks[i].npreds + g->tasks[i].nafter_any;
}
static inline uint32_t aq_plan_wait(const plan_t *p, const aq_graph_t *g, uint32_t i, uint32_t j) {
  const plan_task_t *t = &p->tasks[i];
  return j < t->npreds ? t->preds[j] : g->tasks[i].after_any[j - t->npreds];
}
aq_status_t aq_plan_append_pred(plan_task_t *t, uint32_t pred);
aq_status_t aq_plan_add_pred(plan_task_t *t, uint32_t pred);
/* HEFT (Topcuoglu et al.): tasks by decreasing upward rank over mean
 * costs, each on the lane where it finishes first, transfers included;
 * rewrites p->order to the rank order (a topological one). Called by
 * aq_plan_build after the dependencies and a first order are known. */
aq_status_t aq_plan_heft(plan_t *p, aq_graph_t *g, const plan_lanes_t *l);
/* What moving `bytes` from agent a to agent b costs, in ns (0 on one agent). */
double aq_plan_transfer_ns(const plan_lanes_t *l, uint32_t a, uint32_t b, double bytes);
/* Task t's work-groups (a host call is one). A CPU dispatch splits them
 * across all of the agent's workers, whatever queue it came from. */
double aq_plan_task_groups(const task_t *t);
/* After edges were added to a planned graph: a topological order as close
 * to the current one as the edges allow (of the ready tasks, the one that
 * came first goes first), successor counts, and lane positions again. */
aq_status_t aq_plan_reorder(plan_t *p, aq_graph_t *g, uint32_t nlanes);
/* Once every task has its lane: the order in which the lanes, each in
 * order, would run their tasks by the placement's estimates, a ready task
 * never queued behind one that waits longer (sequence.c). */
aq_status_t aq_plan_sequence(plan_t *p, aq_graph_t *g, uint32_t nlanes);
/* Numbers each task's position in its lane (seq), following order. */
aq_status_t aq_plan_number_lanes(plan_t *p, uint32_t nlanes);

#endif
