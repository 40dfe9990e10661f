/* Memory planning by lifetime (scheduler/memplan.c) on its own: graphs
 * built by hand, planned on several lanes, then each buffer shared by two
 * tensors is checked against the plan's dependencies: every task touching
 * the first holder must come before the second's first writer, whatever
 * the lanes, so no two live tensors ever overlap. */
#include "scheduler/memplan.h"

#include <stdio.h>

#include "units.h"

enum { MAXT = 160, BIG = 8192 };

typedef struct hand {
  aq_graph_t g;
  tensor_t tensors[MAXT];
  task_t tasks[MAXT];
} hand_t;

static hand_t *hand_new(void) {
  hand_t *h = calloc(1, sizeof(*h));
  cr_assert(h);
  h->g.tensors = h->tensors, h->g.tasks = h->tasks;
  h->g.ntensors = 1; /* id 0: no tensor */
  return h;
}

static uint32_t tensor(hand_t *h, aq_tensor_role_t role, size_t bytes) {
  cr_assert(h->g.ntensors < MAXT);
  tensor_t *x = &h->tensors[h->g.ntensors];
  snprintf(x->name, sizeof(x->name), "x%u", h->g.ntensors);
  x->dtype = AQ_DTYPE_F32, x->role = role, x->bytes = bytes;
  return h->g.ntensors++;
}

static uint32_t task(hand_t *h, const uint32_t *reads, uint32_t nreads, const uint32_t *writes, uint32_t nwrites) {
  cr_assert(h->g.ntasks < MAXT && nreads <= AQ_TASK_MAX_TENSORS && nwrites <= AQ_TASK_MAX_TENSORS);
  task_t *t = &h->tasks[h->g.ntasks];
  snprintf(t->name, sizeof(t->name), "t%u", h->g.ntasks);
  snprintf(t->kernel, sizeof(t->kernel), "k");
  t->kind = TASK_KERNEL, t->agent = -1;
  t->nreads = nreads, t->nwrites = nwrites;
  memcpy(t->reads, reads, nreads * sizeof(uint32_t));
  memcpy(t->writes, writes, nwrites * sizeof(uint32_t));
  return h->g.ntasks++;
}

/* The plan's ancestor sets, computed apart from memplan: anc[t][q] when q
 * must finish before t starts. */
static uint8_t (*ancestors(const plan_t *p))[MAXT] {
  uint8_t(*anc)[MAXT] = calloc(MAXT, sizeof(*anc));
  cr_assert(anc);
  for (uint32_t k = 0; k < p->ntasks; ++k) {
    uint32_t t = p->order[k];
    for (uint32_t j = 0; j < p->tasks[t].npreds; ++j) {
      uint32_t q = p->tasks[t].preds[j];
      anc[t][q] = 1;
      for (uint32_t i = 0; i < MAXT; ++i) anc[t][i] |= anc[q][i];
    }
  }
  return anc;
}

static int touches(const task_t *t, uint32_t x) {
  for (uint32_t j = 0; j < t->nreads; ++j)
    if (t->reads[j] == x) return 1;
  for (uint32_t j = 0; j < t->nwrites; ++j)
    if (t->writes[j] == x) return 1;
  return 0;
}

/* Whether every task touching x comes before every task touching y. */
static int dead_before(const hand_t *h, uint8_t (*anc)[MAXT], uint32_t x, uint32_t y) {
  for (uint32_t b = 0; b < h->g.ntasks; ++b) {
    if (!touches(&h->tasks[b], y)) continue;
    for (uint32_t a = 0; a < h->g.ntasks; ++a)
      if (touches(&h->tasks[a], x) && !anc[b][a]) return 0;
  }
  return 1;
}

static int overlap(const memplan_t *mp, const hand_t *h, uint32_t x, uint32_t y) {
  return mp->offset[x] < mp->offset[y] + h->tensors[y].bytes && mp->offset[y] < mp->offset[x] + h->tensors[x].bytes;
}

/* Plans h on lanes in one domain (or by the given domains) and checks that
 * every pair of tensors sharing bytes in a domain have disjoint lifetimes;
 * returns how many tensors reuse a buffer. */
