/* Collectives in a task graph. Through MPI: a start task (a kernel of
 * collectives-cpu.so, which receives the tensors' addresses) that starts
 * the nonblocking MPI call, and a completion task (a host call) that drives
 * it to its end or to the communicator's timeout. Through NCCL (the
 * communicator joined this process's GPUs): one stream call (TASK_STREAM)
 * on the GPU lane of the local rank. ops_collective.c makes them for the
 * aq_op_* calls and for aq_graph_data_parallel's buckets. */
#ifndef AQ_SCHEDULER_COLLECTIVE_H_
#define AQ_SCHEDULER_COLLECTIVE_H_

#include "aquila/comm.h"
#include "scheduler/graph_internal.h"

enum { COLL_TENSORS_MAX = 14 };

typedef struct coll_spec {
  const char *name;
  aq_collective_kind_t kind;
  aq_reduce_t reduce;
  uint32_t root;
  /* allreduce, broadcast: the tensors it works on in place (more than one:
   * packed into one buffer, one call for all); allgather, reduce_scatter:
   * one input, and out */
  uint32_t n;
  const uint32_t *tensors;
  uint32_t out;
  int first_run_only; /* later runs skip it (the parameters' first broadcast) */
  uint32_t local;     /* NCCL: the local rank (of comm's GPUs in this process) that runs it */
} coll_spec_t;

/* Appends the pair (or the stream call); *out_start and *out_done (may be
 * NULL) get their task indices (the stream call's both). */
aq_status_t aq_coll_add(aq_graph_t *g, aq_comm_t *comm, const coll_spec_t *spec, uint32_t *out_start, uint32_t *out_done);

#endif
