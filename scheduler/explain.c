/* aq_exec_explain: the placement's reasons, for a person reading why a
 * task ran where it did. Everything is derived again from the exec (the
 * models' estimates, the link costs measured once per process, the plan's
 * makespans); nothing is kept for it at instantiation but the options. */
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/exec_internal.h"

static const char *policy_name(aq_sched_policy_t p) {
  switch (p) {
  case AQ_SCHED_EAGER: return "eager (each task on the lane free first)";
  case AQ_SCHED_ROUND_ROBIN: return "round-robin (tasks dealt to lanes in turn)";
  case AQ_SCHED_PINNED: return "pinned (each task on its agent, else agent 0)";
  case AQ_SCHED_LOCALITY: return "locality (each task near the memory of its inputs)";
  case AQ_SCHED_HEFT: return "heft (earliest finish over measured costs)";
  default: return "?";
  }
}

static const char *kind_name(uint8_t kind) { return kind == AQ_AGENT_KIND_GPU ? "GPU" : "CPU"; }

/* Whether heft kept one lane of a CPU agent (every kernel in turn). */
static int one_lane_kept(const aq_exec_t *e) {
  const plan_t *p = &e->plan;
  return e->policy == AQ_SCHED_HEFT && p->heft_one_lane_agent >= 0 && p->heft_ns == p->heft_one_lane_ns;
}

/* Whether heft kept its single-agent placement (every kernel on one agent). */
static int single_kept(const aq_exec_t *e) {
  const plan_t *p = &e->plan;
  return e->policy == AQ_SCHED_HEFT && p->heft_single_agent >= 0 && p->heft_ns == p->heft_single_ns;
}

static void header(aq_exec_t *e, FILE *out) {
  const plan_t *p = &e->plan;
  fprintf(out, "placement: %s\n", policy_name(e->policy));
  if (e->policy == AQ_SCHED_HEFT) {
    fprintf(out, "estimated run: %.1f us kept", p->heft_ns / 1e3);
    if (p->heft_dominant >= 0)
      fprintf(out, "; over all agents not tried (beside %s, no other agent could pay for a split)",
              e->agent_names[p->heft_dominant]);
    else
      fprintf(out, "; over all agents %.1f us", p->heft_mixed_ns / 1e3);
    if (p->heft_single_agent >= 0)
      fprintf(out, "; every kernel on %s %.1f us", e->agent_names[p->heft_single_agent], p->heft_single_ns / 1e3);
    if (p->heft_one_lane_agent >= 0)
      fprintf(out, "; one lane of %s %.1f us", e->agent_names[p->heft_one_lane_agent], p->heft_one_lane_ns / 1e3);
    fprintf(out, "\n");
  }
  double *links = NULL;
  if (e->nagents > 1 && aq_exec_heft_links(e, &links) == AQ_OK) {
    size_t nn = (size_t)e->nagents * e->nagents;
    fprintf(out, "links (an edge's latency, and bandwidth):");
    for (uint32_t a = 0; a < e->nagents; ++a)
      for (uint32_t b = 0; b < e->nagents; ++b) {
        if (a == b) continue;
        double pb = links[nn + (size_t)a * e->nagents + b];
        fprintf(out, "%s %s->%s %.1f us %.1f GB/s", a + b == 1 ? "" : ";", e->agent_names[a], e->agent_names[b],
                links[(size_t)a * e->nagents + b] / 1e3, pb > 0 ? 1 / pb : 0);
      }
    fprintf(out, "\n");
  }
  free(links);
}

/* The agents whose kind may run a task. */
static uint32_t candidates(const aq_exec_t *e, uint8_t eligible) {
  uint32_t n = 0;
  for (uint32_t b = 0; b < e->nagents; ++b) n += (eligible >> e->agent_kind[b]) & 1;
  return n;
}

