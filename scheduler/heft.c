/* HEFT placement (Topcuoglu, Hariri, Wu 2002) over measured performance
 * models: upward ranks from mean costs, then each task, by decreasing rank,
 * on the lane where it finishes first, with what moving its inputs costs.
 * Pure graph work: the costs come in through plan_lanes_t. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/linkcal.h"
#include "scheduler/plan.h"

/* What a dependency costs beyond the data: a hop between two lanes of one
 * agent is a barrier packet and a signal wake-up; between agents also the
 * copy or the remote reads. The exec measures them once per process
 * (linkcal.h); without measurements, round figures for a NUMA link and PCIe. */

static uint8_t agent_kind(const plan_lanes_t *l, uint32_t agent) {
  for (uint32_t c = 0; c < l->nlanes; ++c)
    if (l->lane_agent[c] == agent) return l->lane_kind[c];
  return 0;
}

double plan_transfer_ns(const plan_lanes_t *l, uint32_t a, uint32_t b, double bytes) {
  if (a == b) return 0;
  size_t ab = (size_t)a * l->nagents + b;
  if (l->link_ns) return l->link_ns[ab] + bytes * l->link_ns_per_byte[ab];
  uint8_t ka = agent_kind(l, a), kb = agent_kind(l, b);
  if (ka == AQ_AGENT_KIND_CPU && kb == AQ_AGENT_KIND_CPU) return LINK_NUMA_NS + bytes * LINK_NUMA_NS_PER_BYTE;
  return LINK_PCIE_NS + bytes * LINK_PCIE_NS_PER_BYTE;
}

/* Between two lanes of agent a. */
static double lane_hop_ns(const plan_lanes_t *l, uint32_t a) {
  return l->link_ns ? l->link_ns[(size_t)a * l->nagents + a] : LINK_HOP_NS;
}

/* Bytes task t reads that task q writes. */
static double edge_bytes(const aq_graph_t *g, uint32_t q, uint32_t t) {
  const task_t *a = &g->tasks[q], *b = &g->tasks[t];
  double bytes = 0;
  for (uint32_t r = 0; r < b->nreads; ++r)
    for (uint32_t w = 0; w < a->nwrites; ++w)
      if (b->reads[r] == a->writes[w]) {
        bytes += (double)g->tensors[b->reads[r]].bytes;
        break;
      }
  return bytes;
}

static const double *rank_of;
static const uint32_t *pos_of;
static int by_rank(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  if (rank_of[a] != rank_of[b]) return rank_of[a] > rank_of[b] ? -1 : 1;
  return pos_of[a] < pos_of[b] ? -1 : pos_of[a] > pos_of[b];
}

