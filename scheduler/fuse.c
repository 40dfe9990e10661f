/* Epilogue fusion (fuse.h). A training step's backward pass writes each
 * weight gradient with a matmul and reads it back once, in the SGD update;
 * relu's backward likewise reads a product once to mask it; a bias
 * gradient, a sum over rows, goes to its update the same way. Fused, the
 * consumer's rule runs on the result in the producer's write-back and the
 * intermediate is never stored: one launch and one pass over it fewer. On
 * a GPU that is what pays (the launches); on a CPU the consumer's arrays,
 * read in the GEMM's tile order, cost about what the pass saved, so the
 * exec fuses there only when asked (exec_place.c's aq_exec_fuse).
 *
 * A pair fuses only where nothing else can see the product: one writer (a
 * plain matmul of the op library: no bias, activation or batch; or a sum
 * over rows that does not accumulate), one reader (the consumer), no
 * successor of the product that leads to the consumer, and both tasks on
 * lanes of one agent that fuses them (fuse_in_t.agent_fuses). */
#include "scheduler/fuse.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"

/* The consumer kinds and where each reads the product. */
static int consumer_slot(const task_t *t, size_t *off, aq_matmul_fuse_t *kind) {
  if (t->kind != TASK_KERNEL || t->code_object.handle) return 0;
  if (!strcmp(t->kernel, AQ_KERNEL_SGD)) {
    *off = offsetof(aq_sgd_args_t, grad), *kind = AQ_MATMUL_FUSE_SGD;
    return 1;
  }
  if (!strcmp(t->kernel, AQ_KERNEL_RELU_BWD)) {
    *off = offsetof(aq_relu_args_t, dy), *kind = AQ_MATMUL_FUSE_RELU_MASK;
    return 1;
  }
  return 0;
}

static int reads_at(const task_t *t, size_t off, uint32_t *tensor) {
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->read_off[r] == off) return *tensor = t->reads[r], 1;
  return 0;
}

static int library(const task_t *t, const char *kernel) {
  return t->kind == TASK_KERNEL && !t->code_object.handle && !strcmp(t->kernel, kernel);
}

/* Which fused kernel runs product m (writing only x) with consumer c, as a
 * FUSE_* bit, or 0: a plain library matmul whose epilogue the fused kernel
 * takes over as it is (ops.h's rules for aq_matmul_fused_f32), or a sum
 * over rows (a bias gradient) feeding SGD. */
static uint32_t fused_form(const task_t *m, uint32_t x, const task_t *c, aq_matmul_fuse_t kind) {
  if (m->nwrites != 1 || m->writes[0] != x) return 0;
  aq_sgd_args_t s;
  memcpy(&s, c->kernarg, sizeof(s));
  if (library(m, AQ_KERNEL_SUM_ROWS)) {
    aq_sum_rows_args_t a;
    memcpy(&a, m->kernarg, sizeof(a));
    return kind == AQ_MATMUL_FUSE_SGD && a.beta == 0.0f && s.n == a.cols ? FUSE_SUM_ROWS_SGD : 0;
  }
  if (!library(m, AQ_KERNEL_MATMUL)) return 0;
  uint32_t bias;
  if (reads_at(m, offsetof(aq_matmul_args_t, bias), &bias)) return 0;
  aq_matmul_args_t a;
  memcpy(&a, m->kernarg, sizeof(a));
  if (a.bias || a.activation != AQ_ACTIVATION_NONE || a.batch > 1 || a.ldc != a.n || a.beta != 0.0f) return 0;
  if (kind == AQ_MATMUL_FUSE_SGD)
    return a.k <= AQ_MATMUL_FUSE_SGD_MAX_K && s.n == a.m * a.n ? FUSE_MATMUL_SGD : 0;
  aq_relu_args_t r;
  memcpy(&r, c->kernarg, sizeof(r));
  return r.n == a.m * a.n ? FUSE_MATMUL_RELU_MASK : 0;
}

