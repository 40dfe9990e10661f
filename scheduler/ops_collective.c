/* Collectives as graph ops (collective.h). Through MPI, on CPU agents:
 * each is a start task and a completion task, so the agent's other workers
 * keep computing while MPI moves the data. Through NCCL, where the
 * communicator joined a GPU: one stream call on that GPU's lane, ordered
 * by the lane's barrier packets like its kernels. Their state lives with
 * the communicator, which must outlive the execs that run them; one exec
 * of such a graph runs at a time. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/comm/call.h"
#include "runtime/comm.h"
#include "runtime/status.h"
#include "scheduler/collective.h"
#include "scheduler/ranks.h"

typedef struct coll {
  comm_op_t op;
  char name[TASK_NAME_MAX];
  uint32_t n;
  size_t count[COLL_TENSORS_MAX];
  float *addr[COLL_TENSORS_MAX]; /* this run's, from the start task */
  float *out;
  float *pack; /* n > 1: the tensors side by side, one call for all */
  size_t total;
  int first_run_only, skip;
  uint64_t runs;
  uint32_t local; /* NCCL: the local rank (GPU) it runs on */
} coll_t;

static void coll_start(void *user, void *const *ptrs) {
  coll_t *c = user;
  c->skip = c->first_run_only && c->runs++ > 0;
  if (c->skip) return;
  for (uint32_t i = 0; i < c->n; ++i) c->addr[i] = ptrs[i];
  c->out = c->op.c.kind == AQ_COLLECTIVE_ALLGATHER || c->op.c.kind == AQ_COLLECTIVE_REDUCE_SCATTER ? ptrs[c->n] : NULL;
  if (c->pack) {
    size_t at = 0;
    for (uint32_t i = 0; i < c->n; ++i)
      memcpy(c->pack + at, c->addr[i], c->count[i] * sizeof(float)), at += c->count[i];
    c->op.c.send = c->op.c.recv = c->pack;
  } else {
    c->op.c.send = c->addr[0];
    c->op.c.recv = c->out ? c->out : c->addr[0];
  }
  aq_comm_op_start(&c->op);
}

static aq_status_t coll_complete(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  coll_t *c = user;
  if (c->skip) return AQ_OK;
  AQ_RETURN_IF_ERROR(aq_comm_op_complete(&c->op));
  size_t at = 0;
  for (uint32_t i = 0; c->pack && i < c->n; ++i)
    memcpy(c->addr[i], c->pack + at, c->count[i] * sizeof(float)), at += c->count[i];
  return AQ_OK;
}

/* The NCCL form's stream call, on the GPU queue's packet processor: the
 * tensors (a bucket's) as one NCCL group on the stream. */
static aq_status_t coll_stream(const hsa_agent_dispatch_packet_t *p, void *stream) {
  const aq_tensor_call_args_t *a = p->return_address;
  coll_t *c = a->user;
  if (c->first_run_only && c->runs++ > 0) return AQ_OK;
  aq_collective_t x[COLL_TENSORS_MAX];
  int to_new = c->op.c.kind == AQ_COLLECTIVE_ALLGATHER || c->op.c.kind == AQ_COLLECTIVE_REDUCE_SCATTER;
  uint32_t n = to_new ? 1 : c->n;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = c->op.c;
    x[i].send = a->ptrs[i];
    x[i].recv = to_new ? a->ptrs[c->n] : a->ptrs[i];
    if (!to_new) x[i].count = c->count[i];
  }
  return aq_comm_nccl_stream(c->op.comm, c->local, x, n, stream, p->completion_signal.handle);
}

/* NCCL carries the communicator's graph collectives where it joined a GPU. */
static int nccl_form(const aq_comm_t *comm) { return comm->ngpus > 0; }

