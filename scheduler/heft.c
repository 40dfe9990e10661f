/* HEFT placement (Topcuoglu, Hariri, Wu 2002) over measured performance
 * models: upward ranks from mean costs, then each task, by decreasing rank,
 * on the lane where it finishes first, with what moving its inputs costs.
 * A CPU agent's lanes share its workers (placer_t below), a GPU lane runs
 * no faster than its launches, and a placement over several agents is kept
 * only where it beats every single agent's by more than an edge.
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

/* An edge between agents costs a run more than the idle ping that measures
 * its latency: the consumer's GPU stream waits on host memory and loses
 * the CUDA graph its stretch would replay as, a CPU worker wakes, and a
 * tensor two kinds of agent touch is read over the host link. Taken at
 * face value, the measured latencies made splits of a training step look
 * cheap that ran several times slower than one GPU. */
#define EDGE_LATENCY_FACTOR 4.0

double aq_plan_transfer_ns(const plan_lanes_t *l, uint32_t a, uint32_t b, double bytes) {
  if (a == b) return 0;
  size_t ab = (size_t)a * l->nagents + b;
  if (l->link_ns) return EDGE_LATENCY_FACTOR * l->link_ns[ab] + bytes * l->link_ns_per_byte[ab];
  uint8_t ka = agent_kind(l, a), kb = agent_kind(l, b);
  if (ka == AQ_AGENT_KIND_CPU && kb == AQ_AGENT_KIND_CPU) return LINK_NUMA_NS + bytes * LINK_NUMA_NS_PER_BYTE;
  return LINK_PCIE_NS + bytes * LINK_PCIE_NS_PER_BYTE;
}

/* Between two lanes of agent a. */
static double lane_hop_ns(const plan_lanes_t *l, uint32_t a) {
  return l->link_ns ? l->link_ns[(size_t)a * l->nagents + a] : LINK_HOP_NS;
}

/* A barrier packet in a lane of agent a (a GPU's are stream waits, left
 * in its launch floor). */
