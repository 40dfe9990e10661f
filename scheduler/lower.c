/* Lowering: each task becomes its packets (barrier-AND packets over its
 * producers on other lanes, a barrier-OR for an after-any edge, the task
 * itself with its kernarg filled in) in the stream of its lane; one lane
 * joins the others' ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/signal.h"
#include "scheduler/exec_internal.h"
#include "scheduler/tune.h"

static aq_status_t push(stream_t *st, const void *packet) {
  if (st->npackets == st->cap) {
    uint32_t cap = st->cap ? 2 * st->cap : 64;
    uint8_t *n = realloc(st->packets, (size_t)cap * PKT);
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for packets");
    st->packets = n;
    st->cap = cap;
  }
  memcpy(st->packets + (size_t)st->npackets++ * PKT, packet, PKT);
  return AQ_OK;
}

int aq_exec_same_gpu_lanes(const aq_exec_t *e, uint32_t mine, uint32_t other) {
  return mine != other && e->lane_kind[mine] == AQ_AGENT_KIND_GPU && e->lane_agent[mine] == e->lane_agent[other];
}

/* same_gpu: bit i, deps[i] is written by another stream of this lane's
 * GPU (queue.h: aq_barrier_same_gpu_dep). */
static aq_status_t push_barrier(aq_exec_t *e, stream_t *st, hsa_packet_type_t type, const aq_signal_t *deps,
                                uint32_t n, aq_signal_t completion, uint32_t same_gpu) {
  hsa_barrier_and_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = exec_packet_header(type, 1);
  b.reserved1 = same_gpu;
  for (uint32_t i = 0; i < n; ++i) b.dep_signal[i].handle = deps[i].handle;
  b.completion_signal.handle = completion.handle;
  e->barriers++;
  return push(st, &b);
}

/* Task t's kernarg as written at dst: the graph's, with the addresses of
 * its tensors filled in. */
static void fill_kernarg(const aq_exec_t *e, uint32_t t, uint8_t *dst) {
  const task_t *task = &e->graph->tasks[t];
  if (!task->kernarg_size) return; /* dst may be NULL then: no arena */
  memcpy(dst, task->kernarg, task->kernarg_size);
  for (uint32_t r = 0; r < task->nreads; ++r)
    if (task->read_off[r] != UINT32_MAX) memcpy(dst + task->read_off[r], &e->buffers[task->reads[r]], sizeof(void *));
  for (uint32_t w = 0; w < task->nwrites; ++w)
    if (task->write_off[w] != UINT32_MAX)
      memcpy(dst + task->write_off[w], &e->buffers[task->writes[w]], sizeof(void *));
}

/* A fused consumer's kernarg: the product's and its own, merged. */
static void fill_fused_kernarg(const aq_exec_t *e, uint32_t t, uint8_t *dst) {
  uint8_t mine[TASK_KERNARG_MAX], product[TASK_KERNARG_MAX];
  fill_kernarg(e, t, mine);
  fill_kernarg(e, e->fusion.product[t], product);
  aq_fuse_kernarg(&e->fusion, t, mine, product, dst);
}

/* An update group's lead (fuse.h): each member's kernarg, its own, as an
 * entry of the multi-update's; each member's kernarg address is its entry
 * (a new learning rate goes there, aq_exec_set_learning_rate). */
static void fill_group_kernarg(aq_exec_t *e, uint32_t lead, uint8_t *dst) {
  aq_sgd_multi_args_t *m = (aq_sgd_multi_args_t *)(void *)dst;
  memset(m, 0, sizeof(*m));
  for (uint32_t t = e->fusion.first[lead]; t != UINT32_MAX && m->count < AQ_SGD_MULTI_MAX; t = e->fusion.next[t]) {
    fill_kernarg(e, t, (uint8_t *)&m->t[m->count]);
    e->kernargs[t] = &m->t[m->count++];
  }
}

/* An update group's grid on a CPU (ops.h): each entry's n rounded up to
 * the members' work-group. */
