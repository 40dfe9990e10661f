/* Epilogue fusion's choice of pairs (scheduler/fuse.c) on its own: graphs
 * built through the public API and planned on lanes of one CPU agent, then
 * aq_fuse_plan with the op library's rules and those each agent runs. Which
 * pairs fuse, which stay apart and why, and the plan still an order the
 * packets can follow. */
#include <stddef.h>
#include <stdint.h>

#include "scheduler/fuse.h"
#include <stdio.h>

#include "units.h"

enum { B = 32, IN = 40, H = 48, OUT = 10 };

/* The op library's description, as an exec reads it. */
static const oplib_t *lib;
static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  AQ_ASSERT_OK(aq_op_library_ops(&lib));
}
static void teardown(void) { aq_shut_down(); }
TestSuite(fuse_pairs, .init = setup, .fini = teardown);

/* The bit of the library's rule fusing product into consumer. */
static uint32_t rule(const char *product, const char *consumer) {
  for (uint32_t r = 0; r < lib->table->fusion_count; ++r)
    if (!strcmp(lib->table->fusions[r].product, product) && !strcmp(lib->table->fusions[r].consumer, consumer))
      return 1u << r;
  cr_assert_fail("the op library fuses no %s into %s", product, consumer);
  return 0;
}
#define ALL_FORMS ((1u << lib->table->fusion_count) - 1)

static aq_tensor_t make(aq_graph_t *g, const char *name, aq_tensor_role_t role, int64_t rows, int64_t cols) {
  aq_tensor_t t;
  AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, role, cols ? 2 : 1, (int64_t[]){rows, cols}, &t));
  return t;
}

/* The index of the n-th task (from 0) running kernel. */
static uint32_t task_of(const aq_graph_t *g, const char *kernel, uint32_t n) {
  for (uint32_t t = 0; t < g->ntasks; ++t)
    if (!strcmp(g->tasks[t].kernel, kernel) && n-- == 0) return t;
  cr_assert_fail("no task %u runs %s", n, kernel);
  return UINT32_MAX;
}

/* The plan's order runs every task after its predecessors. */
static void assert_topological(const plan_t *p) {
  uint32_t *at = malloc(p->ntasks * sizeof(uint32_t));
  for (uint32_t k = 0; k < p->ntasks; ++k) at[p->order[k]] = k;
  for (uint32_t t = 0; t < p->ntasks; ++t)
    for (uint32_t j = 0; j < p->tasks[t].npreds; ++j)
      cr_assert_lt(at[p->tasks[t].preds[j]], at[t], "task %u runs before its predecessor %u", t, p->tasks[t].preds[j]);
  free(at);
}

typedef struct fused {
  plan_t plan;
  fusion_t f;
} fused_t;

/* g planned on nlanes lanes, then fused; lane_agent: NULL for one agent,
 * and product_lane moves task product_task to a lane first (UINT32_MAX: no). */
static void fuse_on(aq_graph_t *g, uint32_t nlanes, const uint32_t *lane_agent, uint32_t forms, int off,
                    uint32_t product_task, uint32_t product_lane, fused_t *out) {
  static const uint32_t one_agent[UNITS_LANES_MAX] = {0};
  uint32_t fuses[2] = {forms, forms};
  AQ_ASSERT_OK(units_plan(g, nlanes, &out->plan));
  if (product_task != UINT32_MAX) out->plan.tasks[product_task].lane = product_lane;
  fuse_in_t in = {g, nlanes, lane_agent ? lane_agent : one_agent, lib, fuses, off};
  AQ_ASSERT_OK(aq_fuse_plan(&in, &out->plan, &out->f));
  assert_topological(&out->plan);
}

static void fused_free(fused_t *x, aq_graph_t *g) {
  aq_fusion_free(&x->f);
  aq_plan_free(&x->plan);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* dW = x^T dy, then w's SGD update: the update can run in the product's
 * write-back. */
static aq_graph_t *weight_update(int64_t batch, aq_tensor_t *out_grad) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x = make(g, "x", AQ_ROLE_INPUT, batch, IN), dy = make(g, "dy", AQ_ROLE_INPUT, batch, H);
  aq_tensor_t w = make(g, "w", AQ_ROLE_PARAMETER, IN, H), none = {0};
  AQ_ASSERT_OK(aq_op_matmul(g, x, dy, none, 1, 0, AQ_ACTIVATION_NONE, out_grad));
  aq_sgd_options_t o = {.lr = 0.1f, .momentum = 0.9f};
  AQ_ASSERT_OK(aq_op_sgd(g, w, *out_grad, &o));
  return g;
}