static aq_status_t check_spec(aq_graph_t *g, aq_comm_t *comm, const coll_spec_t *s) {
  if (!comm || (!comm->mpi && !comm->ngpus))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: graph collectives need an MPI communicator (aq_comm_create_mpi)",
                    s->name);
  /* Several GPUs of this process: the graph is rank 0's part, replicated
   * per GPU at instantiation (ranks.h), over one communicator only. */
  if (comm->ngpus > 1 && g->ranks_comm && g->ranks_comm != comm)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "%s: the graph's collectives already use another communicator of several GPUs, and a graph is "
                    "replicated over one",
                    s->name);
  if (comm->ngpus > 1 && s->local)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: local rank %u; a graph over several GPUs is written as rank 0's",
                    s->name, s->local);
  if (nccl_form(comm) && s->local >= comm->ngpus)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: local rank %u, but this process has %u of the communicator's",
                    s->name, s->local, comm->ngpus);
  if (!s->n || s->n > COLL_TENSORS_MAX)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %u tensors (1 to %d a collective)", s->name, s->n,
                    COLL_TENSORS_MAX);
  for (uint32_t i = 0; i < s->n + (s->out != 0); ++i) {
    uint32_t x = i < s->n ? s->tensors[i] : s->out;
    tensor_t *t = aq_graph_tensor(g, (aq_tensor_t){x});
    if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: tensor %u is not one of this graph", s->name, x);
    if (t->dtype != AQ_DTYPE_F32)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: tensor '%s' is not f32 (collectives move f32)", s->name, t->name);
  }
  aq_collective_t probe = {.kind = s->kind, .reduce = s->reduce, .root = s->root};
  return aq_comm_check(comm, &probe, s->name);
}

static aq_status_t call_code_object(aq_comm_t *comm, aq_code_object_t *out) {
  pthread_mutex_lock(&comm->keep_lock);
  aq_status_t s = comm->call_co.handle ? AQ_OK : aq_code_object_load(AQ_TENSOR_CALL_CODE_OBJECT, &comm->call_co);
  *out = comm->call_co;
  pthread_mutex_unlock(&comm->keep_lock);
  return s;
}

static coll_t *new_coll(aq_graph_t *g, aq_comm_t *comm, const coll_spec_t *s) {
  coll_t *c = aq_comm_keep(comm, sizeof(coll_t));
  if (!c) return NULL;
  c->op = (comm_op_t){.comm = comm, .c = {.kind = s->kind, .reduce = s->reduce, .root = s->root}, .name = c->name};
  snprintf(c->name, sizeof(c->name), "%s", s->name);
  c->n = s->n;
  c->first_run_only = s->first_run_only;
  c->local = s->local;
  for (uint32_t i = 0; i < s->n; ++i)
    c->count[i] = g->tensors[s->tensors[i]].bytes / sizeof(float), c->total += c->count[i];
  /* MPI takes one buffer a call; NCCL groups the calls instead */
  if (s->n > 1 && !nccl_form(comm) && !(c->pack = aq_comm_keep(comm, c->total * sizeof(float)))) return NULL;
  c->op.c.count = s->kind == AQ_COLLECTIVE_REDUCE_SCATTER ? g->tensors[s->out].bytes / sizeof(float) : c->total;
  return c;
}

/* Both tasks touch every tensor: the start one so that the tasks before
 * it that read or write them are done before MPI reads or writes them, the
 * completion one so that the tasks after it wait for the result (and no
 * buffer is reused while MPI still has it). */
static void touch(task_t *t, const coll_spec_t *s, int offsets) {
  for (uint32_t i = 0; i < s->n; ++i) {
    t->reads[t->nreads] = s->tensors[i];
    t->read_off[t->nreads++] = offsets ? (uint32_t)offsetof(aq_tensor_call_args_t, ptrs[i]) : UINT32_MAX;
  }
  uint32_t outs = s->out ? 1 : s->n;
  for (uint32_t i = 0; i < outs; ++i) {
    t->writes[t->nwrites] = s->out ? s->out : s->tensors[i];
    t->write_off[t->nwrites++] = offsets && s->out ? (uint32_t)offsetof(aq_tensor_call_args_t, ptrs[s->n]) : UINT32_MAX;
  }
}

int aq_coll_is_task(const task_t *t) { return t->kind == TASK_STREAM && t->stream_fn == coll_stream; }

