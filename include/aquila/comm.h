/* Communicators and collectives: scaling out over processes (MPI) and GPUs
 * (NCCL).
 *
 * A communicator is a set of ranks. Made from MPI (aq_comm_create_mpi), each
 * process is one rank: MPI carries CPU buffers and bootstraps NCCL, whose
 * unique id rank 0 broadcasts, for the process's GPU agent. Made inside one
 * process (aq_comm_create_gpus), each GPU agent is one rank, joined by NCCL.
 * Neither library is linked: libmpi.so.40 (Open MPI) and libnccl.so.2 are
 * loaded at run time, as libcuda is, so one binary runs with or without them;
 * aq_comm_backend_status says which loaded and why one did not.
 *
 * Collectives are graph ops (aq_op_allreduce, ...): on a CPU agent one task
 * starts the nonblocking MPI call and a later task completes it, so the
 * workers keep computing meanwhile; the completing task gives up after the
 * communicator's timeout and fails the run with an error naming the rank,
 * the collective and the peer that did not join (the communicator is then
 * unusable: destroy it). On a GPU agent the NCCL call goes on the agent's
 * queue stream as an agent-dispatch packet (AQ_AGENT_DISPATCH_STREAM_CALL),
 * ordered by the same barrier packets as kernels: aq_comm_enqueue.
 * aq_graph_data_parallel turns a training graph into its data-parallel
 * form with one call.
 */
#ifndef AQUILA_COMM_H_
#define AQUILA_COMM_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/code_object.h"
#include "aquila/graph.h"
#include "aquila/queue.h"
#include "aquila/signal.h"
#include "aquila/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_comm aq_comm_t;

typedef struct aq_comm_options {
  /* How long a collective may wait for its peers, in ms; 0 = AQ_COMM_TIMEOUT_MS,
   * else 300000 (first collectives include MPI's connection set-up). */
  uint64_t timeout_ms;
  /* Do not join the GPU agents through NCCL (MPI communicators only; every
   * rank passes the same). */
  int no_nccl;
} aq_comm_options_t;

/* A communicator over an MPI communicator: mpi_comm is an Open MPI MPI_Comm
 * (a pointer), or NULL for MPI_COMM_WORLD. MPI is initialized here (thread
 * level MULTIPLE) unless the program did so already (then at thread level
 * SERIALIZED at least: Aquila's workers call MPI), and finalized at exit
 * in that case. The communicator is duplicated: Aquila's messages never meet
 * the program's. Collective over the ranks (every rank calls it). */
aq_status_t aq_comm_create_mpi(void *mpi_comm, const aq_comm_options_t *options, aq_comm_t **out_comm);
/* A communicator of this process's GPU agents, one rank each
 * (ncclCommInitAll). AQ_ERROR_UNAVAILABLE without GPU agents or NCCL. */
aq_status_t aq_comm_create_gpus(const aq_comm_options_t *options, aq_comm_t **out_comm);
aq_status_t aq_comm_destroy(aq_comm_t *comm);

typedef struct aq_comm_info {
  uint32_t rank;        /* this process's first rank */
  uint32_t size;        /* ranks in all */
  uint32_t local_ranks; /* ranks in this process (GPU communicators: one per GPU) */
  int mpi;              /* carried by MPI */
  int nccl;             /* GPU agents joined by NCCL */
  int32_t gpu_agent;    /* agent index of this process's first GPU rank, -1 if none */
  uint64_t timeout_ms;
} aq_comm_info_t;
aq_status_t aq_comm_get_info(const aq_comm_t *comm, aq_comm_info_t *info);

/* Whether a collective backend ("mpi", "nccl") can be loaded: *message is ""
 * if so, else why not ("libnccl.so.2: cannot open shared object file"). */
aq_status_t aq_comm_backend_status(const char *backend, const char **message);

typedef enum aq_reduce {
  AQ_REDUCE_SUM = 0,
  AQ_REDUCE_MEAN = 1, /* the sum divided by the ranks */
} aq_reduce_t;

typedef enum aq_collective_kind {
  AQ_COLLECTIVE_ALLREDUCE = 1,
  AQ_COLLECTIVE_BROADCAST = 2,
  AQ_COLLECTIVE_ALLGATHER = 3,      /* recv holds count * size floats, rank r's at r * count */
  AQ_COLLECTIVE_REDUCE_SCATTER = 4, /* send holds count * size floats; recv gets block rank */
} aq_collective_kind_t;

/* One collective over fp32 data. count is per rank (see the kinds); send
 * may equal recv for allreduce; broadcast uses recv only. */