Test(fuse_pairs, a_weight_gradient_runs_in_its_update) {
  aq_tensor_t gw;
  aq_graph_t *g = weight_update(B, &gw);
  uint32_t mm = task_of(g, AQ_KERNEL_MATMUL, 0), sgd = task_of(g, AQ_KERNEL_SGD, 0);
  fused_t x;
  fuse_on(g, 2, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &x);
  cr_assert_eq(x.f.count, 1);
  cr_assert_eq(x.f.product[sgd], mm);
  cr_assert(x.f.absorbed[mm] && !x.f.absorbed[sgd]);
  cr_assert_eq(x.f.unstored[gw.id], sgd, "the gradient is never stored: the update takes it in");
  cr_assert_str_eq(aq_fuse_kernel(&x.f, sgd), AQ_KERNEL_MATMUL_FUSED);
  cr_assert_eq(aq_fuse_kernarg_size(&x.f, sgd), sizeof(aq_matmul_fused_args_t));
  cr_assert_eq(aq_fuse_lr_offset(&x.f, sgd), offsetof(aq_matmul_fused_args_t, lr));
  fused_free(&x, g);
}

Test(fuse_pairs, nothing_fuses_off_or_where_the_agent_lacks_the_form) {
  aq_tensor_t gw;
  aq_graph_t *g = weight_update(B, &gw);
  fused_t x;
  fuse_on(g, 2, NULL, ALL_FORMS, 1, UINT32_MAX, 0, &x);
  cr_assert_eq(x.f.count, 0, "off: AQ_EXEC_NO_FUSION or AQ_FUSION=0");
  for (uint32_t t = 0; t < g->ntasks; ++t) cr_assert(x.f.product[t] == UINT32_MAX && !x.f.absorbed[t]);
  cr_assert_eq(x.f.unstored[gw.id], UINT32_MAX);
  aq_fusion_free(&x.f), aq_plan_free(&x.plan);
  fuse_on(g, 2, NULL, rule(AQ_KERNEL_MATMUL, AQ_KERNEL_RELU_BWD) | rule(AQ_KERNEL_SUM_ROWS, AQ_KERNEL_SGD), 0,
          UINT32_MAX, 0, &x);
  cr_assert_eq(x.f.count, 0, "the agent runs no matmul-into-SGD kernel");
  fused_free(&x, g);
}

Test(fuse_pairs, a_pair_across_two_agents_stays_apart) {
  aq_tensor_t gw;
  aq_graph_t *g = weight_update(B, &gw);
  uint32_t mm = task_of(g, AQ_KERNEL_MATMUL, 0), sgd = task_of(g, AQ_KERNEL_SGD, 0), two[2] = {0, 1};
  fused_t x;
  fuse_on(g, 2, two, ALL_FORMS, 0, mm, 1, &x);
  cr_assert_neq(x.plan.tasks[sgd].lane, 1, "the update should be on agent 0's lane");
  cr_assert_eq(x.f.count, 0, "the product runs on agent 1, its update on agent 0");
  fused_free(&x, g);
}

Test(fuse_pairs, a_depth_past_the_fused_kernels_stays_apart) {
  aq_tensor_t gw;
  aq_graph_t *g = weight_update(AQ_MATMUL_FUSE_SGD_MAX_K + 1, &gw);
  fused_t x;
  fuse_on(g, 1, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &x);
  cr_assert_eq(x.f.count, 0, "k = %d is past AQ_MATMUL_FUSE_SGD_MAX_K", AQ_MATMUL_FUSE_SGD_MAX_K + 1);
  fused_free(&x, g);
}

Test(fuse_pairs, a_product_someone_else_reads_stays_apart) {
  aq_tensor_t gw, seen;
  aq_graph_t *g = weight_update(B, &gw);
  AQ_ASSERT_OK(aq_op_relu(g, gw, &seen));
  fused_t x;
  fuse_on(g, 2, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &x);
  cr_assert_eq(x.f.count, 0, "relu reads the gradient too: it must be stored");
  fused_free(&x, g);
}

/* A product whose own epilogue (a bias, an activation) the fused kernel
 * would have to run too. */