/* Why task t (placed on agent a) is there. */
static void reason(aq_exec_t *e, uint32_t t, uint32_t a, uint8_t eligible, FILE *out) {
  const task_t *task = &e->graph->tasks[t];
  const plan_t *p = &e->plan;
  if (task->kind == TASK_HOST) {
    fprintf(out, "a host call: CPU agents run it");
  } else if (task->kind == TASK_STREAM) {
    if (e->lane_queue_flags[p->tasks[t].lane] & AQ_QUEUE_HIGH_PRIORITY)
      fprintf(out, "a stream call (%s): on its rank's GPU, in a lane (a stream) of its own, beside the kernels "
                   "that neither lead to it nor follow it", task->kernel);
    else
      fprintf(out, "a stream call (%s): on its rank's GPU, in its kernels' lane (too little beside it to pay "
                   "for a stream of its own)", task->kernel);
  } else if (task->agent >= 0) {
    fprintf(out, "pinned to agent %d by the graph", task->agent);
  } else if (candidates(e, eligible) == 1) {
    fprintf(out, "the only agent here that may run '%s'%s", task->kernel, e->kinds ? " (as the options allow)" : "");
  } else if (eligible == (1u << e->agent_kind[a])) {
    fprintf(out, "only %s agents may run '%s'%s", kind_name(e->agent_kind[a]), task->kernel,
            e->kinds ? " (as the options allow)" : "");
  } else if (one_lane_kept(e)) {
    double spread = p->heft_single_agent == p->heft_one_lane_agent ? p->heft_single_ns : p->heft_mixed_ns;
    fprintf(out, "every kernel on one lane of %s, in turn: %.1f us estimated against %.1f us over lanes, whose "
            "hand-offs cost more than side-by-side runs save", e->agent_names[p->heft_one_lane_agent],
            p->heft_one_lane_ns / 1e3, spread / 1e3);
  } else if (single_kept(e) && p->heft_dominant == p->heft_single_agent) {
    fprintf(out, "every kernel on %s: the other agents take each kernel at least as long, and all their lanes "
            "too little of the work for a split to pay", e->agent_names[p->heft_single_agent]);
  } else if (single_kept(e)) {
    double gain = p->heft_mixed_ns < p->heft_single_ns ? 1 - p->heft_mixed_ns / p->heft_single_ns : 0;
    fprintf(out, "every kernel on %s: a split over agents would save %.1f%% of the run, too little for its edges",
            e->agent_names[p->heft_single_agent], 100 * gain);
  } else if (e->policy == AQ_SCHED_HEFT) {
    fprintf(out, "its earliest estimated finish, %.1f us into the run, counting its inputs' moves", p->tasks[t].finish / 1e3);
  } else {
    fprintf(out, "%s", policy_name(e->policy));
  }
}

/* Where t's update runs in an update group (fuse_group.c): which dispatch. */
static void group_note(const aq_exec_t *e, uint32_t t, FILE *out) {
  uint32_t lead = e->fusion.lead[t], n = 0;
  if (lead == UINT32_MAX) return;
  for (uint32_t m = e->fusion.first[lead]; m != UINT32_MAX; m = e->fusion.next[m]) ++n;
  if (lead == t)
    fprintf(out, "; runs the %u updates of its group as one %s", n, AQ_KERNEL_SGD_MULTI);
  else
    fprintf(out, "; updated in the dispatch of '%s', with %u others", e->graph->tasks[lead].name, n - 1);
}

/* Where t's work runs under epilogue fusion (fuse.c): its consumer's
 * kernel, or its product's work in its own. */
static void fusion_note(const aq_exec_t *e, uint32_t t, FILE *out) {
  const aq_graph_t *g = e->graph;
  uint32_t m = e->fusion.product[t];
  if (m != UINT32_MAX)
    fprintf(out, "; runs '%s' in its kernel, as %s", g->tasks[m].name, aq_fuse_kernel(&e->fusion, t));
  else if (e->fusion.absorbed[t] && e->fusion.lead[t] == UINT32_MAX)
    fprintf(out, "; runs in the kernel of '%s' (fused)", g->tasks[aq_fuse_consumer_of(&e->fusion, &g->tasks[t])].name);
}

AQ_API aq_status_t aq_exec_explain(aq_exec_t *e, FILE *out) {
  if (!e || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_explain: exec and out are required");
  uint8_t *eligible = aq_exec_eligibility(e, e->kinds);
  if (!eligible) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to explain the placement");
  header(e, out);
  fprintf(out, "%-32s %-8s %4s  estimated on:", "task", "agent", "lane");
  for (uint32_t a = 0; a < e->nagents; ++a) fprintf(out, " %11s", e->agent_names[a]);
  fprintf(out, "  why\n");
  const aq_graph_t *g = e->graph;
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k], lane = e->plan.tasks[t].lane, a = e->lane_agent[lane];
    fprintf(out, "%-32.32s %-8s %4u  %13s", g->tasks[t].name, e->agent_names[a], lane, "");
    for (uint32_t b = 0; b < e->nagents; ++b) {
      uint32_t samples = 0;
      if (!(eligible[t] & (1u << e->agent_kind[b]))) {
        fprintf(out, " %11s", "-");
        continue;
      }
      double ns = aq_exec_cost_of(e, t, b, &samples);
      char cell[32];
      snprintf(cell, sizeof(cell), "%.1f us%s", ns / 1e3, samples ? "" : "?");
      fprintf(out, " %11s", cell);
    }
    fprintf(out, "  ");
    reason(e, t, a, eligible[t], out);
    group_note(e, t, out);
    fusion_note(e, t, out);
    fprintf(out, "\n");
  }
  free(eligible);
  return ferror(out) ? aq_error(AQ_ERROR_IO, "aq_exec_explain: cannot write the explanation") : AQ_OK;
}
