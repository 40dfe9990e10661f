/* HEFT's decisions on synthetic cost tables: aq_plan_build with made-up
 * agents, task costs and link costs, so the choice between one agent and a
 * split cannot regress silently whatever machine runs the tests. Agent 0 is
 * a CPU agent of one worker (lane 0), agents 1.. are GPUs (a lane each). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "scheduler/plan.h"

enum { MAX_TASKS = 64, MAX_AGENTS = 3 };

typedef struct table {
  uint32_t nagents;
  double cost[MAX_TASKS][MAX_AGENTS]; /* ns; < 0: cannot run there */
  double lat, per_byte;               /* every link between two agents */
} table_t;

static void setup(void) { cr_assert_eq(aq_init(NULL), AQ_OK, "%s", aq_last_error()); }
static void teardown(void) { aq_shut_down(); }
TestSuite(placement, .init = setup, .fini = teardown);

/* HEFT's estimate of its placement over all agents (before it is
 * weighed against single agents), and the agent it placed alone from the
 * start (-1: none), from the last place(). */
static double mixed_ns;
static int32_t dominant_agent;

/* Places g by t; lane of each task into lane[]. */
static void place(aq_graph_t *g, const table_t *t, uint32_t *lane) {
  uint32_t na = t->nagents, lane_agent[MAX_AGENTS], workers[MAX_AGENTS] = {1};
  uint8_t lane_kind[MAX_AGENTS], eligible[MAX_TASKS];
  int32_t node[MAX_AGENTS] = {0};
  double cost[MAX_TASKS * MAX_AGENTS], lat[MAX_AGENTS * MAX_AGENTS], pb[MAX_AGENTS * MAX_AGENTS];
  for (uint32_t a = 0; a < na; ++a) {
    lane_agent[a] = a;
    lane_kind[a] = a ? AQ_AGENT_KIND_GPU : AQ_AGENT_KIND_CPU;
    for (uint32_t b = 0; b < na; ++b) lat[a * na + b] = a == b ? 500 : t->lat, pb[a * na + b] = a == b ? 0 : t->per_byte;
  }
  cr_assert(g->ntasks <= MAX_TASKS);
  for (uint32_t i = 0; i < g->ntasks; ++i) {
    int host = g->tasks[i].kind == TASK_HOST;
    eligible[i] = host ? 1u << AQ_AGENT_KIND_CPU : (1u << AQ_AGENT_KIND_CPU) | (1u << AQ_AGENT_KIND_GPU);
    for (uint32_t a = 0; a < na; ++a) cost[i * na + a] = host && a ? -1 : t->cost[i][a];
  }
  plan_lanes_t l = {na, na, lane_agent, lane_kind, node, eligible, cost, lat, pb, workers, NULL};
  plan_t p;
  cr_assert_eq(aq_plan_build(&p, g, AQ_SCHED_HEFT, &l), AQ_OK, "%s", aq_last_error());
  for (uint32_t i = 0; i < g->ntasks; ++i) lane[i] = p.tasks[i].lane;
  mixed_ns = p.heft_mixed_ns;
  dominant_agent = p.heft_dominant;
  aq_plan_free(&p);
}

static aq_tensor_t tensor(aq_graph_t *g, const char *name, aq_tensor_role_t role) {
  aq_tensor_t x;
  cr_assert_eq(aq_tensor_create(g, name, AQ_DTYPE_F32, role, 2, (int64_t[]){64, 64}, &x), AQ_OK);
  return x;
}

/* A chain of n relus from x. */
static aq_tensor_t chain(aq_graph_t *g, aq_tensor_t x, int n) {
  for (int i = 0; i < n; ++i) cr_assert_eq(aq_op_relu(g, x, &x), AQ_OK, "%s", aq_last_error());
  return x;
}

static aq_status_t noop(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  return AQ_OK;
}