/* The communicator's last start task (or stream call) is of this graph,
 * and of this local rank (a graph made where a destroyed one was has the
 * same address). */
static int chained(aq_graph_t *g, aq_comm_t *comm, uint32_t local) {
  if (comm->chain_graph != g || comm->chain_task >= g->ntasks) return 0;
  const task_t *t = &g->tasks[comm->chain_task];
  aq_tensor_call_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  int start = t->kind == TASK_KERNEL && t->code_object.handle == comm->call_co.handle && a.fn == coll_start;
  const coll_t *c = a.user;
  return (start || aq_coll_is_task(t)) && c->op.comm == comm && c->local == local;
}

/* Every rank must start its collectives in one order: each follows the
 * communicator's last one in this graph. */
static aq_status_t chain(aq_graph_t *g, aq_comm_t *comm, uint32_t local, uint32_t task) {
  pthread_mutex_lock(&comm->keep_lock);
  aq_task_t prev = {chained(g, comm, local) ? comm->chain_task + 1 : 0};
  comm->chain_graph = g, comm->chain_task = task;
  pthread_mutex_unlock(&comm->keep_lock);
  return prev.id ? aq_graph_add_edge(g, (aq_task_t){task + 1}, AQ_EDGE_AFTER_ALL, &prev, 1) : AQ_OK;
}

static const char *kind_name(aq_collective_kind_t k) {
  static const char *names[] = {"collective", "allreduce", "broadcast", "allgather", "reduce_scatter"};
  return names[(unsigned)k <= 4 ? k : 0];
}

/* The NCCL form: one stream call, pinned to the local rank's GPU. */
static aq_status_t add_stream_call(aq_graph_t *g, aq_comm_t *comm, const coll_spec_t *s, coll_t *c, uint32_t *out) {
  aq_tensor_call_args_t args = {.user = c};
  task_t call = {.kind = TASK_STREAM,
                 .stream_fn = coll_stream,
                 .kernarg_size = sizeof(args),
                 .agent = (int32_t)comm->gpu_agent[s->local],
                 .op = OP_OTHER};
  memcpy(call.kernarg, &args, sizeof(args));
  snprintf(call.kernel, sizeof(call.kernel), "nccl %s", kind_name(s->kind));
  snprintf(call.name, sizeof(call.name), "%s", s->name);
  touch(&call, s, 1);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_new_task(g, &call, &id));
  *out = id - 1;
  return chain(g, comm, s->local, id - 1);
}

aq_status_t aq_coll_add(aq_graph_t *g, aq_comm_t *comm, const coll_spec_t *s, uint32_t *out_start, uint32_t *out_done) {
  AQ_RETURN_IF_ERROR(check_spec(g, comm, s));
  coll_t *c = new_coll(g, comm, s);
  if (!c) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: no memory for the collective", s->name);
  if (comm->ngpus > 1) g->ranks_comm = comm;
  if (nccl_form(comm)) {
    uint32_t t;
    AQ_RETURN_IF_ERROR(add_stream_call(g, comm, s, c, &t));
    if (out_start) *out_start = t;
    if (out_done) *out_done = t;
    return AQ_OK;
  }
  aq_code_object_t co;
  AQ_RETURN_IF_ERROR(call_code_object(comm, &co));
  aq_tensor_call_args_t args = {.fn = coll_start, .user = c};
  task_t start = {.kind = TASK_KERNEL,
                  .code_object = co,
                  .kernarg_size = sizeof(args),
                  .shape = {{1, 1, 1}, {1, 1, 1}},
                  .agent = -1,
                  .op = OP_OTHER};
  memcpy(start.kernarg, &args, sizeof(args));
  snprintf(start.kernel, sizeof(start.kernel), "%s", AQ_KERNEL_TENSOR_CALL);
  snprintf(start.name, sizeof(start.name), "start %.56s", s->name);
  touch(&start, s, 1);
  task_t done = {.kind = TASK_HOST, .fn = coll_complete, .user = c, .agent = -1, .op = OP_OTHER};
  snprintf(done.name, sizeof(done.name), "%s", s->name);
  touch(&done, s, 0);
  uint32_t a, b;
  AQ_RETURN_IF_ERROR(aq_graph_new_task(g, &start, &a));
  AQ_RETURN_IF_ERROR(aq_graph_new_task(g, &done, &b));
  AQ_RETURN_IF_ERROR(chain(g, comm, 0, a - 1));
  if (out_start) *out_start = a - 1;
  if (out_done) *out_done = b - 1;
  return AQ_OK;
}

