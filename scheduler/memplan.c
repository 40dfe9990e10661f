/* Memory planning by lifetime (see memplan.h).
 *
 * Each (candidate tensor, task touching it) pair gets a bit; every task
 * gets the set of pairs among its ancestors (the union over its
 * predecessors, in topological order). A tensor is dead before task w when
 * all of its pairs are in w's set. Buffers are then handed out greedily in
 * topological order, best fit first. The bit sets cost tasks x pairs bits;
 * a graph where that passes PLAN_BITS_MAX keeps a buffer per tensor. */
#include "scheduler/memplan.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"

enum { PLAN_BITS_MAX = 1 << 27 };

typedef struct buffer_slot {
  uint32_t domain, owner; /* owner: the tensor that holds it last */
  size_t offset, size;
} buffer_slot_t;

static size_t align_up(size_t n) { return (n + MEMPLAN_ALIGN - 1) & ~(size_t)(MEMPLAN_ALIGN - 1); }

static int touches(const task_t *t, uint32_t x, int *reads) {
  int hit = 0;
  *reads = 0;
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->reads[r] == x) hit = *reads = 1;
  for (uint32_t w = 0; w < t->nwrites; ++w)
    if (t->writes[w] == x) hit = 1;
  return hit;
}

void aq_memplan_free(memplan_t *mp) {
  free(mp->offset), free(mp->total), free(mp->reused_by);
  memset(mp, 0, sizeof(*mp));
}

