/* Epilogue fusion (fuse.h). A training step's backward pass writes each
 * weight gradient with a matmul and reads it back once, in the SGD update;
 * relu's backward likewise reads a product once to mask it; a bias
 * gradient, a sum over rows, goes to its update the same way. Fused, the
 * consumer's rule runs on the result in the producer's write-back and the
 * intermediate is never stored: one launch and one pass over it fewer. A
 * CNN's conv block has two such pairs: batch norm's apply into relu (the
 * statistics it also writes are still written, as its rule allows), and
 * max-pool's backward into relu's backward. On
 * a GPU that is what pays (the launches); on a CPU a GEMM's epilogue
 * reading the consumer's arrays in tile order costs about what the pass
 * saved, so the exec fuses there only the rules flagged elementwise
 * (AQ_OP_FUSE_ON_CPUS, the conv block's), the rest only when asked
 * (exec_place.c's aq_exec_fuse).
 *
 * A pair fuses only where the op library's rule accepts it (for a matmul:
 * no bias, activation or batch; for a sum over rows: no accumulation) and
 * nothing else can see the product: one writer, one reader (the consumer), no
 * successor of the product that leads to the consumer, and both tasks on
 * lanes of one agent that fuses them (fuse_in_t.agent_fuses). The gradient
 * of a tensor read twice in the forward pass is added up by several
 * backward tasks, so it has several writers: a pool backward writing part
 * of one stays apart. */
#include "scheduler/fuse.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"

static int reads_at(const task_t *t, size_t off, uint32_t *tensor) {
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->read_off[r] == off) return *tensor = t->reads[r], 1;
  return 0;
}

/* The fusion rules whose consumer t could be (its kernel is the library's). */
static uint32_t consumes(const oplib_t *lib, const task_t *t) {
  if (t->kind != TASK_KERNEL || t->code_object.handle) return 0;
  const oplib_entry_t *e = aq_oplib_find(lib, t->kernel);
  return e ? e->consumes : 0;
}

void aq_task_planned_kernarg(const aq_graph_t *g, const task_t *t, uint8_t *out) {
  memcpy(out, t->kernarg, TASK_KERNARG_MAX);
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->read_off[r] != UINT32_MAX) {
      const void *p = &g->tensors[t->reads[r]];
      memcpy(out + t->read_off[r], &p, sizeof(p));
    }
  for (uint32_t w = 0; w < t->nwrites; ++w)
    if (t->write_off[w] != UINT32_MAX) {
      const void *p = &g->tensors[t->writes[w]];
      memcpy(out + t->write_off[w], &p, sizeof(p));
    }
}

static int reads(const task_t *t, uint32_t x) {
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->reads[r] == x) return 1;
  return 0;
}

static int writes(const task_t *t, uint32_t x) {
  for (uint32_t w = 0; w < t->nwrites; ++w)
    if (t->writes[w] == x) return 1;
  return 0;
}

/* Whether m writes x once, through a slot of its kernarg (which the merge
 * points elsewhere), and its other outputs, if any, are ones the rule's
 * fused kernel still writes and c neither reads (it would read them before
 * the fused kernel, c itself, wrote them) nor writes. */
static int outputs_fuse(const aq_op_fusion_t *r, const task_t *m, uint32_t x, const task_t *c) {
  uint32_t found = 0;
  for (uint32_t w = 0; w < m->nwrites; ++w) {
    if (m->writes[w] == x) {
      if (found++ || m->write_off[w] == UINT32_MAX) return 0;
    } else if (!(r->flags & AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS) || reads(c, m->writes[w]) || writes(c, m->writes[w])) {
      return 0;
    }
  }
  return found == 1;
}

/* Whether rule r runs product m (writing x, and others where the rule
 * allows) with consumer c: m is the library's, of the rule's product
 * kernel, and the rule accepts the pair. */
static int fuses_as(const aq_graph_t *g, const aq_op_fusion_t *r, const task_t *m, uint32_t x, const task_t *c) {
  if (m->kind != TASK_KERNEL || m->code_object.handle || strcmp(m->kernel, r->product) || !outputs_fuse(r, m, x, c))
    return 0;
  uint8_t pa[TASK_KERNARG_MAX], ca[TASK_KERNARG_MAX];
  aq_task_planned_kernarg(g, m, pa);
  aq_task_planned_kernarg(g, c, ca);
  return r->accepts(pa, ca);
}

static int has_pred(const plan_task_t *pt, uint32_t q) {
  for (uint32_t j = 0; j < pt->npreds; ++j)
    if (pt->preds[j] == q) return 1;
  return 0;
}

