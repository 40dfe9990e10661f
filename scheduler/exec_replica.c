/* Replicas on an exec (replica.h): the host calls that copy and prefetch
 * between replicas, and the placed graph rebuilt with them. */
#include <stdlib.h>
#include <string.h>

#include "runtime/memory.h"
#include "scheduler/exec_internal.h"

/* A copy task between two replicas run on the host (CPU memory, or a size
 * the GPU's aq_copy does not take: the driver copies device memory). The
 * addresses are looked up at run time: aq_exec_bind may move a tensor. */
aq_status_t aq_exec_replica_copy(void *user, uint64_t dst, uint64_t src, uint64_t bytes) {
  aq_exec_t *e = user;
  return aq_memory_copy(e->buffers[dst], e->buffers[src], bytes);
}

/* A prefetch task (AQ_MEMORY=unified): a managed tensor's pages to agent. */
aq_status_t aq_exec_replica_prefetch(void *user, uint64_t x, uint64_t agent, uint64_t bytes) {
  aq_exec_t *e = user;
  return aq_exec_memory_hint(aq_memory_prefetch(e->buffers[x], bytes, e->agents[agent], (aq_signal_t){0}));
}

/* Rebuilds the placed graph with replicas and copies, or prefetches
 * (replica.c), then plans it again with every task pinned where it was placed. */
aq_status_t aq_exec_replicate(aq_exec_t *e, const uint8_t *eligible) {
  uint8_t gpu[EXEC_AGENTS_MAX], gpus, prefetch;
  for (uint32_t a = 0; a < e->nagents; ++a) gpu[a] = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  if (!aq_replica_wanted(e->flags & AQ_EXEC_REPLICATE, gpu, e->nagents, &gpus, &prefetch)) return AQ_OK;
  replica_in_t in = {e->user_graph, &e->plan, e->lane_agent, e->nagents, gpu, e->agent_names, aq_exec_replica_copy, e,
                     gpus, prefetch, aq_exec_replica_prefetch};
  AQ_RETURN_IF_ERROR(aq_replica_build(&in, &e->replicas));
  aq_graph_t *c = e->replicas.graph;
  uint8_t *elig = malloc(c->ntasks ? c->ntasks : 1);
  if (!elig) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
  for (uint32_t t = 0; t < c->ntasks; ++t) {
    uint32_t o = e->replicas.origin[t];
    elig[t] = o ? eligible[o - 1] : (uint8_t)(1u << e->agent_kind[c->tasks[t].agent]);
  }
  /* The placement's estimates stay with the tasks (DOT shows them). */
  plan_t placed = e->plan;
  memset(&e->plan, 0, sizeof(e->plan));
  plan_lanes_t lanes = {e->nlanes, e->nagents, e->lane_agent, e->lane_kind, e->agent_node, elig, NULL, NULL, NULL, NULL, NULL};
  aq_status_t s = aq_plan_build(&e->plan, c, AQ_SCHED_EAGER, &lanes);
  e->plan.heft_ns = placed.heft_ns, e->plan.heft_mixed_ns = placed.heft_mixed_ns;
  e->plan.heft_single_ns = placed.heft_single_ns, e->plan.heft_single_agent = placed.heft_single_agent;
  e->plan.heft_one_lane_ns = placed.heft_one_lane_ns, e->plan.heft_one_lane_agent = placed.heft_one_lane_agent;
  e->plan.heft_dominant = placed.heft_dominant;
  for (uint32_t t = 0; s == AQ_OK && t < c->ntasks; ++t) {
    uint32_t o = e->replicas.origin[t];
    if (o) e->plan.tasks[t].finish = placed.tasks[o - 1].finish, e->plan.tasks[t].cost_ns = placed.tasks[o - 1].cost_ns;
  }
  aq_plan_free(&placed);
  free(elig);
  if (s == AQ_OK) e->graph = c;
  return s;
}