/* A host task (a batch loader) that writes x. */
static void loader(aq_graph_t *g, aq_tensor_t x) {
  aq_host_task_t h = {.name = "load", .fn = noop, .agent = -1, .write_count = 1, .writes = {x}};
  aq_task_t t;
  cr_assert_eq(aq_graph_add_host(g, &h, &t), AQ_OK, "%s", aq_last_error());
}

static uint32_t on_agent(const uint32_t *lane, uint32_t n, uint32_t agent) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) k += lane[i] == agent;
  return k;
}

Test(placement, every_kernel_goes_to_the_fast_agent) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  chain(g, tensor(g, "x", AQ_ROLE_INPUT), 10);
  table_t t = {.nagents = 2, .lat = 10000, .per_byte = 0.1};
  for (int i = 0; i < 10; ++i) t.cost[i][0] = 100000, t.cost[i][1] = 10000;
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(on_agent(lane, 10, 1), 10, "every task on the GPU, %u there", on_agent(lane, 10, 1));
  /* and the other way round */
  for (int i = 0; i < 10; ++i) t.cost[i][0] = 1000, t.cost[i][1] = 10000;
  place(g, &t, lane);
  cr_expect_eq(on_agent(lane, 10, 0), 10, "every task on the CPU, %u there", on_agent(lane, 10, 0));
  aq_graph_destroy(g);
}

/* An agent that takes every kernel longer than another, and all of whose
 * lanes could take too little of the work for a split to be kept, is not
 * tried beside it (one placement instead of two). Equal speeds, or one
 * kernel it runs faster, and it is. */
Test(placement, an_agent_that_cannot_pay_for_a_split_is_not_tried) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_INPUT);
  for (int i = 0; i < 8; ++i) chain(g, x, 1);
  table_t t = {.nagents = 2, .lat = 100, .per_byte = 0};
  for (int i = 0; i < 8; ++i) t.cost[i][0] = 10000, t.cost[i][1] = 1000000;
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(dominant_agent, 0, "the GPU was tried beside the CPU (dominant %d)", dominant_agent);
  cr_expect_eq(on_agent(lane, 8, 0), 8, "every task on the CPU, %u there", on_agent(lane, 8, 0));
  for (int i = 0; i < 8; ++i) t.cost[i][1] = 10000; /* as fast: half the work, a split could pay */
  place(g, &t, lane);
  cr_expect_eq(dominant_agent, -1, "equal agents: one was placed alone (%d)", dominant_agent);
  for (int i = 0; i < 8; ++i) t.cost[i][1] = 1000000;
  t.cost[3][1] = 5000; /* one kernel faster on the GPU (past its launch) */
  place(g, &t, lane);
  cr_expect_eq(dominant_agent, -1, "a GPU faster at one kernel was not tried (%d)", dominant_agent);
  aq_graph_destroy(g);
}

/* Two branches from one input, joined at the end: a split runs them side
 * by side, which pays only where the links are cheap. */
static aq_graph_t *two_branches(int n) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_INPUT), y;
  aq_tensor_t a = chain(g, x, n), b = chain(g, x, n);
  cr_assert_eq(aq_op_matmul(g, a, b, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &y), AQ_OK, "%s", aq_last_error());
  return g;
}

/* Three branches from one input, joined at the end. */
static aq_graph_t *three_branches(int n) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_INPUT), y, z;
  aq_tensor_t a = chain(g, x, n), b = chain(g, x, n), c = chain(g, x, n);
  cr_assert_eq(aq_op_matmul(g, a, b, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &y), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(aq_op_matmul(g, y, c, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &z), AQ_OK, "%s", aq_last_error());
  return g;
}