static int has_pred(const plan_task_t *pt, uint32_t q) {
  for (uint32_t j = 0; j < pt->npreds; ++j)
    if (pt->preds[j] == q) return 1;
  return 0;
}

static aq_status_t add_pred(plan_task_t *pt, uint32_t q) {
  return has_pred(pt, q) ? AQ_OK : aq_plan_append_pred(pt, q);
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
 * consumer: then the pair stays apart. */
static uint32_t fusable(const fuse_in_t *in, const plan_t *plan, const counts_t *c, const fusion_t *f, uint32_t t,
                        walk_t *w) {
  const aq_graph_t *g = in->graph;
  const task_t *ct = &g->tasks[t];
  size_t off;
  aq_matmul_fuse_t kind;
  uint32_t x;
  if (!consumer_slot(ct, &off, &kind) || !reads_at(ct, off, &x)) return UINT32_MAX;
  aq_tensor_role_t role = g->tensors[x].role;
  if ((role != AQ_ROLE_GRADIENT && role != AQ_ROLE_ACTIVATION) || c->readers[x] != 1 || c->writers[x] != 1)
    return UINT32_MAX;
  const plan_task_t *pt = &plan->tasks[t];
  for (uint32_t j = 0; j < pt->npreds; ++j) {
    uint32_t m = pt->preds[j];
    uint32_t form = fused_form(&g->tasks[m], x, ct, kind);
    if (!form) continue;
    /* the consumer writes in place of what the product still reads */
    for (uint32_t k = 0; k < ct->nwrites; ++k)
      for (uint32_t r = 0; r < g->tasks[m].nreads; ++r)
        if (ct->writes[k] == g->tasks[m].reads[r]) return UINT32_MAX;
    uint32_t lm = plan->tasks[m].lane, lt = pt->lane;
    if (c->awaited[m] || f->absorbed[m] || f->product[m] != UINT32_MAX) return UINT32_MAX;
    if (in->lane_agent[lm] != in->lane_agent[lt] || !(in->agent_fuses[in->lane_agent[lt]] & form)) return UINT32_MAX;
    for (uint32_t u = 0; u < plan->ntasks; ++u)
      if (u != t && has_pred(&plan->tasks[u], m) && is_ancestor(plan, t, u, w)) return UINT32_MAX;
    return m;
  }
  return UINT32_MAX;
}

/* Consumer t takes product m in: t also waits for m's predecessors, and
 * m's other successors wait for t (aq_plan_reorder then counts successors). */
static aq_status_t merge(plan_t *plan, uint32_t t, uint32_t m) {
  aq_status_t s = AQ_OK;
  for (uint32_t j = 0; s == AQ_OK && j < plan->tasks[m].npreds; ++j) s = add_pred(&plan->tasks[t], plan->tasks[m].preds[j]);
  for (uint32_t u = 0; s == AQ_OK && u < plan->ntasks; ++u)
    if (u != t && has_pred(&plan->tasks[u], m)) s = add_pred(&plan->tasks[u], t);
  return s;
}

aq_status_t aq_fuse_plan(const fuse_in_t *in, plan_t *plan, fusion_t *f) {
  const aq_graph_t *g = in->graph;
  memset(f, 0, sizeof(*f));
  f->product = malloc((g->ntasks ? g->ntasks : 1) * sizeof(uint32_t));
  f->absorbed = calloc(g->ntasks ? g->ntasks : 1, 1);
  f->unstored = malloc(g->ntensors * sizeof(uint32_t));
  if (!f->product || !f->absorbed || !f->unstored) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; t < g->ntasks; ++t) f->product[t] = UINT32_MAX;
  for (uint32_t x = 0; x < g->ntensors; ++x) f->unstored[x] = UINT32_MAX;
  if (in->off) return AQ_OK;
  counts_t c = {0};
  walk_t w = {malloc((g->ntasks + 1) * sizeof(uint32_t)), calloc(g->ntasks + 1, 1)};
  aq_status_t s = w.stack && w.seen ? count(g, &c) : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan fusion");
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t) {
    uint32_t m = fusable(in, plan, &c, f, t, &w);
    if (m == UINT32_MAX) continue;
    s = merge(plan, t, m);
    if (s != AQ_OK) break;
    f->product[t] = m;
    f->absorbed[m] = 1;
    f->unstored[g->tasks[m].writes[0]] = t;
    f->count++;
  }
  if (s == AQ_OK && f->count) s = aq_plan_reorder(plan, in->graph, in->nlanes);
  free(c.readers), free(c.writers), free(c.awaited), free(w.stack), free(w.seen);
  return s;
}

