/* Replicas per memory domain and the copies between them, or prefetches of
 * managed memory (see replica.h). */
#include "scheduler/replica.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/ops.h"
#include "runtime/settings.h"
#include "runtime/status.h"

typedef struct walk {
  const replica_in_t *in;
  aq_graph_t *c;     /* the graph being built */
  uint32_t nt;       /* the user's tensors */
  uint32_t *home;    /* per tensor: its home agent, UINT32_MAX if untouched */
  uint64_t *valid;   /* per tensor: agents holding it valid (prefetch: where its pages are) */
  uint64_t *touch;   /* per tensor: agents whose tasks touch it */
  uint32_t *replica; /* nt x nagents: the replica's tensor id, 0 if none yet */
  uint8_t *leave;    /* per tensor: left to the exec's memory scheme (one buffer) */
  uint8_t *written;  /* per tensor: a task of this run has written it (prefetch) */
  uint64_t gpu_mask; /* the GPU agents */
  uint32_t host;     /* the first CPU agent: prefetches for GPU tasks run there */
  uint32_t copies;
} walk_t;

static int is_gpu(const walk_t *w, uint32_t a) { return (w->gpu_mask >> a) & 1; }

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
    AQ_RETURN_IF_ERROR(aq_graph_new_tensor(w->c, name, t->dtype, AQ_ROLE_ACTIVATION, t->rank, dims, r));
  }
  *out = *r;
  return AQ_OK;
}

static uint32_t lowest(uint64_t mask) { return (uint32_t)__builtin_ctzll(mask); }

/* A copy on a GPU: the op library's aq_copy on that GPU's queue (one side is
 * device memory, the other the home replica in pinned host memory). */