static aq_dispatch_shape_t group_shape(const aq_exec_t *e, uint32_t lead, const aq_sgd_multi_args_t *m) {
  aq_dispatch_shape_t sh = e->graph->tasks[lead].shape;
  uint64_t wg = sh.workgroup[0] ? sh.workgroup[0] : 1, items = 0;
  for (int32_t k = 0; k < m->count; ++k) items += ((uint64_t)m->t[k].n + wg - 1) / wg * wg;
  sh.grid[0] = (uint32_t)(items < UINT32_MAX ? items : UINT32_MAX), sh.grid[1] = sh.grid[2] = 1;
  return sh;
}

/* Where an exact exec sets a library kernel's precision, or AQ_OP_FIELD_NONE. */
static uint32_t precision_field(const aq_exec_t *e, const char *kernel) {
  return e->exact_matmul ? aq_oplib_precision_offset(e->lib, kernel) : AQ_OP_FIELD_NONE;
}

static void set_exact(uint8_t *kernarg, uint32_t off) {
  int32_t exact = AQ_MATMUL_PRECISION_EXACT;
  memcpy(kernarg + off, &exact, sizeof(exact));
}

/* The GPU build of task t's op on agent a: the one tuned for its shape on
 * the agent's model (tune.h), else the launch rule's (*tuned: 0).
 * kernarg is the task's as dispatched (an exact exec's products already
 * exact; a fused kernarg starts with the product's, which is all the
 * rules read of either). */
static const char *gpu_kernel(const aq_exec_t *e, uint32_t t, uint32_t a, const char *base, const void *kernarg,
                              int *tuned) {
  const char *pick = aq_tune_choice(e->lib, e->agent_arch[a], t, base, kernarg);
  *tuned = pick != NULL;
  return pick ? pick : aq_oplib_launch_kernel(e->lib, AQ_AGENT_KIND_GPU, base, kernarg);
}

