/* aq_graph_backward: reverse-mode differentiation of a scalar loss.
 *
 * The forward tasks are walked in reverse; each op appends the tasks of its
 * vector-Jacobian product. A tensor reached by several paths accumulates:
 * the first contribution writes its gradient, later ones add to it (matmul
 * and sum-rows through beta = 1, others through a temporary and axpby). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/graph_internal.h"

typedef struct bw {
  aq_graph_t *g;
  uint8_t *needs;   /* per tensor: on a path from a parameter */
  uint8_t *written; /* per tensor: its gradient holds a contribution */
} bw_t;

static aq_status_t grad_of(bw_t *b, uint32_t x, uint32_t *out) {
  tensor_t *t = &b->g->tensors[x];
  if (!t->grad) {
    char name[48];
    aq_graph_name(name, sizeof(name), t->role == AQ_ROLE_PARAMETER ? "grad" : "d", t->name, NULL);
    int64_t dims[AQ_MAX_RANK];
    memcpy(dims, t->dims, sizeof(dims));
    uint32_t rank = t->rank, id;
    AQ_RETURN_IF_ERROR(aq_graph_new_tensor(b->g, name, AQ_DTYPE_F32,
                                        t->role == AQ_ROLE_PARAMETER ? AQ_ROLE_GRADIENT : AQ_ROLE_ACTIVATION, rank,
                                        dims, &id));
    b->g->tensors[x].grad = id;
  }
  *out = b->g->tensors[x].grad;
  return AQ_OK;
}

/* c = op(a) op(b) (+ c when accumulating). */
static aq_status_t matmul_into(bw_t *b, uint32_t a, int ta, uint32_t bb, int tb, uint32_t x) {
  aq_graph_t *g = b->g;
  uint32_t c;
  AQ_RETURN_IF_ERROR(grad_of(b, x, &c));
  tensor_t *A = &g->tensors[a], *B = &g->tensors[bb];
  int accumulate = b->written[x];
  aq_matmul_args_t args = {.m = ta ? A->dims[1] : A->dims[0], .n = tb ? B->dims[0] : B->dims[1],
                           .k = ta ? A->dims[0] : A->dims[1], .lda = A->dims[1], .ldb = B->dims[1],
                           .batch = 1, .alpha = 1.0f, .beta = accumulate ? 1.0f : 0.0f, .trans_a = ta,
                           .trans_b = tb};
  args.ldc = args.n;
  slot_t reads[3] = {{a, offsetof(aq_matmul_args_t, a)}, {bb, offsetof(aq_matmul_args_t, b)}, {c, UINT32_MAX}};
  slot_t writes[1] = {{c, offsetof(aq_matmul_args_t, c)}};
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "matmul_bwd", g->tensors[c].name, NULL);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_MATMUL, &args, sizeof(args), aq_matmul_grid(&args), reads,
                                   accumulate ? 3 : 2, writes, 1, &id));
  b->written[x] = 1;
  return AQ_OK;
}

static aq_status_t sum_rows_into(bw_t *b, uint32_t dz, uint32_t bias) {
  aq_graph_t *g = b->g;
  uint32_t out;
  AQ_RETURN_IF_ERROR(grad_of(b, bias, &out));
  tensor_t *z = &g->tensors[dz];
  int accumulate = b->written[bias];
  aq_sum_rows_args_t a = {.rows = z->dims[0], .cols = z->dims[1], .ldx = z->dims[1], .alpha = 1.0f,
                          .beta = accumulate ? 1.0f : 0.0f};
  slot_t reads[2] = {{dz, offsetof(aq_sum_rows_args_t, x)}, {out, UINT32_MAX}};
  slot_t writes[1] = {{out, offsetof(aq_sum_rows_args_t, out)}};
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "sum_rows", g->tensors[out].name, NULL);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_SUM_ROWS, &a, sizeof(a), aq_cols_grid(a.cols), reads,
                                   accumulate ? 2 : 1, writes, 1, &id));
  b->written[bias] = 1;
  return AQ_OK;
}

/* A new activation shaped like x, for a contribution that cannot accumulate
 * in place. */