Test(placement, a_split_is_kept_only_where_the_links_leave_a_gain) {
  aq_graph_t *g = two_branches(5);
  table_t t = {.nagents = 2, .lat = 100000, .per_byte = 0.1};
  for (uint32_t i = 0; i < g->ntasks; ++i) t.cost[i][0] = 12000, t.cost[i][1] = 10000;
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(on_agent(lane, g->ntasks, 1), g->ntasks, "dear links: all on the GPU, %u there",
               on_agent(lane, g->ntasks, 1));
  /* Cheap links, but a split over CPU and GPU that saves under half the
   * run: those estimates are the least sure, one agent stays. */
  t.lat = 100, t.per_byte = 0;
  place(g, &t, lane);
  cr_expect_eq(on_agent(lane, g->ntasks, 1), g->ntasks, "a 45%% gain: all on the GPU, %u there",
               on_agent(lane, g->ntasks, 1));
  aq_graph_destroy(g);
  /* Three branches over a CPU and two GPUs save over half: kept. */
  g = three_branches(5);
  table_t u = {.nagents = 3, .lat = 100, .per_byte = 0};
  for (uint32_t i = 0; i < g->ntasks; ++i) u.cost[i][0] = u.cost[i][1] = u.cost[i][2] = 10000;
  place(g, &u, lane);
  for (uint32_t a = 0; a < 3; ++a)
    cr_expect_geq(on_agent(lane, g->ntasks, a), 4, "a branch on each agent: %u tasks on agent %u",
                  on_agent(lane, g->ntasks, a), a);
  aq_graph_destroy(g);
}

Test(placement, a_gain_within_the_models_error_keeps_one_agent) {
  aq_graph_t *g = two_branches(12);
  /* A split saves at most the one task's GPU time, 4% of the step: not
   * worth a second agent. */
  table_t t = {.nagents = 2, .lat = 100, .per_byte = 0};
  for (uint32_t i = 0; i < g->ntasks; ++i) t.cost[i][0] = 1000000, t.cost[i][1] = 10000;
  t.cost[1][0] = 9000; /* one task a little faster on the CPU */
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(on_agent(lane, g->ntasks, 1), g->ntasks, "all on the GPU, %u there", on_agent(lane, g->ntasks, 1));
  aq_graph_destroy(g);
}

Test(placement, a_tie_between_two_gpus_stays_on_one) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  chain(g, tensor(g, "x", AQ_ROLE_INPUT), 8);
  table_t t = {.nagents = 3, .lat = 20000, .per_byte = 0.01};
  for (int i = 0; i < 8; ++i) t.cost[i][0] = 500000, t.cost[i][1] = t.cost[i][2] = 10000;
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  uint32_t g1 = on_agent(lane, 8, 1), g2 = on_agent(lane, 8, 2);
  cr_expect(g1 == 8 || g2 == 8, "one GPU runs the chain: %u and %u", g1, g2);
  aq_graph_destroy(g);
}

Test(placement, loaders_stay_on_the_cpu_beside_a_gpu_step) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_ACTIVATION);
  loader(g, x);
  chain(g, x, 6);
  table_t t = {.nagents = 2, .lat = 10000, .per_byte = 0.05};
  t.cost[0][0] = 20000;
  for (int i = 1; i < 7; ++i) t.cost[i][0] = 200000, t.cost[i][1] = 5000;
  /* The first kernel is faster on the CPU, beside the loader's output: a
   * greedy earliest finish takes it there, for a gain within the models'
   * error, at the price of a hop. */
  t.cost[1][0] = 4000;
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(lane[0], 0, "the loader on the CPU");
  cr_expect_eq(on_agent(lane, 7, 1), 6, "every kernel on the GPU, %u there", on_agent(lane, 7, 1));
  aq_graph_destroy(g);
}

/* A parameter is read at the start of the next run from where the update
 * left it: an update on the CPU beside a forward pass on the GPU is not
 * free, however quick it is there. */
