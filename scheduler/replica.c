/* Replicas per memory domain and the copies between them (see replica.h). */
#include "scheduler/replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"

typedef struct walk {
  const replica_in_t *in;
  aq_graph_t *c;            /* the graph being built */
  uint32_t nt;              /* the user's tensors */
  uint32_t *home;           /* per tensor: its home agent, UINT32_MAX if untouched */
  uint64_t *valid;          /* per tensor: agents holding it valid */
  uint32_t *replica;        /* nt x nagents: the replica's tensor id, 0 if none yet */
  uint8_t *gpu;             /* per tensor: a GPU task touches it */
  uint32_t copies;
} walk_t;

static aq_status_t replica_of(walk_t *w, uint32_t x, uint32_t agent, uint32_t *out) {
  if (agent == w->home[x]) {
    *out = x;
    return AQ_OK;
  }
  uint32_t *r = &w->replica[(size_t)x * w->in->nagents + agent];
  if (!*r) {
    const tensor_t *t = &w->c->tensors[x];
    char name[48];
    snprintf(name, sizeof(name), "%.30s@%.16s", t->name, w->in->agent_names[agent]);
    int64_t dims[AQ_MAX_RANK];
    memcpy(dims, t->dims, sizeof(dims));
    /* A replica is made afresh each run: an activation (its buffer may be
     * shared by lifetime). */
    AQ_RETURN_IF_ERROR(graph_new_tensor(w->c, name, t->dtype, AQ_ROLE_ACTIVATION, t->rank, dims, r));
  }
  *out = *r;
  return AQ_OK;
}

static uint32_t lowest(uint64_t mask) { return (uint32_t)__builtin_ctzll(mask); }

/* Appends "copy x from agent `from` to agent `to`", run on `to`'s agent. */
static aq_status_t add_copy(walk_t *w, uint32_t x, uint32_t from, uint32_t to) {
  uint32_t src, dst, id;
  AQ_RETURN_IF_ERROR(replica_of(w, x, from, &src));
  AQ_RETURN_IF_ERROR(replica_of(w, x, to, &dst));
  task_t t;
  memset(&t, 0, sizeof(t));
  t.kind = TASK_HOST;
  t.fn = w->in->copy_fn;
  t.user = w->in->copy_user;
  t.args[0] = dst, t.args[1] = src, t.args[2] = w->c->tensors[x].bytes;
  t.nreads = t.nwrites = 1;
  t.reads[0] = src, t.read_off[0] = UINT32_MAX;
  t.writes[0] = dst, t.write_off[0] = UINT32_MAX;
  t.agent = (int32_t)to;
  t.op = OP_OTHER;
  snprintf(t.name, sizeof(t.name), "copy %.24s -> %.16s", w->c->tensors[x].name, w->in->agent_names[to]);
  w->copies++;
  return graph_new_task(w->c, &t, &id);
}

void replica_free(replica_out_t *out) {
  if (out->graph) aq_graph_destroy(out->graph);
  free(out->final), free(out->origin);
  memset(out, 0, sizeof(*out));
}