static aq_status_t temp_like(aq_graph_t *g, uint32_t x, const char *what, uint32_t *out) {
  tensor_t *t = &g->tensors[x];
  char name[48];
  aq_graph_name(name, sizeof(name), what, t->name, NULL);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, t->dims, sizeof(dims));
  uint32_t rank = t->rank;
  return aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, rank, dims, out);
}

/* dx = f'(src) * dy with a pointwise backward kernel (src: f's output, or
 * its input for gelu). */
static aq_status_t unary_bwd(aq_graph_t *g, const char *kernel, uint32_t src, uint32_t dy, uint32_t dx) {
  int64_t n = (int64_t)(g->tensors[src].bytes / 4);
  aq_unary_args_t a = {.n = n};
  slot_t reads[2] = {{src, offsetof(aq_unary_args_t, x)}, {dy, offsetof(aq_unary_args_t, dy)}};
  slot_t writes[1] = {{dx, offsetof(aq_unary_args_t, y)}};
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), kernel + 3, g->tensors[dx].name, NULL);
  uint32_t id;
  return aq_graph_op_task(g, name, kernel, &a, sizeof(a), aq_elementwise_grid(n), reads, 2, writes, 1, &id);
}

static aq_status_t relu_bwd(aq_graph_t *g, uint32_t y, uint32_t dy, uint32_t dx) {
  return unary_bwd(g, AQ_KERNEL_RELU_BWD, y, dy, dx);
}

static aq_status_t dropout_bwd(aq_graph_t *g, const task_t *fwd, uint32_t dy, uint32_t dx) {
  int64_t n = (int64_t)(g->tensors[dy].bytes / 4);
  aq_dropout_args_t a = {.n = n, .seed = fwd->seed, .p = fwd->p};
  slot_t reads[1] = {{dy, offsetof(aq_dropout_args_t, x)}};
  slot_t writes[1] = {{dx, offsetof(aq_dropout_args_t, y)}};
  uint32_t id;
  return aq_graph_op_task(g, "dropout_bwd", AQ_KERNEL_DROPOUT_BWD, &a, sizeof(a), aq_elementwise_grid(n), reads, 1, writes,
                       1, &id);
}

/* Where a backward kernel writes x's contribution: its gradient the first
 * time, else a temporary that finish() adds in. */
static aq_status_t target_for(bw_t *b, uint32_t x, uint32_t *target, int *first) {
  uint32_t gx;
  AQ_RETURN_IF_ERROR(grad_of(b, x, &gx));
  *first = !b->written[x];
  *target = gx;
  if (!*first) AQ_RETURN_IF_ERROR(temp_like(b->g, x, "dpart", target));
  return AQ_OK;
}

static aq_status_t finish(bw_t *b, uint32_t x, uint32_t target, int first) {
  aq_graph_t *g = b->g;
  b->written[x] = 1;
  if (first) return AQ_OK;
  uint32_t gx = g->tensors[x].grad;
  int64_t n = (int64_t)(g->tensors[x].bytes / 4);
  aq_axpby_args_t a = {.n = n, .alpha = 1.0f, .beta = 1.0f};
  slot_t reads[2] = {{target, offsetof(aq_axpby_args_t, x)}, {gx, offsetof(aq_axpby_args_t, y)}};
  slot_t writes[1] = {{gx, offsetof(aq_axpby_args_t, z)}};
  uint32_t id;
  return aq_graph_op_task(g, "accumulate", AQ_KERNEL_AXPBY, &a, sizeof(a), aq_elementwise_grid(n), reads, 2, writes, 1,
                       &id);
}

/* grad(x) (+)= the backward of a pointwise op: written in place the first
 * time, else through a temporary and an add. */
static aq_status_t pointwise_into(bw_t *b, const task_t *t, uint32_t dy, uint32_t x) {
  uint32_t target;
  int first;
  AQ_RETURN_IF_ERROR(target_for(b, x, &target, &first));
  if (t->op == OP_DROPOUT) AQ_RETURN_IF_ERROR(dropout_bwd(b->g, t, dy, target));
  else AQ_RETURN_IF_ERROR(unary_bwd(b->g, t->bwd_kernel, t->bwd_from_input ? t->in[0] : t->out, dy, target));
  return finish(b, x, target, first);
}