typedef struct aq_collective {
  aq_collective_kind_t kind;
  aq_reduce_t reduce;
  uint32_t root; /* broadcast */
  const float *send;
  float *recv;
  size_t count;
} aq_collective_t;

/* Runs one collective on host memory now, every rank of an MPI
 * communicator calling it alike (the program's own figures: a loss
 * averaged over the ranks). Sizes 0 and up. */
aq_status_t aq_comm_run(aq_comm_t *comm, const aq_collective_t *collective);

/* Puts one collective on a GPU agent's queue: an AQ_AGENT_DISPATCH_STREAM_CALL
 * packet whose NCCL call goes on the queue's stream after the packets before
 * it; completion (may be {0}) is decremented when it is done. send and recv
 * are device memory of that GPU, kept alive until then; the collective
 * struct is copied. GPU communicators: each GPU's queue gets its own call,
 * as each rank's would. */
aq_status_t aq_comm_enqueue(aq_comm_t *comm, aq_queue_t queue, const aq_collective_t *collective,
                            aq_signal_t completion);

/* ---- collectives as graph ops -------------------------------------------
 * fp32 tensors. allreduce and broadcast work in place; allgather and
 * reduce_scatter make a new activation whose first dimension is size times
 * (allgather) or a size-th (reduce_scatter, which needs it divisible) that
 * of x. Where the communicator joined this process's GPU (NCCL), each is
 * one task pinned to that GPU, whose NCCL call goes on a stream beside the
 * kernels'; the graph's kernels then run on that GPU or on CPU agents, not
 * on the process's other GPUs. Otherwise (MPI on CPU agents) each is a
 * start task and a completion task. A communicator of several GPUs of
 * this process replicates the graph per GPU: see aq_exec_local_tensor. */
aq_status_t aq_op_allreduce(aq_graph_t *graph, aq_comm_t *comm, aq_tensor_t x, aq_reduce_t reduce);
aq_status_t aq_op_broadcast(aq_graph_t *graph, aq_comm_t *comm, aq_tensor_t x, uint32_t root);
aq_status_t aq_op_allgather(aq_graph_t *graph, aq_comm_t *comm, aq_tensor_t x, aq_tensor_t *out);
aq_status_t aq_op_reduce_scatter(aq_graph_t *graph, aq_comm_t *comm, aq_tensor_t x, aq_reduce_t reduce,
                                 aq_tensor_t *out);

typedef struct aq_data_parallel_options {
  size_t bucket_bytes; /* gradient bytes a bucket gathers at most; 0 = 25 MB, as DDP */
  uint32_t root;       /* the rank whose parameters everyone starts from */
} aq_data_parallel_options_t;

/* After aq_graph_backward and before the optimizer ops: every rank trains
 * the same model on its share of each global batch. Parameters are
 * broadcast from the root at the first run (tasks put at the graph's head:
 * task handles taken before this call name other tasks afterwards);
 * gradients, in the order the backward pass finishes them, are gathered
 * into buckets whose mean all-reduce starts once the bucket's last
 * gradient is written, while the backward pass goes on (a bucket ends at
 * bucket_bytes, or where the pass goes on to an earlier layer once it
 * holds 8 MiB: a model under the cap still overlaps); an optimizer op
 * added afterwards waits for its own bucket only. A loss divided by the
 * local batch (aq_op_softmax_xent's mean) then trains as one process with
 * the global batch would. AQ_ERROR_INVALID_GRAPH before backward or after
 * an optimizer op. */
aq_status_t aq_graph_data_parallel(aq_graph_t *graph, aq_comm_t *comm, const aq_data_parallel_options_t *options);

/* Several GPUs in one process (aq_comm_create_gpus): a graph whose
 * collectives, or aq_graph_data_parallel, use such a communicator is
 * written once, as local rank 0's part, and instantiated as one replica of
 * the whole step per GPU, each rank's tasks on its GPU, joined by NCCL.
 * The graph's tensor handles name rank 0's tensors; this gives local rank
 * `rank`'s copy of `tensor` in exec (each rank's inputs are bound or
 * written on their own: a shard of the global batch each). aq_exec_write
 * to a parameter or state tensor writes every rank's copy (aq_exec_load
 * too); aq_exec_read, aq_exec_tensor_data and aq_exec_save see rank 0's,
 * so a parameter changed in place there reaches the other ranks only
 * through the first run's broadcast. Host tasks run once, and must touch
 * no tensor (their functions know rank 0's only). */
aq_status_t aq_exec_local_tensor(aq_exec_t *exec, aq_tensor_t tensor, uint32_t rank, aq_tensor_t *out_tensor);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_COMM_H_ */
