/* --data-parallel (parallel.h). */
#include "parallel.h"

#include <stdio.h>

int parallel_start(parallel_t *p, uint32_t kernel_agent_kinds) {
  *p = (parallel_t){.ranks = 1};
  aq_comm_options_t o = {.no_nccl = kernel_agent_kinds && !(kernel_agent_kinds & (1u << AQ_AGENT_KIND_GPU))};
  if (aq_comm_create_mpi(NULL, &o, &p->comm) != AQ_OK) {
    fprintf(stderr, "train_fashion: --data-parallel: %s\n", aq_last_error());
    return 1;
  }
  aq_comm_info_t info;
  aq_comm_get_info(p->comm, &info);
  p->rank = info.rank, p->ranks = info.size;
  if (p->rank == 0)
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