static aq_status_t gpu_copy_task(walk_t *w, uint32_t src, uint32_t dst, size_t bytes, uint32_t gpu, const char *name) {
  aq_copy_args_t a = {.bytes = (int64_t)bytes};
  slot_t reads[1] = {{src, offsetof(aq_copy_args_t, src)}}, writes[1] = {{dst, offsetof(aq_copy_args_t, dst)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(w->c, name, AQ_KERNEL_COPY, &a, sizeof(a), aq_elementwise_grid((int64_t)bytes / 4),
                                   reads, 1, writes, 1, &id));
  w->c->tasks[id - 1].agent = (int32_t)gpu;
  return AQ_OK;
}

/* Appends "copy x -> to": a host task on the CPU side, or a kernel on the
 * GPU side where one is a GPU (aq_copy moves 4-byte words: any other size
 * goes through the host task, which copies through the driver). */
static aq_status_t add_copy(walk_t *w, uint32_t x, uint32_t from, uint32_t to) {
  uint32_t src, dst, id;
  AQ_RETURN_IF_ERROR(replica_of(w, x, from, &src));
  AQ_RETURN_IF_ERROR(replica_of(w, x, to, &dst));
  size_t bytes = w->c->tensors[x].bytes;
  char name[TASK_NAME_MAX];
  snprintf(name, sizeof(name), "copy %.24s -> %.16s", w->c->tensors[x].name, w->in->agent_names[to]);
  w->copies++;
  if ((is_gpu(w, from) || is_gpu(w, to)) && bytes % 4 == 0)
    return gpu_copy_task(w, src, dst, bytes, is_gpu(w, to) ? to : from, name);
  task_t t;
  memset(&t, 0, sizeof(t));
  t.kind = TASK_HOST;
  t.fn = w->in->copy_fn;
  t.user = w->in->copy_user;
  t.args[0] = dst, t.args[1] = src, t.args[2] = bytes;
  t.nreads = t.nwrites = 1;
  t.reads[0] = src, t.read_off[0] = UINT32_MAX;
  t.writes[0] = dst, t.write_off[0] = UINT32_MAX;
  t.agent = (int32_t)(is_gpu(w, to) ? from : to);
  t.op = OP_OTHER;
  snprintf(t.name, sizeof(t.name), "%s", name);
  return aq_graph_new_task(w->c, &t, &id);
}

/* Makes x valid on agent d, copying from a valid domain: the home one
 * first. A GPU copies only to or from home, so a GPU replica is filled from
 * home, and a CPU replica whose only source is a GPU goes through home. */
static aq_status_t ensure(walk_t *w, uint32_t x, uint32_t d) {
  if (w->valid[x] & (1ull << d)) return AQ_OK;
  uint32_t h = w->home[x], from;
  int on_cpu = (w->valid[x] & ~w->gpu_mask) != 0;
  if (d != h && (is_gpu(w, d) || !on_cpu)) {
    AQ_RETURN_IF_ERROR(ensure(w, x, h));
    from = h;
  } else {
    from = w->valid[x] & (1ull << h) ? h : on_cpu ? lowest(w->valid[x] & ~w->gpu_mask) : lowest(w->valid[x]);
  }
  AQ_RETURN_IF_ERROR(add_copy(w, x, from, d));
  w->valid[x] |= 1ull << d;
  return AQ_OK;
}

/* Where a task on agent a reads or writes x. */
static uint32_t domain(const walk_t *w, const task_t *task, uint32_t a, uint32_t x) {
  if (w->leave[x] || task->kind == TASK_HOST) return w->home[x];
  return a;
}

/* Appends "prefetch x -> to" (pages of managed memory), run on a CPU agent. */
static aq_status_t add_prefetch(walk_t *w, uint32_t x, uint32_t to) {
  task_t t;
  memset(&t, 0, sizeof(t));
  t.kind = TASK_HOST;
  t.fn = w->in->prefetch_fn;
  t.user = w->in->copy_user;
  t.args[0] = x, t.args[1] = to, t.args[2] = w->c->tensors[x].bytes;
  /* A tensor not written yet this run that holds nothing from before (an
   * activation, a gradient) has nothing to read: the prefetch only moves
   * its pages ahead of the writer. */
  t.nreads = w->written[x] || aq_plan_readable_without_writer(w->c->tensors[x].role);
  t.nwrites = 1;
  t.reads[0] = t.writes[0] = x;
  t.read_off[0] = t.write_off[0] = UINT32_MAX;
  t.agent = (int32_t)(is_gpu(w, to) ? w->host : to);
  t.op = OP_OTHER;
  snprintf(t.name, sizeof(t.name), "prefetch %.22s -> %.16s", w->c->tensors[x].name, w->in->agent_names[to]);
  w->copies++;
  uint32_t id;
  return aq_graph_new_task(w->c, &t, &id);
}

/* The pages' place for a task on agent a: the GPU, or the host (any CPU
 * agent: a prefetch to the host does not choose a node). */
static uint64_t place(const walk_t *w, uint32_t a) { return is_gpu(w, a) ? 1ull << a : ~w->gpu_mask; }

/* Prefetches before task (on agent a) for the managed tensors it touches. */
static aq_status_t prefetch_for(walk_t *w, const task_t *task, uint32_t a) {
  for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
    uint32_t x = j < task->nreads ? task->reads[j] : task->writes[j - task->nreads];
    if (!(w->touch[x] & w->gpu_mask) || (w->valid[x] & place(w, a))) continue;
    AQ_RETURN_IF_ERROR(add_prefetch(w, x, a));
    w->valid[x] = place(w, a);
  }
  for (uint32_t j = 0; j < task->nwrites; ++j) w->written[task->writes[j]] = 1;
  return AQ_OK;
}

/* Copies before task (on agent a) and its tensors renamed to the replicas. */
static aq_status_t copies_for(walk_t *w, task_t *task, uint32_t a) {
  for (uint32_t r = 0; r < task->nreads; ++r) {
    uint32_t x = task->reads[r], d = domain(w, task, a, x);
    AQ_RETURN_IF_ERROR(ensure(w, x, d));
    AQ_RETURN_IF_ERROR(replica_of(w, x, d, &task->reads[r]));
  }
  for (uint32_t j = 0; j < task->nwrites; ++j) {
    uint32_t x = task->writes[j], d = domain(w, task, a, x);
    AQ_RETURN_IF_ERROR(replica_of(w, x, d, &task->writes[j]));
    w->valid[x] = 1ull << d;
  }
  return AQ_OK;
}