Test(placement, a_parameters_update_stays_with_its_readers) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_INPUT), w = tensor(g, "w", AQ_ROLE_PARAMETER), h, gr;
  cr_assert_eq(aq_op_matmul(g, x, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &h), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(aq_op_relu(g, h, &gr), AQ_OK);
  cr_assert_eq(aq_op_sgd(g, w, gr, &(aq_sgd_options_t){.lr = 0.1f}), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(g->ntasks, 3);
  table_t t = {.nagents = 2, .lat = 5000, .per_byte = 1};
  t.cost[0][0] = t.cost[1][0] = 100000, t.cost[0][1] = t.cost[1][1] = 10000;
  t.cost[2][0] = 1000, t.cost[2][1] = 30000; /* the update: 30x quicker on the CPU */
  uint32_t lane[MAX_TASKS];
  place(g, &t, lane);
  cr_expect_eq(lane[2], 1, "the update beside the forward pass, on the GPU");
  aq_graph_destroy(g);
}

/* Products of one large input on two GPUs: the second GPU would read it
 * in place from the first one's memory, over and over (PEER_READ_FACTOR),
 * which costs more than the split saves, so the placement over all agents
 * keeps them on one GPU; products of inputs of their own spread over both
 * (and then, saving no more than half, are weighed against one GPU). */
static void products_of(aq_graph_t *g, int shared) {
  aq_tensor_t big = {0};
  for (int i = 0; i < 4; ++i) {
    char name[8] = {'b', (char)('0' + i), 0};
    if (!shared || !i)
      cr_assert_eq(aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){1024, 1024}, &big), AQ_OK);
    aq_tensor_t out;
    cr_assert_eq(aq_op_matmul(g, big, big, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &out), AQ_OK, "%s",
                 aq_last_error());
  }
}

Test(placement, gpus_sharing_a_large_input_do_not_split_it) {
  table_t t = {.nagents = 3, .lat = 10000, .per_byte = 1.0 / 300}; /* NVLink-like: 300 GB/s */
  for (int i = 0; i < 4; ++i) t.cost[i][0] = 2000000, t.cost[i][1] = t.cost[i][2] = 56000;
  uint32_t lane[MAX_TASKS];
  for (int shared = 1; shared >= 0; --shared) {
    aq_graph_t *g;
    cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
    products_of(g, shared);
    place(g, &t, lane);
    uint32_t g1 = on_agent(lane, 4, 1), g2 = on_agent(lane, 4, 2);
    cr_expect(g1 == 4 || g2 == 4, "one GPU runs the products, not %u and %u", g1, g2);
    if (shared)
      cr_expect(mixed_ns >= 4 * 56000, "one input: the split was estimated at %.0f ns", mixed_ns);
    else
      cr_expect(mixed_ns < 3 * 56000, "an input each: the split was estimated at %.0f ns", mixed_ns);
    aq_graph_destroy(g);
  }
}

/* ---- one CPU agent, two lanes sharing two workers ---------------------------- */

/* Two independent chains of n one-group kernels (a user's: only their
 * costs matter here). */
static aq_graph_t *two_chains(int n) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  for (int c = 0; c < 2; ++c) {
    aq_tensor_t x = {0};
    for (int i = 0; i < n; ++i) {
      aq_tensor_t y;
      cr_assert_eq(aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &y), AQ_OK);
      aq_kernel_task_t k = {.name = "tiny", .kernel = "k", .shape = {{1, 1, 1}, {1, 1, 1}}, .write_count = 1,
                            .writes = {y}, .write_offsets = {UINT32_MAX}, .agent = -1, .read_count = i > 0,
                            .reads = {x}, .read_offsets = {UINT32_MAX}};
      cr_assert_eq(aq_graph_add_kernel(g, &k, NULL), AQ_OK, "%s", aq_last_error());
      x = y;
    }
  }
  return g;
}

/* Places g's tasks, each costing task_ns, on lanes 0 and 1 of one CPU agent
 * with two workers, a lane hop of hop_ns and barrier packets of
 * barrier_ns; the lanes into lane[], the plan's estimates into *out. */
