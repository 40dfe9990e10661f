/* Communicators: creation over MPI or over this process's GPU agents, and
 * collectives run at once on host memory. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/runtime.h"
#include "runtime/settings.h"
#include "runtime/status.h"

enum { DEFAULT_TIMEOUT_MS = 300000 };

struct comm_kept {
  struct comm_kept *next;
  max_align_t data[];
};

/* MPI_Init was ours: MPI_Finalize is too, at exit, unless a collective
 * failed (a dead peer would hold it forever). */
static _Atomic int we_initialized, any_broken;

static void finalize_at_exit(void) {
  int done = 0;
  if (atomic_load(&any_broken) || aq_mpi.Finalized(&done) != 0 || done) return;
  aq_mpi.Finalize();
}

static aq_status_t timeout_of(const aq_comm_options_t *o, uint64_t *out_ns) {
  uint64_t ms = o ? o->timeout_ms : 0;
  if (!ms) ms = aq_setting_u64(AQ_SET_COMM_TIMEOUT_MS);
  *out_ns = (ms ? ms : DEFAULT_TIMEOUT_MS) * 1000000ull;
  return AQ_OK;
}

/* user_out is the caller's: checked and cleared here. */
static aq_status_t new_comm(const aq_comm_options_t *o, aq_comm_t **user_out, aq_comm_t **out) {
  if (!user_out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_comm_create: out_comm is NULL");
  *user_out = NULL;
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  uint64_t timeout = 0;
  AQ_RETURN_IF_ERROR(timeout_of(o, &timeout));
  aq_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a communicator");
  c->timeout_ns = timeout;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->keep_lock, NULL);
  *out = c;
  return AQ_OK;
}

static aq_status_t init_mpi(void) {
  AQ_RETURN_IF_ERROR(aq_comm_mpi_load());
  int up = 0, provided = 0;
  aq_mpi.Initialized(&up);
  if (up) {
    /* Aquila's workers call MPI, one at a time on a communicator. */
    aq_mpi.Query_thread(&provided);
    if (provided < AQ_MPI_THREAD_SERIALIZED)
      return aq_error(AQ_ERROR_UNAVAILABLE,
                      "MPI was initialized at thread level %d; Aquila's worker threads call MPI: initialize it with "
                      "MPI_Init_thread at MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (or leave it to Aquila)",
                      provided);
    return AQ_OK;
  }
  int rc = aq_mpi.Init_thread(NULL, NULL, AQ_MPI_THREAD_MULTIPLE, &provided);
  if (rc != 0) return aq_error(AQ_ERROR_UNAVAILABLE, "MPI_Init_thread failed: %s", aq_comm_mpi_error(rc));
  if (!atomic_exchange(&we_initialized, 1)) atexit(finalize_at_exit);
  return AQ_OK;
}

/* Every rank must take the same way (NCCL or not), or the collectives
 * that follow would not match: they agree on it first. */
static aq_status_t all_agree(aq_comm_t *c, int mine, int *out_all) {
  float v = mine ? 1.0f : 0.0f;
  comm_op_t op = {
      .comm = c, .c = {.kind = AQ_COLLECTIVE_ALLREDUCE, .send = &v, .recv = &v, .count = 1}, .name = "agree on NCCL"};
  aq_comm_op_start(&op);
  AQ_RETURN_IF_ERROR(aq_comm_op_complete(&op));
  *out_all = v == (float)c->size;
  return AQ_OK;
}

/* A GPU of its own for this process: the local rank's (as Open MPI
 * numbers the processes of one machine), where there are as many GPUs as
 * processes here, or where CUDA_VISIBLE_DEVICES gives each its own (each
 * then sees one, or a few, and takes its local rank's among them). */
