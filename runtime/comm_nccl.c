/* NCCL, loaded at run time: collectives between GPU agents, each call put
 * on a GPU queue's stream by that queue's packet processor (an
 * AQ_AGENT_DISPATCH_STREAM_CALL packet), so it is ordered by the queue's
 * barrier packets like a kernel. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/drivers/cuda.h"
#include "runtime/queue.h"
#include "runtime/status.h"
#include "runtime/trace.h"

nccl_api_t aq_nccl;
static const char *resolve(void *h, char *why, size_t size) {
  const char *missing = NULL;
#define AQ_NCCL_LOAD(ret, name, params) \
  if (!missing && !(*(void **)&aq_nccl.name = dlsym(h, "nccl" #name))) missing = "nccl" #name;
  AQ_NCCL_FUNCTIONS(AQ_NCCL_LOAD)
#undef AQ_NCCL_LOAD
  int version = 0;
  if (missing)
    snprintf(why, size, "libnccl.so.2 lacks %s", missing);
  else if (aq_nccl.GetVersion(&version) != NCCL_SUCCESS || version < 21000)
    snprintf(why, size, "libnccl.so.2 is version %d; 2.10 or newer needed (ncclAvg)", version);
  else
    return NULL;
  return why;
}

static comm_lib_t lib = COMM_LIB("libnccl.so.2", "NCCL", "", RTLD_NOW | RTLD_LOCAL, resolve);

aq_status_t aq_comm_nccl_load(void) { return aq_comm_lib_load(&lib); }
const char *aq_comm_nccl_status(void) { return lib.loaded ? "" : lib.why_not; }

static aq_status_t nccl_failed(ncclResult_t r, const char *what) {
  return aq_error(AQ_ERROR_IO, "%s: NCCL error %d: %s", what, r, aq_nccl.GetErrorString(r));
}

/* The cuda driver's GPU agents, in agent order. */
static uint32_t cuda_agents(uint32_t *index, uint32_t cap) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < aq_agent_count() && n < cap; ++i) {
    aq_agent_impl_t *a = aq_agent_at(i);
    if (a->info.kind == AQ_AGENT_KIND_GPU && !strcmp(a->info.driver, "cuda")) index[n++] = i;
  }
  return n;
}

static cuda_agent_t *gpu(uint32_t agent) { return aq_agent_at(agent)->driver_data; }

/* One GPU per process: the local rank's (Open MPI says which), of the ones
 * this process sees. Rank 0's unique id reaches the others over MPI. */
aq_status_t aq_comm_nccl_join_mpi(aq_comm_t *c) {
  uint32_t agents[COMM_GPUS_MAX], n = cuda_agents(agents, COMM_GPUS_MAX);
  if (!n) return aq_error(AQ_ERROR_UNAVAILABLE, "NCCL: no GPU agent in this process");
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  uint32_t pick = (uint32_t)(local ? atoi(local) : 0) % n; /* one GPU a process: see have_gpu (comm.c) */
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (c->rank == 0) {
    ncclResult_t r = aq_nccl.GetUniqueId(&id);
    if (r != NCCL_SUCCESS) return nccl_failed(r, "ncclGetUniqueId");
  }
  comm_op_t op = {.comm = c,
                  .c = {.kind = AQ_COLLECTIVE_BROADCAST, .recv = (float *)(void *)&id, .count = sizeof(id) / 4},
                  .name = "NCCL unique id"};
  aq_comm_op_start(&op);
  AQ_RETURN_IF_ERROR(aq_comm_op_complete(&op));
  AQ_RETURN_IF_ERROR(aq_cuda_bind(gpu(agents[pick])));
  ncclResult_t r = aq_nccl.CommInitRank(&c->nccl[0], (int)c->size, id, (int)c->rank);
  if (r != NCCL_SUCCESS) return nccl_failed(r, "ncclCommInitRank");
  c->gpu_agent[0] = agents[pick];
  c->ngpus = 1;
  return aq_comm_watch_start(c);
}

aq_status_t aq_comm_nccl_join_gpus(aq_comm_t *c) {
  uint32_t agents[COMM_GPUS_MAX], n = cuda_agents(agents, COMM_GPUS_MAX);
  if (!n) return aq_error(AQ_ERROR_UNAVAILABLE, "aq_comm_create_gpus: this process has no CUDA GPU agent");
  int devices[COMM_GPUS_MAX];
  for (uint32_t i = 0; i < n; ++i) devices[i] = gpu(agents[i])->device, c->gpu_agent[i] = agents[i];
  AQ_RETURN_IF_ERROR(aq_cuda_bind(gpu(agents[0])));
  ncclResult_t r = aq_nccl.CommInitAll(c->nccl, (int)n, devices);
  if (r != NCCL_SUCCESS) return nccl_failed(r, "ncclCommInitAll");
  c->ngpus = n;
  return aq_comm_watch_start(c);
}

void aq_comm_nccl_leave(aq_comm_t *c, int abort) {
  aq_comm_watch_stop(c);
  for (uint32_t i = 0; i < c->ngpus; ++i)
    if (c->nccl[i]) (abort ? aq_nccl.CommAbort : aq_nccl.CommDestroy)(c->nccl[i]);
  c->ngpus = 0;
}

/* The packet's reserved0: kind (4 bits), reduction (4), local rank (8),
 * root (16). */
static uint32_t pack(const aq_collective_t *x, uint32_t local) {
  return (uint32_t)x->kind | (uint32_t)x->reduce << 4 | local << 8 | x->root << 16;
}

