/* aq_graph_data_parallel: the data-parallel form of a training graph, as
 * DDP makes it. Gradients go into buckets in the order the backward pass
 * finishes them; each bucket is one mean all-reduce whose start task waits
 * only for the bucket's gradients, so it overlaps the rest of the backward
 * pass, and an optimizer op added afterwards waits only for its bucket's
 * completion. The parameters' broadcast from the root runs at the first run
 * only, from tasks moved to the graph's head, before anything reads them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/status.h"
#include "scheduler/collective.h"
#include "scheduler/oplib.h"

enum { DEFAULT_BUCKET_BYTES = 25u << 20, STAGE_BUCKET_BYTES = 8u << 20 };

/* An optimizer of the op library, as its description says. */
static int is_optimizer(const oplib_t *lib, const task_t *t) {
  if (t->kind != TASK_KERNEL || t->code_object.handle) return 0;
  const oplib_entry_t *e = aq_oplib_find(lib, t->kernel);
  return e && e->op && (e->op->flags & AQ_OP_OPTIMIZER);
}

/* The first optimizer task of g, or UINT32_MAX. */
static aq_status_t first_optimizer(const aq_graph_t *g, uint32_t *out) {
  const oplib_t *lib;
  *out = UINT32_MAX;
  if (!g->ntasks) return AQ_OK;
  AQ_RETURN_IF_ERROR(aq_op_library_ops(&lib));
  for (uint32_t i = 0; i < g->ntasks && *out == UINT32_MAX; ++i)
    if (is_optimizer(lib, &g->tasks[i])) *out = i;
  return AQ_OK;
}

typedef struct param {
  uint32_t tensor, grad;
  uint32_t done;  /* the last task writing the gradient */
  uint32_t depth; /* of that task: the longest chain of tasks that ends there */
} param_t;

static int by_done(const void *a, const void *b) {
  const param_t *x = a, *y = b;
  return x->done < y->done ? -1 : x->done > y->done;
}

/* Each task's depth: 1 + the deepest task whose output it reads (the
 * tasks' order is their dependencies' order). Tasks of one depth in the
 * backward pass are one stage of it: a layer's gradients, ready at about
 * the same time. */
static uint32_t *depths(const aq_graph_t *g) {
  uint32_t *depth = calloc(g->ntasks ? g->ntasks : 1, sizeof(uint32_t)), *writer = malloc(g->ntensors * sizeof(uint32_t));
  if (!depth || !writer) return free(depth), free(writer), NULL;
  for (uint32_t x = 0; x < g->ntensors; ++x) writer[x] = UINT32_MAX;
  for (uint32_t i = 0; i < g->ntasks; ++i) {
    const task_t *t = &g->tasks[i];
    for (uint32_t r = 0; r < t->nreads; ++r)
      if (writer[t->reads[r]] != UINT32_MAX && depth[writer[t->reads[r]]] >= depth[i]) depth[i] = depth[writer[t->reads[r]]];
    depth[i]++;
    for (uint32_t w = 0; w < t->nwrites; ++w) writer[t->writes[w]] = i;
  }
  free(writer);
  return depth;
}

/* The trained parameters, by when the backward pass finishes their
 * gradients. */
static aq_status_t trained(aq_graph_t *g, param_t **out, uint32_t *out_n) {
  param_t *p = calloc(g->ntensors, sizeof(*p));
  uint32_t *depth = depths(g);
  if (!p || !depth) return free(p), free(depth), aq_error(AQ_ERROR_OUT_OF_MEMORY, "aq_graph_data_parallel: no memory");
  uint32_t n = 0;
  for (uint32_t x = 1; x < g->ntensors; ++x) {
    const tensor_t *t = &g->tensors[x];
    if (t->role != AQ_ROLE_PARAMETER || !t->grad) continue;
    p[n] = (param_t){x, t->grad, 0, 0};
    for (uint32_t i = 0; i < g->ntasks; ++i)
      for (uint32_t w = 0; w < g->tasks[i].nwrites; ++w)
        if (g->tasks[i].writes[w] == t->grad) p[n].done = i;
    p[n].depth = depth[p[n].done];
    ++n;
  }
  free(depth);
  qsort(p, n, sizeof(*p), by_done);
  *out = p, *out_n = n;
  return AQ_OK;
}

/* Buckets of consecutive entries: up to `bytes` (at least one tensor) and
 * COLL_TENSORS_MAX tensors each. A bucket also ends where the backward
 * pass goes on to a deeper stage (stage[], non-decreasing), once it holds
 * STAGE_BUCKET_BYTES: a layer's gradients are then all-reduced while the
 * layers before it are worked out, where one cap-sized bucket would wait
 * for the whole pass of a model smaller than the cap. Not sooner: each
 * all-reduce has a fixed cost (NCCL's, between two GPUs of one machine,
 * about what 4 MB more would cost), which a smaller bucket does not earn
 * back. Every rank makes the same buckets: they depend on the graph alone. */
