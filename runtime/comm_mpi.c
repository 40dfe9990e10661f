/* MPI, loaded at run time: collectives over CPU buffers between processes.
 * Each collective is started nonblocking and driven to its end by MPI_Test
 * with a deadline, so a peer that died or stalled costs the timeout, not a
 * hang. */
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"
#include "runtime/status.h"
#include "runtime/trace.h"
#include "runtime/wake.h"

mpi_api_t aq_mpi;

static const char *resolve(void *h, char *why, size_t size) {
  const char *missing = NULL;
#define AQ_MPI_LOAD(ret, name, params) \
  if (!missing && !(*(void **)&aq_mpi.name = dlsym(h, "MPI_" #name))) missing = "MPI_" #name;
  AQ_MPI_FUNCTIONS(AQ_MPI_LOAD)
#undef AQ_MPI_LOAD
#define AQ_MPI_OBJECT_LOAD(name) \
  if (!missing && !(aq_mpi.name = dlsym(h, #name))) missing = #name;
  AQ_MPI_OBJECTS(AQ_MPI_OBJECT_LOAD)
#undef AQ_MPI_OBJECT_LOAD
  if (!missing) return NULL;
  snprintf(why, size, "libmpi.so.40 lacks %s (not Open MPI 4 or newer)", missing);
  return why;
}

/* RTLD_GLOBAL: Open MPI's components, which it dlopens in turn, find
 * libmpi's symbols only in the global scope. */
static comm_lib_t lib = COMM_LIB("libmpi.so.40", "MPI", " (Open MPI: apt-get install openmpi-bin)",
                                 RTLD_NOW | RTLD_GLOBAL, resolve);

aq_status_t aq_comm_mpi_load(void) { return aq_comm_lib_load(&lib); }
const char *aq_comm_mpi_status(void) { return lib.loaded ? "" : lib.why_not; }

const char *aq_comm_mpi_error(int code) {
  static _Thread_local char buf[256];
  int len = 0;
  if (!aq_mpi.Error_string || aq_mpi.Error_string(code, buf, &len) != 0)
    snprintf(buf, sizeof(buf), "MPI error %d", code);
  return buf;
}

static const char *kind_name(aq_collective_kind_t k) {
  switch (k) {
    case AQ_COLLECTIVE_ALLREDUCE: return "allreduce";
    case AQ_COLLECTIVE_BROADCAST: return "broadcast";
    case AQ_COLLECTIVE_ALLGATHER: return "allgather";
    case AQ_COLLECTIVE_REDUCE_SCATTER: return "reduce_scatter";
  }
  return "collective";
}

/* Floats the collective moves per rank, in the largest MPI count. */
static aq_status_t mpi_count(const comm_op_t *op, int *out) {
  if (op->c.count > (size_t)0x7fffffff)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s '%s': %zu floats, more than one MPI call takes",
                    kind_name(op->c.kind), op->name, op->c.count);
  *out = (int)op->c.count;
  return AQ_OK;
}

static int post(comm_op_t *op, int n) {
  aq_comm_t *c = op->comm;
  MPI_Datatype f = (MPI_Datatype)aq_mpi.ompi_mpi_float;
  MPI_Op sum = (MPI_Op)aq_mpi.ompi_mpi_op_sum;
  const void *send = op->c.send == op->c.recv ? AQ_MPI_IN_PLACE : (const void *)op->c.send;
  switch (op->c.kind) {
    case AQ_COLLECTIVE_ALLREDUCE: return aq_mpi.Iallreduce(send, op->c.recv, n, f, sum, c->mpi, &op->request);
    case AQ_COLLECTIVE_BROADCAST: return aq_mpi.Ibcast(op->c.recv, n, f, (int)op->c.root, c->mpi, &op->request);
    case AQ_COLLECTIVE_ALLGATHER: return aq_mpi.Iallgather(send, n, f, op->c.recv, n, f, c->mpi, &op->request);
    case AQ_COLLECTIVE_REDUCE_SCATTER:
      return aq_mpi.Ireduce_scatter_block(send, op->c.recv, n, f, sum, c->mpi, &op->request);
  }
  return -1;
}

void aq_comm_op_start(comm_op_t *op) {
  aq_comm_t *c = op->comm;
  op->active = 0;
  op->start_error = AQ_OK;
  op->started_ns = aq_now_ns();
  if (atomic_load(&c->broken)) {
    op->start_error = AQ_ERROR_UNAVAILABLE;
    snprintf(op->start_why, sizeof(op->start_why), "the communicator failed earlier: %s", c->broken_why);
    return;
  }
  int n = 0;
  if (mpi_count(op, &n) != AQ_OK) {
    op->start_error = AQ_ERROR_INVALID_ARGUMENT;
    snprintf(op->start_why, sizeof(op->start_why), "%s", aq_last_error());
    return;
  }
  atomic_fetch_add(&c->collectives, 1);
  pthread_mutex_lock(&c->lock);
  int rc = post(op, n);
  pthread_mutex_unlock(&c->lock);
  if (rc != 0) {
    op->start_error = AQ_ERROR_IO;
    snprintf(op->start_why, sizeof(op->start_why), "%s", aq_comm_mpi_error(rc));
    return;
  }
  op->active = 1;
}

/* The peers a collective waits for, for its error: of two ranks the other
 * one; of more, MPI cannot tell which one is missing. */
static void peers(const aq_comm_t *c, char *buf, size_t size) {
  if (c->size == 2)
    snprintf(buf, size, "rank %u", 1 - c->rank);
  else
    snprintf(buf, size, "one of the other %u ranks", c->size - 1);
}

static aq_status_t fail(comm_op_t *op, aq_status_t s, const char *why) {
  aq_comm_t *c = op->comm;
  size_t bytes = op->c.count * sizeof(float);
  char msg[sizeof(c->broken_why)];
  snprintf(msg, sizeof(msg), "rank %u of %u: %s (%s of %zu bytes): %s", c->rank, c->size, op->name,
           kind_name(op->c.kind), bytes, why);
  if (!atomic_exchange(&c->broken, 1)) snprintf(c->broken_why, sizeof(c->broken_why), "%s", msg);
  return aq_error(s, "%s", msg);
}

static void record(const comm_op_t *op, uint64_t end) {
  if (!aq_trace_on()) return;
  char name[96];
  snprintf(name, sizeof(name), "%s: %zu B x %u ranks", op->name, op->c.count * sizeof(float), op->comm->size);
  aq_trace_event_t ev = {.name = name,
                         .category = "collective",
                         .ready_ns = op->started_ns,
                         .start_ns = op->started_ns,
                         .end_ns = end,
                         .queue = UINT32_MAX,
                         .bytes = op->c.count * sizeof(float)};
  aq_trace_record(&ev);
}

/* MPI progresses only inside its calls, so the waiter keeps calling: at
 * first yielding the core between looks (a collective's fragments go back
 * and forth many times, and a sleep's wake-up on a loaded machine takes
 * longer than the transfer), then sleeping longer and longer, up to
 * NAP_MAX_NS, while the peers are late. */
enum { YIELD_NS = 200000, NAP_MAX_NS = 100000 };

static void pause_between_looks(uint64_t waited_ns, long *nap_ns) {
  if (waited_ns < YIELD_NS) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, *nap_ns};
  nanosleep(&ts, NULL);
  if (*nap_ns < NAP_MAX_NS) *nap_ns *= 2;
}

static aq_status_t timed_out(comm_op_t *op) {
  aq_comm_t *c = op->comm;
  char who[64], why[160];
  peers(c, who, sizeof(who));
  snprintf(why, sizeof(why), "no answer after %.1f s: %s did not join (dead or stalled)", (double)c->timeout_ns / 1e9,
           who);
  op->active = 0; /* an MPI collective cannot be cancelled: the communicator is lost */
  return fail(op, AQ_ERROR_TIMEOUT, why);
}

aq_status_t aq_comm_op_complete(comm_op_t *op) {
  aq_comm_t *c = op->comm;
  if (op->start_error != AQ_OK) return fail(op, op->start_error, op->start_why);
  if (!op->active) return AQ_OK;
  uint64_t waiting = aq_now_ns(), deadline = op->started_ns + c->timeout_ns;
  long nap_ns = 1000;
  for (;;) {
    int done = 0;
    pthread_mutex_lock(&c->lock);
    int rc = aq_mpi.Test(&op->request, &done, NULL);
    pthread_mutex_unlock(&c->lock);
    if (rc != 0) {
      op->active = 0;
      return fail(op, AQ_ERROR_IO, aq_comm_mpi_error(rc));
    }
    if (done) break;
    uint64_t now = aq_now_ns();
    if (now >= deadline) return timed_out(op);
    pause_between_looks(now - waiting, &nap_ns);
  }
  op->active = 0;
  int reduces = op->c.kind == AQ_COLLECTIVE_ALLREDUCE || op->c.kind == AQ_COLLECTIVE_REDUCE_SCATTER;
  if (reduces && op->c.reduce == AQ_REDUCE_MEAN) {
    float scale = 1.0f / (float)c->size;
    for (size_t i = 0; i < op->c.count; ++i) op->c.recv[i] *= scale;
  }
  record(op, aq_now_ns());
  return AQ_OK;
}