/* Per tensor, how many tasks read and write it; per task, whether an
 * after-any edge names it (such a task must keep its own signal). */
typedef struct counts {
  uint32_t *readers, *writers;
  uint8_t *awaited;
} counts_t;

static aq_status_t count(const aq_graph_t *g, counts_t *c) {
  c->readers = calloc(g->ntensors, sizeof(uint32_t));
  c->writers = calloc(g->ntensors, sizeof(uint32_t));
  c->awaited = calloc(g->ntasks ? g->ntasks : 1, 1);
  if (!c->readers || !c->writers || !c->awaited) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *k = &g->tasks[t];
    for (uint32_t r = 0; r < k->nreads; ++r) c->readers[k->reads[r]]++;
    for (uint32_t w = 0; w < k->nwrites; ++w) c->writers[k->writes[w]]++;
    for (uint32_t j = 0; j < k->nafter_any; ++j) c->awaited[k->after_any[j]] = 1;
  }
  return AQ_OK;
}

/* Scratch for walking the plan: a stack and a mark per task. */
typedef struct walk {
  uint32_t *stack;
  uint8_t *seen;
} walk_t;

/* Whether `target` is an ancestor of t. */
static int is_ancestor(const plan_t *plan, uint32_t t, uint32_t target, walk_t *w) {
  uint32_t top = 0, found = 0;
  w->stack[top++] = t;
  w->seen[t] = 1;
  while (top && !found) {
    const plan_task_t *pt = &plan->tasks[w->stack[--top]];
    for (uint32_t j = 0; j < pt->npreds && !found; ++j) {
      uint32_t q = pt->preds[j];
      found = q == target;
      if (!w->seen[q]) w->seen[q] = 1, w->stack[top++] = q;
    }
  }
  memset(w->seen, 0, plan->ntasks); /* small graphs fuse; big ones rarely have a candidate */
  return (int)found;
}

/* The product task consumer t can take in, or UINT32_MAX. Tasks ordered
 * after the product for other reasons (a later writer of an operand it
 * reads) will follow the consumer instead, unless one of them leads to the
 * consumer: then the pair stays apart. This under the library's rule r. */
static uint32_t fusable_by(const fuse_in_t *in, const plan_t *plan, const counts_t *c, const fusion_t *f, uint32_t t,
                           walk_t *w, uint32_t r) {
  const aq_graph_t *g = in->graph;
  const task_t *ct = &g->tasks[t];
  const aq_op_fusion_t *rule = &in->lib->table->fusions[r];
  uint32_t x;
  if (!reads_at(ct, rule->consumer_slot, &x)) return UINT32_MAX;
  aq_tensor_role_t role = g->tensors[x].role;
  if ((role != AQ_ROLE_GRADIENT && role != AQ_ROLE_ACTIVATION) || c->readers[x] != 1 || c->writers[x] != 1)
    return UINT32_MAX;
  const plan_task_t *pt = &plan->tasks[t];
  for (uint32_t j = 0; j < pt->npreds; ++j) {
    uint32_t m = pt->preds[j];
    if (!fuses_as(g, rule, &g->tasks[m], x, ct)) continue;
    /* the consumer writes in place of what the product still reads */
    for (uint32_t k = 0; k < ct->nwrites; ++k)
      for (uint32_t q = 0; q < g->tasks[m].nreads; ++q)
        if (ct->writes[k] == g->tasks[m].reads[q]) return UINT32_MAX;
    uint32_t lm = plan->tasks[m].lane, lt = pt->lane;
    if (c->awaited[m] || f->absorbed[m] || f->product[m] != UINT32_MAX) return UINT32_MAX;
    if (in->lane_agent[lm] != in->lane_agent[lt] || !(in->agent_fuses[in->lane_agent[lt]] & (1u << r)))
      return UINT32_MAX;
    for (uint32_t u = 0; u < plan->ntasks; ++u)
      if (u != t && has_pred(&plan->tasks[u], m) && is_ancestor(plan, t, u, w)) return UINT32_MAX;
    return m;
  }
  return UINT32_MAX;
}

/* The product t can take in under the first rule that fuses them, *rule
 * (of `runs`, the rules some lane's agent runs). */
static uint32_t fusable(const fuse_in_t *in, const plan_t *plan, const counts_t *c, const fusion_t *f, uint32_t t,
                        walk_t *w, uint32_t runs, uint8_t *rule) {
  uint32_t rules = consumes(in->lib, &in->graph->tasks[t]) & runs;
  for (; rules; rules &= rules - 1) {
    uint32_t r = (uint32_t)__builtin_ctz(rules), m = fusable_by(in, plan, c, f, t, w, r);
    if (m != UINT32_MAX) return *rule = (uint8_t)(r + 1), m;
  }
  return UINT32_MAX;
}

