/* Planning an instantiation: the checks, the dependencies, a topological
 * order, and placement. Pure graph work: nothing here touches an agent. */
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/plan.h"

int aq_plan_readable_without_writer(aq_tensor_role_t r) {
  return r == AQ_ROLE_INPUT || r == AQ_ROLE_PARAMETER || r == AQ_ROLE_CONSTANT || r == AQ_ROLE_STATE;
}

/* Dependencies as they are inferred: every task's predecessors, one after
 * another in one pool (tasks get theirs in one go, in the order they were
 * added); stamp[pred] == task + 1 once pred is in task's list, so a fan-in
 * stays linear, not quadratic. */
typedef struct preds_pool {
  uint32_t *v, n, cap;
  uint32_t *stamp;
} preds_pool_t;

static aq_status_t add_pred(plan_t *p, preds_pool_t *pool, uint32_t task, uint32_t pred) {
  if (pool->stamp[pred] == task + 1) return AQ_OK;
  pool->stamp[pred] = task + 1;
  if (pool->n == pool->cap) {
    uint32_t cap = pool->cap ? 2 * pool->cap : 1024;
    uint32_t *n = realloc(pool->v, cap * sizeof(*n));
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for dependencies");
    pool->v = n, pool->cap = cap;
  }
  pool->v[pool->n++] = pred;
  p->tasks[task].npreds++;
  return AQ_OK;
}

aq_status_t aq_plan_append_pred(plan_task_t *t, uint32_t pred) {
  if (!t->cap_preds || t->npreds == t->cap_preds) {
    /* a list in the plan's pool is copied out before it grows */
    uint32_t cap = t->cap_preds ? 2 * t->cap_preds : t->npreds + 4;
    uint32_t *n = t->cap_preds ? realloc(t->preds, cap * sizeof(*n)) : malloc(cap * sizeof(*n));
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for dependencies");
    if (!t->cap_preds && t->npreds) memcpy(n, t->preds, t->npreds * sizeof(*n));
    t->preds = n, t->cap_preds = cap;
  }
  t->preds[t->npreds++] = pred;
  return AQ_OK;
}

/* RAW, WAR and WAW edges in the order tasks were added, and the check that
 * nothing is read before it is written. A tensor's readers since its last
 * write are a chain through the read slots (head per tensor, next per
 * slot): a few arrays for the whole graph, not one a tensor. */
static aq_status_t infer(plan_t *p, aq_graph_t *g) {
  uint32_t slots = 0;
  for (uint32_t i = 0; i < g->ntasks; ++i) slots += g->tasks[i].nreads;
  uint32_t *last_writer = malloc(g->ntensors * sizeof(uint32_t)), *head = malloc(g->ntensors * sizeof(uint32_t));
  uint32_t *tail = malloc(g->ntensors * sizeof(uint32_t));
  uint32_t *next = malloc((slots ? slots : 1) * sizeof(uint32_t)), *reader = malloc((slots ? slots : 1) * sizeof(uint32_t));
  preds_pool_t pool = {NULL, 0, 0, calloc(g->ntasks ? g->ntasks : 1, sizeof(uint32_t))};
  aq_status_t s = last_writer && head && tail && next && reader && pool.stamp
                      ? AQ_OK
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  for (uint32_t i = 0; s == AQ_OK && i < g->ntensors; ++i) last_writer[i] = head[i] = UINT32_MAX;
  for (uint32_t i = 0, slot = 0; s == AQ_OK && i < g->ntasks; ++i) {
    const task_t *t = &g->tasks[i];
    for (uint32_t r = 0; s == AQ_OK && r < t->nreads; ++r, ++slot) {
      uint32_t x = t->reads[r];
      if (last_writer[x] != UINT32_MAX) s = add_pred(p, &pool, i, last_writer[x]);
      else if (!aq_plan_readable_without_writer(g->tensors[x].role))
        s = aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' reads tensor '%s' before any task writes it", t->name,
                     g->tensors[x].name);
      /* in reading order: the edges come out as they always did */
      reader[slot] = i, next[slot] = UINT32_MAX;
      if (head[x] == UINT32_MAX) head[x] = slot;
      else next[tail[x]] = slot;
      tail[x] = slot;
    }
    for (uint32_t w = 0; s == AQ_OK && w < t->nwrites; ++w) {
      uint32_t x = t->writes[w];
      if (last_writer[x] != UINT32_MAX && last_writer[x] != i) s = add_pred(p, &pool, i, last_writer[x]);
      for (uint32_t r = head[x]; s == AQ_OK && r != UINT32_MAX; r = next[r])
        if (reader[r] != i) s = add_pred(p, &pool, i, reader[r]);
      head[x] = UINT32_MAX;
      last_writer[x] = i;
    }
    for (uint32_t e = 0; s == AQ_OK && e < t->nafter_all; ++e) s = add_pred(p, &pool, i, t->after_all[e]);
  }
  p->pred_pool = pool.v;
  for (uint32_t i = 0, at = 0; s == AQ_OK && pool.v && i < g->ntasks; at += p->tasks[i++].npreds)
    p->tasks[i].preds = pool.v + at; /* (no pool where no task has a predecessor: NULL + 0 is undefined) */
  free(last_writer), free(head), free(tail), free(next), free(reader), free(pool.stamp);
  return s;
}