aq_status_t aq_memplan_build(memplan_t *mp, const aq_graph_t *g, const plan_t *p, const uint32_t *domain,
                          uint32_t ndomains, const uint8_t *reusable) {
  memset(mp, 0, sizeof(*mp));
  uint32_t nt = g->ntensors, n = p->ntasks;
  mp->offset = calloc(nt ? nt : 1, sizeof(size_t));
  mp->total = calloc(ndomains ? ndomains : 1, sizeof(size_t));
  mp->reused_by = calloc(nt ? nt : 1, sizeof(uint32_t));
  uint32_t *first = malloc((nt ? nt : 1) * sizeof(uint32_t)), *count = calloc(nt ? nt : 1, sizeof(uint32_t));
  uint32_t *base = calloc(nt ? nt : 1, sizeof(uint32_t));
  uint8_t *donor = calloc(nt ? nt : 1, 1), *placed = calloc(nt ? nt : 1, 1);
  uint64_t *bits = NULL;
  buffer_slot_t *slots = NULL;
  aq_status_t s = mp->offset && mp->total && mp->reused_by && first && count && base && donor && placed
                      ? AQ_OK
                      : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  /* Candidates and their pairs: first toucher, touch count, and whether the
   * last touch (in plan order) reads it (else it is an output: kept). */
  uint64_t pairs = 0;
  /* A graph whose activations are all too small to share (tiny tasks)
   * has none: its tasks are not walked for them. */
  int some = 0;
  for (uint32_t x = 0; s == AQ_OK && x < nt && !some; ++x) some = reusable[x] && g->tensors[x].bytes >= MEMPLAN_MIN_BYTES;
  for (uint32_t x = 0; s == AQ_OK && x < nt; ++x) first[x] = UINT32_MAX;
  for (uint32_t k = 0; s == AQ_OK && some && k < n; ++k) {
    uint32_t t = p->order[k];
    const task_t *task = &g->tasks[t];
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
      uint32_t x = j < task->nreads ? task->reads[j] : task->writes[j - task->nreads];
      if (!reusable[x] || g->tensors[x].bytes < MEMPLAN_MIN_BYTES) continue;
      int rd;
      touches(task, x, &rd);
      /* a task may list a tensor twice (read and written): one pair */
      int dup = 0;
      for (uint32_t i = 0; i < j; ++i)
        dup |= (i < task->nreads ? task->reads[i] : task->writes[i - task->nreads]) == x;
      if (dup) continue;
      if (first[x] == UINT32_MAX) first[x] = t;
      count[x]++;
      donor[x] = (uint8_t)rd;
      pairs++;
    }
  }
  uint64_t words = (pairs + 63) / 64;
  int plan = s == AQ_OK && pairs && words * 64 * (uint64_t)n <= PLAN_BITS_MAX;
  if (plan) {
    bits = calloc((size_t)words * n, sizeof(uint64_t));
    slots = calloc(nt, sizeof(buffer_slot_t));
    if (!bits || !slots) plan = 0; /* no memory to plan: a buffer each still works */
  }
  uint32_t *ord = NULL, *pair_of = NULL;
  uint64_t *start = NULL;
  if (plan) {
    uint32_t next = 0;
    for (uint32_t x = 0; x < nt; ++x)
      if (count[x]) base[x] = next, next += count[x];
    /* Pair ordinals: the k-th toucher (in plan order) of x is bit base[x] + k. */
    uint64_t touches_total = 0;
    for (uint32_t t = 0; t < n; ++t) touches_total += g->tasks[t].nreads + g->tasks[t].nwrites;
    ord = calloc(nt, sizeof(uint32_t));
    pair_of = malloc((size_t)(touches_total ? touches_total : 1) * sizeof(uint32_t));
    start = calloc((size_t)n + 1, sizeof(uint64_t));
    if (!ord || !pair_of || !start) plan = 0;
  }
  for (uint32_t t = 0; plan && t < n; ++t) start[t + 1] = start[t] + g->tasks[t].nreads + g->tasks[t].nwrites;
  for (uint32_t k = 0; plan && k < n; ++k) {
    uint32_t t = p->order[k];
    const task_t *task = &g->tasks[t];
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
      uint32_t x = j < task->nreads ? task->reads[j] : task->writes[j - task->nreads], dup = 0;
      for (uint32_t i = 0; i < j; ++i) dup |= (i < task->nreads ? task->reads[i] : task->writes[i - task->nreads]) == x;
      pair_of[start[t] + j] = count[x] && !dup ? base[x] + ord[x]++ : UINT32_MAX;
    }
  }
  /* Ancestor sets: set(t) = OR over predecessors q of set(q) | pairs(q). */
  for (uint32_t k = 0; plan && k < n; ++k) {
    uint32_t t = p->order[k];
    uint64_t *mine = bits + (size_t)t * words;
    const plan_task_t *pt = &p->tasks[t];
    for (uint32_t j = 0; j < pt->npreds; ++j) {
      uint32_t q = pt->preds[j];
      const uint64_t *theirs = bits + (size_t)q * words;
      for (uint64_t w = 0; w < words; ++w) mine[w] |= theirs[w];
      for (uint64_t i = start[q]; i < start[q + 1]; ++i)
        if (pair_of[i] != UINT32_MAX) mine[pair_of[i] / 64] |= 1ull << (pair_of[i] % 64);
    }
  }
  free(ord), free(pair_of), free(start);
  /* Hand out buffers: non-candidates and tensors no slot fits get their own;
   * a candidate's first writer looks for the smallest slot of its domain
   * whose owner is dead before it. */
  uint32_t nslots = 0;
  for (uint32_t k = 0; s == AQ_OK && plan && k < n; ++k) {
    uint32_t t = p->order[k];
    const task_t *task = &g->tasks[t];
    const uint64_t *anc = bits + (size_t)t * words;
    for (uint32_t j = 0; j < task->nwrites; ++j) {
      uint32_t x = task->writes[j];
      if (!count[x] || first[x] != t || placed[x]) continue;
      placed[x] = 1;
      size_t need = align_up(g->tensors[x].bytes);
      uint32_t best = UINT32_MAX;
      for (uint32_t i = 0; i < nslots; ++i) {
        buffer_slot_t *sl = &slots[i];
        uint32_t o = sl->owner;
        if (sl->domain != domain[x] || sl->size < need || !donor[o]) continue;
        if (best != UINT32_MAX && slots[best].size <= sl->size) continue;
        int dead = 1;
        for (uint32_t b = base[o]; b < base[o] + count[o] && dead; ++b) dead = (anc[b / 64] >> (b % 64)) & 1;
        if (dead) best = i;
      }
      if (best != UINT32_MAX) {
        mp->offset[x] = slots[best].offset;
        mp->reused_by[slots[best].owner] = x;
        slots[best].owner = x;
        mp->saved += g->tensors[x].bytes;
      } else {
        buffer_slot_t *sl = &slots[nslots++];
        sl->domain = domain[x], sl->owner = x, sl->size = need;
        sl->offset = mp->offset[x] = mp->total[domain[x]];
        mp->total[domain[x]] += need;
      }
    }
  }
  for (uint32_t x = 1; s == AQ_OK && x < nt; ++x) {
    if (plan && placed[x]) continue;
    mp->offset[x] = mp->total[domain[x]];
    mp->total[domain[x]] += align_up(g->tensors[x].bytes);
  }
  free(first), free(count), free(base), free(donor), free(placed), free(bits), free(slots);
  if (s != AQ_OK) aq_memplan_free(mp);
  return s;
}