static double barrier_ns(const plan_lanes_t *l, uint32_t a) {
  if (agent_kind(l, a) != AQ_AGENT_KIND_CPU) return 0;
  return l->barrier_ns ? l->barrier_ns[a] : LINK_BARRIER_NS;
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

/* A GPU lane is one in-order stream: a kernel there takes at least what
 * its packet processor needs to launch one (4.1 us each on an H100, see
 * DESIGN.md), however short its own time (all that its model measures:
 * the driver's kernel times). Stretches replayed as CUDA graphs launch
 * faster; heft does not count on that. */
#define GPU_LAUNCH_NS 4000.0

/* Task i's time on agent a as placement counts it: its model's, and a GPU
 * kernel's at least a launch; < 0 where a may not run it. */
static double placed_cost(const plan_lanes_t *l, uint32_t i, uint32_t a) {
  double c = l->cost_ns[(size_t)i * l->nagents + a];
  return c >= 0 && agent_kind(l, a) == AQ_AGENT_KIND_GPU && c < GPU_LAUNCH_NS ? GPU_LAUNCH_NS : c;
}

/* The share of a single agent's makespan a placement of kernels over
 * several agents must save to be kept. Such estimates are the least sure:
 * they leave out what a split costs beyond its edges (a tensor two kinds of
 * agent touch lives in pinned host memory, which every GPU access then
 * reads over the host link; one GPU's stretch of kernels replays as a
 * single CUDA graph, a split's launches one by one); what the edges cost
 * beyond the ping is EDGE_LATENCY_FACTOR's. */
#define SPLIT_GAIN 0.10
/* The same where the split involves a GPU (CPU and GPU, or two GPUs):
 * the GPU's kernels are modelled above their time in a training step (one
 * at a time, not replayed as a graph), which flatters a split, and what a
 * split costs beyond its edges is left out. */
#define SPLIT_GAIN_GPU 0.50
/* The longest kernel, in barrier packets' costs, for which one lane of a
 * CPU agent is tried (one_lane below). */
#define ONE_LANE_BARRIERS 4.0

/* One placement in the making. The lanes of a CPU agent are queues, not
 * processors: they share the agent's workers. So besides each lane's
 * stream (in order), each CPU agent keeps when each of its workers is next
 * free. A task's model was measured alone on the agent (calibrate.h), so
 * with min(groups, workers) workers: its full width. With fewer free it
 * takes longer, by the rounds of work-groups each worker runs
 * (ceil(groups / k) against ceil(groups / full)); it goes at the width
 * that finishes first. So two 1024^3 matmuls on two lanes of one agent
 * take twice one's time, as they do, not one's; eight 2-group ones on 16
 * workers run side by side. */
/* What place() reads of each task, gathered once in index order: it walks
 * the tasks in rank order, where each big task_t and tensor_t would be a
 * cache miss, once per placement tried. */
typedef struct hot_task {
  double groups;
  int32_t agent;
  uint32_t nafter_any;
  uint8_t kind;
  uint8_t home; /* touches a persistent tensor (home_cost) */
} hot_task_t;

/* Of one lane, the producers of the task being placed: the latest to
 * finish, the last in the lane's order (a wait for it covers the others),
 * and the lane's agent. */
typedef struct pred_lane {
  double finish;
  uint32_t lane, agent, seq;
} pred_lane_t;

typedef struct placer {
  plan_t *p;
  aq_graph_t *g;
  const plan_lanes_t *l;
  const hot_task_t *hot;
  double *lane_free, *worker_free, *sorted; /* per lane; per worker of all agents; scratch */
  uint32_t *first_worker;                   /* per agent (+1): its workers in worker_free */
  uint8_t *taken, *used;                    /* scratch, per worker; per lane: has a task */
  uint32_t *lane;                           /* per task: the result */
  double *finish, *cost;
  uint32_t *home;                           /* per tensor: where a persistent one lives (home_cost) */
  uint32_t *gpu_home;                       /* per tensor: the GPU whose memory holds it (home_cost) */
  uint64_t gpus;                            /* the GPU agents, a bit each */
  uint64_t shares_workers;                  /* the agents whose workers are tracked, a bit each (placer_init) */
  uint32_t *agent_lanes, *first_lane;       /* each agent's lanes: agent_lanes[first_lane[a]..first_lane[a+1]) */
  uint64_t *cand;                           /* a bit per lane: the lanes a task is tried on (gather) */
  uint32_t words;                           /* of cand */
  uint32_t *earliest;                       /* per agent: its lane free first (place) */
  uint8_t *kind;                            /* per agent: agent_kind, looked up once */
  double *hop, *barrier;                    /* per agent: lane_hop_ns, barrier_ns, looked up once */
  /* The lanes of the producers of the task being placed, each once
   * (gather): what trying a lane reads, a pass over these rather than
   * over the producers and the arrays of each. */
  pred_lane_t *groups;
  uint32_t ngroups;
  uint32_t *group_of, *group_stamp;         /* per lane: its entry in groups, for the task stamped */
  uint64_t pred_agents;                     /* the agents of those lanes, a bit each (all bits: one past 63) */
  const double *pred_bytes;                 /* per task, per predecessor: edge_bytes (from pred_at) */
  const uint32_t *pred_at;
  int one_lane;                             /* place(): each agent's first lane only */
  /* The waits a lane's barrier packets hold, as lower.c makes them: a lane
   * waits once for another lane's tasks up to the latest it needs (that
   * lane completes them in order), so a task whose producer an earlier
   * wait already covers costs its lane no packet. */
  uint32_t *seq;       /* per task: its place in its lane, from 1 */
  uint32_t *lane_len;  /* per lane: tasks so far */
  uint32_t *covered;   /* lane x lane: the last place in the second the first has waited for */
  void *block; /* every array above (placer_init) */
} placer_t;

static uint32_t workers_of(const plan_lanes_t *l, uint32_t a) {
  return l->agent_workers && agent_kind(l, a) == AQ_AGENT_KIND_CPU ? l->agent_workers[a] : 0;
}

/* Carves n items of `size` bytes from *at (8-byte aligned), advancing it. */
static void *carve(uint8_t **at, size_t n, size_t size) {
  void *p = *at;
  *at += (n * size + 7) & ~(size_t)7;
  return p;
}

/* All of a placer's arrays in one block: one allocation, not twenty, for
 * each placement tried. */
static aq_status_t placer_init(placer_t *pl, plan_t *p, aq_graph_t *g, const plan_lanes_t *l, const hot_task_t *hot,
                               uint64_t gpus, int narrow) {
  memset(pl, 0, sizeof(*pl));
  pl->p = p, pl->g = g, pl->l = l, pl->hot = hot, pl->gpus = gpus;
  uint32_t most = 1, nw = 0, na = l->nagents;
  for (uint32_t a = 0; a < na; ++a) nw += workers_of(l, a), most = workers_of(l, a) > most ? workers_of(l, a) : most;
  size_t n = p->ntasks ? p->ntasks : 1, nl = l->nlanes ? l->nlanes : 1, nt = g->ntensors ? g->ntensors : 1;
  size_t words = (nl + 63) / 64;
  size_t bytes = 8 * (nl + (nw ? nw : 1) + most + 2 * n + words + 2 * na) +
                 4 * (2 * n + 2 * nt + 4 * nl + nl * nl + 3 * na + 3) + nl * sizeof(pred_lane_t) + most + nl + na +
                 8 * 32;
  uint8_t *at = pl->block = malloc(bytes);
  if (!at) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  pl->lane_free = carve(&at, nl, 8), pl->worker_free = carve(&at, nw ? nw : 1, 8), pl->sorted = carve(&at, most, 8);
  pl->finish = carve(&at, n, 8), pl->cost = carve(&at, n, 8);
  pl->lane = carve(&at, n, 4), pl->seq = carve(&at, n, 4);
  pl->home = carve(&at, nt, 4), pl->gpu_home = carve(&at, nt, 4);
  pl->agent_lanes = carve(&at, nl, 4), pl->cand = carve(&at, words, 8);
  pl->groups = carve(&at, nl, sizeof(pred_lane_t));
  pl->group_of = carve(&at, nl, 4), pl->group_stamp = carve(&at, nl, 4);
  pl->lane_len = carve(&at, nl, 4), pl->covered = carve(&at, nl * nl, 4);
  pl->first_worker = carve(&at, na + 1, 4), pl->first_lane = carve(&at, na + 2, 4), pl->earliest = carve(&at, na, 4);
  pl->hop = carve(&at, na, 8), pl->barrier = carve(&at, na, 8), pl->kind = carve(&at, na, 1);
  pl->taken = carve(&at, most, 1), pl->used = carve(&at, nl, 1);
  memset(pl->cand, 0, words * sizeof(uint64_t));
  pl->words = (uint32_t)words;
  for (uint32_t a = 0; a < na; ++a)
    pl->kind[a] = agent_kind(l, a), pl->hop[a] = lane_hop_ns(l, a), pl->barrier[a] = barrier_ns(l, a);
  memset(pl->first_worker, 0, (na + 1) * sizeof(uint32_t));
  memset(pl->first_lane, 0, (na + 2) * sizeof(uint32_t));
  for (uint32_t a = 0; a < na; ++a) pl->first_worker[a + 1] = pl->first_worker[a] + workers_of(l, a);
  for (uint32_t c = 0; c < l->nlanes; ++c) pl->first_lane[l->lane_agent[c] + 2]++;
  for (uint32_t a = 0; a < na; ++a) pl->first_lane[a + 2] += pl->first_lane[a + 1];
  for (uint32_t c = 0; c < l->nlanes; ++c) pl->agent_lanes[pl->first_lane[l->lane_agent[c] + 1]++] = c;
  /* A lane runs one task at a time: where every task is one work-group and
   * an agent has a worker for each of its lanes, some worker is free
   * whenever a lane is, and tracking them changes nothing (at the cost of
   * two passes over them a task). narrow: every task is one work-group. */
  for (uint32_t a = 0; a < na && a < 64; ++a) {
    uint32_t w = workers_of(l, a), lanes = pl->first_lane[a + 1] - pl->first_lane[a];
    if (w && (!narrow || lanes > w)) pl->shares_workers |= 1ull << a;
  }
  return AQ_OK;
}

static void placer_free(placer_t *pl) {
  free(pl->block);
  memset(pl, 0, sizeof(*pl));
}

static void placer_swap(placer_t *a, placer_t *b) {
  placer_t t = *a;
  *a = *b, *b = t;
}

/* The `need` earliest free times of agent a's workers, earliest first,
 * into pl->sorted; how many (a task of g work-groups looks at no more than
 * g of them: one, for most tasks, whatever the worker count). */
static uint32_t sort_workers(placer_t *pl, uint32_t a, uint32_t need) {
  uint32_t f = pl->first_worker[a], n = pl->first_worker[a + 1] - f, k = 0;
  double *v = pl->sorted;
  if (need > n) need = n;
  for (uint32_t i = 0; i < n; ++i) {
    double x = pl->worker_free[f + i];
    if (k == need && !(x < v[k - 1])) continue;
    uint32_t j = k < need ? k++ : k - 1;
    for (; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
    v[j] = x;
  }
  return k;
}

/* The width (workers) at which a task of `groups` work-groups, costing
 * `cost` at its full width, finishes first when it may start at `base`
 * (its lane and inputs) and the workers are free at sorted[0..n);
 * *start, *finish for it. */
static uint32_t best_width(const double *sorted, uint32_t n, double groups, double base, double cost, double *start,
                           double *finish) {
  uint32_t full = groups < n ? (uint32_t)groups : n, best = 1;
  double rounds = ceil(groups / full);
  for (uint32_t k = 1; k <= full; ++k) {
    double s = sorted[k - 1] > base ? sorted[k - 1] : base, f = s + cost * ceil(groups / k) / rounds;
    if (k == 1 || f < *finish) best = k, *start = s, *finish = f;
  }
  return best;
}

/* Takes w workers of agent a free by `start` until `finish`: the ones
 * free last (the best fit leaves earlier-free workers to others). */
static void take_workers(placer_t *pl, uint32_t a, uint32_t w, double start, double finish) {
  uint32_t f = pl->first_worker[a], n = pl->first_worker[a + 1] - f;
  if (w == 1) { /* most tasks: one pass, the best kept in a register */
    double *free_at = pl->worker_free + f, latest = -1;
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = 0; i < n; ++i)
      if (free_at[i] <= start && free_at[i] > latest) pick = i, latest = free_at[i];
    if (pick != UINT32_MAX) free_at[pick] = finish;
    return;
  }
  memset(pl->taken, 0, n);
  for (uint32_t k = 0; k < w; ++k) {
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = 0; i < n; ++i)
      if (!pl->taken[i] && pl->worker_free[f + i] <= start &&
          (pick == UINT32_MAX || pl->worker_free[f + i] > pl->worker_free[f + pick]))
        pick = i;
    if (pick == UINT32_MAX) return;
    pl->taken[pick] = 1;
    pl->worker_free[f + pick] = finish;
  }
}