/* The tasks ready to go next: first in, first out; or, with keep (a
 * position per task), the one with the lowest position first (a heap). */
typedef struct ready {
  uint32_t *v, head, size;
  const uint32_t *keep;
} ready_t;

static void ready_push(ready_t *r, uint32_t t) {
  if (!r->keep) {
    r->v[r->head + r->size++] = t;
    return;
  }
  uint32_t c = r->size++;
  for (; c && r->keep[r->v[(c - 1) / 2]] > r->keep[t]; c = (c - 1) / 2) r->v[c] = r->v[(c - 1) / 2];
  r->v[c] = t;
}

static uint32_t ready_pop(ready_t *r) {
  if (!r->keep) return r->size--, r->v[r->head++];
  uint32_t top = r->v[0], last = r->v[--r->size], c = 0;
  for (;;) {
    uint32_t l = 2 * c + 1, m = l + 1 < r->size && r->keep[r->v[l + 1]] < r->keep[r->v[l]] ? l + 1 : l;
    if (l >= r->size || r->keep[r->v[m]] >= r->keep[last]) break;
    r->v[c] = r->v[m], c = m;
  }
  if (r->size) r->v[c] = last;
  return top;
}

/* Kahn's algorithm over successor lists (CSR); a cycle (only explicit edges
 * can make one) names a task on it. after-any edges order like ordinary ones.
 * Counts each task's successors. keep: see ready_t (NULL: first in, first out). */
static aq_status_t order(plan_t *p, aq_graph_t *g, const uint32_t *keep) {
  uint32_t n = p->ntasks, edges = 0;
  for (uint32_t i = 0; i < n; ++i) edges += p->tasks[i].npreds + g->tasks[i].nafter_any;
  uint32_t *indeg = calloc(n + 1, sizeof(uint32_t)), *start = calloc(n + 1, sizeof(uint32_t));
  uint32_t *succ = malloc((edges ? edges : 1) * sizeof(uint32_t)), *fill = calloc(n + 1, sizeof(uint32_t));
  ready_t r = {malloc((n ? n : 1) * sizeof(uint32_t)), 0, 0, keep};
  aq_status_t s = indeg && start && succ && fill && r.v ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    indeg[i] = p->tasks[i].npreds + g->tasks[i].nafter_any;
    for (uint32_t j = 0; j < p->tasks[i].npreds; ++j) start[p->tasks[i].preds[j] + 1]++;
    for (uint32_t j = 0; j < g->tasks[i].nafter_any; ++j) start[g->tasks[i].after_any[j] + 1]++;
  }
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    start[i + 1] += start[i];
    p->tasks[i].nsuccs = 0;
  }
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    for (uint32_t j = 0; j < p->tasks[i].npreds; ++j) {
      uint32_t q = p->tasks[i].preds[j];
      succ[start[q] + fill[q]++] = i;
      p->tasks[q].nsuccs++;
    }
    for (uint32_t j = 0; j < g->tasks[i].nafter_any; ++j) {
      uint32_t q = g->tasks[i].after_any[j];
      succ[start[q] + fill[q]++] = i;
    }
  }
  uint32_t out = 0;
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i)
    if (!indeg[i]) ready_push(&r, i);
  while (s == AQ_OK && r.size) {
    uint32_t t = ready_pop(&r);
    p->order[out++] = t;
    for (uint32_t e = start[t]; e < start[t + 1]; ++e)
      if (--indeg[succ[e]] == 0) ready_push(&r, succ[e]);
  }
  if (s == AQ_OK && out != n) {
    uint32_t stuck = 0;
    while (stuck < n && !indeg[stuck]) ++stuck;
    s = aq_error(AQ_ERROR_INVALID_GRAPH, "the graph has a cycle through task '%s'", g->tasks[stuck].name);
  }
  free(indeg), free(start), free(succ), free(fill), free(r.v);
  return s;
}

aq_status_t aq_plan_reorder(plan_t *p, aq_graph_t *g, uint32_t nlanes) {
  uint32_t *keep = malloc((p->ntasks ? p->ntasks : 1) * sizeof(uint32_t));
  if (!keep) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  for (uint32_t k = 0; k < p->ntasks; ++k) keep[p->order[k]] = k;
  aq_status_t s = order(p, g, keep);
  free(keep);
  return s == AQ_OK ? aq_plan_number_lanes(p, nlanes) : s;
}

