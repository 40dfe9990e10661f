/* Lane sequencing by readiness (plan.h: aq_plan_sequence).
 *
 * A lane is an in-order queue: a task whose inputs come late holds back
 * every task queued behind it, ready or not. HEFT's list order (decreasing
 * upward rank) is blind to that; it serves where a lane's tasks all become
 * ready as the lane reaches them, which a collective breaks. The
 * optimizer's update of a bucket's parameters waits for that bucket's
 * all-reduce on another stream, and the smallest update has the lowest
 * rank, so one waiting for the last bucket was queued before the others
 * and every update waited for the last all-reduce.
 *
 * So, once each task has its lane, the lanes are run through in estimated
 * time: whenever a lane could start its next task, it takes, of the tasks
 * whose predecessors have all been taken, the one that can start first;
 * of several that could start at once, the one of highest upward rank (now
 * over the placement's own costs: a gradient that an all-reduce waits for
 * goes before a product that only the next layer's gradient needs), then
 * the one earlier in the old order. That order (topological: a task is
 * taken only after its predecessors) becomes the plan's. */
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/plan.h"

typedef struct sequencer {
  const plan_t *p;
  const aq_graph_t *g;
  uint32_t *succ_at, *succ; /* successors, CSR */
  uint32_t *pending;        /* predecessors not taken yet */
  uint32_t *pos;            /* place in the old order */
  uint32_t *ready, nready;  /* tasks whose predecessors were all taken */
  double *rank, *ready_at, *lane_free;
} sequencer_t;

static uint32_t npreds_of(const sequencer_t *s, uint32_t i) { return aq_plan_waits(s->p, s->g, i); }
static uint32_t pred_of(const sequencer_t *s, uint32_t i, uint32_t j) { return aq_plan_wait(s->p, s->g, i, j); }

static void successors(sequencer_t *s) {
  uint32_t n = s->p->ntasks;
  memset(s->succ_at, 0, (n + 1) * sizeof(uint32_t));
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < npreds_of(s, i); ++j) s->succ_at[pred_of(s, i, j) + 1]++;
  for (uint32_t i = 0; i < n; ++i) s->succ_at[i + 1] += s->succ_at[i];
  uint32_t *fill = s->pending; /* borrowed: set again below */
  memcpy(fill, s->succ_at, n * sizeof(uint32_t));
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < npreds_of(s, i); ++j) s->succ[fill[pred_of(s, i, j)]++] = i;
  for (uint32_t i = 0; i < n; ++i) s->pending[i] = npreds_of(s, i);
}

/* Upward ranks over the placed costs, in reverse of the old order. */
static void ranks(sequencer_t *s) {
  for (uint32_t k = s->p->ntasks; k-- > 0;) {
    uint32_t i = s->p->order[k];
    double below = 0;
    for (uint32_t e = s->succ_at[i]; e < s->succ_at[i + 1]; ++e)
      if (s->rank[s->succ[e]] > below) below = s->rank[s->succ[e]];
    s->rank[i] = s->p->tasks[i].cost_ns + below;
  }
}

/* Whether ready task a goes before ready task b. */
static int before(const sequencer_t *s, uint32_t a, uint32_t b) {
  double fa = s->lane_free[s->p->tasks[a].lane], fb = s->lane_free[s->p->tasks[b].lane];
  double sa = s->ready_at[a] > fa ? s->ready_at[a] : fa, sb = s->ready_at[b] > fb ? s->ready_at[b] : fb;
  if (sa != sb) return sa < sb;
  if (s->rank[a] != s->rank[b]) return s->rank[a] > s->rank[b];
  return s->pos[a] < s->pos[b];
}

static void take(sequencer_t *s, uint32_t r) {
  uint32_t i = s->ready[r], lane = s->p->tasks[i].lane;
  s->ready[r] = s->ready[--s->nready];
  double start = s->ready_at[i] > s->lane_free[lane] ? s->ready_at[i] : s->lane_free[lane];
  s->lane_free[lane] = start + s->p->tasks[i].cost_ns;
  for (uint32_t e = s->succ_at[i]; e < s->succ_at[i + 1]; ++e) {
    uint32_t q = s->succ[e];
    if (s->lane_free[lane] > s->ready_at[q]) s->ready_at[q] = s->lane_free[lane];
    if (!--s->pending[q]) s->ready[s->nready++] = q;
  }
}

aq_status_t aq_plan_sequence(plan_t *p, aq_graph_t *g, uint32_t nlanes) {
  uint32_t n = p->ntasks, edges = 0;
  for (uint32_t i = 0; i < n; ++i) edges += aq_plan_waits(p, g, i);
  sequencer_t s = {.p = p, .g = g};
  s.succ_at = malloc((n + 1) * sizeof(uint32_t)), s.succ = malloc((edges ? edges : 1) * sizeof(uint32_t));
  s.pending = malloc((n + 1) * sizeof(uint32_t)), s.pos = malloc((n + 1) * sizeof(uint32_t));
  s.ready = malloc((n + 1) * sizeof(uint32_t));
  s.rank = malloc((n + 1) * sizeof(double)), s.ready_at = calloc(n + 1, sizeof(double));
  s.lane_free = calloc(nlanes + 1, sizeof(double));
  aq_status_t st = s.succ_at && s.succ && s.pending && s.pos && s.ready && s.rank && s.ready_at && s.lane_free
                       ? AQ_OK
                       : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  if (st == AQ_OK) {
    successors(&s);
    ranks(&s);
    for (uint32_t k = 0; k < n; ++k) s.pos[p->order[k]] = k;
    for (uint32_t i = 0; i < n; ++i)
      if (!s.pending[i]) s.ready[s.nready++] = i;
    uint32_t k = 0;
    for (; k < n && s.nready; ++k) {
      uint32_t best = 0;
      for (uint32_t r = 1; r < s.nready; ++r)
        if (before(&s, s.ready[r], s.ready[best])) best = r;
      p->order[k] = s.ready[best];
      take(&s, best);
    }
    /* (the plan's order was topological: every task is taken) */
    st = k == n ? aq_plan_number_lanes(p, nlanes) : aq_error(AQ_ERROR_INTERNAL, "sequencing left %u tasks", n - k);
  }
  free(s.succ_at), free(s.succ), free(s.pending), free(s.pos), free(s.ready), free(s.rank), free(s.ready_at),
      free(s.lane_free);
  return st;
}