static aq_status_t kernel_packet(aq_exec_t *e, uint32_t t, int barrier, hsa_kernel_dispatch_packet_t *p) {
  aq_graph_t *g = e->graph;
  const task_t *task = &g->tasks[t];
  uint32_t a = e->lane_agent[e->plan.tasks[t].lane];
  int gpu = e->lane_kind[e->plan.tasks[t].lane] == AQ_AGENT_KIND_GPU;
  aq_code_object_t co = task->code_object.handle ? task->code_object : gpu ? e->gpu_ops : e->ops;
  uint32_t fused = e->fusion.product[t];
  /* A fused consumer dispatches as its product (kernel, grid), with both
   * kernargs. The op library's GPU build may have a variant per class of
   * shapes. */
  const task_t *body = fused != UINT32_MAX ? &g->tasks[fused] : task;
  int group = e->fusion.lead[t] == t;
  const char *base = fused != UINT32_MAX ? aq_fuse_kernel(&e->fusion, t) : group ? AQ_KERNEL_SGD_MULTI : task->kernel;
  /* The kernarg first: the build is picked from it as dispatched. */
  size_t bytes = aq_exec_kernarg_bytes(e, t);
  /* No arena where no task of the agent takes kernargs (not NULL + 0). */
  e->kernargs[t] = e->kernarg_arenas[a] ? (uint8_t *)e->kernarg_arenas[a] + e->kernarg_used[a] : NULL;
  e->kernarg_used[a] += (bytes + 63) & ~(size_t)63;
  uint8_t *ka = e->kernargs[t];
  if (fused != UINT32_MAX)
    fill_fused_kernarg(e, t, ka);
  else if (group)
    fill_group_kernarg(e, t, ka);
  else
    fill_kernarg(e, t, ka);
  uint32_t precision = gpu && !task->code_object.handle ? precision_field(e, base) : AQ_OP_FIELD_NONE;
  if (precision != AQ_OP_FIELD_NONE) set_exact(ka, precision);
  int tuned = 0;
  const char *name = gpu && !task->code_object.handle ? gpu_kernel(e, t, a, base, ka ? ka : body->kernarg, &tuned) : base;
  aq_kernel_info_t k;
  if (!(e->last_kernel_co == co.handle && e->last_kernel_agent == a && !strcmp(e->last_kernel_name, name))) {
    e->last_kernel_co = 0;
    if (aq_code_object_find_kernel(co, name, e->agents[a], &e->last_kernel) != AQ_OK)
      return aq_error_annotate(AQ_ERROR_INVALID_GRAPH, "placed on agent %s, which lacks kernel '%s'",
                               e->agent_names[a], name);
    /* remembered only once found (the names are at most 63 characters) */
    e->last_kernel_co = co.handle, e->last_kernel_agent = a;
    snprintf(e->last_kernel_name, sizeof(e->last_kernel_name), "%s", name);
  }
  k = e->last_kernel;
  if (bytes < k.kernarg_size)
    return aq_error(AQ_ERROR_INVALID_GRAPH, "kernel '%s' takes %u bytes of kernargs, the task gives %zu", name,
                    k.kernarg_size, bytes);
  memset(p, 0, sizeof(*p));
  p->header = exec_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, barrier);
  p->setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  /* GPUs get each kernel's own launch shape (conv, pool and batch norm would
   * leave a GPU nearly idle under their CPU grids of one item per plane). */
  aq_dispatch_shape_t cpu_shape = group ? group_shape(e, t, (const aq_sgd_multi_args_t *)(const void *)ka) : body->shape;
  /* A tuned build's own shape (the op's is the rule's pick's); its group
   * segment below is its own too. */
  aq_dispatch_shape_t sh = !gpu    ? cpu_shape
                           : tuned ? aq_oplib_build_shape(e->lib, AQ_AGENT_KIND_GPU, base, name, ka, cpu_shape)
                                   : aq_oplib_launch_shape(e->lib, AQ_AGENT_KIND_GPU, base, ka, cpu_shape);
  if (gpu) AQ_RETURN_IF_ERROR(aq_graph_check_gpu_grid(task->name, name, sh));
  p->workgroup_size_x = sh.workgroup[0] ? sh.workgroup[0] : 1;
  p->workgroup_size_y = sh.workgroup[1] ? sh.workgroup[1] : 1;
  p->workgroup_size_z = sh.workgroup[2] ? sh.workgroup[2] : 1;
  p->grid_size_x = sh.grid[0] ? sh.grid[0] : 1;
  p->grid_size_y = sh.grid[1] ? sh.grid[1] : 1;
  p->grid_size_z = sh.grid[2] ? sh.grid[2] : 1;
  p->group_segment_size = gpu ? aq_oplib_group_segment(e->lib, AQ_AGENT_KIND_GPU, name, ka) : 0; /* staged tiles past 48 KB */
  p->kernel_object = k.kernel_object;
  p->kernarg_address = ka;
  p->reserved2 = ((uint64_t)e->serial << 20) | (t + 1); /* the run goes in at each run */
  /* A GPU writes a completion with a stream operation: only where another
   * lane waits for it (a fault still reaches the run through its lane's end). */
  p->completion_signal.handle = gpu && !e->watched[t] ? 0 : e->signals[t].handle;
  return AQ_OK;
}

/* A stream call (a NCCL collective on a GPU lane): its kernarg, with its
 * tensors' addresses, goes to the agent's kernarg arena (host memory: the
 * queue's packet processor reads it) and the packet points at it. Its
 * completion is always written: the NCCL watchdog fails it on an abort. */
static aq_status_t stream_packet(aq_exec_t *e, uint32_t t, int barrier, hsa_agent_dispatch_packet_t *p) {
  const task_t *task = &e->graph->tasks[t];
  uint32_t lane = e->plan.tasks[t].lane, a = e->lane_agent[lane];
  if (e->lane_kind[lane] != AQ_AGENT_KIND_GPU)
    return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is a GPU stream call, placed on agent %s", task->name,
                    e->agent_names[a]);
  e->kernargs[t] = (uint8_t *)e->kernarg_arenas[a] + e->kernarg_used[a];
  e->kernarg_used[a] += (aq_exec_kernarg_bytes(e, t) + 63) & ~(size_t)63;
  fill_kernarg(e, t, e->kernargs[t]);
  memset(p, 0, sizeof(*p));
  p->header = exec_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, barrier);
  p->type = AQ_AGENT_DISPATCH_STREAM_CALL;
  p->return_address = e->kernargs[t];
  p->arg[0] = (uint64_t)(uintptr_t)task->stream_fn;
  for (int i = 0; i < 3; ++i) p->arg[i + 1] = task->args[i];
  p->completion_signal.handle = e->signals[t].handle;
  p->reserved2 = ((uint64_t)e->serial << 20) | (t + 1);
  return AQ_OK;
}