static void place_on_two_lanes(aq_graph_t *g, double task_ns, double hop_ns, double barrier_ns, uint32_t *lane,
                               plan_t *out) {
  uint32_t lane_agent[2] = {0, 0}, workers[1] = {2};
  uint8_t lane_kind[2] = {AQ_AGENT_KIND_CPU, AQ_AGENT_KIND_CPU}, eligible[MAX_TASKS];
  int32_t node[1] = {0};
  double cost[MAX_TASKS], lat[1] = {hop_ns}, pb[1] = {0}, bar[1] = {barrier_ns};
  cr_assert(g->ntasks <= MAX_TASKS);
  for (uint32_t i = 0; i < g->ntasks; ++i) eligible[i] = 1u << AQ_AGENT_KIND_CPU, cost[i] = task_ns;
  plan_lanes_t l = {2, 1, lane_agent, lane_kind, node, eligible, cost, lat, pb, workers, bar};
  cr_assert_eq(aq_plan_build(out, g, AQ_SCHED_HEFT, &l), AQ_OK, "%s", aq_last_error());
  for (uint32_t i = 0; i < g->ntasks; ++i) lane[i] = out->tasks[i].lane;
}

Test(placement, tasks_shorter_than_a_hand_off_run_on_one_lane) {
  aq_graph_t *g = two_chains(16);
  uint32_t lane[MAX_TASKS];
  plan_t p;
  /* 50 ns tasks, a 5 us hop, 150 ns barriers: side by side the chains
   * finish in 16 x 50 ns, but the run ends when one lane has seen the
   * other's end (a hop); in turn on one lane they take 32 x 50 ns. */
  place_on_two_lanes(g, 50, 5000, 150, lane, &p);
  cr_expect_eq(p.heft_one_lane_agent, 0, "one lane was tried");
  cr_expect(p.heft_one_lane_ns >= 32 * 50 && p.heft_one_lane_ns < 32 * 50 + 5000, "one lane: %.0f ns",
            p.heft_one_lane_ns);
  cr_expect_eq(p.heft_ns, p.heft_one_lane_ns, "one lane kept: %.0f ns, over both lanes %.0f ns", p.heft_ns,
               p.heft_mixed_ns);
  cr_expect_eq(on_agent(lane, g->ntasks, 0), g->ntasks, "every task on lane 0");
  aq_plan_free(&p);
  aq_graph_destroy(g);
}

Test(placement, tasks_longer_than_a_few_barriers_are_never_serialised) {
  aq_graph_t *g = two_chains(16);
  uint32_t lane[MAX_TASKS];
  plan_t p;
  /* 2 us tasks and a pessimistic 5 us hop: one lane would look as good as
   * two, but such tasks are not put in turn on one lane on the models' word
   * (aq-bench tasks' METG stencil was, at 2 us, and lost half its speed). */
  place_on_two_lanes(g, 2000, 5000, 150, lane, &p);
  cr_expect_eq(p.heft_one_lane_agent, -1, "one lane not tried: %.0f ns", p.heft_one_lane_ns);
  uint32_t on0 = on_agent(lane, g->ntasks, 0);
  cr_expect(on0 > 0 && on0 < g->ntasks, "both lanes used (%u of %u on lane 0)", on0, g->ntasks);
  cr_expect(p.heft_ns <= 16 * 2000 + 5000 + 1, "the chains side by side: %.0f ns", p.heft_ns);
  aq_plan_free(&p);
  aq_graph_destroy(g);
}

Test(placement, a_lane_waits_once_for_what_it_has_already_waited_for) {
  /* A fan-out: one task, then 30 reading it. On the second lane only the
   * first of them waits for the first lane (a barrier packet); the rest are
   * covered by that wait, so the lanes share the work evenly. */
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t root;
  cr_assert_eq(aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &root), AQ_OK);
  for (int i = 0; i < 31; ++i) {
    aq_tensor_t y = root;
    if (i) cr_assert_eq(aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &y), AQ_OK);
    aq_kernel_task_t k = {.name = "fan", .kernel = "k", .shape = {{1, 1, 1}, {1, 1, 1}}, .write_count = 1,
                          .writes = {y}, .write_offsets = {UINT32_MAX}, .agent = -1, .read_count = i > 0,
                          .reads = {root}, .read_offsets = {UINT32_MAX}};
    cr_assert_eq(aq_graph_add_kernel(g, &k, NULL), AQ_OK, "%s", aq_last_error());
  }
  uint32_t lane[MAX_TASKS];
  plan_t p;
  place_on_two_lanes(g, 2000, 1000, 1500, lane, &p);
  uint32_t on0 = on_agent(lane, g->ntasks, 0);
  cr_expect(on0 >= 14 && on0 <= 17, "%u of 31 on lane 0", on0);
  cr_expect(p.heft_ns < 17 * 2000 + 1000 + 2 * 1500, "one barrier charged on the second lane: %.0f ns", p.heft_ns);
  aq_plan_free(&p);
  aq_graph_destroy(g);
}

