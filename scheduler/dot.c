/* An exec as a DOT graph: each task with its kernel, agent, lane and
 * estimate; edges marked by the packet that carries them. */
#include <stdio.h>

#include "scheduler/exec_internal.h"

/* What a task runs, as DOT shows it: a fused pair is one kernel, the
 * consumer's; the product's node says where its work went. */
static const char *dot_kernel(const aq_exec_t *e, uint32_t t) {
  const task_t *task = &e->graph->tasks[t];
  if (task->kind == TASK_HOST) return "host call";
  if (task->kind == TASK_STREAM) return task->kernel; /* the stream work it puts there: "nccl allreduce" */
  if (e->fusion.product[t] != UINT32_MAX) return aq_fuse_kernel(&e->fusion, t);
  if (e->fusion.lead[t] != UINT32_MAX)
    return e->fusion.lead[t] == t ? AQ_KERNEL_SGD_MULTI : "updated in its group's dispatch";
  return e->fusion.absorbed[t] ? "fused into its consumer" : task->kernel;
}

/* A fill per agent, told apart at a glance (Okabe-Ito's palette, light). */
static const char *agent_colour(uint32_t a) {
  static const char *const colours[] = {"#cfe8f7", "#fde0b6", "#c9eadb", "#f7d4e6", "#fbf4b8", "#d9d2f0", "#e6e6e6"};
  return colours[a % (sizeof(colours) / sizeof(colours[0]))];
}

AQ_API aq_status_t aq_exec_write_dot(aq_exec_t *e, const char *path) {
  if (!e || !path) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_write_dot: exec and path are required");
  FILE *f = fopen(path, "w");
  if (!f) return aq_error(AQ_ERROR_IO, "cannot write %s", path);
  aq_graph_t *g = e->graph;
  fprintf(f, "digraph aquila {\n  rankdir=TB; node [shape=box, style=filled, fontname=\"sans-serif\", fontsize=10];\n");
  /* A legend: one swatch per agent that runs a task. */
  fprintf(f, "  subgraph cluster_agents { label=\"agents\"; fontname=\"sans-serif\"; fontsize=10;\n");
  for (uint32_t a = 0; a < e->nagents; ++a)
    fprintf(f, "    agent%u [label=\"%s\", fillcolor=\"%s\"];\n", a, e->agent_names[a], agent_colour(a));
  fprintf(f, "  }\n");
  if (e->policy == AQ_SCHED_HEFT) { /* heft's estimates of the whole run: what it kept, and what it weighed */
    const plan_t *p = &e->plan;
    fprintf(f, "  labelloc=t; label=\"heft: makespan estimate %.1f us (over all agents %.1f us", p->heft_ns / 1e3,
            p->heft_mixed_ns / 1e3);
    if (p->heft_single_agent >= 0 && (uint32_t)p->heft_single_agent < e->nagents)
      fprintf(f, "; best single agent %.1f us on %s", p->heft_single_ns / 1e3, e->agent_names[p->heft_single_agent]);
    fprintf(f, ")\";\n");
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    const plan_task_t *pt = &e->plan.tasks[t];
    uint32_t a = e->lane_agent[pt->lane];
    const char *variant = task->kind == TASK_HOST     ? "host"
                          : task->kind == TASK_STREAM ? "stream call"
                          : task->code_object.handle  ? "user code object"
                          : aq_oplib_build(e->lib, e->agent_kind[a]) ? aq_oplib_build(e->lib, e->agent_kind[a])
                                                                        : "op library";
    if (e->policy == AQ_SCHED_HEFT)
      fprintf(f, "  t%u [label=\"%s\\n%s [%s]\\non %s, lane %u\\nest. %.1f us, finish %.1f us\", fillcolor=\"%s\"];\n", t,
              task->name, dot_kernel(e, t), variant, e->agent_names[a], pt->lane, pt->cost_ns / 1e3, pt->finish / 1e3,
              agent_colour(a));
    else {
      /* Other policies place by a work-group count; the estimate shown is
       * still the performance model's, where there is one. */
      perf_key_t k;
      double bytes;
      uint32_t samples;
      aq_exec_task_key(e, t, a, &k, &bytes);
      double ns = aq_perf_estimate(&k, bytes, -1, &samples);
      char est[48];
      if (samples) snprintf(est, sizeof(est), "est. %.1f us (%u samples)", ns / 1e3, samples);
      else snprintf(est, sizeof(est), "est. ? (no model yet)");
      fprintf(f, "  t%u [label=\"%s\\n%s [%s]\\non %s, lane %u\\n%s\", fillcolor=\"%s\"];\n", t, task->name,
              dot_kernel(e, t), variant, e->agent_names[a], pt->lane, est, agent_colour(a));
    }
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const plan_task_t *pt = &e->plan.tasks[t];
    for (uint32_t j = 0; j < pt->npreds; ++j)
      fprintf(f, "  t%u -> t%u%s;\n", pt->preds[j], t,
              e->plan.tasks[pt->preds[j]].lane != pt->lane ? " [style=dashed, label=\"barrier-AND\"]" : "");
    for (uint32_t j = 0; j < g->tasks[t].nafter_any; ++j)
      fprintf(f, "  t%u -> t%u [style=dotted, label=\"barrier-OR\"];\n", g->tasks[t].after_any[j], t);
  }
  fprintf(f, "}\n");
  return fclose(f) ? aq_error(AQ_ERROR_IO, "cannot write %s", path) : AQ_OK;
}
