/* Auto-tuning at instantiation (tune.h): before placement, each op-library
 * kernel that may run on a GPU and has several builds for its shape there
 * has them timed once per GPU model, unless a choice for the shape is
 * kept; and the public view of the choices kept. */
#include <stdio.h>
#include <string.h>

#include "runtime/settings.h"
#include "runtime/status.h"
#include "scheduler/calibrate.h"
#include "scheduler/exec_internal.h"
#include "scheduler/tune.h"

/* Whether a kept choice timed each of names. */
static int timed_every(const aq_tuned_build_t *b, const char *const *names, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i)
    if (!aq_tune_timed(b, names[i])) return 0;
  return 1;
}

/* Task t's builds on GPU agent a, where they are worth timing: how many
 * (0: none to time), their names in names, the shape's key in key. A kept
 * choice holds unless the library now lists a build it did not time (one
 * a later Aquila added: the version that wrote the file may be the same),
 * or it records a failure to tune in this process. */
static uint32_t untuned_builds(aq_exec_t *e, uint32_t t, uint32_t a, const char **names, char *key, size_t size) {
  const task_t *task = &e->graph->tasks[t];
  uint8_t ka[TASK_KERNARG_MAX];
  aq_task_planned_kernarg(e->graph, task, ka);
  uint32_t n = aq_oplib_builds(e->lib, AQ_AGENT_KIND_GPU, task->kernel, ka, names, AQ_TUNED_CANDIDATES_MAX);
  if (n < 2 || !aq_oplib_tune_key(e->lib, AQ_AGENT_KIND_GPU, task->kernel, ka, key, size)) return 0;
  tune_entry_t kept;
  const int found = aq_tune_find(e->agent_arch[a], task->kernel, key, &kept);
  if (found && (!kept.b.candidates || timed_every(&kept.b, names, n))) return 0; /* without a lookup a build */
  /* a build this GPU's code object lacks (an sm_90 cluster build on an older GPU) is not a candidate */
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    aq_kernel_info_t k;
    if (aq_code_object_find_kernel(e->gpu_ops, names[i], e->agents[a], &k) == AQ_OK) names[m++] = names[i];
    else aq_error_clear();
  }
  return m < 2 || (found && timed_every(&kept.b, names, m)) ? 0 : m;
}

/* What a build must save over an earlier one to be kept instead: timing
 * noise must not flip a choice. */
#define TUNE_MARGIN 1.03

static void tune_task(aq_exec_t *e, uint32_t t, uint32_t a, const char **names, uint32_t n, const char *key) {
  double ns[AQ_TUNED_CANDIDATES_MAX];
  const task_t *task = &e->graph->tasks[t];
  tune_entry_t te;
  memset(&te, 0, sizeof(te));
  snprintf(te.arch, sizeof(te.arch), "%s", e->agent_arch[a]);
  snprintf(te.b.kernel, sizeof(te.b.kernel), "%s", task->kernel);
  snprintf(te.b.shape, sizeof(te.b.shape), "%s", key);
  if (aq_perf_tune(e->graph, t, a, names, n, ns) != AQ_OK) {
    /* the launch rule's build, not timed again in this process (tune.h) */
    fprintf(stderr, "aquila: tuning %s (%s) on %s failed: %s; the launch rule's build runs\n", task->kernel, key,
            e->agent_names[a], aq_last_error());
    aq_error_clear();
    snprintf(te.b.build, sizeof(te.b.build), "%s", names[0]);
    aq_tune_put(&te);
    return;
  }
  uint32_t best = 0;
  for (uint32_t i = 0; i < n; ++i) {
    snprintf(te.b.candidate[i], sizeof(te.b.candidate[i]), "%s", names[i]);
    te.b.candidate_ns[i] = ns[i];
    if (ns[i] * TUNE_MARGIN < ns[best]) best = i; /* else the earlier: the rule's pick is listed first */
  }
  te.b.candidates = n;
  snprintf(te.b.build, sizeof(te.b.build), "%s", names[best]);
  aq_tune_put(&te);
}

aq_status_t aq_exec_tune(aq_exec_t *e, const uint8_t *eligible) {
  if (aq_tune_forcing() || !aq_tune_on() || !e->gpu_ops.handle) return AQ_OK;
  int tuned = 0;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    if (e->agent_kind[a] != AQ_AGENT_KIND_GPU) continue;
    int seen = 0; /* GPUs of one model share their choices */
    for (uint32_t b = 0; b < a && !seen; ++b)
      seen = e->agent_kind[b] == AQ_AGENT_KIND_GPU && !strcmp(e->agent_arch[b], e->agent_arch[a]);
    for (uint32_t t = 0; !seen && t < e->graph->ntasks; ++t) {
      const char *names[AQ_TUNED_CANDIDATES_MAX];
      char key[192];
      if (!(eligible[t] & (1u << e->agent_kind[a])) || !aq_perf_calibratable(e->graph, t)) continue;
      uint32_t n = untuned_builds(e, t, a, names, key, sizeof(key));
      if (n) tune_task(e, t, a, names, n, key), tuned = 1;
    }
  }
  if (tuned && aq_tune_save() != AQ_OK) aq_error_clear(); /* a cache: kept in memory all the same */
  return AQ_OK;
}

static aq_status_t arch_of(aq_agent_t agent, char *arch, size_t size) {
  aq_agent_info_t info;
  AQ_RETURN_IF_ERROR(aq_agent_get_info(agent, &info));
  aq_perf_arch(&info, arch, size);
  return AQ_OK;
}

AQ_API aq_status_t aq_tuned_builds(aq_agent_t agent, aq_tuned_build_t *out, size_t capacity, size_t *count) {
  if (!count || (capacity && !out)) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tuned_builds: count (and out) are required");
  char arch[PERF_ARCH_MAX];
  AQ_RETURN_IF_ERROR(arch_of(agent, arch, sizeof(arch)));
  *count = aq_tune_list(arch, out, capacity);
  return AQ_OK;
}

AQ_API aq_status_t aq_tuned_build(aq_agent_t agent, const char *kernel, const void *kernarg, aq_tuned_build_t *out) {
  if (!kernel || !kernarg || !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tuned_build: kernel, kernarg and out are required");
  char arch[PERF_ARCH_MAX];
  const oplib_t *lib;
  AQ_RETURN_IF_ERROR(arch_of(agent, arch, sizeof(arch)));
  AQ_RETURN_IF_ERROR(aq_op_library_ops(&lib));
  tune_entry_t e;
  if (!aq_tune_on() || !aq_tune_lookup(lib, arch, kernel, kernarg, &e) || !e.b.candidates) /* none, or a failure */
    return aq_error(AQ_ERROR_NOT_FOUND, "no tuned build of %s for this shape on %s%s", kernel, arch,
                    aq_tune_on() ? "" : " (AQ_TUNE=0)");
  *out = e.b;
  return AQ_OK;
}