void aq_replica_free(replica_out_t *out) {
  if (out->graph) aq_graph_destroy(out->graph);
  free(out->final), free(out->origin);
  memset(out, 0, sizeof(*out));
}

int aq_replica_wanted(int replicate_flag, const uint8_t *agent_gpu, uint32_t nagents, uint8_t *gpus, uint8_t *prefetch) {
  uint64_t mem = aq_setting_u64(AQ_SET_MEMORY);
  uint32_t ncpu = 0, ngpu = 0;
  for (uint32_t a = 0; a < nagents; ++a) agent_gpu[a] ? ++ngpu : ++ncpu;
  *prefetch = mem == AQ_MEMORY_UNIFIED && ncpu && ngpu;
  *gpus = 0;
  if (*prefetch) return 1;
  if (!(replicate_flag || mem == AQ_MEMORY_REPLICATE)) return 0;
  *gpus = ncpu && ngpu;
  return ncpu > 1 || *gpus;
}

/* Homes, who touches what, what is left alone, and what must persist
 * across runs; the first valid places. */
static aq_status_t survey(walk_t *w, uint8_t *persist) {
  const aq_graph_t *g = w->in->graph;
  const plan_t *p = w->in->plan;
  uint32_t nt = w->nt;
  uint32_t *cpu_home = malloc(nt * sizeof(uint32_t)), *last = malloc(nt * sizeof(uint32_t));
  uint8_t *seen = calloc(nt, 1);
  if (!cpu_home || !last || !seen) {
    free(cpu_home), free(last), free(seen);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
  }
  for (uint32_t x = 0; x < nt; ++x) {
    w->home[x] = cpu_home[x] = UINT32_MAX;
    aq_tensor_role_t r = g->tensors[x].role;
    persist[x] = r == AQ_ROLE_PARAMETER || r == AQ_ROLE_STATE || r == AQ_ROLE_INPUT || r == AQ_ROLE_CONSTANT;
  }
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    uint32_t t = p->order[k], a = w->in->lane_agent[p->tasks[t].lane];
    const task_t *task = &g->tasks[t];
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
      int read = j < task->nreads;
      uint32_t x = read ? task->reads[j] : task->writes[j - task->nreads];
      if (w->home[x] == UINT32_MAX) w->home[x] = a;
      if (cpu_home[x] == UINT32_MAX && !is_gpu(w, a)) cpu_home[x] = a;
      w->touch[x] |= 1ull << a;
      last[x] = a;
      if (!seen[x] && read) persist[x] = 1; /* read before this run writes it */
    }
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j)
      seen[j < task->nreads ? task->reads[j] : task->writes[j - task->nreads]] = 1;
  }
  for (uint32_t x = 0; x < nt; ++x) {
    uint64_t gpus = w->touch[x] & w->gpu_mask;
    if (cpu_home[x] != UINT32_MAX) w->home[x] = cpu_home[x];
    w->leave[x] = w->in->gpus ? (gpus & (gpus - 1)) != 0 : gpus != 0;
    if (w->home[x] == UINT32_MAX) continue;
    /* A run begins where the last one left the pages: with its last toucher. */
    w->valid[x] = w->in->prefetch ? place(w, last[x]) : 1ull << w->home[x];
  }
  free(cpu_home), free(last), free(seen);
  return AQ_OK;
}

/* Explicit edges, renumbered to the new tasks. */
static aq_status_t renumber(const aq_graph_t *g, aq_graph_t *c, const uint32_t *newid) {
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *src = &g->tasks[t];
    task_t *dst = &c->tasks[newid[t]];
    if (src->nafter_all) {
      dst->after_all = malloc(src->nafter_all * sizeof(uint32_t));
      if (!dst->after_all) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
      for (uint32_t j = 0; j < src->nafter_all; ++j) dst->after_all[j] = newid[src->after_all[j]];
      dst->nafter_all = src->nafter_all;
    }
    if (src->nafter_any) {
      dst->after_any = malloc(src->nafter_any * sizeof(uint32_t));
      if (!dst->after_any) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
      for (uint32_t j = 0; j < src->nafter_any; ++j) dst->after_any[j] = newid[src->after_any[j]];
      dst->nafter_any = src->nafter_any;
    }
  }
  return AQ_OK;
}

