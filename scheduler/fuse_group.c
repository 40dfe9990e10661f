/* Update groups (fuse.h: aq_fuse_groups). A model's parameters are many
 * tensors, most of them small (biases, batch norm's scales, a LeNet's
 * filters), and each SGD update is a launch that a GPU finishes long before
 * the next one can start: a CNN step spent eight such launches of a few
 * microseconds each. Updates that one lane queues together are run as one
 * aq_sgd_momentum_multi_f32, whose entries are their own arguments.
 *
 * Joining a group moves an update to the group's last place in its lane,
 * so only updates that nothing in the run waits for join, and a group ends
 * where the lane would wait for another lane's task it had not waited for
 * yet: the update queued behind that wait (the next bucket's all-reduce, in
 * a data-parallel step) is a group of its own, and the ones before it do
 * not wait with it. */
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/fuse.h"

/* The multi kernel's grid takes no grid-stride loop: its entries' elements
 * stay well under what one launch holds. */
#define GROUP_ELEMENTS_MAX ((int64_t)1 << 28)

typedef struct grouper {
  const group_in_t *in;
  plan_t *plan;
  fusion_t *f;
  uint8_t *awaited;   /* per task: an after-any edge names it */
  uint32_t *waited;   /* per lane: 1 + the last place in it this lane has waited for */
  uint32_t members[AQ_SGD_MULTI_MAX], count;
  int64_t elements;
} grouper_t;

static int64_t sgd_elements(const task_t *t) {
  aq_sgd_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  return a.n;
}

/* Whether t may join a group: the library's SGD, run in no fused kernel,
 * that nothing in the run waits for. */
static int joins(const grouper_t *gr, uint32_t t) {
  const task_t *k = &gr->in->graph->tasks[t];
  return k->kind == TASK_KERNEL && !k->code_object.handle && !strcmp(k->kernel, AQ_KERNEL_SGD) &&
         k->kernarg_size >= sizeof(aq_sgd_args_t) && !gr->f->absorbed[t] && gr->f->product[t] == UINT32_MAX &&
         !gr->plan->tasks[t].nsuccs && !gr->awaited[t] && sgd_elements(k) >= 0;
}

/* Whether t, on lane c, waits for a task of another lane that c has not
 * waited for; notes its waits either way. */
static int new_wait(grouper_t *gr, uint32_t t, uint32_t c) {
  int fresh = 0;
  for (uint32_t j = 0; j < aq_plan_waits(gr->plan, gr->in->graph, t); ++j) {
    uint32_t q = aq_plan_wait(gr->plan, gr->in->graph, t, j), l = gr->plan->tasks[q].lane;
    if (l == c || gr->plan->tasks[q].seq < gr->waited[l]) continue;
    gr->waited[l] = gr->plan->tasks[q].seq + 1;
    fresh = 1;
  }
  return fresh;
}

/* The group so far, if it has two updates or more: its last leads, waiting
 * for every member's predecessors. */
static aq_status_t close_group(grouper_t *gr) {
  uint32_t n = gr->count, lead = n ? gr->members[n - 1] : 0;
  gr->count = 0, gr->elements = 0;
  if (n < 2) return AQ_OK;
  fusion_t *f = gr->f;
  plan_task_t *lt = &gr->plan->tasks[lead];
  f->first[lead] = gr->members[0];
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t m = gr->members[i];
    f->lead[m] = lead;
    f->next[m] = i + 1 < n ? gr->members[i + 1] : UINT32_MAX;
    if (m == lead) continue;
    f->absorbed[m] = 1;
    const plan_task_t *mt = &gr->plan->tasks[m];
    for (uint32_t j = 0; j < mt->npreds; ++j) AQ_RETURN_IF_ERROR(aq_plan_add_pred(lt, mt->preds[j]));
  }
  f->groups++;
  return AQ_OK;
}

static aq_status_t group_lane(grouper_t *gr, uint32_t c) {
  memset(gr->waited, 0, gr->in->nlanes * sizeof(uint32_t));
  for (uint32_t k = 0; k < gr->plan->ntasks; ++k) {
    uint32_t t = gr->plan->order[k];
    if (gr->plan->tasks[t].lane != c) continue;
    if (new_wait(gr, t, c)) AQ_RETURN_IF_ERROR(close_group(gr));
    if (!joins(gr, t)) continue;
    int64_t n = sgd_elements(&gr->in->graph->tasks[t]);
    if (gr->count == AQ_SGD_MULTI_MAX || gr->elements + n > GROUP_ELEMENTS_MAX) AQ_RETURN_IF_ERROR(close_group(gr));
    gr->members[gr->count++] = t;
    gr->elements += n;
  }
  return close_group(gr);
}

aq_status_t aq_fuse_groups(const group_in_t *in, plan_t *plan, fusion_t *f) {
  const aq_graph_t *g = in->graph;
  size_t n = g->ntasks ? g->ntasks : 1;
  f->groups = 0;
  f->lead = malloc(n * sizeof(uint32_t)), f->next = malloc(n * sizeof(uint32_t)), f->first = malloc(n * sizeof(uint32_t));
  if (!f->lead || !f->next || !f->first) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; t < g->ntasks; ++t) f->lead[t] = f->next[t] = f->first[t] = UINT32_MAX;
  int any = 0;
  for (uint32_t c = 0; c < in->nlanes; ++c) any |= in->agent_groups[in->lane_agent[c]];
  if (!any) return AQ_OK;
  grouper_t gr = {.in = in, .plan = plan, .f = f};
  size_t nl = in->nlanes ? in->nlanes : 1;
  gr.awaited = calloc(n, 1), gr.waited = calloc(nl, sizeof(uint32_t));
  uint32_t *candidates = calloc(nl, sizeof(uint32_t));
  aq_status_t s = gr.awaited && gr.waited && candidates ? AQ_OK
                                                        : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t)
    for (uint32_t j = 0; j < g->tasks[t].nafter_any; ++j) gr.awaited[g->tasks[t].after_any[j]] = 1;
  /* (a lane walked only where two updates could group: most graphs have none) */
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t)
    if (in->agent_groups[in->lane_agent[plan->tasks[t].lane]] && joins(&gr, t)) candidates[plan->tasks[t].lane]++;
  for (uint32_t c = 0; s == AQ_OK && c < in->nlanes; ++c)
    if (candidates[c] >= 2) s = group_lane(&gr, c);
  free(candidates);
  if (s == AQ_OK && f->groups) s = aq_plan_reorder(plan, in->graph, in->nlanes);
  free(gr.awaited), free(gr.waited);
  return s;
}