static ncclResult_t call(ncclComm_t comm, const aq_collective_t *x, void *stream) {
  int red = x->reduce == AQ_REDUCE_MEAN ? NCCL_AVG : NCCL_SUM;
  switch (x->kind) {
    case AQ_COLLECTIVE_ALLREDUCE: return aq_nccl.AllReduce(x->send, x->recv, x->count, NCCL_FLOAT32, red, comm, stream);
    case AQ_COLLECTIVE_BROADCAST:
      return aq_nccl.Broadcast(x->recv, x->recv, x->count, NCCL_FLOAT32, (int)x->root, comm, stream);
    case AQ_COLLECTIVE_ALLGATHER: return aq_nccl.AllGather(x->send, x->recv, x->count, NCCL_FLOAT32, comm, stream);
    default: return aq_nccl.ReduceScatter(x->send, x->recv, x->count, NCCL_FLOAT32, red, comm, stream);
  }
}

/* n calls of one kind (a bucket's tensors), as one NCCL group: one launch. */
static ncclResult_t call_group(ncclComm_t comm, const aq_collective_t *x, uint32_t n, void *stream) {
  if (n == 1) return call(comm, x, stream);
  ncclResult_t r = aq_nccl.GroupStart();
  for (uint32_t i = 0; i < n && (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS); ++i) r = call(comm, &x[i], stream);
  ncclResult_t end = aq_nccl.GroupEnd();
  return r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS ? end : r;
}

static void trace_call(aq_comm_t *c, uint32_t local, const aq_collective_t *x, uint64_t bytes, uint64_t t0) {
  static const char *names[] = {"", "allreduce", "broadcast", "allgather", "reduce_scatter"};
  char name[96];
  snprintf(name, sizeof(name), "nccl %s: %llu B x %u ranks", names[x->kind <= 4 ? x->kind : 0],
           (unsigned long long)bytes, c->size);
  aq_trace_event_t ev = {.name = name,
                         .category = "collective",
                         .ready_ns = t0,
                         .start_ns = t0,
                         .end_ns = aq_now_ns(),
                         .agent = c->gpu_agent[local],
                         .queue = UINT32_MAX,
                         .bytes = bytes};
  aq_trace_record(&ev);
}

aq_status_t aq_comm_nccl_stream(aq_comm_t *c, uint32_t local, const aq_collective_t *x, uint32_t n, void *stream,
                             uint64_t completion) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < n; ++i) bytes += x[i].count * 4;
  aq_comm_watch_lock(c, local);
  if (atomic_load(&c->broken) || !c->nccl[local]) {
    aq_comm_watch_unlock(c, local);
    return aq_error(AQ_ERROR_UNAVAILABLE, "the communicator failed earlier: %s", c->broken_why);
  }
  uint64_t t0 = aq_trace_on() ? aq_now_ns() : 0;
  ncclResult_t r = call_group(c->nccl[local], x, n, stream);
  if (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) aq_comm_watch_issued(c, local, stream, completion, x->kind, bytes);
  aq_comm_watch_unlock(c, local);
  if (r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) {
    char msg[sizeof(c->broken_why)];
    snprintf(msg, sizeof(msg), "rank %u of %u: NCCL collective %u (%llu bytes): error %d: %s", c->rank + local,
             c->size, x->kind, (unsigned long long)bytes, r, aq_nccl.GetErrorString(r));
    if (!atomic_exchange(&c->broken, 1)) snprintf(c->broken_why, sizeof(c->broken_why), "%s", msg);
    return aq_error(AQ_ERROR_IO, "%s", msg);
  }
  if (t0) trace_call(c, local, x, bytes, t0);
  return AQ_OK;
}

/* The packet processor's call for aq_comm_enqueue: the collective onto the
 * queue's stream. */
static aq_status_t stream_collective(const hsa_agent_dispatch_packet_t *p, void *stream) {
  aq_collective_t x = {.kind = (aq_collective_kind_t)(p->reserved0 & 15),
                       .reduce = (aq_reduce_t)((p->reserved0 >> 4) & 15),
                       .root = p->reserved0 >> 16,
                       .send = (const float *)(uintptr_t)p->arg[1],
                       .recv = (float *)(uintptr_t)p->arg[2],
                       .count = p->arg[3]};
  return aq_comm_nccl_stream(p->return_address, (p->reserved0 >> 8) & 255, &x, 1, stream, p->completion_signal.handle);
}

aq_status_t aq_comm_nccl_enqueue(aq_comm_t *c, aq_queue_t queue, const aq_collective_t *x, aq_signal_t completion) {
  aq_queue_impl_t *q;
  AQ_RETURN_IF_ERROR(aq_queue_resolve(queue, &q));
  uint32_t local = 0;
  while (local < c->ngpus && c->gpu_agent[local] != q->agent->info.index) ++local;
  if (local == c->ngpus)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "aq_comm_enqueue: queue %u is on agent %s, which is no rank of this communicator", q->id,
                    q->agent->info.name);
  hsa_agent_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.type = AQ_AGENT_DISPATCH_STREAM_CALL;
  p.reserved0 = pack(x, local);
  p.return_address = c;
  p.arg[0] = (uint64_t)(uintptr_t)stream_collective;
  p.arg[1] = (uint64_t)(uintptr_t)x->send;
  p.arg[2] = (uint64_t)(uintptr_t)x->recv;
  p.arg[3] = x->count;
  p.completion_signal.handle = completion.handle;
  return aq_queue_submit(queue, &p, UINT64_MAX, NULL);
}