/* A run's edges are not all in the graph: a parameter or optimizer state
 * is read at the start of the next run from where the last run wrote it.
 * Such a tensor lives where its first task is placed (its home: the
 * exec's memory plan puts it with its first toucher too); a task on
 * another agent that touches it pays the copy there and back. Without
 * this, an update on a CPU beside a GPU's forward pass looked free. */
static int persistent(const aq_tensor_role_t role) { return role == AQ_ROLE_PARAMETER || role == AQ_ROLE_STATE; }

/* A tensor a GPU touches lives in the memory of the first GPU that does
 * (the exec's memory plan), and another GPU's kernels read it there in
 * place, over peer access: not once, as a copy would, but as often as the
 * kernel reads its operands (a product reads each input once per tile of
 * the other), without the caches that local reads hit. So a GPU task
 * reading another GPU's tensor pays its bytes over the link that many
 * times; without this, two GPUs sharing one large input split products
 * that then ran nine times slower on the second. */
#define PEER_READ_FACTOR 16.0

static int is_gpu(const placer_t *pl, uint32_t a) { return a < 64 && (pl->gpus >> a & 1); }

static double home_cost(const placer_t *pl, const task_t *t, uint32_t a) {
  double ns = 0;
  for (uint32_t j = 0; j < t->nreads + t->nwrites; ++j) {
    uint32_t x = j < t->nreads ? t->reads[j] : t->writes[j - t->nreads], h = pl->home[x], gh = pl->gpu_home[x];
    double bytes = (double)pl->g->tensors[x].bytes;
    if (h != UINT32_MAX && h != a && persistent(pl->g->tensors[x].role)) ns += aq_plan_transfer_ns(pl->l, h, a, bytes);
    if (gh != UINT32_MAX && gh != a && is_gpu(pl, a)) ns += PEER_READ_FACTOR * aq_plan_transfer_ns(pl->l, gh, a, bytes);
  }
  return ns;
}

static void take_home(placer_t *pl, const task_t *t, uint32_t a) {
  for (uint32_t j = 0; j < t->nreads + t->nwrites; ++j) {
    uint32_t x = j < t->nreads ? t->reads[j] : t->writes[j - t->nreads];
    if (pl->home[x] == UINT32_MAX && persistent(pl->g->tensors[x].role)) pl->home[x] = a;
    if (pl->gpu_home[x] == UINT32_MAX && is_gpu(pl, a)) pl->gpu_home[x] = a;
  }
}

/* Whether task t's placement depends on where its tensors live: on a
 * persistent one's home, or, with several GPUs, on any one's GPU. With no
 * persistent tensor in g (`homes` 0), its tensors are not looked at. */
static hot_task_t hot_of(const aq_graph_t *g, const task_t *t, int gpus, int homes) {
  hot_task_t h = {aq_plan_task_groups(t), t->agent, t->nafter_any, (uint8_t)t->kind, 0};
  h.home = gpus > 1 && t->nreads + t->nwrites > 0;
  for (uint32_t j = 0; homes && j < t->nreads + t->nwrites && !h.home; ++j)
    h.home = persistent(g->tensors[j < t->nreads ? t->reads[j] : t->writes[j - t->nreads]].role);
  return h;
}