/* The producers on other lanes that task t must wait for. Packets of one
 * queue complete in order (CPU queues, GPU streams), so of the producers on
 * another lane only the last one in that lane counts: a fan-in of n tasks
 * waits on one signal per lane, not n. *same_queue: a producer shares t's
 * lane (its packet then needs the barrier bit). */
static uint32_t other_lane_producers(aq_exec_t *e, uint32_t t, uint32_t *out, int *same_queue) {
  const plan_task_t *pt = &e->plan.tasks[t];
  uint32_t *last = e->lane_last_pred, n = 0;
  /* covered[mine * nlanes + other]: packets of lane `other` before this seq
   * are already waited for by an earlier barrier in my lane (which runs in
   * order): a wavefront waits once per lane hop, not once per edge. */
  uint32_t *covered = e->covered + (size_t)pt->lane * e->nlanes;
  *same_queue = 0;
  for (uint32_t j = 0; j < pt->npreds; ++j) {
    uint32_t q = pt->preds[j], lane = e->plan.tasks[q].lane;
    if (e->fusion.absorbed[q]) continue; /* runs in a consumer, which t already follows */
    if (lane == pt->lane) {
      *same_queue = 1;
    } else if (e->plan.tasks[q].seq < covered[lane]) {
      continue;
    } else if (e->lane_stamp[lane] != t + 1) {
      e->lane_stamp[lane] = t + 1;
      last[lane] = q;
      e->lane_touched[n++] = lane;
    } else if (e->plan.tasks[q].seq > e->plan.tasks[last[lane]].seq) {
      last[lane] = q;
    }
  }
  for (uint32_t j = 0; j < n; ++j) {
    out[j] = last[e->lane_touched[j]];
    covered[e->lane_touched[j]] = e->plan.tasks[out[j]].seq + 1;
  }
  /* stamps are per task id; a second call for the same task starts afresh */
  for (uint32_t j = 0; j < n; ++j) e->lane_stamp[e->lane_touched[j]] = 0;
  return n;
}

/* Per task in plan order (k): the producers on other lanes it waits for
 * (producers[start[k]..start[k+1])) and whether one shares its lane. */
typedef struct waits {
  uint32_t *start, *producers;
  uint8_t *same_queue;
} waits_t;

static aq_status_t find_waits(aq_exec_t *e, waits_t *w) {
  aq_graph_t *g = e->graph;
  size_t edges = 0;
  for (uint32_t t = 0; t < e->plan.ntasks; ++t) edges += e->plan.tasks[t].npreds;
  w->start = malloc((e->plan.ntasks + 1) * sizeof(uint32_t));
  w->producers = malloc((edges ? edges : 1) * sizeof(uint32_t));
  w->same_queue = calloc(e->plan.ntasks ? e->plan.ntasks : 1, 1);
  if (!w->start || !w->producers || !w->same_queue) {
    free(w->start), free(w->producers), free(w->same_queue);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  }
  uint32_t at = 0;
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k], n = 0;
    w->start[k] = at;
    if (e->fusion.absorbed[t]) continue;
    int same;
    n = other_lane_producers(e, t, w->producers + at, &same);
    w->same_queue[k] = (uint8_t)same;
    for (uint32_t j = 0; j < n; ++j) e->watched[w->producers[at + j]] = 1;
    for (uint32_t j = 0; j < g->tasks[t].nafter_any; ++j) e->watched[g->tasks[t].after_any[j]] = 1;
    at += n;
  }
  w->start[e->plan.ntasks] = at;
  return AQ_OK;
}

/* Each lane's packet array sized once from the waits (a task's barriers,
 * five producers each, its after-any barrier and itself; a lane's end and
 * the join's barriers): grown by doubling, it copied every packet about
 * twice more and faulted its pages in again. */
