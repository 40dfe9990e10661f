/* --data-parallel: this process as one rank of an MPI job (mpirun -np N
 * train_fashion --data-parallel ...), training on its shard of every global
 * batch: the graph is made data-parallel (aq_graph_data_parallel), and rank
 * 0 alone prints and writes the metrics. Started alone on a machine with
 * several GPU agents, the process's GPUs are the ranks (a replica of the
 * step each, aq_comm_create_gpus); else it is one rank. */
#ifndef AQ_EXAMPLES_PARALLEL_H_
#define AQ_EXAMPLES_PARALLEL_H_

#include <stdint.h>

#include "aquila/aquila.h"

typedef struct parallel {
  aq_comm_t *comm;
  uint32_t rank, ranks;
} parallel_t;

/* Joins the job; prints why not and returns non-zero on failure. The
 * gradients' all-reduces go through NCCL on each rank's GPU unless
 * kernel_agent_kinds (the --placement) keeps kernels off GPUs: then they
 * go through MPI from host memory, where the CPU agents computed them. Ranks
 * other than 0 print nothing on stdout from here on (errors still go to
 * stderr, prefixed with their rank by mpirun's --tag-output if asked). */
int parallel_start(parallel_t *p, uint32_t kernel_agent_kinds);
void parallel_stop(parallel_t *p);

#endif