/* The copy's own state (its runs, its local rank), kept with the
 * communicator as the original's is. */
aq_status_t aq_coll_for_rank(task_t *t, uint32_t local) {
  aq_tensor_call_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  const coll_t *c = a.user;
  coll_t *copy = aq_comm_keep(c->op.comm, sizeof(coll_t));
  if (!copy) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "%s: no memory for local rank %u's collective", t->name, local);
  *copy = *c;
  copy->op.name = copy->name;
  copy->local = local, copy->runs = 0;
  a.user = copy;
  memcpy(t->kernarg, &a, sizeof(a));
  return AQ_OK;
}

static aq_status_t in_place(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, aq_collective_kind_t kind,
                            aq_reduce_t reduce, uint32_t root, const char *op) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: graph is NULL", op);
  tensor_t *t = aq_graph_tensor(g, x);
  char name[TASK_NAME_MAX];
  snprintf(name, sizeof(name), "%s %.40s", op + 6, t ? t->name : "?");
  coll_spec_t s = {.name = name, .kind = kind, .reduce = reduce, .root = root, .n = 1, .tensors = &x.id};
  return aq_coll_add(g, comm, &s, NULL, NULL);
}

AQ_API aq_status_t aq_op_allreduce(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, aq_reduce_t reduce) {
  return in_place(g, comm, x, AQ_COLLECTIVE_ALLREDUCE, reduce, 0, "aq_op_allreduce");
}

AQ_API aq_status_t aq_op_broadcast(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, uint32_t root) {
  return in_place(g, comm, x, AQ_COLLECTIVE_BROADCAST, AQ_REDUCE_SUM, root, "aq_op_broadcast");
}

/* allgather and reduce_scatter: a new tensor, x's first dimension times
 * (or over) the ranks. */
static aq_status_t to_new(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, aq_collective_kind_t kind, aq_reduce_t reduce,
                          aq_tensor_t *out, const char *op) {
  if (!g || !out || !comm) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: graph, comm and out are required", op);
  tensor_t *t = aq_graph_tensor(g, x);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: x is tensor %u, not one of this graph", op, x.id);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, t->dims, sizeof(dims));
  if (kind == AQ_COLLECTIVE_REDUCE_SCATTER && dims[0] % comm->size)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: '%s' has %lld rows, which %u ranks cannot share evenly", op,
                    t->name, (long long)dims[0], comm->size);
  dims[0] = kind == AQ_COLLECTIVE_ALLGATHER ? dims[0] * comm->size : dims[0] / comm->size;
  char name[TASK_NAME_MAX];
  snprintf(name, sizeof(name), "%s(%.40s)", op + 6, t->name);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, t->rank, dims, &id));
  coll_spec_t s = {.name = name, .kind = kind, .reduce = reduce, .n = 1, .tensors = &x.id, .out = id};
  AQ_RETURN_IF_ERROR(aq_coll_add(g, comm, &s, NULL, NULL));
  out->id = id;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_allgather(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, aq_tensor_t *out) {
  return to_new(g, comm, x, AQ_COLLECTIVE_ALLGATHER, AQ_REDUCE_SUM, out, "aq_op_allgather");
}

AQ_API aq_status_t aq_op_reduce_scatter(aq_graph_t *g, aq_comm_t *comm, aq_tensor_t x, aq_reduce_t reduce,
                                        aq_tensor_t *out) {
  return to_new(g, comm, x, AQ_COLLECTIVE_REDUCE_SCATTER, reduce, out, "aq_op_reduce_scatter");
}