static aq_status_t backward_conv2d(bw_t *b, const task_t *t) {
  aq_graph_t *g = b->g;
  uint32_t x = t->in[0], w = t->in[1], bias = t->in[2], dy = g->tensors[t->out].grad;
  aq_conv2d_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  uint32_t id, tx, tw, tb = 0;
  int fx, fw, fb = 0;
  if (b->needs[x]) {
    AQ_RETURN_IF_ERROR(target_for(b, x, &tx, &fx));
    slot_t reads[2] = {{w, offsetof(aq_conv2d_args_t, w)}, {dy, offsetof(aq_conv2d_args_t, dy)}};
    slot_t writes[1] = {{tx, offsetof(aq_conv2d_args_t, dx)}};
    AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "conv2d_bwd_data", AQ_KERNEL_CONV2D_BWD_DATA, &a, sizeof(a),
                                     aq_planes_grid(a.n * a.c), reads, 2, writes, 1, &id));
    AQ_RETURN_IF_ERROR(finish(b, x, tx, fx));
  }
  if (b->needs[w] || (bias && b->needs[bias])) {
    AQ_RETURN_IF_ERROR(target_for(b, w, &tw, &fw));
    if (bias) AQ_RETURN_IF_ERROR(target_for(b, bias, &tb, &fb));
    slot_t reads[2] = {{x, offsetof(aq_conv2d_args_t, x)}, {dy, offsetof(aq_conv2d_args_t, dy)}};
    slot_t writes[2] = {{tw, offsetof(aq_conv2d_args_t, dw)}, {tb, offsetof(aq_conv2d_args_t, dbias)}};
    AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "conv2d_bwd_filter", AQ_KERNEL_CONV2D_BWD_FILTER, &a, sizeof(a),
                                     aq_planes_grid(a.k * a.c), reads, 2, writes, bias ? 2 : 1, &id));
    AQ_RETURN_IF_ERROR(finish(b, w, tw, fw));
    if (bias) AQ_RETURN_IF_ERROR(finish(b, bias, tb, fb));
  }
  return AQ_OK;
}

static aq_status_t backward_pool(bw_t *b, const task_t *t) {
  aq_graph_t *g = b->g;
  uint32_t x = t->in[0], dy = g->tensors[t->out].grad, target, id;
  int first;
  aq_pool_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  AQ_RETURN_IF_ERROR(target_for(b, x, &target, &first));
  slot_t reads[2] = {{t->aux, offsetof(aq_pool_args_t, argmax)}, {dy, offsetof(aq_pool_args_t, dy)}};
  slot_t writes[1] = {{target, offsetof(aq_pool_args_t, dx)}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "max_pool2d_bwd", AQ_KERNEL_MAX_POOL_BWD, &a, sizeof(a), aq_planes_grid(a.planes),
                                   reads, 2, writes, 1, &id));
  return finish(b, x, target, first);
}

static aq_status_t backward_batch_norm(bw_t *b, const task_t *t) {
  aq_graph_t *g = b->g;
  uint32_t x = t->in[0], gamma = t->in[1], beta = t->in[2], dy = g->tensors[t->out].grad, tx, tg, tb, partial, id;
  int fx, fg, fb;
  aq_batch_norm_args_t a;
  memcpy(&a, t->kernarg, sizeof(a));
  /* The kernel writes all three; what nobody needs goes to a temporary. */
  AQ_RETURN_IF_ERROR(target_for(b, x, &tx, &fx));
  AQ_RETURN_IF_ERROR(target_for(b, gamma, &tg, &fg));
  AQ_RETURN_IF_ERROR(target_for(b, beta, &tb, &fb));
  /* Two kernels, as the forward: the sums over slices, then dx. */
  AQ_RETURN_IF_ERROR(aq_batch_norm_partial(g, a.c, a.slices, "bn.dpartial", &partial));
  slot_t sreads[3] = {{x, offsetof(aq_batch_norm_args_t, x)}, {t->aux, offsetof(aq_batch_norm_args_t, mean)},
                      {dy, offsetof(aq_batch_norm_args_t, dy)}};
  slot_t swrites[1] = {{partial, offsetof(aq_batch_norm_args_t, partial)}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "batch_norm_bwd_stats", AQ_KERNEL_BATCH_NORM_BWD_STATS, &a, sizeof(a),
                                      aq_planes_grid(a.c * a.slices), sreads, 3, swrites, 1, &id));
  slot_t reads[6] = {{x, offsetof(aq_batch_norm_args_t, x)}, {gamma, offsetof(aq_batch_norm_args_t, gamma)},
                     {t->aux, offsetof(aq_batch_norm_args_t, mean)}, {t->aux + 1, offsetof(aq_batch_norm_args_t, rstd)},
                     {dy, offsetof(aq_batch_norm_args_t, dy)}, {partial, offsetof(aq_batch_norm_args_t, partial)}};
  slot_t writes[3] = {{tx, offsetof(aq_batch_norm_args_t, dx)}, {tg, offsetof(aq_batch_norm_args_t, dgamma)},
                      {tb, offsetof(aq_batch_norm_args_t, dbeta)}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "batch_norm_bwd", AQ_KERNEL_BATCH_NORM_BWD_APPLY, &a, sizeof(a),
                                      aq_planes_grid(a.c * a.slices), reads, 6, writes, 3, &id));
  AQ_RETURN_IF_ERROR(finish(b, x, tx, fx));
  AQ_RETURN_IF_ERROR(finish(b, gamma, tg, fg));
  return finish(b, beta, tb, fb);
}