static int have_gpu(void) {
  const char *here = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  uint32_t ranks_here = here ? (uint32_t)atoi(here) : 1, gpus = 0;
  for (uint32_t i = 0; i < aq_agent_count(); ++i)
    gpus += aq_agent_at(i)->info.kind == AQ_AGENT_KIND_GPU && !strcmp(aq_agent_at(i)->info.driver, "cuda");
  return gpus && (ranks_here <= gpus || getenv("CUDA_VISIBLE_DEVICES"));
}

AQ_API aq_status_t aq_comm_create_mpi(void *mpi_comm, const aq_comm_options_t *options, aq_comm_t **out) {
  aq_comm_t *c;
  AQ_RETURN_IF_ERROR(new_comm(options, out, &c));
  aq_status_t s = init_mpi();
  int rc = 0, rank = 0, size = 0;
  if (s == AQ_OK) {
    MPI_Comm base = mpi_comm ? (MPI_Comm)mpi_comm : (MPI_Comm)aq_mpi.ompi_mpi_comm_world;
    rc = aq_mpi.Comm_dup(base, &c->mpi);
    if (!rc) rc = aq_mpi.Comm_set_errhandler(c->mpi, (MPI_Errhandler)aq_mpi.ompi_mpi_errors_return);
    if (!rc) rc = aq_mpi.Comm_rank(c->mpi, &rank);
    if (!rc) rc = aq_mpi.Comm_size(c->mpi, &size);
    if (rc) s = aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_comm_create_mpi: %s", aq_comm_mpi_error(rc));
  }
  c->rank = (uint32_t)rank, c->size = (uint32_t)size, c->local_ranks = 1;
  int nccl = 0;
  if (s == AQ_OK && c->size > 1 && !(options && options->no_nccl))
    s = all_agree(c, have_gpu() && aq_comm_nccl_load() == AQ_OK, &nccl);
  if (s == AQ_OK && nccl) s = aq_comm_nccl_join_mpi(c);
  if (s != AQ_OK) {
    aq_comm_destroy(c);
    return s;
  }
  *out = c;
  return AQ_OK;
}

AQ_API aq_status_t aq_comm_create_gpus(const aq_comm_options_t *options, aq_comm_t **out) {
  aq_comm_t *c;
  AQ_RETURN_IF_ERROR(new_comm(options, out, &c));
  aq_status_t s = aq_comm_nccl_load();
  if (s == AQ_OK) s = aq_comm_nccl_join_gpus(c);
  if (s != AQ_OK) {
    aq_comm_destroy(c);
    return s;
  }
  c->rank = 0, c->size = c->local_ranks = c->ngpus;
  *out = c;
  return AQ_OK;
}

AQ_API aq_status_t aq_comm_destroy(aq_comm_t *c) {
  if (!c) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_comm_destroy: comm is NULL");
  int broken = atomic_load(&c->broken);
  if (broken) atomic_store(&any_broken, 1);
  aq_comm_nccl_leave(c, broken);
  /* A communicator with a collective stuck in it cannot be freed. */
  if (c->mpi && !broken) aq_mpi.Comm_free(&c->mpi);
  for (struct comm_kept *k = c->kept, *next; k; k = next) next = k->next, free(k);
  if (c->call_co.handle) aq_code_object_unload(c->call_co);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->keep_lock);
  free(c);
  return AQ_OK;
}

void *aq_comm_keep(aq_comm_t *c, size_t bytes) {
  struct comm_kept *k = calloc(1, sizeof(*k) + bytes);
  if (!k) return NULL;
  pthread_mutex_lock(&c->keep_lock);
  k->next = c->kept;
  c->kept = k;
  pthread_mutex_unlock(&c->keep_lock);
  return k->data;
}