/* What a task costs, in the estimate's units: its work-groups (an empty
 * task is 1), and what a cross-lane edge adds (a barrier packet and a
 * signal hop, about one task). */
double aq_plan_task_groups(const task_t *t) {
  if (t->kind == TASK_HOST) return 1;
  double groups = 1;
  for (int d = 0; d < 3; ++d) {
    uint64_t wg = t->shape.workgroup[d] ? t->shape.workgroup[d] : 1, gr = t->shape.grid[d] ? t->shape.grid[d] : 1;
    groups *= (double)((gr + wg - 1) / wg); /* 64-bit: a grid near 2^32 wrapped to no groups at all */
  }
  return groups;
}

static double task_cost(const task_t *t, uint8_t kind) {
  double groups = aq_plan_task_groups(t);
  if (t->kind == TASK_HOST) return 1.0;
  /* A GPU runs a CPU work-group's worth of work in a small fraction of the
   * time, after a launch that costs about one empty CPU task. */
  return kind == AQ_AGENT_KIND_GPU ? 1.0 + 0.02 * groups : groups;
}
enum { CROSS_LANE_COST = 1, CROSS_AGENT_COST = 2 };

/* Earliest finish over the allowed lanes: HEFT's rule with the estimate
 * above; a tie keeps the lane of a producer. */
static uint32_t earliest(plan_t *p, aq_graph_t *g, uint32_t task, const plan_lanes_t *l, const double *free_at,
                         int32_t agent_only, int32_t node_only, double *out_finish) {
  const plan_task_t *t = &p->tasks[task];
  uint32_t best = UINT32_MAX;
  double best_finish = 0;
  for (uint32_t c = 0; c < l->nlanes; ++c) {
    if (!(l->eligible[task] & (1u << l->lane_kind[c]))) continue;
    if (agent_only >= 0 && l->lane_agent[c] != (uint32_t)agent_only) continue;
    if (node_only >= 0 && l->agent_node[l->lane_agent[c]] != node_only) continue;
    double ready = 0;
    for (uint32_t j = 0; j < t->npreds; ++j) {
      const plan_task_t *q = &p->tasks[t->preds[j]];
      double r = q->finish + (q->lane == c                                      ? 0
                              : l->lane_agent[q->lane] == l->lane_agent[c] ? CROSS_LANE_COST
                                                                              : CROSS_AGENT_COST);
      if (r > ready) ready = r;
    }
    double finish = (free_at[c] > ready ? free_at[c] : ready) + task_cost(&g->tasks[task], l->lane_kind[c]);
    if (best == UINT32_MAX || finish < best_finish) best = c, best_finish = finish;
  }
  *out_finish = best_finish;
  return best;
}

/* NUMA locality: the node holding the most bytes of what task t reads
 * (tensors already placed), -1 if none is. */
static int32_t data_node(const aq_graph_t *g, uint32_t t, const plan_lanes_t *l, const uint32_t *tensor_agent) {
  const task_t *task = &g->tasks[t];
  double best = 0;
  int32_t node = -1;
  for (uint32_t r = 0; r < task->nreads; ++r) {
    uint32_t a = tensor_agent[task->reads[r]];
    if (a == UINT32_MAX) continue;
    double bytes = 0;
    for (uint32_t q = 0; q < task->nreads; ++q) {
      uint32_t b = tensor_agent[task->reads[q]];
      if (b != UINT32_MAX && l->agent_node[b] == l->agent_node[a]) bytes += (double)g->tensors[task->reads[q]].bytes;
    }
    if (bytes > best) best = bytes, node = l->agent_node[a];
  }
  return node;
}