static uint32_t plan_and_check(hand_t *h, uint32_t lanes, const uint32_t *domain, uint32_t ndomains, memplan_t *mp,
                               plan_t *p) {
  uint32_t one[MAXT] = {0};
  uint8_t reusable[MAXT] = {0};
  for (uint32_t x = 1; x < h->g.ntensors; ++x) reusable[x] = h->tensors[x].role == AQ_ROLE_ACTIVATION;
  AQ_ASSERT_OK(units_plan(&h->g, lanes, p));
  AQ_ASSERT_OK(aq_memplan_build(mp, &h->g, p, domain ? domain : one, domain ? ndomains : 1, reusable));
  const uint32_t *dom = domain ? domain : one;
  uint8_t(*anc)[MAXT] = ancestors(p);
  uint32_t reuses = 0;
  for (uint32_t x = 1; x < h->g.ntensors; ++x) {
    cr_assert(mp->offset[x] % MEMPLAN_ALIGN == 0, "x%u at offset %zu", x, mp->offset[x]);
    cr_assert(mp->offset[x] + h->tensors[x].bytes <= mp->total[dom[x]], "x%u past its arena", x);
    reuses += mp->reused_by[x] != 0;
    for (uint32_t y = x + 1; y < h->g.ntensors; ++y) {
      if (dom[x] != dom[y] || !overlap(mp, h, x, y)) continue;
      cr_assert(reusable[x] && reusable[y], "x%u and x%u share bytes, and one is not an activation", x, y);
      cr_assert(h->tensors[x].bytes >= MEMPLAN_MIN_BYTES && h->tensors[y].bytes >= MEMPLAN_MIN_BYTES,
                "x%u and x%u share bytes, and one is under MEMPLAN_MIN_BYTES", x, y);
      cr_assert(dead_before(h, anc, x, y) || dead_before(h, anc, y, x),
                "x%u and x%u share bytes at %zu/%zu on %u lanes, and both may be live at once", x, y, mp->offset[x],
                mp->offset[y], lanes);
    }
  }
  free(anc);
  return reuses;
}

static void hand_free(hand_t *h, memplan_t *mp, plan_t *p) {
  aq_memplan_free(mp);
  aq_plan_free(p);
  free(h);
}

TestSuite(memplan);

Test(memplan, a_chain_hands_each_dead_buffer_on) {
  hand_t *h = hand_new();
  uint32_t in = tensor(h, AQ_ROLE_INPUT, BIG), a = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t b = tensor(h, AQ_ROLE_ACTIVATION, BIG), c = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t out = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  task(h, &in, 1, &a, 1), task(h, &a, 1, &b, 1), task(h, &b, 1, &c, 1), task(h, &c, 1, &out, 1);
  memplan_t mp;
  plan_t p;
  plan_and_check(h, 2, NULL, 1, &mp, &p);
  cr_assert_eq(mp.reused_by[a], c, "c is written once a is read: it takes a's buffer (got %u)", mp.reused_by[a]);
  cr_assert_eq(mp.reused_by[b], out);
  cr_assert_eq(mp.reused_by[c], 0, "c is read last by the task that writes out: live then");
  cr_assert_eq(mp.reused_by[out], 0, "out is never read: it is kept for the user");
  cr_assert_eq(mp.offset[c], mp.offset[a]);
  cr_assert_eq(mp.total[0], 3 * (size_t)BIG, "in, and two buffers the four activations take turns in");
  cr_assert_eq(mp.saved, 2 * (size_t)BIG);
  hand_free(h, &mp, &p);
}

/* a -> {b, c} -> d: the branches may run on two lanes at once. */
Test(memplan, parallel_branches_keep_their_own_buffers) {
  hand_t *h = hand_new();
  uint32_t in = tensor(h, AQ_ROLE_INPUT, BIG), a = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t b = tensor(h, AQ_ROLE_ACTIVATION, BIG), c = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t d = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  task(h, &in, 1, &a, 1), task(h, &a, 1, &b, 1), task(h, &a, 1, &c, 1);
  task(h, (uint32_t[]){b, c}, 2, &d, 1);
  memplan_t mp;
  plan_t p;
  plan_and_check(h, 2, NULL, 1, &mp, &p);
  cr_assert(!overlap(&mp, h, b, c), "b and c are live together");
  cr_assert(!overlap(&mp, h, a, b) && !overlap(&mp, h, a, c), "a is read as b and c are written");
  cr_assert_eq(mp.reused_by[a], d, "both readers of a come before d's writer");
  hand_free(h, &mp, &p);
}

/* Two independent chains: the second comes later in plan order, but nothing
 * orders it after the first, so it may run beside it on another lane. */
