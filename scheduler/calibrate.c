/* Calibration runs for heft (see calibrate.h). */
#include "scheduler/calibrate.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "runtime/wake.h"
#include "scheduler/exec_internal.h"
#include "scheduler/perfmodel.h"
#include "scheduler/tune.h"

static const uint64_t CALIBRATION_TIMEOUT_NS = 60000000000ull;
/* Warming up: at least this long, at most this many runs. */
static const uint64_t WARM_UP_NS = 50000000ull;
enum { WARM_UP_RUNS_MAX = 1000 };

int aq_perf_calibratable(const aq_graph_t *g, uint32_t t) {
  const task_t *task = &g->tasks[t];
  return task->kind == TASK_KERNEL && !task->code_object.handle;
}

/* A copy of task t reading and writing fresh tensors (state: zeroed, and
 * readable before any write; a second copy of t shares the first's),
 * pinned to agent, after task `after` (UINT32_MAX: none). */
static aq_status_t copy_task(aq_graph_t *c, const aq_graph_t *g, uint32_t t, uint32_t agent, uint32_t after,
                             uint32_t *map, uint32_t *stamp, uint32_t *out) {
  task_t k = g->tasks[t];
  k.after_all = k.after_any = NULL;
  k.nafter_all = k.nafter_any = 0;
  k.agent = (int32_t)agent;
  for (uint32_t j = 0; j < k.nreads + k.nwrites; ++j) {
    uint32_t *x = j < k.nreads ? &k.reads[j] : &k.writes[j - k.nreads];
    const tensor_t *src = &g->tensors[*x];
    if (stamp[*x] != t + 1) {
      stamp[*x] = t + 1;
      AQ_RETURN_IF_ERROR(aq_graph_new_tensor(c, src->name, src->dtype, AQ_ROLE_STATE, src->rank, src->dims, &map[*x]));
    }
    *x = map[*x];
  }
  AQ_RETURN_IF_ERROR(aq_graph_new_task(c, &k, out));
  return after != UINT32_MAX ? aq_graph_add_edge(c, (aq_task_t){*out}, AQ_EDGE_AFTER_ALL, &(aq_task_t){after}, 1) : AQ_OK;
}

/* Unprofiled runs until the agent runs at its steady speed: at least
 * WARM_UP_NS of them and two in a row within 10% of each other. An idle
 * GPU's clocks take milliseconds to rise: calibrated cold, its kernels are
 * modelled well above their time in a training step, and heft sends work
 * elsewhere for it. */
static aq_status_t warm_up(aq_exec_t *e) {
  uint64_t start = aq_now_ns(), last = 0;
  for (int r = 0; r < WARM_UP_RUNS_MAX; ++r) {
    aq_exec_warm_up_next(e);
    uint64_t t0 = aq_now_ns();
    AQ_RETURN_IF_ERROR(aq_exec_run(e));
    AQ_RETURN_IF_ERROR(aq_exec_wait(e, CALIBRATION_TIMEOUT_NS));
    uint64_t ns = aq_now_ns() - t0;
    int steady = last && ns * 10 <= last * 11 && last * 10 <= ns * 11;
    if ((steady && aq_now_ns() - start >= WARM_UP_NS) || ns >= WARM_UP_NS) break; /* a run that long warmed it */
    last = ns;
  }
  return AQ_OK;
}