/* Sequencing (aq_plan_sequence): on an in-order lane, a task whose input
 * comes late from another lane must not hold back one that is ready. Lane
 * 1 is given, in HEFT's order, an update after a long task of lane 2 (a
 * collective), then a small one ready from the start; sequenced, the ready
 * one goes first. Of two tasks ready together, the one of higher rank
 * (more work after it) goes first whatever the old order. */
Test(placement, a_ready_task_is_not_queued_behind_one_that_waits) {
  aq_graph_t *g;
  cr_assert_eq(aq_graph_create(NULL, &g), AQ_OK);
  aq_tensor_t x = tensor(g, "x", AQ_ROLE_INPUT), y = tensor(g, "y", AQ_ROLE_INPUT), slow, late, early;
  cr_assert_eq(aq_op_relu(g, x, &slow), AQ_OK);  /* 0: lane 2, long */
  cr_assert_eq(aq_op_relu(g, slow, &late), AQ_OK); /* 1: lane 1, after 0 */
  cr_assert_eq(aq_op_relu(g, y, &early), AQ_OK);  /* 2: lane 1, ready at once */
  aq_tensor_t a, b;
  cr_assert_eq(aq_op_relu(g, early, &a), AQ_OK); /* 3: lane 1 */
  cr_assert_eq(aq_op_relu(g, early, &b), AQ_OK); /* 4: lane 1, then a chain after it */
  chain(g, b, 3);                                 /* 5..7: lane 1 */
  plan_t p;
  memset(&p, 0, sizeof(p));
  p.ntasks = g->ntasks;
  p.tasks = calloc(p.ntasks, sizeof(plan_task_t));
  p.order = calloc(p.ntasks, sizeof(uint32_t));
  cr_assert(p.tasks && p.order);
  static const uint32_t preds[8][1] = {{0}, {0}, {0}, {2}, {2}, {4}, {5}, {6}};
  static const uint32_t npreds[8] = {0, 1, 0, 1, 1, 1, 1, 1};
  for (uint32_t i = 0; i < 8; ++i) {
    p.tasks[i].preds = (uint32_t *)preds[i], p.tasks[i].npreds = npreds[i];
    p.tasks[i].lane = i == 0 ? 2 : 1, p.tasks[i].cost_ns = i == 0 ? 100000 : 1000;
  }
  /* HEFT's list order by rank: the long task's chain first, 3 before 4. */
  static const uint32_t heft_order[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  memcpy(p.order, heft_order, sizeof(heft_order));
  cr_assert_eq(aq_plan_sequence(&p, g, 3), AQ_OK, "%s", aq_last_error());
  uint32_t at[8];
  for (uint32_t k = 0; k < 8; ++k) at[p.order[k]] = k;
  cr_expect_lt(at[2], at[1], "the ready task waits behind the late one (positions %u, %u)", at[2], at[1]);
  cr_expect_lt(at[4], at[3], "of two ready together, the one with the longer chain after it goes second (%u, %u)",
               at[4], at[3]);
  cr_expect_gt(at[1], at[7], "the late task goes before tasks ready long before it (%u, chain's end %u)", at[1], at[7]);
  for (uint32_t i = 0; i < 8; ++i)
    for (uint32_t j = 0; j < npreds[i]; ++j) cr_expect_lt(at[preds[i][j]], at[i], "task %u before its input %u", i, preds[i][j]);
  free(p.tasks), free(p.order);
  aq_graph_destroy(g);
}