static aq_status_t backward_reshape(bw_t *b, const task_t *t) {
  aq_graph_t *g = b->g;
  uint32_t x = t->in[0], dy = g->tensors[t->out].grad, target, id;
  int first;
  AQ_RETURN_IF_ERROR(target_for(b, x, &target, &first));
  aq_copy_args_t a = {.bytes = (int64_t)g->tensors[x].bytes};
  slot_t reads[1] = {{dy, offsetof(aq_copy_args_t, src)}};
  slot_t writes[1] = {{target, offsetof(aq_copy_args_t, dst)}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "reshape_bwd", AQ_KERNEL_COPY, &a, sizeof(a), aq_elementwise_grid(a.bytes / 4),
                                   reads, 1, writes, 1, &id));
  return finish(b, x, target, first);
}

static aq_status_t backward_matmul(bw_t *b, const task_t *t) {
  aq_graph_t *g = b->g;
  uint32_t dz = g->tensors[t->out].grad;
  if (t->activation == AQ_ACTIVATION_RELU) { /* through the fused relu first */
    uint32_t d;
    AQ_RETURN_IF_ERROR(temp_like(g, t->out, "dpre", &d));
    AQ_RETURN_IF_ERROR(relu_bwd(g, t->out, dz, d));
    dz = d;
  }
  uint32_t a = t->in[0], bb = t->in[1], bias = t->in[2];
  if (bias && b->needs[bias]) AQ_RETURN_IF_ERROR(sum_rows_into(b, dz, bias));
  /* op(A) = dZ op(B)^T; A itself is that or its transpose. */
  if (b->needs[a]) {
    if (!t->trans_a) AQ_RETURN_IF_ERROR(matmul_into(b, dz, 0, bb, !t->trans_b, a));
    else AQ_RETURN_IF_ERROR(matmul_into(b, bb, t->trans_b, dz, 1, a));
  }
  /* op(B) = op(A)^T dZ. */
  if (b->needs[bb]) {
    if (!t->trans_b) AQ_RETURN_IF_ERROR(matmul_into(b, a, !t->trans_a, dz, 0, bb));
    else AQ_RETURN_IF_ERROR(matmul_into(b, dz, 1, a, t->trans_a, bb));
  }
  return AQ_OK;
}

/* The loss's gradient comes from the forward task itself: given dlogits,
 * its kernel writes it in the same pass (ops.h), one kernel less a step
 * than a backward task reading the saved softmax, and the same values. */
static aq_status_t backward_xent(bw_t *b, uint32_t xent) {
  aq_graph_t *g = b->g;
  uint32_t logits = g->tasks[xent].in[0], d;
  AQ_RETURN_IF_ERROR(grad_of(b, logits, &d));
  task_t *t = &g->tasks[xent];
  if (t->nwrites == AQ_TASK_MAX_TENSORS) return aq_error(AQ_ERROR_INTERNAL, "softmax_xent: no slot for its gradient");
  float scale = 1.0f / (float)g->tensors[logits].dims[0];
  memcpy(t->kernarg + offsetof(aq_softmax_xent_args_t, scale), &scale, sizeof(scale));
  t->writes[t->nwrites] = d, t->write_off[t->nwrites] = offsetof(aq_softmax_xent_args_t, dlogits);
  t->nwrites++;
  b->written[logits] = 1;
  return AQ_OK;
}

