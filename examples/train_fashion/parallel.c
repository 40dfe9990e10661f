/* --data-parallel (parallel.h). */
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>

/* Started alone (not by mpirun) with several GPU agents allowed: they are
 * the ranks, a replica of the step each. NULL where not. */
static aq_comm_t *gpus_of_this_process(uint32_t kernel_agent_kinds) {
  aq_comm_t *c = NULL;
  aq_comm_info_t info;
  if (getenv("OMPI_COMM_WORLD_SIZE") || (kernel_agent_kinds && !(kernel_agent_kinds & (1u << AQ_AGENT_KIND_GPU))) ||
      aq_comm_create_gpus(NULL, &c) != AQ_OK)
    return NULL;
  if (aq_comm_get_info(c, &info) == AQ_OK && info.local_ranks > 1) return c;
  aq_comm_destroy(c);
  return NULL;
}

int parallel_start(parallel_t *p, uint32_t kernel_agent_kinds) {
  *p = (parallel_t){.ranks = 1};
  aq_comm_options_t o = {.no_nccl = kernel_agent_kinds && !(kernel_agent_kinds & (1u << AQ_AGENT_KIND_GPU))};
  if (!(p->comm = gpus_of_this_process(kernel_agent_kinds)) && aq_comm_create_mpi(NULL, &o, &p->comm) != AQ_OK) {
    fprintf(stderr, "train_fashion: --data-parallel: %s\n", aq_last_error());
    return 1;
  }
  aq_comm_info_t info;
  aq_comm_get_info(p->comm, &info);
  p->rank = info.rank, p->ranks = info.size;
  if (info.local_ranks > 1)
    fprintf(stderr, "train_fashion: %u GPUs of this process, a replica of the step each (NCCL)\n", info.local_ranks);
  else if (p->rank == 0)
    fprintf(stderr, "train_fashion: rank 0 of %u%s\n", p->ranks, info.nccl ? " (NCCL joins the GPUs)" : "");
  /* The progress bar and the epoch lines: rank 0's only. */
  else if (!freopen("/dev/null", "w", stdout))
    return 1;
  return 0;
}

void parallel_stop(parallel_t *p) {
  if (p->comm) aq_comm_destroy(p->comm);
  p->comm = NULL;
}