aq_status_t plan_heft(plan_t *p, aq_graph_t *g, const plan_lanes_t *l) {
  uint32_t n = p->ntasks, na = l->nagents;
  double *mean = calloc(n, sizeof(double)), *rank = calloc(n, sizeof(double));
  double *free_at = calloc(l->nlanes, sizeof(double));
  uint32_t *pos = malloc(n * sizeof(uint32_t)), *order = malloc(n * sizeof(uint32_t));
  uint32_t *start = calloc(n + 1, sizeof(uint32_t)), *fill = calloc(n + 1, sizeof(uint32_t));
  aq_status_t s = mean && rank && free_at && pos && order && start && fill
                      ? AQ_OK
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  uint32_t edges = 0, *succ = NULL;
  if (s == AQ_OK) {
    for (uint32_t i = 0; i < n; ++i) edges += p->tasks[i].npreds + g->tasks[i].nafter_any;
    succ = malloc((edges ? edges : 1) * sizeof(uint32_t));
    if (!succ) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  }
  /* Mean cost over the agents that may run each task. */
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    double sum = 0;
    uint32_t k = 0;
    for (uint32_t a = 0; a < na; ++a)
      if (l->cost_ns[(size_t)i * na + a] >= 0) sum += l->cost_ns[(size_t)i * na + a], ++k;
    if (!k) {
      s = aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': no agent allowed here has its kernel '%s'", g->tasks[i].name,
                   g->tasks[i].kind == TASK_HOST ? "(host call)" : g->tasks[i].kernel);
      break;
    }
    mean[i] = sum / k > 1 ? sum / k : 1; /* > 0: ranks then fall along every edge */
  }
  /* Successors (CSR), after-any edges included: they order tasks too. */
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    for (uint32_t j = 0; j < p->tasks[i].npreds; ++j) start[p->tasks[i].preds[j] + 1]++;
    for (uint32_t j = 0; j < g->tasks[i].nafter_any; ++j) start[g->tasks[i].after_any[j] + 1]++;
  }
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) start[i + 1] += start[i];
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    for (uint32_t j = 0; j < p->tasks[i].npreds; ++j) {
      uint32_t q = p->tasks[i].preds[j];
      succ[start[q] + fill[q]++] = i;
    }
    for (uint32_t j = 0; j < g->tasks[i].nafter_any; ++j) {
      uint32_t q = g->tasks[i].after_any[j];
      succ[start[q] + fill[q]++] = i;
    }
  }
  /* An edge's mean cost: over every ordered pair of agents (the same agent
   * costing a lane hop at most), latency + bytes x ns per byte. */
  double lat = 0, per_byte = 0;
  for (uint32_t a = 0; a < na; ++a)
    for (uint32_t b = 0; b < na; ++b) {
      double base = a == b ? (na > 1 ? 0 : lane_hop_ns(l, a)) : plan_transfer_ns(l, a, b, 0);
      lat += base / ((double)na * na);
      per_byte += (a == b ? 0 : plan_transfer_ns(l, a, b, 1e6) - plan_transfer_ns(l, a, b, 0)) / 1e6 / ((double)na * na);
    }
  /* Upward ranks, in reverse topological order. */
  for (uint32_t k = n; s == AQ_OK && k-- > 0;) {
    uint32_t i = p->order[k];
    pos[i] = k;
    double best = 0;
    for (uint32_t e = start[i]; e < start[i + 1]; ++e) {
      uint32_t v = succ[e];
      double comm = lat + per_byte * edge_bytes(g, i, v);
      if (comm + rank[v] > best) best = comm + rank[v];
    }
    rank[i] = mean[i] + best;
  }
  if (s == AQ_OK) {
    memcpy(order, p->order, n * sizeof(uint32_t));
    rank_of = rank, pos_of = pos;
    qsort(order, n, sizeof(uint32_t), by_rank);
    /* Ranks fall along every edge, so this is a topological order; check
     * it all the same and keep the first order if not (NaN costs). */
    for (uint32_t k = 0; k < n; ++k) pos[order[k]] = k;
    int ok = 1;
    for (uint32_t i = 0; i < n && ok; ++i)
      for (uint32_t e = start[i]; e < start[i + 1]; ++e) ok &= pos[i] < pos[succ[e]];
    if (ok) memcpy(p->order, order, n * sizeof(uint32_t));
  }
  /* Earliest finish time per lane, appending only: each lane's stream runs
   * its tasks in this order. */
  for (uint32_t k = 0; s == AQ_OK && k < n; ++k) {
    uint32_t i = p->order[k];
    const task_t *t = &g->tasks[i];
    plan_task_t *pt = &p->tasks[i];
    uint32_t best = UINT32_MAX;
    double best_finish = 0, best_cost = 0;
    for (uint32_t c = 0; c < l->nlanes; ++c) {
      uint32_t a = l->lane_agent[c];
      double cost = l->cost_ns[(size_t)i * na + a];
      if (cost < 0 || !(l->eligible[i] & (1u << l->lane_kind[c]))) continue;
      if (t->agent >= 0 && a != (uint32_t)t->agent) continue;
      double ready = 0;
      for (uint32_t j = 0; j < pt->npreds + t->nafter_any; ++j) {
        uint32_t q = j < pt->npreds ? pt->preds[j] : t->after_any[j - pt->npreds];
        const plan_task_t *pq = &p->tasks[q];
        uint32_t aq = l->lane_agent[pq->lane];
        double hop = pq->lane == c ? 0 : aq == a ? lane_hop_ns(l, a) : plan_transfer_ns(l, aq, a, edge_bytes(g, q, i));
        double r = pq->finish + hop;
        if (r > ready) ready = r;
      }
      double finish = (free_at[c] > ready ? free_at[c] : ready) + cost;
      if (best == UINT32_MAX || finish < best_finish) best = c, best_finish = finish, best_cost = cost;
    }
    if (best == UINT32_MAX) {
      s = t->agent >= 0 ? aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is pinned to agent %d, which cannot run its kernel '%s'",
                                   t->name, t->agent, t->kernel)
                        : aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': no agent allowed here has its kernel '%s'",
                                   t->name, t->kernel);
      break;
    }
    pt->lane = best;
    pt->finish = best_finish;
    pt->cost_ns = best_cost;
    free_at[best] = best_finish;
  }
  free(mean), free(rank), free(free_at), free(pos), free(order), free(start), free(fill), free(succ);
  return s;
}