/* Whether placement pl puts kernels on two agents or more, a GPU among them. */
static int gpu_split(const placer_t *pl) {
  int32_t first = -1, gpu = 0, several = 0;
  for (uint32_t i = 0; i < pl->p->ntasks; ++i) {
    if (pl->hot[i].kind == TASK_HOST) continue;
    int32_t a = (int32_t)pl->l->lane_agent[pl->lane[i]];
    gpu |= pl->l->lane_kind[pl->lane[i]] == AQ_AGENT_KIND_GPU;
    if (first < 0) first = a;
    several |= a != first;
  }
  return several && gpu;
}

/* The agent all of pl's kernels went to, or -1 (several, or none). */
static int32_t kernels_on_one_agent(const placer_t *pl) {
  int32_t on = -1;
  for (uint32_t i = 0; i < pl->p->ntasks; ++i) {
    if (pl->hot[i].kind == TASK_HOST) continue;
    int32_t a = (int32_t)pl->l->lane_agent[pl->lane[i]];
    if (on >= 0 && a != on) return -1;
    on = a;
  }
  return on;
}

/* The lanes of agent a. */
static uint32_t lanes_in(const placer_t *pl, uint32_t a) { return pl->first_lane[a + 1] - pl->first_lane[a]; }

/* g's tasks on one lane of CPU agent a run one after another, each at its
 * full width: their costs' sum is that placement's makespan; -1 where a
 * task costs more than ONE_LANE_BARRIERS barrier packets (or is a stream
 * call), which one lane is not tried for. */
static double serial_bound(const aq_graph_t *g, const plan_lanes_t *l, uint32_t a) {
  double work = 0, most = ONE_LANE_BARRIERS * barrier_ns(l, a);
  for (uint32_t i = 0; i < g->ntasks; ++i) {
    double c = l->cost_ns[(size_t)i * l->nagents + a];
    if (c < 0 || c > most) return -1;
    work += c;
  }
  return work;
}

/* A lower bound on any placement of g's kernels on agent a alone: their
 * work spread evenly over its lanes (a CPU's lanes share its workers, and
 * a kernel measured at full width does at least its cost in worker time;
 * a GPU lane runs one kernel at a time, each at least a launch). */
static double work_bound(const placer_t *pl, uint32_t a) {
  uint32_t lanes = lanes_in(pl, a), workers = workers_of(pl->l, a);
  if (workers > lanes) lanes = workers;
  double work = 0;
  for (uint32_t i = 0; i < pl->p->ntasks; ++i)
    if (pl->hot[i].kind != TASK_HOST) work += placed_cost(pl->l, i, a);
  return lanes ? work / lanes : 0;
}

/* Whether agent a may run every kernel of g (host calls run on CPU lanes
 * whatever the placement: a batch loader beside a GPU's training step). */
static int runs_every_kernel(const hot_task_t *hot, const aq_graph_t *g, const plan_lanes_t *l, uint32_t a) {
  uint8_t kind = agent_kind(l, a);
  for (uint32_t i = 0; i < g->ntasks; ++i) {
    if (hot[i].kind == TASK_HOST) continue;
    if (l->cost_ns[(size_t)i * l->nagents + a] < 0 || !(l->eligible[i] & (1u << kind)) ||
        (hot[i].agent >= 0 && (uint32_t)hot[i].agent != a))
      return 0;
  }
  return 1;
}

/* Agent a's lane free first (of equals, the first in its lane order). Only
 * a placement on that lane can change it: the others' times only grow. */
static void find_earliest(placer_t *pl, uint32_t a) {
  uint32_t first = UINT32_MAX;
  double at = 0;
  for (uint32_t j = pl->first_lane[a]; j < pl->first_lane[a + 1]; ++j) {
    uint32_t c = pl->agent_lanes[j];
    if (first == UINT32_MAX || pl->lane_free[c] < at) first = c, at = pl->lane_free[c];
  }
  pl->earliest[a] = first;
}

/* The lanes worth trying task i (k-th in order) into pl->cand: of each
 * agent that may run it, the lane free first (its first lane, placing on
 * one lane an agent) and the lanes of its predecessors. Another lane of
 * the agent is never better than the one free first (the same hops from
 * every predecessor, the same workers), and trying every lane of a
 * 16-worker CPU made placing a task cost a microsecond. The lanes of its
 * producers into pl->groups, each once. */
static void gather(placer_t *pl, uint32_t i, uint32_t k, int32_t only) {
  const plan_lanes_t *l = pl->l;
  const hot_task_t *t = &pl->hot[i];
  const plan_task_t *pt = &pl->p->tasks[i];
  for (uint32_t a = 0; a < l->nagents; ++a) {
    if (l->cost_ns[(size_t)i * l->nagents + a] < 0 || (t->agent >= 0 && a != (uint32_t)t->agent) ||
        (only >= 0 && a != (uint32_t)only && t->kind != TASK_HOST))
      continue;
    if (pl->first_lane[a + 1] == pl->first_lane[a]) continue;
    uint32_t first = pl->one_lane ? pl->agent_lanes[pl->first_lane[a]] : pl->earliest[a];
    pl->cand[first / 64] |= 1ull << (first % 64);
  }
  uint32_t n = 0;
  uint64_t agents = 0;
  for (uint32_t j = 0; j < pt->npreds + t->nafter_any; ++j) {
    uint32_t q = j < pt->npreds ? pt->preds[j] : pl->g->tasks[i].after_any[j - pt->npreds], c = pl->lane[q];
    if (pl->group_stamp[c] != k + 1) {
      uint32_t a = l->lane_agent[c];
      pl->group_stamp[c] = k + 1, pl->group_of[c] = n;
      pl->groups[n++] = (pred_lane_t){-INFINITY, c, a, 0};
      pl->cand[c / 64] |= 1ull << (c % 64);
      agents |= a < 64 ? 1ull << a : ~0ull;
    }
    pred_lane_t *gr = &pl->groups[pl->group_of[c]];
    if (pl->finish[q] > gr->finish) gr->finish = pl->finish[q];
    if (pl->seq[q] > gr->seq) gr->seq = pl->seq[q];
  }
  pl->ngroups = n, pl->pred_agents = agents;
}