Test(fuse_pairs, a_product_with_a_bias_or_an_activation_stays_apart) {
  for (int kind = 0; kind < 2; ++kind) {
    aq_graph_t *g;
    AQ_ASSERT_OK(aq_graph_create(NULL, &g));
    aq_tensor_t x = make(g, "x", AQ_ROLE_INPUT, B, IN), dy = make(g, "dy", AQ_ROLE_INPUT, B, H);
    aq_tensor_t w = make(g, "w", AQ_ROLE_PARAMETER, IN, H), bias = make(g, "bias", AQ_ROLE_INPUT, H, 0), gw;
    aq_tensor_t none = {0};
    AQ_ASSERT_OK(aq_op_matmul(g, x, dy, kind ? none : bias, 1, 0, kind ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE,
                              &gw));
    aq_sgd_options_t o = {.lr = 0.1f};
    AQ_ASSERT_OK(aq_op_sgd(g, w, gw, &o));
    fused_t f;
    fuse_on(g, 1, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &f);
    cr_assert_eq(f.f.count, 0, "%s", kind ? "an activation" : "a bias");
    fused_free(&f, g);
  }
}

/* An MLP's training step: each weight gradient into its update, each bias
 * gradient (a sum over rows) into its update, and each hidden layer's dX
 * product into relu's backward mask. */
Test(fuse_pairs, an_mlp_step_fuses_every_gradient_and_relu_mask) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x = make(g, "x", AQ_ROLE_INPUT, B, IN), h = x, loss, labels, w[3], b[3];
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &labels));
  int64_t dims[3][2] = {{IN, H}, {H, H}, {H, OUT}};
  for (int l = 0; l < 3; ++l) {
    char wn[8], bn[8]; /* names are unique within a graph */
    snprintf(wn, sizeof(wn), "w%d", l), snprintf(bn, sizeof(bn), "b%d", l);
    w[l] = make(g, wn, AQ_ROLE_PARAMETER, dims[l][0], dims[l][1]);
    b[l] = make(g, bn, AQ_ROLE_PARAMETER, dims[l][1], 0);
    AQ_ASSERT_OK(aq_op_matmul(g, h, w[l], b[l], 0, 0, l < 2 ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE, &h));
  }
  AQ_ASSERT_OK(aq_op_softmax_xent(g, h, labels, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_sgd_options_t o = {.lr = 0.1f, .momentum = 0.9f};
  for (int l = 0; l < 3; ++l) {
    aq_tensor_t gw, gb;
    AQ_ASSERT_OK(aq_graph_gradient(g, w[l], &gw));
    AQ_ASSERT_OK(aq_graph_gradient(g, b[l], &gb));
    AQ_ASSERT_OK(aq_op_sgd(g, w[l], gw, &o));
    AQ_ASSERT_OK(aq_op_sgd(g, b[l], gb, &o));
  }
  fused_t f;
  fuse_on(g, 4, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &f);
  uint32_t mm_sgd = 0, rows_sgd = 0, mm_relu = 0;
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    uint32_t m = f.f.product[t];
    if (m == UINT32_MAX) continue;
    const char *c = g->tasks[t].kernel, *p = g->tasks[m].kernel;
    cr_assert(f.f.absorbed[m], "task %u took %u in, which still runs", t, m);
    mm_sgd += !strcmp(p, AQ_KERNEL_MATMUL) && !strcmp(c, AQ_KERNEL_SGD);
    rows_sgd += !strcmp(p, AQ_KERNEL_SUM_ROWS) && !strcmp(c, AQ_KERNEL_SGD);
    mm_relu += !strcmp(p, AQ_KERNEL_MATMUL) && !strcmp(c, AQ_KERNEL_RELU_BWD);
    /* whatever followed the product now follows its consumer */
    for (uint32_t u = 0; u < g->ntasks; ++u)
      for (uint32_t j = 0; u != t && j < f.plan.tasks[u].npreds; ++j)
        if (f.plan.tasks[u].preds[j] == m) {
          int after = 0;
          for (uint32_t i = 0; i < f.plan.tasks[u].npreds; ++i) after |= f.plan.tasks[u].preds[i] == t;
          cr_assert(after, "task %u follows product %u but not its consumer %u", u, m, t);
        }
  }
  cr_assert_eq(mm_sgd, 3, "weight gradients into SGD: %u", mm_sgd);
  cr_assert_eq(rows_sgd, 3, "bias gradients into SGD: %u", rows_sgd);
  cr_assert_eq(mm_relu, 2, "dX into relu's backward: %u", mm_relu);
  cr_assert_eq(f.f.count, 8);
  fused_free(&f, g);
}