static aq_status_t size_streams(aq_exec_t *e, const waits_t *w) {
  uint32_t need[EXEC_LANES_MAX] = {0};
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k], nprod = w->start[k + 1] - w->start[k];
    if (!e->fusion.absorbed[t])
      need[e->plan.tasks[t].lane] += (nprod + 4) / 5 + (e->graph->tasks[t].nafter_any > 0) + 1;
  }
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    stream_t *st = &e->streams[a];
    uint32_t n = need[a] + (e->nlanes + 4) / 5 + 1;
    if (!need[a] || n <= st->cap) continue;
    uint8_t *packets = realloc(st->packets, (size_t)n * PKT);
    if (!packets) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for packets");
    st->packets = packets, st->cap = n;
  }
  return AQ_OK;
}

/* Barrier-ANDs in lane's stream over n signals, five a packet (consecutive
 * barriers in one queue AND together); from[i] is the lane that writes
 * deps[i], marked where it is another stream of the lane's GPU (queue.h:
 * aq_barrier_same_gpu_dep). */
static aq_status_t push_waits(aq_exec_t *e, uint32_t lane, const aq_signal_t *deps, const uint32_t *from, uint32_t n) {
  aq_signal_t none = {0};
  for (uint32_t i = 0; i < n; i += 5) {
    uint32_t m = n - i < 5 ? n - i : 5, same_gpu = 0;
    for (uint32_t j = 0; j < m; ++j) {
      int mine = aq_exec_same_gpu_lanes(e, lane, from[i + j]);
      same_gpu |= (uint32_t)mine << j;
      if (mine) aq_signal_wait_on_device(deps[i + j]);
    }
    AQ_RETURN_IF_ERROR(push_barrier(e, &e->streams[lane], HSA_PACKET_TYPE_BARRIER_AND, deps + i, m, none, same_gpu));
  }
  return AQ_OK;
}

/* Packets for one task: barrier-AND packets over its producers on other
 * queues (five at a time: consecutive barriers in one queue AND together),
 * a barrier-OR for its after-any edge, then the task itself. */
static aq_status_t lower_task(aq_exec_t *e, uint32_t t, const uint32_t *producers, uint32_t nprod, int same_queue) {
  aq_graph_t *g = e->graph;
  const task_t *task = &g->tasks[t];
  const plan_task_t *pt = &e->plan.tasks[t];
  stream_t *st = &e->streams[pt->lane];
  aq_signal_t deps[EXEC_LANES_MAX], none = {0}; /* a producer a lane at most */
  uint32_t from[EXEC_LANES_MAX];
  for (uint32_t j = 0; j < nprod; ++j) deps[j] = e->signals[producers[j]], from[j] = e->plan.tasks[producers[j]].lane;
  if (nprod) AQ_RETURN_IF_ERROR(push_waits(e, pt->lane, deps, from, nprod));
  if (task->nafter_any) {
    if (task->nafter_any > 5)
      return aq_error(AQ_ERROR_INVALID_GRAPH, "an after-any edge of %u tasks (at most 5)",
                      task->nafter_any);
    for (uint32_t j = 0; j < task->nafter_any; ++j) deps[j] = e->signals[task->after_any[j]];
    AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_OR, deps, task->nafter_any, none, 0));
  }
  if (task->kind == TASK_HOST) {
    hsa_agent_dispatch_packet_t p;
    memset(&p, 0, sizeof(p));
    p.header = exec_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, same_queue);
    p.type = AQ_AGENT_DISPATCH_HOST_CALL;
    p.return_address = task->user;
    p.arg[0] = (uint64_t)(uintptr_t)task->fn;
    for (int i = 0; i < 3; ++i) p.arg[i + 1] = task->args[i];
    p.completion_signal.handle = e->signals[t].handle;
    p.reserved2 = ((uint64_t)e->serial << 20) | (t + 1);
    return push(st, &p);
  }
  if (task->kind == TASK_STREAM) {
    hsa_agent_dispatch_packet_t p;
    AQ_RETURN_IF_ERROR(stream_packet(e, t, same_queue, &p));
    return push(st, &p);
  }
  hsa_kernel_dispatch_packet_t p;
  AQ_RETURN_IF_ERROR(kernel_packet(e, t, same_queue, &p));
  return push(st, &p);
}

/* One lane ends with barriers over every other lane's end: its done signal
 * is the run's (aq_exec_completion_signal). The lane of the task the plan
 * expects to finish last (of equals, the later in its order): then the
 * run's end takes no hop through another lane's thread (a GPU's end went
 * through a CPU worker's barrier and cost a training step a wake-up). Not
 * the plan's last task: a batch loader of no measured cost ranks last,
 * though it ends long before the GPU's step. UINT32_MAX: no packets. */