/* When task i's inputs are ready on lane c of agent a, and in *waits the
 * other lanes c waits for (a barrier packet each five; a lane an earlier
 * wait of c covers costs none). A producer on another lane of a costs a
 * hop, one on another agent (across: there is one) its bytes' move too. */
static double ready_on(const placer_t *pl, uint32_t i, uint32_t c, uint32_t a, int across, uint32_t *waits) {
  const plan_lanes_t *l = pl->l;
  const uint32_t *covered = pl->covered + (size_t)c * l->nlanes;
  double ready = 0, hop = pl->hop[a];
  uint32_t w = 0;
  for (uint32_t x = 0; x < pl->ngroups; ++x) {
    const pred_lane_t *gr = &pl->groups[x];
    double r = gr->finish;
    if (gr->lane != c) {
      w += gr->seq > covered[gr->lane];
      if (gr->agent != a) continue;
      r += hop; /* (rounding is monotonic: the lane's latest producer arrives last, as each one's sum would say) */
    }
    if (r > ready) ready = r;
  }
  *waits = w;
  if (!across) return ready;
  /* Across agents each edge's bytes count: producer by producer. */
  const aq_graph_t *g = pl->g;
  const plan_task_t *pt = &pl->p->tasks[i];
  for (uint32_t j = 0; j < pt->npreds + pl->hot[i].nafter_any; ++j) {
    uint32_t q = j < pt->npreds ? pt->preds[j] : g->tasks[i].after_any[j - pt->npreds], aq = l->lane_agent[pl->lane[q]];
    if (aq == a) continue;
    double bytes = j < pt->npreds ? pl->pred_bytes[pl->pred_at[i] + j] : edge_bytes(g, q, i);
    double r = pl->finish[q] + aq_plan_transfer_ns(l, aq, a, bytes);
    if (r > ready) ready = r;
  }
  return ready;
}

/* placed_cost, with the agent's kind looked up once. */
static double cost_on(const placer_t *pl, uint32_t i, uint32_t a) {
  double c = pl->l->cost_ns[(size_t)i * pl->l->nagents + a];
  return c >= 0 && pl->kind[a] == AQ_AGENT_KIND_GPU && c < GPU_LAUNCH_NS ? GPU_LAUNCH_NS : c;
}

/* Places the tasks in p->order, each where it finishes first (every kernel
 * on agent `only` if >= 0: a single-agent placement, as a user's
 * --placement gpu would be); the makespan, or -1 with *fail the task that
 * has no lane. */
static double place(placer_t *pl, int32_t only, uint32_t *fail) {
  const plan_lanes_t *l = pl->l;
  aq_graph_t *g = pl->g;
  plan_t *p = pl->p;
  uint32_t na = l->nagents;
  double makespan = 0;
  for (uint32_t c = 0; c < l->nlanes; ++c) pl->lane_free[c] = 0, pl->used[c] = 0;
  for (uint32_t a = 0; a < na; ++a) find_earliest(pl, a);
  for (uint32_t w = 0; w < pl->first_worker[na]; ++w) pl->worker_free[w] = 0;
  for (uint32_t x = 0; x < g->ntensors; ++x) pl->home[x] = pl->gpu_home[x] = UINT32_MAX;
  for (uint32_t c = 0; c < l->nlanes; ++c) pl->group_stamp[c] = 0, pl->lane_len[c] = 0;
  memset(pl->covered, 0, (size_t)l->nlanes * l->nlanes * sizeof(uint32_t));
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    uint32_t i = p->order[k];
    const hot_task_t *t = &pl->hot[i];
    uint32_t best = UINT32_MAX, cached = UINT32_MAX, nsorted = 0, best_width_ = 1, seen = UINT32_MAX;
    double best_finish = 0, best_start = 0, best_cost = 0, groups = t->groups, cost = -1;
    int across = 0;
    gather(pl, i, k, only);
    for (uint32_t word = 0; word < pl->words; ++word) {
      uint64_t bits = pl->cand[word];
      pl->cand[word] = 0;
      while (bits) { /* ascending, as when every lane was tried: a tie goes to the lowest */
        uint32_t c = word * 64 + (uint32_t)__builtin_ctzll(bits);
        bits &= bits - 1;
        uint32_t a = l->lane_agent[c];
        if (a != seen) { /* what the agent decides, worked out again only when the agent changes */
          seen = a, cost = cost_on(pl, i, a), across = (pl->pred_agents & ~(a < 64 ? 1ull << a : 0)) != 0;
          if ((t->agent >= 0 && a != (uint32_t)t->agent) || (only >= 0 && a != (uint32_t)only && t->kind != TASK_HOST))
            cost = -1;
        }
        if (cost < 0 || !(l->eligible[i] & (1u << l->lane_kind[c]))) continue;
        /* No lane finishes a task before it is free plus the task's cost (at
         * full width; hops, barriers and homes only add): one that cannot beat
         * the best so far is not worked out. A GPU lane beside sixteen CPU
         * lanes of tiny tasks almost never can. */
        if (best != UINT32_MAX && pl->lane_free[c] + cost >= best_finish) continue;
        uint32_t waits; /* other lanes waited for: barrier packets, five waits a packet */
        double ready = ready_on(pl, i, c, a, across, &waits);
        double start = (pl->lane_free[c] > ready ? pl->lane_free[c] : ready) + (waits + 4) / 5 * pl->barrier[a];
        double finish = start + cost;
        uint32_t width = 1;
        if (pl->shares_workers >> a & 1) {
          if (cached != a)
            cached = a, nsorted = sort_workers(pl, a, groups < UINT32_MAX ? (uint32_t)ceil(groups) : UINT32_MAX);
          width = best_width(pl->sorted, nsorted, groups, start, cost, &start, &finish);
        }
        if (t->home) finish += home_cost(pl, &g->tasks[i], a);
        if (best == UINT32_MAX || finish < best_finish)
          best = c, best_finish = finish, best_start = start, best_cost = finish - start, best_width_ = width;
      }
    }
    if (best == UINT32_MAX) {
      *fail = i;
      return -1;
    }
    uint32_t a = l->lane_agent[best];
    if (pl->shares_workers >> a & 1) take_workers(pl, a, best_width_, best_start, best_finish);
    if (t->home) take_home(pl, &g->tasks[i], a);
    for (uint32_t x = 0; x < pl->ngroups; ++x) {
      const pred_lane_t *gr = &pl->groups[x];
      uint32_t *cov = &pl->covered[(size_t)best * l->nlanes + gr->lane];
      if (gr->lane != best && gr->seq > *cov) *cov = gr->seq;
    }
    pl->seq[i] = ++pl->lane_len[best];
    pl->lane[i] = best;
    pl->finish[i] = best_finish;
    pl->cost[i] = best_cost;
    pl->lane_free[best] = best_finish;
    pl->used[best] = 1;
    if (pl->earliest[a] == best) find_earliest(pl, a);
  }
  /* The run ends when its last CPU lane (the exec's join lane, or the last
   * GPU one if none) has seen every other lane's end: a lane on another
   * agent costs an edge more (a GPU's end seen by a CPU queue). */
  uint32_t join = UINT32_MAX;
  for (uint32_t c = 0; c < l->nlanes; ++c)
    if (pl->used[c] && (join == UINT32_MAX || l->lane_kind[c] == AQ_AGENT_KIND_CPU ||
                        l->lane_kind[join] != AQ_AGENT_KIND_CPU))
      join = c;
  for (uint32_t c = 0; c < l->nlanes; ++c) {
    if (!pl->used[c]) continue;
    uint32_t a = l->lane_agent[c], b = l->lane_agent[join];
    double end = pl->lane_free[c] + (c == join ? 0 : a == b ? lane_hop_ns(l, a) : aq_plan_transfer_ns(l, a, b, 0));
    if (end > makespan) makespan = end;
  }
  return makespan;
}