aq_status_t aq_replica_build(const replica_in_t *in, replica_out_t *out) {
  const aq_graph_t *g = in->graph;
  const plan_t *p = in->plan;
  uint32_t n = p->ntasks, nt = g->ntensors, na = in->nagents;
  memset(out, 0, sizeof(*out));
  if (na > 64) return aq_error(AQ_ERROR_UNAVAILABLE, "replicas: at most 64 agents, not %u", na);
  walk_t w = {.in = in, .nt = nt, .host = UINT32_MAX};
  for (uint32_t a = 0; a < na; ++a) {
    if (in->agent_gpu[a])
      w.gpu_mask |= 1ull << a;
    else if (w.host == UINT32_MAX)
      w.host = a;
  }
  if (in->prefetch && w.host == UINT32_MAX)
    return aq_error(AQ_ERROR_UNAVAILABLE, "prefetch tasks need a CPU agent to run on");
  w.home = malloc(nt * sizeof(uint32_t));
  w.valid = calloc(nt, sizeof(uint64_t));
  w.touch = calloc(nt, sizeof(uint64_t));
  w.replica = calloc((size_t)nt * (na ? na : 1), sizeof(uint32_t));
  w.leave = calloc(nt, 1);
  w.written = calloc(nt, 1);
  uint8_t *persist = calloc(nt, 1);
  uint32_t *newid = malloc((n ? n : 1) * sizeof(uint32_t));
  out->final = malloc(nt * sizeof(uint32_t));
  aq_status_t s = w.home && w.valid && w.touch && w.replica && w.leave && w.written && persist && newid && out->final
                      ? aq_graph_create(NULL, &w.c)
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
  for (uint32_t x = 1; s == AQ_OK && x < nt; ++x) {
    const tensor_t *t = &g->tensors[x];
    uint32_t id;
    s = aq_graph_new_tensor(w.c, t->name, t->dtype, t->role, t->rank, t->dims, &id);
    if (s == AQ_OK) w.c->tensors[id].grad = t->grad;
  }
  if (s == AQ_OK) s = survey(&w, persist);
  /* The walk: copies (or prefetches) before the tasks that need them. */
  for (uint32_t k = 0; s == AQ_OK && k < n; ++k) {
    uint32_t t = p->order[k], a = in->lane_agent[p->tasks[t].lane];
    task_t task = g->tasks[t];
    s = in->prefetch ? prefetch_for(&w, &task, a) : copies_for(&w, &task, a);
    /* Edges are renumbered below, once every task has its new id. */
    task.after_all = task.after_any = NULL;
    task.nafter_all = task.nafter_any = 0;
    task.agent = (int32_t)a;
    if (s == AQ_OK) s = aq_graph_new_task(w.c, &task, &newid[t]);
    if (s == AQ_OK) newid[t]--;
  }
  /* The end of the run: what persists goes home; the rest is read where
   * it was last written. */
  for (uint32_t x = 1; s == AQ_OK && x < nt; ++x) {
    out->final[x] = x;
    if (in->prefetch || w.home[x] == UINT32_MAX || w.valid[x] & (1ull << w.home[x])) continue;
    if (persist[x])
      s = ensure(&w, x, w.home[x]);
    else
      s = replica_of(&w, x, (w.valid[x] & ~w.gpu_mask) ? lowest(w.valid[x] & ~w.gpu_mask) : lowest(w.valid[x]),
                     &out->final[x]);
  }
  out->final[0] = 0;
  if (s == AQ_OK) s = renumber(g, w.c, newid);
  if (s == AQ_OK) {
    out->origin = calloc(w.c->ntasks ? w.c->ntasks : 1, sizeof(uint32_t));
    if (!out->origin) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
    for (uint32_t t = 0; s == AQ_OK && t < n; ++t) out->origin[newid[t]] = t + 1;
  }
  out->graph = w.c;
  out->copies = w.copies;
  out->prefetch = in->prefetch;
  free(w.home), free(w.valid), free(w.touch), free(w.replica), free(w.leave), free(w.written), free(persist),
      free(newid);
  if (s != AQ_OK) aq_replica_free(out);
  return s;
}