/* A conv block's training step: conv2d -> batch norm -> relu -> max-pool
 * -> a dense layer, backward. variant 1: batch norm's output read twice;
 * 2: relu's output pooled twice, its gradient added up from both. */
static aq_graph_t *conv_block(int variant, aq_tensor_t *normalised, aq_tensor_t *mean) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, labels, w, bias, gamma, beta, rm, rv, fc, c, b, r, p, flat, logits, loss, none = {0};
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, (int64_t[]){4, 1, 8, 8}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &labels));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 4, (int64_t[]){3, 1, 3, 3}, &w));
  bias = make(g, "bias", AQ_ROLE_PARAMETER, 3, 0), gamma = make(g, "gamma", AQ_ROLE_PARAMETER, 3, 0);
  beta = make(g, "beta", AQ_ROLE_PARAMETER, 3, 0), rm = make(g, "rm", AQ_ROLE_STATE, 3, 0);
  rv = make(g, "rv", AQ_ROLE_STATE, 3, 0), fc = make(g, "fc", AQ_ROLE_PARAMETER, 48, 4);
  aq_conv2d_options_t co = {.pad_h = 1, .pad_w = 1};
  aq_batch_norm_options_t bo = {.training = 1};
  aq_pool_options_t po = {.kernel_h = 2, .kernel_w = 2};
  AQ_ASSERT_OK(aq_op_conv2d(g, x, w, bias, &co, &c));
  AQ_ASSERT_OK(aq_op_batch_norm(g, c, gamma, beta, rm, rv, &bo, &b));
  AQ_ASSERT_OK(aq_op_relu(g, b, &r));
  if (variant == 1) {
    aq_tensor_t again;
    AQ_ASSERT_OK(aq_op_relu(g, b, &again));
  }
  AQ_ASSERT_OK(aq_op_max_pool2d(g, r, &po, &p));
  AQ_ASSERT_OK(aq_op_reshape(g, p, 2, (int64_t[]){4, 48}, &flat));
  if (variant == 2) {
    aq_tensor_t p2, cols;
    AQ_ASSERT_OK(aq_op_max_pool2d(g, r, &po, &p2));
    AQ_ASSERT_OK(aq_op_reshape(g, p2, 2, (int64_t[]){48, 4}, &cols));
    AQ_ASSERT_OK(aq_op_matmul(g, flat, cols, none, 0, 0, AQ_ACTIVATION_NONE, &logits));
  } else {
    AQ_ASSERT_OK(aq_op_matmul(g, flat, fc, none, 0, 0, AQ_ACTIVATION_NONE, &logits));
  }
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, labels, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  *normalised = b;
  mean->id = g->tasks[task_of(g, AQ_KERNEL_BATCH_NORM_APPLY, 0)].writes[1];
  return g;
}

/* The fused pairs of f by rule: batch norm into relu, pool into relu's
 * backward; whatever followed a product now follows its consumer. */
static void count_conv_pairs(const aq_graph_t *g, const fused_t *f, uint32_t *bn_relu, uint32_t *pool_relu) {
  *bn_relu = *pool_relu = 0;
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    uint32_t m = f->f.product[t];
    if (m == UINT32_MAX) continue;
    *bn_relu += !strcmp(g->tasks[m].kernel, AQ_KERNEL_BATCH_NORM_APPLY) && !strcmp(g->tasks[t].kernel, AQ_KERNEL_RELU);
    *pool_relu += !strcmp(g->tasks[m].kernel, AQ_KERNEL_MAX_POOL_BWD) && !strcmp(g->tasks[t].kernel, AQ_KERNEL_RELU_BWD);
    for (uint32_t u = 0; u < g->ntasks; ++u)
      for (uint32_t j = 0; u != t && j < f->plan.tasks[u].npreds; ++j)
        if (f->plan.tasks[u].preds[j] == m) {
          int after = 0;
          for (uint32_t i = 0; i < f->plan.tasks[u].npreds; ++i) after |= f->plan.tasks[u].preds[i] == t;
          cr_assert(after, "task %u follows product %u but not its consumer %u", u, m, t);
        }
  }
}

