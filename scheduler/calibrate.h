/* Calibration runs for heft: a kernel task whose performance model on some
 * agent has too few samples is measured there before the graph is placed,
 * so heft never weighs a measurement on one agent against a guess on
 * another (a guess that once sent 1024^3 matmuls to 16 CPU cores at 64 us
 * each; they took 5.3 ms).
 *
 * The tasks (one per kernel x shape class: the caller picks them) are copied
 * into a graph of their own with fresh zeroed tensors, chained so they run
 * one at a time, pinned to the agent, and run as a profiled exec (warm-up
 * runs, then CALIBRATION_RUNS profiled ones, fewer once they add up to
 * PERF_SETTLED_NS: CPU tasks between host-call
 * stamps, GPU kernels by the driver's own times), which records
 * their models like any profiled run and saves them to the models file: on a
 * machine this happens once per kernel, shape class and agent architecture.
 * Only the op library's kernels are calibrated: they touch nothing but
 * their declared tensors (a user's kernel might reach memory through its
 * kernargs, and host tasks have side effects): those are measured in place,
 * in the exec's own first runs. */
#ifndef AQ_SCHEDULER_CALIBRATE_H_
#define AQ_SCHEDULER_CALIBRATE_H_

#include "scheduler/graph_internal.h"

enum { CALIBRATION_RUNS = 3 }; /* profiled, after a warm-up run */

/* Whether task t may be calibrated apart from its graph. */
int aq_perf_calibratable(const aq_graph_t *g, uint32_t t);
/* Measures tasks[0..n) of g on agent (an index into aq_agents' usable list,
 * as an exec numbers them). */
aq_status_t aq_perf_calibrate(const aq_graph_t *g, const uint32_t *tasks, uint32_t n, uint32_t agent);

/* Times task t of g on agent (as aq_perf_calibrate) under each of n
 * builds of its kernel (the op library's names): ns[i], the median of
 * TUNE_RUNS runs of builds[i] (tune.h). Nothing goes into the models. */
aq_status_t aq_perf_tune(const aq_graph_t *g, uint32_t t, uint32_t agent, const char *const *builds, uint32_t n,
                         double *ns);

/* exec.c: the exec's next run is not profiled (a warm-up: workers asleep,
 * caches cold, a GPU's first launch of each kernel). */
void aq_exec_warm_up_next(aq_exec_t *e);
/* exec.c: profiled runs record tasks from index `first` on only. */
void aq_exec_profile_from(aq_exec_t *e, uint32_t first);

#endif