aq_status_t aq_plan_build(plan_t *p, aq_graph_t *g, aq_sched_policy_t policy, const plan_lanes_t *l) {
  memset(p, 0, sizeof(*p));
  p->ntasks = g->ntasks;
  p->tasks = calloc(g->ntasks ? g->ntasks : 1, sizeof(plan_task_t));
  p->order = calloc(g->ntasks ? g->ntasks : 1, sizeof(uint32_t));
  if (!p->tasks || !p->order) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  if (g->ntasks == 0) return aq_error(AQ_ERROR_INVALID_GRAPH, "the graph has no tasks");
  if (l->nlanes == 0) return aq_error(AQ_ERROR_UNAVAILABLE, "no agent can run the graph");
  AQ_RETURN_IF_ERROR(infer(p, g));
  AQ_RETURN_IF_ERROR(order(p, g, NULL));
  if (policy == AQ_SCHED_HEFT) {
    for (uint32_t i = 0; i < p->ntasks; ++i)
      if (g->tasks[i].agent >= 0 && (uint32_t)g->tasks[i].agent >= l->nagents)
        return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is pinned to agent %d; only %u agents can run it",
                        g->tasks[i].name, g->tasks[i].agent, l->nagents);
    if (!l->cost_ns) return aq_error(AQ_ERROR_INTERNAL, "heft placement without costs");
    AQ_RETURN_IF_ERROR(aq_plan_heft(p, g, l));
    return aq_plan_number_lanes(p, l->nlanes);
  }
  double *free_at = calloc(l->nlanes, sizeof(double));
  /* locality: the agent whose memory each tensor will live in (its first
   * toucher's), as placement goes */
  uint32_t *tensor_agent = policy == AQ_SCHED_LOCALITY ? malloc(g->ntensors * sizeof(uint32_t)) : NULL;
  if (!free_at || (policy == AQ_SCHED_LOCALITY && !tensor_agent)) {
    free(free_at), free(tensor_agent);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  }
  for (uint32_t x = 0; tensor_agent && x < g->ntensors; ++x) tensor_agent[x] = UINT32_MAX;
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    uint32_t i = p->order[k];
    const task_t *t = &g->tasks[i];
    plan_task_t *pt = &p->tasks[i];
    double finish;
    if (t->agent >= 0 && (uint32_t)t->agent >= l->nagents) {
      free(free_at), free(tensor_agent);
      return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is pinned to agent %d; only %u agents can run it", t->name,
                      t->agent, l->nagents);
    }
    if (!l->eligible[i]) {
      free(free_at), free(tensor_agent);
      return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': no agent allowed here has its kernel '%s'", t->name,
                      t->kind == TASK_HOST ? "(host call)" : t->kernel);
    }
    uint32_t rr = UINT32_MAX;
    if (policy == AQ_SCHED_ROUND_ROBIN && t->agent < 0)
      for (uint32_t c = 0; c < l->nlanes && rr == UINT32_MAX; ++c)
        if (l->eligible[i] & (1u << l->lane_kind[(k + c) % l->nlanes])) rr = (k + c) % l->nlanes;
    if (rr != UINT32_MAX) {
      pt->lane = rr;
      double ready = 0;
      for (uint32_t j = 0; j < pt->npreds; ++j)
        if (p->tasks[pt->preds[j]].finish > ready) ready = p->tasks[pt->preds[j]].finish;
      finish = (free_at[rr] > ready ? free_at[rr] : ready) + task_cost(t, l->lane_kind[rr]);
    } else {
      int32_t node = policy == AQ_SCHED_LOCALITY ? data_node(g, i, l, tensor_agent) : -1;
      pt->lane = earliest(p, g, i, l, free_at, t->agent, node, &finish);
      if (pt->lane == UINT32_MAX) pt->lane = earliest(p, g, i, l, free_at, t->agent, -1, &finish);
      if (pt->lane == UINT32_MAX) {
        free(free_at), free(tensor_agent);
        return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is pinned to agent %d, which cannot run its kernel '%s'",
                        t->name, t->agent, t->kernel);
      }
    }
    pt->finish = finish;
    free_at[pt->lane] = finish;
    if (tensor_agent) { /* first touch: where the exec will give it memory */
      for (uint32_t j = 0; j < t->nreads + t->nwrites; ++j) {
        uint32_t x = j < t->nreads ? t->reads[j] : t->writes[j - t->nreads];
        if (tensor_agent[x] == UINT32_MAX) tensor_agent[x] = l->lane_agent[pt->lane];
      }
    }
  }
  free(free_at), free(tensor_agent);
  return aq_plan_number_lanes(p, l->nlanes);
}

aq_status_t aq_plan_number_lanes(plan_t *p, uint32_t nlanes) {
  uint32_t *next = calloc(nlanes ? nlanes : 1, sizeof(uint32_t));
  if (!next) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    plan_task_t *pt = &p->tasks[p->order[k]];
    pt->seq = next[pt->lane]++;
  }
  free(next);
  return AQ_OK;
}

aq_status_t aq_plan_add_pred(plan_task_t *t, uint32_t pred) {
  for (uint32_t j = 0; j < t->npreds; ++j)
    if (t->preds[j] == pred) return AQ_OK;
  return aq_plan_append_pred(t, pred);
}

void aq_plan_free(plan_t *p) {
  for (uint32_t i = 0; p->tasks && i < p->ntasks; ++i)
    if (p->tasks[i].cap_preds) free(p->tasks[i].preds);
  free(p->pred_pool);
  free(p->tasks);
  free(p->order);
  memset(p, 0, sizeof(*p));
}