static uint32_t join_lane(const aq_exec_t *e) {
  uint32_t join = UINT32_MAX;
  double last = 0;
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k];
    const plan_task_t *pt = &e->plan.tasks[t];
    if (e->fusion.absorbed[t] || !e->streams[pt->lane].npackets) continue;
    if (join == UINT32_MAX || !(pt->finish < last)) join = pt->lane, last = pt->finish;
  }
  return join;
}

aq_status_t aq_exec_lower(aq_exec_t *e, uint32_t queue_size) {
  aq_graph_t *g = e->graph;
  e->kernargs = calloc(g->ntasks, sizeof(void *));
  e->signals = calloc(g->ntasks, sizeof(aq_signal_t));
  if (!e->kernargs || !e->signals) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  AQ_RETURN_IF_ERROR(aq_exec_plan_kernargs(e));
  e->watched = calloc(g->ntasks, 1);
  if (!e->watched) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  /* watched: a producer another lane waits for, or an after-any edge
   * points at (a GPU writes only those completion signals). */
  e->covered = calloc((size_t)e->nlanes * e->nlanes, sizeof(uint32_t));
  if (!e->covered) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  AQ_RETURN_IF_ERROR(aq_signal_create_many(0, g->ntasks, e->signals));
  /* Each task's waits (plan order), first: the watched tasks must be known
   * before any packet is written. */
  waits_t w;
  AQ_RETURN_IF_ERROR(find_waits(e, &w));
  aq_status_t s = size_streams(e, &w);
  for (uint32_t k = 0; s == AQ_OK && k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k];
    if (e->fusion.absorbed[t]) continue;
    s = lower_task(e, t, w.producers + w.start[k], w.start[k + 1] - w.start[k], w.same_queue[k]);
    if (s != AQ_OK) aq_error_annotate(s, "task '%s'", g->tasks[t].name);
  }
  free(w.start), free(w.producers), free(w.same_queue);
  AQ_RETURN_IF_ERROR(s);
  aq_signal_t none = {0};
  e->join_lane = join_lane(e);
  for (uint32_t a = 0; a < e->nlanes; ++a)
    if (e->streams[a].npackets) AQ_RETURN_IF_ERROR(aq_signal_create(0, &e->streams[a].done));
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    stream_t *st = &e->streams[a];
    if (!st->npackets) continue;
    if (a == e->join_lane) {
      aq_signal_t deps[EXEC_LANES_MAX];
      uint32_t from[EXEC_LANES_MAX], nd = 0;
      for (uint32_t b = 0; b < e->nlanes; ++b)
        if (e->streams[b].npackets && b != a) deps[nd] = e->streams[b].done, from[nd++] = b;
      AQ_RETURN_IF_ERROR(push_waits(e, a, deps, from, nd));
      e->barriers -= (nd + 4) / 5; /* bookkeeping, not edges */
    }
    /* The end of the stream: a barrier (bit set) that marks the lane done. */
    AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, &none, 0, st->done, 0));
    e->barriers--; /* bookkeeping, not an edge */
    e->packets += st->npackets;
    if (e->stamps && e->lane_kind[a] == AQ_AGENT_KIND_CPU) AQ_RETURN_IF_ERROR(aq_exec_profile_stream(e, st));
    uint32_t need = st->nprof > st->npackets ? st->nprof : st->npackets;
    uint32_t size = queue_size ? queue_size : 64;
    while (size < need) size *= 2;
    aq_queue_options_t qo = {.size = size, .flags = e->lane_queue_flags[a]};
    aq_status_t s = aq_queue_create(e->agents[e->lane_agent[a]], &qo, &st->queue);
    if (s != AQ_OK) return s;
    aq_queue_info_t info;
    AQ_RETURN_IF_ERROR(aq_queue_get_info(st->queue, &info));
    if (info.size < need)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "queue_size %u cannot hold the %u packets of one run on %s",
                      info.size, need, e->agent_names[e->lane_agent[a]]);
    st->ring = info.base_address;
    st->size = info.size;
    e->queues_used++;
  }
  return AQ_OK;
}
