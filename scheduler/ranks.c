/* A step replicated per local rank (ranks.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/status.h"
#include "scheduler/ranks.h"

uint32_t aq_graph_local_ranks(const aq_graph_t *g) {
  return g->ranks_comm && g->ranks_comm->ngpus > 1 ? g->ranks_comm->ngpus : 1;
}

static uint32_t shift(uint32_t x, uint32_t by) { return x ? x + by : 0; }

/* Rank k's copies of g's tensors, appended to x (rank 0's keep their ids). */
static aq_status_t copy_tensors(const aq_graph_t *g, aq_graph_t *x, uint32_t k) {
  uint32_t by = k * (g->ntensors - 1);
  for (uint32_t i = 1; i < g->ntensors; ++i) {
    const tensor_t *t = &g->tensors[i];
    char name[sizeof(t->name)], base[sizeof(t->name) - 5];
    aq_graph_fit(base, sizeof(base) - 1, t->name);
    if (k)
      snprintf(name, sizeof(name), "%s@r%u", base, k);
    else
      memcpy(name, t->name, sizeof(name));
    uint32_t id;
    AQ_RETURN_IF_ERROR(aq_graph_new_tensor(x, name, t->dtype, t->role, t->rank, t->dims, &id));
    if (id != i + by) return aq_error(AQ_ERROR_INTERNAL, "expanding ranks: tensor '%s' got id %u", name, id);
    x->tensors[id].grad = shift(t->grad, by);
    x->tensors[id].init = t->init;
  }
  return AQ_OK;
}

/* Host tasks run once (rank 0's part), so each must touch no tensor. */
static aq_status_t check_host_tasks(const aq_graph_t *g) {
  for (uint32_t i = 0; i < g->ntasks; ++i)
    if (g->tasks[i].kind == TASK_HOST && (g->tasks[i].nreads || g->tasks[i].nwrites))
      return aq_error(AQ_ERROR_INVALID_GRAPH,
                      "host task '%s' reads or writes tensors, and a graph replicated over %u GPUs runs host tasks "
                      "once, on rank 0's tensors; make it touch no tensor or use a communicator per process",
                      g->tasks[i].name, aq_graph_local_ranks(g));
  return AQ_OK;
}

static aq_status_t copy_edges(uint32_t **list, uint32_t n, const uint32_t *map) {
  if (!n) return AQ_OK;
  uint32_t *e = malloc(n * sizeof(uint32_t));
  if (!e) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "expanding ranks: no memory for edges");
  for (uint32_t j = 0; j < n; ++j) e[j] = map[(*list)[j]];
  *list = e;
  return AQ_OK;
}

/* Rank k's copy of task i (map: g's task index -> x's, for rank k). */
static aq_status_t copy_task(const aq_graph_t *g, aq_graph_t *x, uint32_t k, uint32_t i, const uint32_t *map) {
  task_t t = g->tasks[i];
  uint32_t by = k * (g->ntensors - 1);
  for (uint32_t r = 0; r < t.nreads; ++r) t.reads[r] += by;
  for (uint32_t w = 0; w < t.nwrites; ++w) t.writes[w] += by;
  for (uint32_t j = 0; j < 3; ++j) t.in[j] = shift(t.in[j], by);
  t.out = shift(t.out, by), t.aux = shift(t.aux, by);
  t.after_all = t.after_any = NULL, t.nafter_all = t.nafter_any = 0;
  if (t.kind != TASK_HOST) t.agent = (int32_t)g->ranks_comm->gpu_agent[k];
  if (k && strlen(t.name) + 4 < sizeof(t.name)) snprintf(t.name + strlen(t.name), 5, "@r%u", k);
  if (aq_coll_is_task(&t)) AQ_RETURN_IF_ERROR(aq_coll_for_rank(&t, k));
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_new_task(x, &t, &id));
  task_t *n = &x->tasks[id - 1];
  n->nafter_all = g->tasks[i].nafter_all, n->after_all = g->tasks[i].after_all;
  n->nafter_any = g->tasks[i].nafter_any, n->after_any = g->tasks[i].after_any;
  aq_status_t s = copy_edges(&n->after_all, n->nafter_all, map);
  if (s != AQ_OK) n->after_all = NULL, n->nafter_all = 0;
  if (s == AQ_OK) s = copy_edges(&n->after_any, n->nafter_any, map);
  if (s != AQ_OK) n->after_any = NULL, n->nafter_any = 0;
  return s;
}

static aq_status_t expand(const aq_graph_t *g, aq_graph_t *x, uint32_t *map) {
  uint32_t n = aq_graph_local_ranks(g), K = g->ntasks;
  for (uint32_t k = 0; k < n; ++k) AQ_RETURN_IF_ERROR(copy_tensors(g, x, k));
  /* Each rank's part in g's order; a host task stays rank 0's. */
  for (uint32_t k = 0, next = 0; k < n; ++k)
    for (uint32_t i = 0; i < K; ++i)
      map[k * K + i] = k && g->tasks[i].kind == TASK_HOST ? map[i] : next++;
  for (uint32_t k = 0; k < n; ++k)
    for (uint32_t i = 0; i < K; ++i)
      if (!k || g->tasks[i].kind != TASK_HOST) AQ_RETURN_IF_ERROR(copy_task(g, x, k, i, map + (size_t)k * K));
  return AQ_OK;
}

aq_status_t aq_graph_expand_ranks(const aq_graph_t *g, aq_graph_t **out) {
  AQ_RETURN_IF_ERROR(check_host_tasks(g));
  aq_graph_t *x;
  AQ_RETURN_IF_ERROR(aq_graph_create(NULL, &x));
  uint32_t *map = malloc(((size_t)aq_graph_local_ranks(g) * g->ntasks + 1) * sizeof(uint32_t));
  aq_status_t s = map ? expand(g, x, map) : aq_error(AQ_ERROR_OUT_OF_MEMORY, "expanding ranks: no memory");
  free(map);
  if (s != AQ_OK) {
    aq_error_saved_t first;
    aq_error_save(&first);
    aq_graph_destroy(x);
    aq_error_restore(s, &first);
    return s;
  }
  x->ranks_comm = g->ranks_comm;
  *out = x;
  return AQ_OK;
}
