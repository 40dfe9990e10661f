/* In-process data parallelism: a graph whose collectives use a
 * communicator of several GPUs of this process (aq_comm_create_gpus) is
 * written once, as local rank 0 sees it, and becomes at instantiation one
 * replica of the whole step per local rank, each pinned to its rank's GPU.
 *
 * The expanded graph keeps rank 0's tensors and tasks at their ids (every
 * handle the user holds still names them); rank k's copy of tensor x is
 * x + k * (tensors per rank). Tasks are copied with their reads, writes,
 * explicit edges and kernargs; a collective's copy gets a state of its own
 * for its local rank (ops_collective.c). Host tasks run once, in rank 0's
 * part: one that reads or writes tensors cannot be replicated and is
 * refused, since its function knows only rank 0's. */
#ifndef AQ_SCHEDULER_RANKS_H_
#define AQ_SCHEDULER_RANKS_H_

#include "scheduler/graph_internal.h"

/* The local ranks g is replicated over: 1 unless its collectives use a
 * communicator of several GPUs. */
uint32_t aq_graph_local_ranks(const aq_graph_t *g);

/* g's replicated form, a new graph (the caller destroys it). */
aq_status_t aq_graph_expand_ranks(const aq_graph_t *g, aq_graph_t **out);

/* ops_collective.c: whether task t is one of comm's collectives, and, for
 * a copy of it in local rank `local`'s part, a state of its own. */
int aq_coll_is_task(const task_t *t);
aq_status_t aq_coll_for_rank(task_t *t, uint32_t local);

#endif /* AQ_SCHEDULER_RANKS_H_ */
