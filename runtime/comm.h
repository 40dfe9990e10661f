/* Communicators inside the runtime: the MPI and NCCL entry points, loaded
 * at run time (each listed once: the table and its loader are generated
 * from the list, as IREE's dynamic_symbol_tables.h does), and the
 * start / complete halves of a collective that graph tasks call. */
#ifndef AQ_RUNTIME_COMM_H_
#define AQ_RUNTIME_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "aquila/code_object.h"
#include "aquila/comm.h"
#include "aquila/runtime.h"

/* Open MPI's handles are pointers to its structs, its predefined ones
 * (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM) the addresses of exported globals:
 * declared here so that no mpi.h is needed to build. */
typedef struct ompi_communicator_t *MPI_Comm;
typedef struct ompi_datatype_t *MPI_Datatype;
typedef struct ompi_op_t *MPI_Op;
typedef struct ompi_request_t *MPI_Request;
typedef struct ompi_errhandler_t *MPI_Errhandler;
#define AQ_MPI_IN_PLACE ((void *)1)
#define AQ_MPI_THREAD_SERIALIZED 2
#define AQ_MPI_THREAD_MULTIPLE 3

/* X(return type, name, parameters): libmpi's MPI_<name>. */
#define AQ_MPI_FUNCTIONS(X)                                                                                 \
  X(int, Initialized, (int *))                                                                              \
  X(int, Finalized, (int *))                                                                                \
  X(int, Init_thread, (int *, char ***, int, int *))                                                        \
  X(int, Finalize, (void))                                                                                  \
  X(int, Query_thread, (int *))                                                                             \
  X(int, Comm_rank, (MPI_Comm, int *))                                                                      \
  X(int, Comm_size, (MPI_Comm, int *))                                                                      \
  X(int, Comm_dup, (MPI_Comm, MPI_Comm *))                                                                  \
  X(int, Comm_free, (MPI_Comm *))                                                                           \
  X(int, Comm_set_errhandler, (MPI_Comm, MPI_Errhandler))                                                   \
  X(int, Error_string, (int, char *, int *))                                                                \
  X(int, Iallreduce, (const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *))            \
  X(int, Ibcast, (void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *))                                 \
  X(int, Iallgather, (const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *)) \
  X(int, Ireduce_scatter_block, (const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *)) \
  X(int, Test, (MPI_Request *, int *, void *))

/* X(name): Open MPI's exported predefined objects. */
#define AQ_MPI_OBJECTS(X) \
  X(ompi_mpi_comm_world) X(ompi_mpi_float) X(ompi_mpi_op_sum) X(ompi_mpi_errors_return)

typedef struct mpi_api {
#define AQ_MPI_FIELD(ret, name, params) ret(*name) params;
  AQ_MPI_FUNCTIONS(AQ_MPI_FIELD)
#undef AQ_MPI_FIELD
#define AQ_MPI_OBJECT(name) void *name;
  AQ_MPI_OBJECTS(AQ_MPI_OBJECT)
#undef AQ_MPI_OBJECT
} mpi_api_t;

/* NCCL's types, as nccl.h has them (it needs the CUDA runtime's headers). */
typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7, NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_AVG = 4 };

/* X(return type, name, parameters): libnccl's nccl<name>. */
#define AQ_NCCL_FUNCTIONS(X)                                                               \
  X(ncclResult_t, GetVersion, (int *))                                                     \
  X(ncclResult_t, GroupStart, (void))                                                      \
  X(ncclResult_t, GroupEnd, (void))                                                        \
  X(ncclResult_t, GetUniqueId, (ncclUniqueId *))                                           \
  X(ncclResult_t, CommInitRank, (ncclComm_t *, int, ncclUniqueId, int))                    \
  X(ncclResult_t, CommInitAll, (ncclComm_t *, int, const int *))                           \
  X(ncclResult_t, CommDestroy, (ncclComm_t))                                               \
  X(ncclResult_t, CommAbort, (ncclComm_t))                                                 \
  X(ncclResult_t, CommGetAsyncError, (ncclComm_t, ncclResult_t *))                         \
  X(const char *, GetErrorString, (ncclResult_t))                                          \
  X(ncclResult_t, AllReduce, (const void *, void *, size_t, int, int, ncclComm_t, void *)) \
  X(ncclResult_t, Broadcast, (const void *, void *, size_t, int, int, ncclComm_t, void *)) \
  X(ncclResult_t, AllGather, (const void *, void *, size_t, int, ncclComm_t, void *))      \
  X(ncclResult_t, ReduceScatter, (const void *, void *, size_t, int, int, ncclComm_t, void *))

typedef struct nccl_api {
#define AQ_NCCL_FIELD(ret, name, params) ret(*name) params;
  AQ_NCCL_FUNCTIONS(AQ_NCCL_FIELD)
#undef AQ_NCCL_FIELD
} nccl_api_t;

extern mpi_api_t aq_mpi;
extern nccl_api_t aq_nccl;