/* How many tasks of one work-group agent a runs side by side: its lanes,
 * or on a CPU agent its workers if fewer. */
static double side_by_side(const placer_t *pl, uint32_t a) {
  uint32_t lanes = lanes_in(pl, a), workers = workers_of(pl->l, a);
  return workers && workers < lanes ? workers : lanes;
}

/* Whether agent b could be part of a split kept over agent a alone: it
 * finishes some kernel sooner than a would, or its lanes together could
 * take the share of the work that the split must save (SPLIT_GAIN_GPU
 * where a GPU is one of the two, else SPLIT_GAIN). Where b takes every
 * kernel at least as long, it gains only while a's lanes are all busy, and
 * then by at most its throughput's share. */
static int could_pay(const placer_t *pl, uint32_t a, uint32_t b) {
  const plan_lanes_t *l = pl->l;
  double most = 0; /* the most of one task's work a lane of b does while one of a's does it all */
  for (uint32_t i = 0; i < pl->p->ntasks; ++i) {
    double ca = placed_cost(l, i, a), cb = placed_cost(l, i, b);
    if (pl->hot[i].kind == TASK_HOST || cb < 0) continue;
    if (cb < ca) return 1;
    if (cb > 0 && ca / cb > most) most = ca / cb;
  }
  double x = side_by_side(pl, b) * most / side_by_side(pl, a);
  int gpu = agent_kind(l, a) == AQ_AGENT_KIND_GPU || agent_kind(l, b) == AQ_AGENT_KIND_GPU;
  return x / (1 + x) >= (gpu ? SPLIT_GAIN_GPU : SPLIT_GAIN);
}

/* An agent that runs every kernel and beside which no other could pay
 * for a split: placed alone at once, the placement over all agents would
 * only try, and lose, the others' lanes (on a GPU machine, a graph of
 * tiny CPU tasks paid a second placement for it). -1: none. */
static int32_t dominant(const placer_t *pl) {
  const plan_lanes_t *l = pl->l;
  for (uint32_t a = 0; a < l->nagents; ++a) {
    if (!side_by_side(pl, a) || !runs_every_kernel(pl->hot, pl->g, l, a)) continue;
    uint32_t b = 0;
    while (b < l->nagents && (b == a || !could_pay(pl, a, b))) ++b;
    if (b == l->nagents) return (int32_t)a;
  }
  return -1;
}

/* One lane of CPU agent a, worked out without placing: each task starts
 * as the one before it ends (its producers are all earlier on the lane, its
 * workers all free) and takes its cost at full width, which is what place()
 * finds there, in a fraction of the time. Only where every task is a's: a
 * host call another CPU agent could take, or a pin elsewhere, needs place().
 * The makespan, or -1. */
static double serial_place(placer_t *pl, uint32_t a) {
  const plan_lanes_t *l = pl->l;
  const plan_t *p = pl->p;
  for (uint32_t i = 0; i < p->ntasks; ++i) {
    if (pl->hot[i].agent >= 0 && (uint32_t)pl->hot[i].agent != a) return -1;
    if (pl->hot[i].kind != TASK_HOST) continue;
    for (uint32_t b = 0; b < l->nagents; ++b)
      if (b != a && l->cost_ns[(size_t)i * l->nagents + b] >= 0) return -1;
  }
  uint32_t lane = pl->agent_lanes[pl->first_lane[a]];
  double at = 0;
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    uint32_t i = p->order[k];
    pl->cost[i] = l->cost_ns[(size_t)i * l->nagents + a];
    pl->lane[i] = lane;
    pl->finish[i] = at += pl->cost[i];
  }
  return at;
}

/* Tasks too short for the hand-offs between lanes (a barrier packet, a
 * worker's wake-up) run faster on one lane of a CPU agent, one after
 * another. That placement is tried for each CPU agent that runs every
 * kernel, none of them longer than a few barrier packets, and kept only
 * where it beats the best by SPLIT_GAIN: serialising on a model's word
 * caps the run at one lane's work, where spreading costs only the
 * hand-offs. The lane hop in the estimates is an idle lane's wake-up,
 * dearer than a busy pipeline's; longer tasks (a stencil of 2 us tasks on
 * two lanes, as aq-bench tasks' METG runs) were serialised by it. Tasks
 * whose kernarg sets their time carry a cost key, so that a model of one
 * length does not speak for another. */