aq_status_t replica_build(const replica_in_t *in, replica_out_t *out) {
  const aq_graph_t *g = in->graph;
  const plan_t *p = in->plan;
  uint32_t n = p->ntasks, nt = g->ntensors, na = in->nagents;
  memset(out, 0, sizeof(*out));
  if (na > 64) return aq_error(AQ_ERROR_UNAVAILABLE, "replicas: at most 64 agents, not %u", na);
  walk_t w = {.in = in, .nt = nt};
  w.home = malloc(nt * sizeof(uint32_t));
  w.valid = calloc(nt, sizeof(uint64_t));
  w.replica = calloc((size_t)nt * na, sizeof(uint32_t));
  w.gpu = calloc(nt, 1);
  uint8_t *persist = calloc(nt, 1), *seen = calloc(nt, 1);
  uint32_t *newid = malloc((n ? n : 1) * sizeof(uint32_t));
  out->final = malloc(nt * sizeof(uint32_t));
  aq_status_t s = w.home && w.valid && w.replica && w.gpu && persist && seen && newid && out->final
                      ? aq_graph_create(NULL, &w.c)
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
  for (uint32_t x = 1; s == AQ_OK && x < nt; ++x) {
    const tensor_t *t = &g->tensors[x];
    uint32_t id;
    s = graph_new_tensor(w.c, t->name, t->dtype, t->role, t->rank, t->dims, &id);
    if (s == AQ_OK) w.c->tensors[id].grad = t->grad;
  }
  /* Homes, GPU-touched tensors, and what must persist across runs. */
  for (uint32_t x = 0; s == AQ_OK && x < nt; ++x) {
    w.home[x] = UINT32_MAX;
    aq_tensor_role_t r = g->tensors[x].role;
    persist[x] = r == AQ_ROLE_PARAMETER || r == AQ_ROLE_STATE || r == AQ_ROLE_INPUT || r == AQ_ROLE_CONSTANT;
  }
  for (uint32_t k = 0; s == AQ_OK && k < n; ++k) {
    uint32_t t = p->order[k], a = in->lane_agent[p->tasks[t].lane];
    const task_t *task = &g->tasks[t];
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
      int read = j < task->nreads;
      uint32_t x = read ? task->reads[j] : task->writes[j - task->nreads];
      if (w.home[x] == UINT32_MAX) w.home[x] = a;
      if (in->agent_gpu[a]) w.gpu[x] = 1;
      if (!seen[x] && read) persist[x] = 1; /* read before this run writes it */
    }
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j)
      seen[j < task->nreads ? task->reads[j] : task->writes[j - task->nreads]] = 1;
  }
  for (uint32_t x = 0; x < nt && s == AQ_OK; ++x)
    if (w.home[x] != UINT32_MAX) w.valid[x] = 1ull << w.home[x];
  /* The walk: copies before the tasks that need them. */
  for (uint32_t k = 0; s == AQ_OK && k < n; ++k) {
    uint32_t t = p->order[k], a = in->lane_agent[p->tasks[t].lane];
    task_t task = g->tasks[t];
    int local = task.kind == TASK_KERNEL && !in->agent_gpu[a];
    for (uint32_t r = 0; s == AQ_OK && r < task.nreads; ++r) {
      uint32_t x = task.reads[r], d = local && !w.gpu[x] ? a : w.home[x];
      if (!(w.valid[x] & (1ull << d))) {
        uint32_t from = w.valid[x] & (1ull << w.home[x]) ? w.home[x] : lowest(w.valid[x]);
        s = add_copy(&w, x, from, d);
        w.valid[x] |= 1ull << d;
      }
      if (s == AQ_OK) s = replica_of(&w, x, d, &task.reads[r]);
    }
    for (uint32_t j = 0; s == AQ_OK && j < task.nwrites; ++j) {
      uint32_t x = task.writes[j], d = local && !w.gpu[x] ? a : w.home[x];
      s = replica_of(&w, x, d, &task.writes[j]);
      w.valid[x] = 1ull << d;
    }
    /* Edges are renumbered below, once every task has its new id. */
    task.after_all = task.after_any = NULL;
    task.nafter_all = task.nafter_any = 0;
    task.agent = (int32_t)a;
    if (s == AQ_OK) s = graph_new_task(w.c, &task, &newid[t]);
    if (s == AQ_OK) newid[t]--;
  }
  /* The end of the run: what persists goes home; the rest is read where
   * it was last written. */
  for (uint32_t x = 1; s == AQ_OK && x < nt; ++x) {
    out->final[x] = x;
    if (w.home[x] == UINT32_MAX || w.valid[x] & (1ull << w.home[x])) continue;
    uint32_t from = lowest(w.valid[x]);
    if (persist[x]) s = add_copy(&w, x, from, w.home[x]);
    else s = replica_of(&w, x, from, &out->final[x]);
  }
  out->final[0] = 0;
  for (uint32_t t = 0; s == AQ_OK && t < n; ++t) {
    const task_t *src = &g->tasks[t];
    task_t *dst = &w.c->tasks[newid[t]];
    if (src->nafter_all) {
      dst->after_all = malloc(src->nafter_all * sizeof(uint32_t));
      if (!dst->after_all) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
      for (uint32_t j = 0; s == AQ_OK && j < src->nafter_all; ++j) dst->after_all[j] = newid[src->after_all[j]];
      if (s == AQ_OK) dst->nafter_all = src->nafter_all;
    }
    if (s == AQ_OK && src->nafter_any) {
      dst->after_any = malloc(src->nafter_any * sizeof(uint32_t));
      if (!dst->after_any) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
      for (uint32_t j = 0; s == AQ_OK && j < src->nafter_any; ++j) dst->after_any[j] = newid[src->after_any[j]];
      if (s == AQ_OK) dst->nafter_any = src->nafter_any;
    }
  }
  if (s == AQ_OK) {
    out->origin = calloc(w.c->ntasks ? w.c->ntasks : 1, sizeof(uint32_t));
    if (!out->origin) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
    for (uint32_t t = 0; s == AQ_OK && t < n; ++t) out->origin[newid[t]] = t + 1;
  }
  out->graph = w.c;
  out->copies = w.copies;
  free(w.home), free(w.valid), free(w.replica), free(w.gpu), free(persist), free(seen), free(newid);
  if (s != AQ_OK) replica_free(out);
  return s;
}