aq_status_t aq_comm_lib_load(comm_lib_t *l) {
  pthread_mutex_lock(&l->lock);
  if (!l->loaded) {
    void *h = dlopen(l->soname, l->dlopen_flags);
    if (!h) {
      snprintf(l->why_not, sizeof(l->why_not), "%s%s", dlerror(), l->hint);
    } else if (l->resolve(h, l->why_not, sizeof(l->why_not))) {
      dlclose(h);
    } else {
      l->loaded = 1;
    }
  }
  pthread_mutex_unlock(&l->lock);
  return l->loaded ? AQ_OK : aq_error(AQ_ERROR_UNAVAILABLE, "%s: %s", l->label, l->why_not);
}

AQ_API aq_status_t aq_comm_get_info(const aq_comm_t *c, aq_comm_info_t *info) {
  if (!c || !info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_comm_get_info: comm and info are required");
  *info = (aq_comm_info_t){.rank = c->rank,
                           .size = c->size,
                           .local_ranks = c->local_ranks,
                           .mpi = c->mpi != NULL,
                           .nccl = c->ngpus > 0,
                           .gpu_agent = c->ngpus ? (int32_t)c->gpu_agent[0] : -1,
                           .timeout_ms = c->timeout_ns / 1000000};
  return AQ_OK;
}

AQ_API aq_status_t aq_comm_backend_status(const char *backend, const char **message) {
  if (!backend || !message)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_comm_backend_status: backend and message are required");
  if (!strcmp(backend, "mpi")) {
    aq_comm_mpi_load();
    *message = aq_comm_mpi_status();
  } else if (!strcmp(backend, "nccl")) {
    aq_comm_nccl_load();
    *message = aq_comm_nccl_status();
  } else {
    return aq_error(AQ_ERROR_NOT_FOUND, "no collective backend called '%s' (mpi, nccl)", backend);
  }
  return AQ_OK;
}

aq_status_t aq_comm_check(const aq_comm_t *c, const aq_collective_t *x, const char *what) {
  if (!c || !x) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: comm and collective are required", what);
  if (x->kind < AQ_COLLECTIVE_ALLREDUCE || x->kind > AQ_COLLECTIVE_REDUCE_SCATTER)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: unknown collective kind %d", what, x->kind);
  if (x->reduce != AQ_REDUCE_SUM && x->reduce != AQ_REDUCE_MEAN)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: unknown reduction %d (sum or mean)", what, x->reduce);
  if (x->kind == AQ_COLLECTIVE_BROADCAST && x->root >= c->size)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: broadcast root %u, but the communicator has %u ranks", what,
                    x->root, c->size);
  if (x->count && (!x->recv || (x->kind != AQ_COLLECTIVE_BROADCAST && !x->send)))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %zu floats but no buffer", what, x->count);
  if (x->send == x->recv && x->count && x->kind != AQ_COLLECTIVE_ALLREDUCE && x->kind != AQ_COLLECTIVE_BROADCAST)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: allgather and reduce_scatter need send and recv apart", what);
  return AQ_OK;
}

AQ_API aq_status_t aq_comm_run(aq_comm_t *c, const aq_collective_t *x) {
  AQ_RETURN_IF_ERROR(aq_comm_check(c, x, "aq_comm_run"));
  if (!c->mpi)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "aq_comm_run: a GPU communicator's collectives go on queues (aq_comm_enqueue)");
  comm_op_t op = {.comm = c, .c = *x, .name = "aq_comm_run"};
  aq_comm_op_start(&op);
  return aq_comm_op_complete(&op);
}

AQ_API aq_status_t aq_comm_enqueue(aq_comm_t *c, aq_queue_t queue, const aq_collective_t *x, aq_signal_t completion) {
  AQ_RETURN_IF_ERROR(aq_comm_check(c, x, "aq_comm_enqueue"));
  if (!c->ngpus)
    return aq_error(AQ_ERROR_UNAVAILABLE, "aq_comm_enqueue: the communicator has no GPU agents joined by NCCL (%s)",
                    *aq_comm_nccl_status() ? aq_comm_nccl_status() : "no GPU agent");
  return aq_comm_nccl_enqueue(c, queue, x, completion);
}