aq_status_t aq_perf_calibrate(const aq_graph_t *g, const uint32_t *tasks, uint32_t n, uint32_t agent) {
  aq_graph_t *c;
  AQ_RETURN_IF_ERROR(aq_graph_create(NULL, &c));
  uint32_t *map = calloc(g->ntensors, sizeof(uint32_t)), *stamp = calloc(g->ntensors, sizeof(uint32_t));
  aq_status_t s = map && stamp ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to calibrate");
  /* A copy of the first task leads the chain, unrecorded: the first
   * dispatch of a run takes a tiny kernel several times its time in a run
   * of many, and heft then spread over lanes work that one lane runs
   * fastest. */
  uint32_t prev = UINT32_MAX;
  for (uint32_t i = 0; s == AQ_OK && i <= n; ++i)
    s = copy_task(c, g, tasks[i ? i - 1 : 0], agent, prev, map, stamp, &prev);
  free(map), free(stamp);
  /* Profiled every run; eager, which keeps each task on its pinned agent. */
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .flags = AQ_EXEC_PROFILE | AQ_EXEC_NO_MEMORY_REUSE};
  aq_exec_t *e = NULL;
  if (s == AQ_OK) s = aq_graph_instantiate(c, &o, &e);
  if (s == AQ_OK) aq_exec_profile_from(e, 1); /* c's tasks are numbered in order */
  if (s == AQ_OK) s = warm_up(e);
  /* Fewer runs where they are long: the models count measured time as
   * samples (perfmodel.h: PERF_SETTLED_NS). */
  uint64_t start = aq_now_ns();
  for (int r = 0; s == AQ_OK && r < CALIBRATION_RUNS && aq_now_ns() - start < PERF_SETTLED_NS; ++r) {
    s = aq_exec_run(e);
    if (s == AQ_OK) s = aq_exec_wait(e, CALIBRATION_TIMEOUT_NS);
  }
  if (e && aq_exec_wait(e, CALIBRATION_TIMEOUT_NS) == AQ_OK) aq_exec_destroy(e); /* saves the models */
  aq_graph_destroy(c);
  return s;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

aq_status_t aq_perf_tune(const aq_graph_t *g, uint32_t t, uint32_t agent, const char *const *builds, uint32_t n,
                         double *ns) {
  enum { MOST = AQ_TUNED_CANDIDATES_MAX };
  if (n > MOST) n = MOST;
  aq_graph_t *c;
  AQ_RETURN_IF_ERROR(aq_graph_create(NULL, &c));
  uint32_t *map = calloc(g->ntensors, sizeof(uint32_t)), *stamp = calloc(g->ntensors, sizeof(uint32_t));
  aq_status_t s = map && stamp ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to tune");
  /* A copy of the first build leads the chain, untimed (calibrate.h); the
   * copies share their tensors and run one after another. */
  const char *forced[MOST + 1];
  uint32_t prev = UINT32_MAX;
  for (uint32_t i = 0; s == AQ_OK && i <= n; ++i) {
    forced[i] = builds[i ? i - 1 : 0];
    s = copy_task(c, g, t, agent, prev, map, stamp, &prev);
  }
  free(map), free(stamp);
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .flags = AQ_EXEC_PROFILE | AQ_EXEC_NO_MEMORY_REUSE};
  aq_exec_t *e = NULL;
  aq_tune_force(forced, n + 1);
  if (s == AQ_OK) s = aq_graph_instantiate(c, &o, &e);
  aq_tune_force(NULL, 0);
  if (s == AQ_OK) aq_exec_profile_from(e, UINT32_MAX); /* no candidate's time goes into the op's model */
  if (s == AQ_OK) s = warm_up(e);
  double times[MOST][TUNE_RUNS];
  for (int r = 0; s == AQ_OK && r < TUNE_RUNS; ++r) {
    s = aq_exec_run(e);
    if (s == AQ_OK) s = aq_exec_wait(e, CALIBRATION_TIMEOUT_NS);
    for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
      uint64_t t0 = e->stamps[2 * (i + 1)], t1 = e->stamps[2 * (i + 1) + 1];
      if (!t0 || t1 < t0) s = aq_error(AQ_ERROR_INTERNAL, "build %s was not timed", builds[i]);
      else times[i][r] = (double)(t1 - t0);
    }
  }
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    qsort(times[i], TUNE_RUNS, sizeof(double), by_value);
    ns[i] = times[i][TUNE_RUNS / 2];
  }
  if (e && aq_exec_wait(e, CALIBRATION_TIMEOUT_NS) == AQ_OK) aq_exec_destroy(e);
  aq_graph_destroy(c);
  return s;
}