Test(memplan, a_buffer_goes_only_to_a_task_ordered_after_its_holder) {
  hand_t *h = hand_new();
  uint32_t in1 = tensor(h, AQ_ROLE_INPUT, BIG), in2 = tensor(h, AQ_ROLE_INPUT, BIG);
  uint32_t a = tensor(h, AQ_ROLE_ACTIVATION, BIG), o1 = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t b = tensor(h, AQ_ROLE_ACTIVATION, BIG), o2 = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  task(h, &in1, 1, &a, 1), task(h, &a, 1, &o1, 1);
  task(h, &in2, 1, &b, 1), task(h, &b, 1, &o2, 1);
  memplan_t mp;
  plan_t p;
  plan_and_check(h, 2, NULL, 1, &mp, &p);
  cr_assert_eq(mp.reused_by[a], 0, "a went to x%u of the other chain", mp.reused_by[a]);
  cr_assert_eq(mp.saved, 0);
  hand_free(h, &mp, &p);
}

/* Small activations, other roles and other domains never share. */
Test(memplan, only_big_activations_of_one_domain_share) {
  hand_t *h = hand_new();
  uint32_t in = tensor(h, AQ_ROLE_INPUT, BIG), small = tensor(h, AQ_ROLE_ACTIVATION, MEMPLAN_MIN_BYTES / 2);
  uint32_t a = tensor(h, AQ_ROLE_ACTIVATION, BIG), g = tensor(h, AQ_ROLE_GRADIENT, BIG);
  uint32_t b = tensor(h, AQ_ROLE_ACTIVATION, BIG), c = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  uint32_t s2 = tensor(h, AQ_ROLE_ACTIVATION, MEMPLAN_MIN_BYTES / 2), out = tensor(h, AQ_ROLE_ACTIVATION, BIG);
  task(h, &in, 1, &small, 1), task(h, &small, 1, &a, 1), task(h, &a, 1, &g, 1), task(h, &g, 1, &b, 1);
  task(h, &b, 1, &c, 1), task(h, &c, 1, &s2, 1), task(h, &s2, 1, &out, 1);
  uint32_t domain[MAXT] = {0};
  domain[b] = 1; /* a is dead when b is written, but b lives in another arena */
  memplan_t mp;
  plan_t p;
  plan_and_check(h, 1, domain, 2, &mp, &p);
  cr_assert_eq(mp.reused_by[small], 0);
  cr_assert_eq(mp.reused_by[g], 0, "a gradient is not reusable here");
  cr_assert_eq(mp.reused_by[a], c, "a's buffer goes to the next activation of its domain (got x%u)", mp.reused_by[a]);
  cr_assert_eq(mp.reused_by[c], out);
  cr_assert_eq(mp.reused_by[b], 0, "b is alone in domain 1");
  cr_assert_eq(mp.total[1], (size_t)BIG);
  hand_free(h, &mp, &p);
}

/* Random graphs: each task reads one to three earlier tensors and writes a
 * new one, some also update what they read in place; sizes straddle
 * MEMPLAN_MIN_BYTES; two domains; one to eight lanes. */
Test(memplan, random_graphs_never_overlap_two_live_tensors) {
  uint32_t seed = 12345, total_reuses = 0;
#define RAND() (seed = seed * 1664525u + 1013904223u, seed >> 8)
  for (int round = 0; round < 60; ++round) {
    hand_t *h = hand_new();
    uint32_t domain[MAXT] = {0}, ntasks = 20 + RAND() % 100;
    for (int i = 0; i < 3; ++i) tensor(h, AQ_ROLE_INPUT, BIG);
    for (uint32_t t = 0; t < ntasks; ++t) {
      uint32_t reads[3], nr = 1 + RAND() % 3, writes[2], nw = 1;
      for (uint32_t r = 0; r < nr; ++r) {
        /* mostly recent tensors: long chains with some long-lived ones */
        uint32_t back = RAND() % 4 == 0 ? RAND() % (h->g.ntensors - 1) : RAND() % 4;
        reads[r] = h->g.ntensors - 1 > back ? h->g.ntensors - 1 - back : 1;
      }
      if (RAND() % 8 == 0 && h->tensors[reads[0]].role == AQ_ROLE_ACTIVATION) writes[nw++] = reads[0];
      size_t bytes = RAND() % 5 == 0 ? 1024 : MEMPLAN_MIN_BYTES * (1 + RAND() % 8);
      writes[0] = tensor(h, RAND() % 10 == 0 ? AQ_ROLE_GRADIENT : AQ_ROLE_ACTIVATION, bytes);
      domain[writes[0]] = RAND() % 4 == 0;
      task(h, reads, nr, writes, nw);
    }
    memplan_t mp;
    plan_t p;
    total_reuses += plan_and_check(h, 1 + round % 8, domain, 2, &mp, &p);
    hand_free(h, &mp, &p);
  }
#undef RAND
  cr_assert_gt(total_reuses, 100, "the random graphs should share buffers (%u tensors did)", total_reuses);
}