static void one_lane(placer_t *best, placer_t *trial, double *best_ms) {
  const plan_lanes_t *l = best->l;
  plan_t *p = best->p;
  for (uint32_t a = 0; a < l->nagents; ++a) {
    if (agent_kind(l, a) != AQ_AGENT_KIND_CPU || lanes_in(best, a) < 2 || !runs_every_kernel(best->hot, best->g, l, a))
      continue;
    double bound = serial_bound(best->g, l, a);
    if (bound < 0 || bound >= (1 - SPLIT_GAIN) * *best_ms) continue;
    uint32_t fail;
    double ms = serial_place(trial, a);
    if (ms < 0) {
      trial->one_lane = 1;
      ms = place(trial, (int32_t)a, &fail);
      trial->one_lane = 0;
    }
    if (ms < 0 || (p->heft_one_lane_ns >= 0 && ms >= p->heft_one_lane_ns)) continue;
    p->heft_one_lane_ns = ms, p->heft_one_lane_agent = (int32_t)a;
    if (ms < (1 - SPLIT_GAIN) * *best_ms) placer_swap(best, trial), *best_ms = ms;
  }
}

/* Sorts ids by decreasing rank, stably (ties keep the order given): a
 * radix sort over the ranks' bits, which order as the ranks do (all
 * positive), RADIX_BITS a pass, skipping a pass where every key has the
 * same digit. qsort's calls through a comparator reading two arrays cost
 * a graph of tiny tasks more than placing it did. */
enum { RADIX_BITS = 11, RADIX = 1 << RADIX_BITS, RADIX_PASSES = (64 + RADIX_BITS - 1) / RADIX_BITS };

static aq_status_t sort_by_rank(uint32_t *ids, uint32_t n, const double *rank) {
  if (n < 2) return AQ_OK;
  uint64_t *key = malloc(2 * (size_t)n * sizeof(uint64_t));
  uint32_t *spare = malloc((size_t)n * sizeof(uint32_t));
  uint32_t(*count)[RADIX] = calloc(RADIX_PASSES, sizeof(*count));
  if (!key || !spare || !count) {
    free(key), free(spare), free(count);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  }
  uint64_t *from_key = key, *to_key = key + n;
  uint32_t *from = ids, *to = spare;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t bits;
    memcpy(&bits, &rank[ids[i]], sizeof(bits));
    from_key[i] = ~bits; /* decreasing */
    for (uint32_t d = 0; d < RADIX_PASSES; ++d) count[d][(from_key[i] >> (d * RADIX_BITS)) & (RADIX - 1)]++;
  }
  for (uint32_t d = 0; d < RADIX_PASSES; ++d) {
    uint32_t shift = d * RADIX_BITS, *c = count[d], sum = 0;
    if (c[(from_key[0] >> shift) & (RADIX - 1)] == n) continue;
    for (uint32_t x = 0; x < RADIX; ++x) {
      uint32_t k = c[x];
      c[x] = sum, sum += k;
    }
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t at = c[(from_key[i] >> shift) & (RADIX - 1)]++;
      to_key[at] = from_key[i], to[at] = from[i];
    }
    uint64_t *tk = from_key;
    uint32_t *t = from;
    from_key = to_key, to_key = tk, from = to, to = t;
  }
  if (from != ids) memcpy(ids, from, (size_t)n * sizeof(uint32_t));
  free(key), free(spare), free(count);
  return AQ_OK;
}