Test(fuse_pairs, a_conv_blocks_relus_run_in_batch_norm_and_the_pools_backward) {
  aq_tensor_t b, mean;
  aq_graph_t *g = conv_block(0, &b, &mean);
  uint32_t bn = task_of(g, AQ_KERNEL_BATCH_NORM_APPLY, 0), relu = task_of(g, AQ_KERNEL_RELU, 0);
  uint32_t pool = task_of(g, AQ_KERNEL_MAX_POOL_BWD, 0), mask = task_of(g, AQ_KERNEL_RELU_BWD, 0);
  cr_assert_gt(g->tasks[bn].nwrites, 1, "batch norm also writes its statistics");
  fused_t f;
  fuse_on(g, 2, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &f);
  uint32_t bn_relu, pool_relu;
  count_conv_pairs(g, &f, &bn_relu, &pool_relu);
  cr_assert(bn_relu == 1 && pool_relu == 1, "%u, %u", bn_relu, pool_relu);
  cr_assert_eq(f.f.product[relu], bn);
  cr_assert_eq(f.f.product[mask], pool);
  cr_assert_eq(f.f.unstored[b.id], relu, "the normalised values go straight to relu's output");
  cr_assert_eq(f.f.unstored[mean.id], UINT32_MAX, "the statistics are still stored");
  cr_assert_eq(aq_fuse_consumer_of(&f.f, &g->tasks[bn]), relu);
  cr_assert_str_eq(aq_fuse_kernel(&f.f, relu), AQ_KERNEL_BATCH_NORM_APPLY_RELU);
  cr_assert_str_eq(aq_fuse_kernel(&f.f, mask), AQ_KERNEL_MAX_POOL_BWD_RELU);
  cr_assert_eq(aq_fuse_kernarg_size(&f.f, mask), sizeof(aq_pool_relu_bwd_args_t));
  cr_assert_eq(aq_fuse_lr_offset(&f.f, relu), SIZE_MAX);
  fused_free(&f, g);
}

Test(fuse_pairs, a_normalised_tensor_read_twice_or_a_gradient_added_up_stays_apart) {
  for (int variant = 1; variant <= 2; ++variant) {
    aq_tensor_t b, mean;
    aq_graph_t *g = conv_block(variant, &b, &mean);
    fused_t f;
    fuse_on(g, 2, NULL, ALL_FORMS, 0, UINT32_MAX, 0, &f);
    uint32_t bn_relu, pool_relu;
    count_conv_pairs(g, &f, &bn_relu, &pool_relu);
    if (variant == 1) /* a second relu reads batch norm's output */
      cr_assert(bn_relu == 0 && pool_relu == 1, "%u, %u", bn_relu, pool_relu);
    else /* both pools' backwards write relu's dy: two writers */
      cr_assert(bn_relu == 1 && pool_relu == 0, "%u, %u", bn_relu, pool_relu);
    fused_free(&f, g);
  }
}

/* Without the rule's leave to keep other outputs, a product writing several
 * stays apart: the fused kernel might not write them. */
Test(fuse_pairs, a_product_with_other_outputs_fuses_only_where_its_rule_keeps_them) {
  aq_tensor_t b, mean;
  aq_graph_t *g = conv_block(0, &b, &mean);
  uint32_t bn_rule = rule(AQ_KERNEL_BATCH_NORM_APPLY, AQ_KERNEL_RELU);
  const aq_op_fusion_t *r = &lib->table->fusions[__builtin_ctz(bn_rule)];
  cr_assert(r->flags & AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS);
  /* the library's table is read-only: the same rule without the flag, in a copy */
  aq_op_fusion_t rules[32];
  cr_assert_leq(lib->table->fusion_count, 32);
  memcpy(rules, lib->table->fusions, lib->table->fusion_count * sizeof(rules[0]));
  rules[__builtin_ctz(bn_rule)].flags = 0;
  aq_op_table_t table = *lib->table;
  table.fusions = rules;
  oplib_t copy = *lib;
  copy.table = &table;
  fused_t f;
  static const uint32_t one_agent[UNITS_LANES_MAX] = {0};
  uint32_t fuses[1] = {ALL_FORMS};
  AQ_ASSERT_OK(units_plan(g, 2, &f.plan));
  fuse_in_t in = {g, 2, one_agent, &copy, fuses, 0};
  AQ_ASSERT_OK(aq_fuse_plan(&in, &f.plan, &f.f));
  uint32_t bn_relu, pool_relu;
  count_conv_pairs(g, &f, &bn_relu, &pool_relu);
  cr_assert(bn_relu == 0 && pool_relu == 1, "%u, %u", bn_relu, pool_relu);
  fused_free(&f, g);
}