static aq_status_t run_backward(bw_t *b, uint32_t loss) {
  aq_graph_t *g = b->g;
  uint32_t nforward = g->ntasks, mean = UINT32_MAX;
  for (uint32_t i = 0; i < nforward; ++i)
    if (g->tasks[i].op == OP_MEAN && g->tasks[i].out == loss) mean = i;
  if (mean == UINT32_MAX)
    return aq_error(AQ_ERROR_INVALID_GRAPH,
                    "backward: loss '%s' is not the output of aq_op_softmax_xent (the losses it differentiates)",
                    g->tensors[loss].name);
  /* Which tensors lie on a path from a parameter. */
  for (uint32_t i = 1; i < g->ntensors; ++i) b->needs[i] = g->tensors[i].role == AQ_ROLE_PARAMETER;
  for (uint32_t i = 0; i < nforward; ++i) {
    const task_t *t = &g->tasks[i];
    int any = 0;
    for (uint32_t r = 0; r < t->nreads; ++r) any |= b->needs[t->reads[r]];
    if (any && t->op != OP_OTHER)
      for (uint32_t w = 0; w < t->nwrites; ++w) b->needs[t->writes[w]] = 1;
  }
  uint32_t xent = g->tasks[mean].aux;
  if (!b->needs[g->tasks[xent].in[0]])
    return aq_error(AQ_ERROR_INVALID_GRAPH, "backward: loss '%s' depends on no parameter", g->tensors[loss].name);
  AQ_RETURN_IF_ERROR(backward_xent(b, xent));
  for (uint32_t i = xent; i-- > 0;) {
    task_t t = g->tasks[i]; /* a copy: appending tasks may move the table */
    if (!b->written[t.out] || t.op == OP_OTHER || t.op == OP_NONE) continue;
    if (t.op == OP_MATMUL) AQ_RETURN_IF_ERROR(backward_matmul(b, &t));
    else if ((t.op == OP_RELU || t.op == OP_UNARY || t.op == OP_DROPOUT) && b->needs[t.in[0]])
      AQ_RETURN_IF_ERROR(pointwise_into(b, &t, g->tensors[t.out].grad, t.in[0]));
    else if (t.op == OP_CONV2D) AQ_RETURN_IF_ERROR(backward_conv2d(b, &t));
    else if (t.op == OP_POOL && b->needs[t.in[0]]) AQ_RETURN_IF_ERROR(backward_pool(b, &t));
    else if (t.op == OP_BATCH_NORM) AQ_RETURN_IF_ERROR(backward_batch_norm(b, &t));
    else if (t.op == OP_RESHAPE && b->needs[t.in[0]]) AQ_RETURN_IF_ERROR(backward_reshape(b, &t));
  }
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_backward(aq_graph_t *g, aq_tensor_t loss) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_backward: graph is NULL");
  if (!aq_graph_tensor(g, loss)) return aq_error(AQ_ERROR_INVALID_HANDLE, "backward: tensor %u is not in this graph", loss.id);
  /* Room for every tensor backward may add: at most a few per task. */
  size_t cap = (size_t)g->ntensors + 8 * (size_t)g->ntasks + 16;
  bw_t b = {g, calloc(cap, 1), calloc(cap, 1)};
  aq_status_t s = b.needs && b.written ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for backward");
  if (s == AQ_OK) s = run_backward(&b, loss.id);
  free(b.needs);
  free(b.written);
  return s;
}

AQ_API aq_status_t aq_graph_gradient(aq_graph_t *g, aq_tensor_t param, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_gradient: graph and out are required");
  tensor_t *t = aq_graph_tensor(g, param);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "tensor %u is not in this graph", param.id);
  if (!t->grad)
    return aq_error(AQ_ERROR_NOT_FOUND, "'%s' has no gradient (not a parameter the loss depends on, or no backward)",
                    t->name);
  out->id = t->grad;
  return AQ_OK;
}