/* Consumer t takes product m in: t also waits for m's predecessors, and
 * m's other successors wait for t (aq_plan_reorder then counts successors). */
static aq_status_t merge(plan_t *plan, uint32_t t, uint32_t m) {
  aq_status_t s = AQ_OK;
  for (uint32_t j = 0; s == AQ_OK && j < plan->tasks[m].npreds; ++j) s = aq_plan_add_pred(&plan->tasks[t], plan->tasks[m].preds[j]);
  for (uint32_t u = 0; s == AQ_OK && u < plan->ntasks; ++u)
    if (u != t && has_pred(&plan->tasks[u], m)) s = aq_plan_add_pred(&plan->tasks[u], t);
  return s;
}

aq_status_t aq_fuse_plan(const fuse_in_t *in, plan_t *plan, fusion_t *f) {
  const aq_graph_t *g = in->graph;
  memset(f, 0, sizeof(*f));
  f->product = malloc((g->ntasks ? g->ntasks : 1) * sizeof(uint32_t));
  f->absorbed = calloc(g->ntasks ? g->ntasks : 1, 1);
  f->unstored = malloc(g->ntensors * sizeof(uint32_t));
  f->rule = calloc(g->ntasks ? g->ntasks : 1, 1);
  if (!f->product || !f->absorbed || !f->unstored || !f->rule) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; t < g->ntasks; ++t) f->product[t] = UINT32_MAX;
  for (uint32_t x = 0; x < g->ntensors; ++x) f->unstored[x] = UINT32_MAX;
  if (in->off || !in->lib->table) return AQ_OK;
  f->rules = in->lib->table->fusions;
  /* A rule no lane's agent runs fuses no pair: on CPU agents, by default,
   * none does, and looking every task's kernel up found nothing. */
  uint32_t runs = 0;
  for (uint32_t l = 0; l < in->nlanes; ++l) runs |= in->agent_fuses[in->lane_agent[l]];
  if (!runs) return AQ_OK;
  counts_t c = {0};
  walk_t w = {malloc((g->ntasks + 1) * sizeof(uint32_t)), calloc(g->ntasks + 1, 1)};
  aq_status_t s = w.stack && w.seen ? count(g, &c) : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t) {
    uint8_t rule = 0;
    uint32_t m = fusable(in, plan, &c, f, t, &w, runs, &rule), x;
    if (m == UINT32_MAX || !reads_at(&g->tasks[t], f->rules[rule - 1].consumer_slot, &x)) continue;
    s = merge(plan, t, m);
    if (s != AQ_OK) break;
    f->product[t] = m;
    f->rule[t] = rule;
    f->absorbed[m] = 1;
    f->unstored[x] = t;
    f->count++;
  }
  if (s == AQ_OK && f->count) s = aq_plan_reorder(plan, in->graph, in->nlanes);
  free(c.readers), free(c.writers), free(c.awaited), free(w.stack), free(w.seen);
  return s;
}

void aq_fusion_free(fusion_t *f) {
  free(f->product), free(f->absorbed), free(f->unstored), free(f->rule), free(f->lead), free(f->next), free(f->first);
  memset(f, 0, sizeof(*f));
}

uint32_t aq_fuse_consumer_of(const fusion_t *f, const task_t *product) {
  for (uint32_t w = 0; w < product->nwrites; ++w)
    if (f->unstored[product->writes[w]] != UINT32_MAX) return f->unstored[product->writes[w]];
  return UINT32_MAX;
}

static const aq_op_fusion_t *rule_of(const fusion_t *f, uint32_t consumer) {
  return &f->rules[f->rule[consumer] - 1];
}

const char *aq_fuse_kernel(const fusion_t *f, uint32_t consumer) { return rule_of(f, consumer)->fused; }

size_t aq_fuse_kernarg_size(const fusion_t *f, uint32_t consumer) { return rule_of(f, consumer)->kernarg_size; }

size_t aq_fuse_lr_offset(const fusion_t *f, uint32_t consumer) {
  uint32_t off = rule_of(f, consumer)->lr_offset;
  return off == AQ_OP_FIELD_NONE ? SIZE_MAX : off;
}

void aq_fuse_kernarg(const fusion_t *f, uint32_t consumer, const void *consumer_args, const void *product_args,
                     void *out) {
  rule_of(f, consumer)->merge(product_args, consumer_args, out);
}