aq_status_t aq_plan_heft(plan_t *p, aq_graph_t *g, const plan_lanes_t *l) {
  uint32_t n = p->ntasks, na = l->nagents;
  p->heft_one_lane_ns = -1, p->heft_one_lane_agent = -1;
  double *mean = malloc(n * sizeof(double)), *rank = malloc(n * sizeof(double)), *below = calloc(n, sizeof(double));
  uint32_t *pos = malloc(n * sizeof(uint32_t)), *order = malloc(n * sizeof(uint32_t));
  hot_task_t *hot = malloc((n ? n : 1) * sizeof(*hot));
  uint32_t *pred_at = malloc((n + 1) * sizeof(uint32_t));
  double *pred_bytes = NULL;
  aq_status_t s = mean && rank && below && pos && order && hot && pred_at
                      ? AQ_OK
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
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
  /* Each edge's bytes once, in task order: for the ranks and for every
   * placement tried (the task_t and tensor_t it reads are cache misses). */
  if (s == AQ_OK) pred_at[0] = 0;
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) pred_at[i + 1] = pred_at[i] + p->tasks[i].npreds;
  /* (With one agent no edge moves data: none are kept, each counts 0.) */
  if (s == AQ_OK && na > 1) pred_bytes = malloc((pred_at[n] ? pred_at[n] : 1) * sizeof(double));
  if (s == AQ_OK && na > 1 && !pred_bytes) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  for (uint32_t i = 0; s == AQ_OK && pred_bytes && i < n; ++i)
    for (uint32_t j = 0; j < p->tasks[i].npreds; ++j)
      pred_bytes[pred_at[i] + j] = edge_bytes(g, p->tasks[i].preds[j], i);
  /* An edge's mean cost: over every ordered pair of agents (the same agent
   * costing a lane hop at most), latency + bytes x ns per byte. */
  double lat = 0, per_byte = 0;
  for (uint32_t a = 0; a < na; ++a)
    for (uint32_t b = 0; b < na; ++b) {
      double base = a == b ? (na > 1 ? 0 : lane_hop_ns(l, a)) : aq_plan_transfer_ns(l, a, b, 0);
      lat += base / ((double)na * na);
      per_byte += (a == b ? 0 : aq_plan_transfer_ns(l, a, b, 1e6) - aq_plan_transfer_ns(l, a, b, 0)) / 1e6 / ((double)na * na);
    }
  uint64_t gpus = 0; /* the GPU agents, a bit each */
  for (uint32_t a = 0; a < na && a < 64; ++a)
    if (agent_kind(l, a) == AQ_AGENT_KIND_GPU) gpus |= 1ull << a;
  int homes = 0, narrow = 1; /* some tensor is persistent; every task is one work-group (placer_init) */
  for (uint32_t x = 0; x < g->ntensors && !homes; ++x) homes = persistent(g->tensors[x].role);
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    hot[i] = hot_of(g, &g->tasks[i], __builtin_popcountll(gpus), homes);
    narrow &= hot[i].groups <= 1;
  }
  /* Upward ranks, in reverse topological order: a task's rank is final once
   * its successors', all later in the order, have been pushed to it
   * (below[q]: the most any successor asks of q); after-any edges order
   * tasks too. */
  for (uint32_t k = n; s == AQ_OK && k-- > 0;) {
    uint32_t i = p->order[k];
    rank[i] = mean[i] + below[i];
    for (uint32_t j = 0; j < p->tasks[i].npreds + hot[i].nafter_any; ++j) {
      int pred = j < p->tasks[i].npreds;
      uint32_t q = pred ? p->tasks[i].preds[j] : g->tasks[i].after_any[j - p->tasks[i].npreds];
      double bytes = !pred ? edge_bytes(g, q, i) : pred_bytes ? pred_bytes[pred_at[i] + j] : 0;
      double up = lat + per_byte * bytes + rank[i];
      if (up > below[q]) below[q] = up;
    }
  }
  if (s == AQ_OK) {
    memcpy(order, p->order, n * sizeof(uint32_t));
    s = sort_by_rank(order, n, rank);
  }
  if (s == AQ_OK) {
    /* Ranks fall along every edge, so this is a topological order; check
     * it all the same and keep the first order if not (NaN costs). */
    for (uint32_t k = 0; k < n; ++k) pos[order[k]] = k;
    int ok = 1;
    for (uint32_t i = 0; i < n && ok; ++i) {
      for (uint32_t j = 0; j < p->tasks[i].npreds; ++j) ok &= pos[p->tasks[i].preds[j]] < pos[i];
      for (uint32_t j = 0; j < hot[i].nafter_any; ++j) ok &= pos[g->tasks[i].after_any[j]] < pos[i];
    }
    if (ok) memcpy(p->order, order, n * sizeof(uint32_t));
  }
  /* Earliest finish per lane, appending only (each lane's stream runs its
   * tasks in this order): for the agents all together, and for each agent
   * that can run every task alone; the mixed placement is kept only where
   * its estimate beats the best single agent's by more than a cross-agent
   * edge and SPLIT_GAIN of the time (a split whose gain is within the
   * models' error costs edges and a second agent's noise for nothing). */
  placer_t mixed = {0}, single = {0};
  uint32_t fail = UINT32_MAX;
  double best_ms = -1, single_ms = -1, margin = 0;
  int32_t single_agent = -1;
  if (s == AQ_OK) s = placer_init(&mixed, p, g, l, hot, gpus, narrow);
  if (s == AQ_OK) s = placer_init(&single, p, g, l, hot, gpus, narrow);
  mixed.pred_bytes = single.pred_bytes = pred_bytes, mixed.pred_at = single.pred_at = pred_at;
  p->heft_dominant = s == AQ_OK && na > 1 ? dominant(&mixed) : -1;
  if (s == AQ_OK) {
    best_ms = place(&mixed, p->heft_dominant, &fail);
    if (best_ms < 0) {
      const task_t *t = &g->tasks[fail];
      s = t->agent >= 0 ? aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is pinned to agent %d, which cannot run its kernel '%s'",
                                   t->name, t->agent, t->kernel)
                        : aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': no agent allowed here has its kernel '%s'",
                                   t->name, t->kernel);
    }
  }
  p->heft_mixed_ns = best_ms;
  for (uint32_t a = 0; a < na; ++a)
    for (uint32_t b = 0; b < na; ++b)
      if (a != b && aq_plan_transfer_ns(l, a, b, 0) > margin) margin = aq_plan_transfer_ns(l, a, b, 0);
  double gain = s == AQ_OK && gpu_split(&mixed) ? SPLIT_GAIN_GPU : SPLIT_GAIN;
  int32_t mixed_on = s == AQ_OK ? kernels_on_one_agent(&mixed) : -1;
  /* Where every kernel went to one agent, that agent's placement is the
   * one just made (tried first, so it is still in `mixed`); an agent whose
   * least possible makespan is already too slow to be kept is not tried
   * (ms >= bound, so ms > best_ms + fmax(margin, gain * ms)). Placing is
   * the dear part of instantiating a big graph. */
  for (uint32_t k = 0; s == AQ_OK && na > 1 && k < na; ++k) {
    uint32_t a = mixed_on >= 0 ? ((uint32_t)mixed_on + k) % na : k;
    if (!runs_every_kernel(hot, g, l, a)) continue;
    if ((int32_t)a == mixed_on) {
      single_ms = best_ms, single_agent = mixed_on;
      continue;
    }
    if (work_bound(&mixed, a) * (1 - gain) > best_ms + margin) continue;
    double ms = place(&single, (int32_t)a, &fail);
    if (ms < 0 || (single_ms >= 0 && ms >= single_ms)) continue;
    single_ms = ms, single_agent = (int32_t)a;
    if (ms <= best_ms + fmax(margin, gain * ms)) placer_swap(&mixed, &single), best_ms = ms;
  }
  p->heft_single_ns = single_ms;
  p->heft_single_agent = single_agent;
  if (s == AQ_OK) one_lane(&mixed, &single, &best_ms);
  p->heft_ns = best_ms;
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    p->tasks[i].lane = mixed.lane[i];
    p->tasks[i].finish = mixed.finish[i];
    p->tasks[i].cost_ns = mixed.cost[i];
  }
  placer_free(&mixed), placer_free(&single);
  free(hot), free(pred_at), free(pred_bytes), free(mean), free(rank), free(below), free(pos), free(order);
  return s;
}