void aq_fusion_free(fusion_t *f) {
  free(f->product), free(f->absorbed), free(f->unstored);
  memset(f, 0, sizeof(*f));
}

/* Both fused layouts start with the product's arguments: its kernarg
 * offsets hold in the fused one (aq_exec_bind relies on it). */
_Static_assert(offsetof(aq_matmul_fused_args_t, mm) == 0, "matmul's offsets must hold in the fused kernarg");
_Static_assert(offsetof(aq_sum_rows_sgd_args_t, sr) == 0, "sum_rows' offsets must hold in the fused kernarg");

static int by_sum_rows(const aq_graph_t *g, uint32_t product) { return library(&g->tasks[product], AQ_KERNEL_SUM_ROWS); }

const char *aq_fuse_kernel(const aq_graph_t *g, uint32_t product) {
  return by_sum_rows(g, product) ? AQ_KERNEL_SUM_ROWS_SGD : AQ_KERNEL_MATMUL_FUSED;
}

size_t aq_fuse_kernarg_size(const aq_graph_t *g, uint32_t product) {
  return by_sum_rows(g, product) ? sizeof(aq_sum_rows_sgd_args_t) : sizeof(aq_matmul_fused_args_t);
}

size_t aq_fuse_lr_offset(const aq_graph_t *g, uint32_t consumer, uint32_t product) {
  size_t off;
  aq_matmul_fuse_t kind = AQ_MATMUL_FUSE_RELU_MASK;
  consumer_slot(&g->tasks[consumer], &off, &kind);
  if (kind != AQ_MATMUL_FUSE_SGD) return SIZE_MAX;
  return by_sum_rows(g, product) ? offsetof(aq_sum_rows_sgd_args_t, lr) : offsetof(aq_matmul_fused_args_t, lr);
}

void aq_fuse_kernarg(const aq_graph_t *g, uint32_t consumer, uint32_t product, const void *consumer_args,
                  const void *product_args, void *out) {
  size_t off;
  aq_matmul_fuse_t kind = AQ_MATMUL_FUSE_RELU_MASK;
  consumer_slot(&g->tasks[consumer], &off, &kind);
  aq_sgd_args_t s;
  memcpy(&s, consumer_args, sizeof(s));
  if (by_sum_rows(g, product)) {
    aq_sum_rows_sgd_args_t f = {.velocity = s.velocity, .lr = s.lr, .momentum = s.momentum,
                                .weight_decay = s.weight_decay};
    memcpy(&f.sr, product_args, sizeof(f.sr));
    f.sr.out = s.w; /* the sums are w's gradient: w takes them in place */
    memcpy(out, &f, sizeof(f));
    return;
  }
  aq_matmul_fused_args_t f = {.fuse = kind};
  memcpy(&f.mm, product_args, sizeof(f.mm));
  if (kind == AQ_MATMUL_FUSE_SGD) {
    f.mm.c = s.w; /* the product is w's gradient: w takes it in place */
    f.velocity = s.velocity;
    f.lr = s.lr, f.momentum = s.momentum, f.weight_decay = s.weight_decay;
  } else {
    aq_relu_args_t r;
    memcpy(&r, consumer_args, sizeof(r));
    f.mm.c = r.y; /* relu's dx */
    f.mask = r.x; /* the forward output */
    f.ldmask = f.mm.n;
  }
  memcpy(out, &f, sizeof(f));
}