/* A library loaded once, at its first use. */
typedef struct comm_lib {
  const char *soname, *label, *hint; /* hint: how to install it */
  int dlopen_flags;
  /* Fills the entry-point table from h: NULL, or why h cannot serve. */
  const char *(*resolve)(void *h, char *why, size_t size);
  pthread_mutex_t lock;
  int loaded;
  char why_not[256];
} comm_lib_t;
aq_status_t aq_comm_lib_load(comm_lib_t *lib);
#define COMM_LIB(soname, label, hint, flags, resolve) \
  {soname, label, hint, flags, resolve, PTHREAD_MUTEX_INITIALIZER, 0, "not loaded yet"}

/* Load the library once; AQ_OK, or AQ_ERROR_UNAVAILABLE saying why. */
aq_status_t aq_comm_mpi_load(void);
aq_status_t aq_comm_nccl_load(void);
/* "" once loaded, else why not (after a load was tried). */
const char *aq_comm_mpi_status(void);
const char *aq_comm_nccl_status(void);
/* libmpi's message for an error code. */
const char *aq_comm_mpi_error(int code);

enum { COMM_GPUS_MAX = 16 };

struct aq_comm {
  MPI_Comm mpi; /* NULL: a GPU communicator of one process */
  uint32_t rank, size, local_ranks;
  uint64_t timeout_ns;
  /* NCCL: one communicator per GPU agent this process joins */
  uint32_t ngpus;
  uint32_t gpu_agent[COMM_GPUS_MAX]; /* agent index of each local rank */
  ncclComm_t nccl[COMM_GPUS_MAX]; /* NULL once aborted */
  struct comm_watch *watch;       /* comm_watch.c */
  /* MPI calls from several workers at once go one at a time */
  pthread_mutex_t lock;
  /* set by the first collective that timed out or failed: every later
   * one fails at once with this message */
  _Atomic int broken;
  char broken_why[256];
  _Atomic uint64_t collectives; /* started so far: names them in errors */
  /* graph ops on this communicator: their tasks' state, and the code
   * object of their start kernels; freed with the communicator */
  pthread_mutex_t keep_lock;
  struct comm_kept *kept;
  aq_code_object_t call_co;
  /* MPI wants every rank to start collectives in one order: a graph's
   * start tasks run one after another (the last one so far, by graph) */
  const void *chain_graph;
  uint32_t chain_task;
};

/* Zeroed memory that lives as long as the communicator. */
void *aq_comm_keep(aq_comm_t *comm, size_t bytes);

/* A collective in flight: what graph tasks start and complete. */
typedef struct comm_op {
  aq_comm_t *comm;
  aq_collective_t c;
  const char *name; /* for errors and traces */
  MPI_Request request;
  int active;
  uint64_t started_ns;
  aq_status_t start_error; /* reported by the completion */
  char start_why[200];
} comm_op_t;

/* Starts op->c (MPI, nonblocking). A failure is kept in op and reported by
 * aq_comm_op_complete, so the starter (a kernel) never fails. */
void aq_comm_op_start(comm_op_t *op);
/* Drives op to its end, up to the communicator's timeout. */
aq_status_t aq_comm_op_complete(comm_op_t *op);
/* Checks a collective's arguments against comm (sizes, root, kind). */
aq_status_t aq_comm_check(const aq_comm_t *comm, const aq_collective_t *c, const char *what);

/* NCCL halves (comm_nccl.c). */
aq_status_t aq_comm_nccl_join_mpi(aq_comm_t *comm);
aq_status_t aq_comm_nccl_join_gpus(aq_comm_t *comm);
void aq_comm_nccl_leave(aq_comm_t *comm, int abort);

/* The NCCL watchdog (comm_watch.c): started once the NCCL communicators
 * exist, stopped before they go. A local rank's calls go between lock and
 * unlock (the abort takes the same lock); issued records one that went on
 * the stream, with its completion signal (0: none). */
aq_status_t aq_comm_watch_start(aq_comm_t *comm);
void aq_comm_watch_stop(aq_comm_t *comm);
void aq_comm_watch_lock(aq_comm_t *comm, uint32_t local);
void aq_comm_watch_unlock(aq_comm_t *comm, uint32_t local);
void aq_comm_watch_issued(aq_comm_t *comm, uint32_t local, void *stream, uint64_t completion, uint32_t kind,
                       uint64_t bytes);
aq_status_t aq_comm_nccl_enqueue(aq_comm_t *comm, aq_queue_t queue, const aq_collective_t *c, aq_signal_t completion);
/* Called on a GPU queue's packet processor (a stream call): n collectives
 * of one kind of local rank `local` onto its stream, as one NCCL group (a
 * bucket's tensors: one launch), watched as one with its completion. */
aq_status_t aq_comm_nccl_stream(aq_comm_t *comm, uint32_t local, const aq_collective_t *x, uint32_t n, void *stream,
                             uint64_t completion);

#endif /* AQ_RUNTIME_COMM_H_ */