static aq_status_t buckets(aq_graph_t *g, aq_comm_t *comm, const uint32_t *ids, const uint32_t *stage, uint32_t n,
                           size_t bytes, const coll_spec_t *like) {
  for (uint32_t first = 0, k = 0; first < n; ++k) {
    uint32_t end = first;
    size_t sum = 0;
    while (end < n && end - first < COLL_TENSORS_MAX && (end == first || sum + g->tensors[ids[end]].bytes <= bytes) &&
           (end == first || stage[end] == stage[end - 1] || sum < STAGE_BUCKET_BYTES))
      sum += g->tensors[ids[end++]].bytes;
    char name[TASK_NAME_MAX];
    snprintf(name, sizeof(name), "%s %u", like->name, k);
    coll_spec_t s = *like;
    s.name = name, s.n = end - first, s.tensors = ids + first;
    AQ_RETURN_IF_ERROR(aq_coll_add(g, comm, &s, NULL, NULL));
    first = end;
  }
  return AQ_OK;
}

static uint32_t moved(uint32_t i, uint32_t from, uint32_t k) { return i >= from ? i - from : i + k; }

/* Moves the tasks from `from` on to the graph's head, renumbering the
 * explicit edges (the tasks' order is the dependencies' order). */
static aq_status_t to_head(aq_graph_t *g, aq_comm_t *comm, uint32_t from) {
  uint32_t k = g->ntasks - from;
  task_t *t = malloc((size_t)g->ntasks * sizeof(task_t));
  if (!t) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "aq_graph_data_parallel: no memory");
  memcpy(t, g->tasks + from, (size_t)k * sizeof(task_t));
  memcpy(t + k, g->tasks, (size_t)from * sizeof(task_t));
  for (uint32_t i = 0; i < g->ntasks; ++i) {
    for (uint32_t e = 0; e < t[i].nafter_all; ++e) t[i].after_all[e] = moved(t[i].after_all[e], from, k);
    for (uint32_t e = 0; e < t[i].nafter_any; ++e) t[i].after_any[e] = moved(t[i].after_any[e], from, k);
  }
  memcpy(g->tasks, t, (size_t)g->ntasks * sizeof(task_t));
  free(t);
  if (comm->chain_graph == g) comm->chain_task = moved(comm->chain_task, from, k);
  return AQ_OK;
}

static aq_status_t check(aq_graph_t *g, aq_comm_t *comm, const aq_data_parallel_options_t *o) {
  if (!g || !comm) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_data_parallel: graph and comm are required");
  if (g->group) return aq_error(AQ_ERROR_INVALID_GRAPH, "aq_graph_data_parallel: inside a task group");
  if (o && o->root >= comm->size)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_data_parallel: root %u, but the communicator has %u ranks",
                    o->root, comm->size);
  uint32_t i;
  AQ_RETURN_IF_ERROR(first_optimizer(g, &i));
  if (i != UINT32_MAX)
    return aq_error(AQ_ERROR_INVALID_GRAPH,
                    "aq_graph_data_parallel: optimizer task '%s' is already there; call it before the optimizer ops",
                    g->tasks[i].name);
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_data_parallel(aq_graph_t *g, aq_comm_t *comm, const aq_data_parallel_options_t *o) {
  AQ_RETURN_IF_ERROR(check(g, comm, o));
  param_t *p = NULL;
  uint32_t n = 0;
  AQ_RETURN_IF_ERROR(trained(g, &p, &n));
  uint32_t *ids = malloc((3 * (size_t)n + 1) * sizeof(uint32_t)), *stage = ids ? ids + 2 * n : NULL;
  aq_status_t s = ids ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "aq_graph_data_parallel: no memory");
  if (s == AQ_OK && !n)
    s = aq_error(AQ_ERROR_INVALID_GRAPH,
                 "aq_graph_data_parallel: no parameter has a gradient (call aq_graph_backward first)");
  size_t bytes = o && o->bucket_bytes ? o->bucket_bytes : DEFAULT_BUCKET_BYTES;
  uint32_t head = g->ntasks;
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) ids[i] = p[i].tensor, ids[n + i] = p[i].grad, stage[i] = p[i].depth;
  if (s == AQ_OK) {
    /* The broadcast first (it is moved to the head, and its starts must
     * precede the gradients' in every rank's order). */
    coll_spec_t bc = {
        .name = "broadcast params", .kind = AQ_COLLECTIVE_BROADCAST, .root = o ? o->root : 0, .first_run_only = 1};
    if (comm->chain_graph == g) comm->chain_graph = NULL; /* at the head, it follows no collective */
    s = buckets(g, comm, ids, stage, n, bytes, &bc);
  }
  if (s == AQ_OK) s = to_head(g, comm, head);
  if (s == AQ_OK) {
    coll_spec_t ar = {.name = "allreduce grads", .kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = AQ_REDUCE_MEAN};
    s = buckets(g, comm, ids + n, stage, n, bytes, &ar);
  }
  free(ids);
  free(p);
  return s;
}
