/* Op calls: each checks its operands' shapes, makes its output tensor and
 * appends a task running the op library's kernel, with the tensors' address
 * slots in the kernarg recorded for instantiation to fill in. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/ops.h"
#include "runtime/drivers/cuda_grid.h"
#include "runtime/status.h"
#include "scheduler/graph_internal.h"

aq_status_t aq_graph_op_task(aq_graph_t *g, const char *name, const char *kernel, const void *kernarg,
                          uint32_t kernarg_size, aq_dispatch_shape_t shape, const slot_t *reads,
                          uint32_t nreads, const slot_t *writes, uint32_t nwrites, uint32_t *out_task) {
  for (int d = 0; d < 3; ++d)
    if (shape.grid[d] == AQ_GRID_TOO_LARGE)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                      "%s: %u or more work-items along %c; a dispatch's grid holds at most %u (split the tensor)",
                      name, AQ_GRID_TOO_LARGE, "xyz"[d], AQ_GRID_TOO_LARGE - 1);
  task_t t = {.kind = TASK_KERNEL, .kernarg_size = kernarg_size, .shape = shape, .nreads = nreads,
              .nwrites = nwrites, .agent = -1, .op = OP_OTHER};
  snprintf(t.name, sizeof(t.name), "%s", name);
  snprintf(t.kernel, sizeof(t.kernel), "%s", kernel);
  memcpy(t.kernarg, kernarg, kernarg_size);
  for (uint32_t i = 0; i < nreads; ++i) t.reads[i] = reads[i].tensor, t.read_off[i] = reads[i].offset;
  for (uint32_t i = 0; i < nwrites; ++i) t.writes[i] = writes[i].tensor, t.write_off[i] = writes[i].offset;
  return aq_graph_new_task(g, &t, out_task);
}

aq_status_t aq_graph_check_gpu_grid(const char *task, const char *kernel, aq_dispatch_shape_t s) {
  for (int d = 0; d < 3; ++d) {
    uint64_t items = s.grid[d] ? s.grid[d] : 1, wg = s.workgroup[d] ? s.workgroup[d] : 1;
    if (items != AQ_GRID_TOO_LARGE && aq_cuda_grid_blocks(items, wg, d)) continue;
    return aq_error(AQ_ERROR_INVALID_GRAPH,
                    "task '%s' (%s): its GPU launch needs %s%llu blocks of %llu threads along %c, and CUDA launches "
                    "at most %llu (split the tensor)",
                    task, kernel, items == AQ_GRID_TOO_LARGE ? "at least " : "",
                    (unsigned long long)((items + wg - 1) / wg), (unsigned long long)wg, "xyz"[d],
                    (unsigned long long)aq_cuda_grid_max_blocks(d));
  }
  return AQ_OK;
}

const char *aq_graph_fault_meaning(const task_t *task, const char *fault) {
  static _Thread_local char out[128];
  const char *at = strstr(fault, "(returned ");
  const char *what = at && task->kind == TASK_KERNEL && !task->code_object.handle ? aq_op_fault_string(atoi(at + 10))
                                                                                 : NULL;
  if (!what) return "";
  snprintf(out, sizeof(out), ": %s", what);
  return out;
}

static aq_status_t operand(aq_graph_t *g, const char *op, aq_tensor_t id, const char *what, aq_dtype_t dtype,
                           uint32_t rank, tensor_t **out) {
  tensor_t *t = aq_graph_tensor(g, id);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: %s is tensor %u, not one of this graph", op, what, id.id);
  if (t->dtype != dtype || t->rank != rank)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: %s '%s' must be a rank-%u %s tensor (it is rank %u %s)", op,
                    what, t->name, rank, dtype == AQ_DTYPE_F32 ? "f32" : "i32", t->rank,
                    t->dtype == AQ_DTYPE_F32 ? "f32" : "i32");
  *out = t;
  return AQ_OK;
}

static task_t *last_task(aq_graph_t *g) { return &g->tasks[g->ntasks - 1]; }

AQ_API aq_status_t aq_op_matmul(aq_graph_t *g, aq_tensor_t a, aq_tensor_t b, aq_tensor_t bias, int trans_a,
                                int trans_b, aq_activation_t act, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_matmul: graph and out are required");
  tensor_t *ta, *tb, *tbias = NULL;
  AQ_RETURN_IF_ERROR(operand(g, "matmul", a, "a", AQ_DTYPE_F32, 2, &ta));
  AQ_RETURN_IF_ERROR(operand(g, "matmul", b, "b", AQ_DTYPE_F32, 2, &tb));
  int64_t m = trans_a ? ta->dims[1] : ta->dims[0], k = trans_a ? ta->dims[0] : ta->dims[1];
  int64_t kb = trans_b ? tb->dims[1] : tb->dims[0], n = trans_b ? tb->dims[0] : tb->dims[1];
  if (k != kb)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "matmul: '%s'%s is %lldx%lld but '%s'%s is %lldx%lld: %lld != %lld",
                    ta->name, trans_a ? "^T" : "", (long long)m, (long long)k, tb->name, trans_b ? "^T" : "",
                    (long long)kb, (long long)n, (long long)k, (long long)kb);
  if (bias.id) {
    AQ_RETURN_IF_ERROR(operand(g, "matmul", bias, "bias", AQ_DTYPE_F32, 1, &tbias));
    if (tbias->dims[0] != n)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "matmul: bias '%s' has %lld entries, the output %lld columns",
                      tbias->name, (long long)tbias->dims[0], (long long)n);
  }
  if (act != AQ_ACTIVATION_NONE && act != AQ_ACTIVATION_RELU)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "matmul: unknown activation %d", act);
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "matmul", ta->name, tb->name);
  int64_t dims[2] = {m, n};
  char oname[48];
  aq_graph_name(oname, sizeof(oname), "matmul", ta->name, tb->name);
  uint32_t o;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, oname, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 2, dims, &o));
  ta = aq_graph_tensor(g, a), tb = aq_graph_tensor(g, b); /* the table may have moved */
  aq_matmul_args_t args = {.m = m, .n = n, .k = k, .lda = ta->dims[1], .ldb = tb->dims[1], .ldc = n, .batch = 1,
                           .alpha = 1.0f, .beta = 0.0f, .trans_a = trans_a, .trans_b = trans_b,
                           .activation = act};
  slot_t reads[3] = {{a.id, offsetof(aq_matmul_args_t, a)}, {b.id, offsetof(aq_matmul_args_t, b)},
                     {bias.id, offsetof(aq_matmul_args_t, bias)}};
  slot_t writes[1] = {{o, offsetof(aq_matmul_args_t, c)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_MATMUL, &args, sizeof(args), aq_matmul_grid(&args), reads,
                                   bias.id ? 3 : 2, writes, 1, &id));
  task_t *t = last_task(g);
  t->op = OP_MATMUL;
  t->in[0] = a.id, t->in[1] = b.id, t->in[2] = bias.id, t->out = o;
  t->trans_a = trans_a, t->trans_b = trans_b, t->activation = act;
  out->id = o;
  return AQ_OK;
}

/* A pointwise op: y = f(x), recorded with what its backward needs. */
static aq_status_t unary(aq_graph_t *g, aq_tensor_t x, const char *what, const char *kernel, op_kind_t op,
                         const char *bwd_kernel, int bwd_from_input, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_%s: graph and out are required", what);
  tensor_t *tx = aq_graph_tensor(g, x);
  if (!tx) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: tensor %u is not in this graph", what, x.id);
  if (tx->dtype != AQ_DTYPE_F32) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: '%s' is not f32", what, tx->name);
  char name[48];
  aq_graph_name(name, sizeof(name), what, tx->name, NULL);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, tx->dims, sizeof(dims));
  uint32_t rank = tx->rank, o;
  int64_t n = (int64_t)(tx->bytes / 4);
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, rank, dims, &o));
  aq_unary_args_t args = {.n = n};
  slot_t reads[1] = {{x.id, offsetof(aq_unary_args_t, x)}};
  slot_t writes[1] = {{o, offsetof(aq_unary_args_t, y)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, kernel, &args, sizeof(args), aq_elementwise_grid(n), reads, 1, writes, 1,
                                   &id));
  task_t *t = last_task(g);
  t->op = op;
  t->in[0] = x.id, t->out = o;
  t->bwd_kernel = bwd_kernel, t->bwd_from_input = bwd_from_input;
  out->id = o;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_relu(aq_graph_t *g, aq_tensor_t x, aq_tensor_t *out) {
  return unary(g, x, "relu", AQ_KERNEL_RELU, OP_RELU, AQ_KERNEL_RELU_BWD, 0, out);
}
AQ_API aq_status_t aq_op_sigmoid(aq_graph_t *g, aq_tensor_t x, aq_tensor_t *out) {
  return unary(g, x, "sigmoid", AQ_KERNEL_SIGMOID, OP_UNARY, AQ_KERNEL_SIGMOID_BWD, 0, out);
}
AQ_API aq_status_t aq_op_tanh(aq_graph_t *g, aq_tensor_t x, aq_tensor_t *out) {
  return unary(g, x, "tanh", AQ_KERNEL_TANH, OP_UNARY, AQ_KERNEL_TANH_BWD, 0, out);
}
AQ_API aq_status_t aq_op_gelu(aq_graph_t *g, aq_tensor_t x, aq_tensor_t *out) {
  return unary(g, x, "gelu", AQ_KERNEL_GELU, OP_UNARY, AQ_KERNEL_GELU_BWD, 1, out);
}

AQ_API aq_status_t aq_op_dropout(aq_graph_t *g, aq_tensor_t x, float p, uint64_t seed, aq_tensor_t *out) {
  if (!(p >= 0.0f && p < 1.0f)) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "dropout: p = %g is not in [0, 1)", p);
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_dropout: graph and out are required");
  tensor_t *tx = aq_graph_tensor(g, x);
  if (!tx || tx->dtype != AQ_DTYPE_F32)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "dropout: tensor %u is not an f32 tensor of this graph", x.id);
  char name[48];
  aq_graph_name(name, sizeof(name), "dropout", tx->name, NULL);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, tx->dims, sizeof(dims));
  uint32_t rank = tx->rank, o;
  int64_t n = (int64_t)(tx->bytes / 4);
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, rank, dims, &o));
  aq_dropout_args_t a = {.n = n, .seed = seed, .p = p};
  slot_t reads[1] = {{x.id, offsetof(aq_dropout_args_t, x)}};
  slot_t writes[1] = {{o, offsetof(aq_dropout_args_t, y)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_DROPOUT, &a, sizeof(a), aq_elementwise_grid(n), reads, 1, writes,
                                   1, &id));
  task_t *t = last_task(g);
  t->op = OP_DROPOUT;
  t->in[0] = x.id, t->out = o, t->seed = seed, t->p = p;
  out->id = o;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_softmax_xent(aq_graph_t *g, aq_tensor_t logits, aq_tensor_t labels, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_softmax_xent: graph and out are required");
  tensor_t *tl, *ty;
  AQ_RETURN_IF_ERROR(operand(g, "softmax_xent", logits, "logits", AQ_DTYPE_F32, 2, &tl));
  AQ_RETURN_IF_ERROR(operand(g, "softmax_xent", labels, "labels", AQ_DTYPE_I32, 1, &ty));
  int64_t rows = tl->dims[0], classes = tl->dims[1];
  if (ty->dims[0] != rows)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "softmax_xent: %lld rows of logits '%s' but %lld labels in '%s'",
                    (long long)rows, tl->name, (long long)ty->dims[0], ty->name);
  uint32_t probs, losses, loss;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "xent.probs", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 2, (int64_t[]){rows, classes},
                                      &probs));
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "xent.losses", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){rows}, &losses));
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "loss", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &loss));
  aq_softmax_xent_args_t x = {.rows = rows, .classes = classes};
  slot_t xr[2] = {{logits.id, offsetof(aq_softmax_xent_args_t, logits)},
                  {labels.id, offsetof(aq_softmax_xent_args_t, labels)}};
  slot_t xw[2] = {{probs, offsetof(aq_softmax_xent_args_t, probs)}, {losses, offsetof(aq_softmax_xent_args_t, loss)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "softmax_xent", AQ_KERNEL_SOFTMAX_XENT, &x, sizeof(x), aq_rows_grid(rows),
                                   xr, 2, xw, 2, &id));
  task_t *t = last_task(g);
  t->op = OP_XENT;
  t->in[0] = logits.id, t->in[1] = labels.id, t->out = probs, t->aux = losses;
  aq_mean_args_t m = {.n = rows};
  slot_t mr[1] = {{losses, offsetof(aq_mean_args_t, x)}};
  slot_t mw[1] = {{loss, offsetof(aq_mean_args_t, out)}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, "mean(loss)", AQ_KERNEL_MEAN, &m, sizeof(m),
                                   (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}}, mr, 1, mw, 1, &id));
  t = last_task(g);
  t->op = OP_MEAN;
  t->in[0] = losses, t->out = loss, t->aux = id - 2; /* index of the xent task */
  out->id = loss;
  return AQ_OK;
}

/* Hyperparameters: NaN fails every comparison, so each test is written to
 * be false for it; Inf is refused as not finite. */
static int positive(float v) { return v > 0.0f && isfinite(v); }
static int in_range(float v, float lo, float hi_excluded) { return v >= lo && v < hi_excluded; }

AQ_API aq_status_t aq_op_sgd(aq_graph_t *g, aq_tensor_t param, aq_tensor_t grad, const aq_sgd_options_t *o) {
  if (!g || !o) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_sgd: graph and options are required");
  tensor_t *tp = aq_graph_tensor(g, param), *tg = aq_graph_tensor(g, grad);
  if (!tp || !tg) return aq_error(AQ_ERROR_INVALID_HANDLE, "sgd: parameter or gradient is not in this graph");
  if (tp->role != AQ_ROLE_PARAMETER)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "sgd: '%s' is not a parameter", tp->name);
  if (tp->bytes != tg->bytes || tp->dtype != AQ_DTYPE_F32 || tg->dtype != AQ_DTYPE_F32)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "sgd: gradient '%s' does not match parameter '%s'", tg->name, tp->name);
  if (!positive(o->lr) || !in_range(o->momentum, 0.0f, INFINITY) || !in_range(o->weight_decay, 0.0f, INFINITY))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "sgd(%s): lr %g must be finite and > 0, momentum %g and weight_decay %g finite and >= 0",
                    tp->name, (double)o->lr, (double)o->momentum, (double)o->weight_decay);
  char name[48];
  aq_graph_name(name, sizeof(name), "velocity", tp->name, NULL);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, tp->dims, sizeof(dims));
  uint32_t rank = tp->rank, v;
  int64_t n = (int64_t)(tp->bytes / 4);
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_STATE, rank, dims, &v));
  aq_sgd_args_t a = {.n = n, .lr = o->lr, .momentum = o->momentum, .weight_decay = o->weight_decay};
  slot_t reads[3] = {{param.id, UINT32_MAX}, {grad.id, offsetof(aq_sgd_args_t, grad)}, {v, UINT32_MAX}};
  slot_t writes[2] = {{param.id, offsetof(aq_sgd_args_t, w)}, {v, offsetof(aq_sgd_args_t, velocity)}};
  aq_graph_name(name, sizeof(name), "sgd", aq_graph_tensor(g, param)->name, NULL);
  uint32_t id;
  return aq_graph_op_task(g, name, AQ_KERNEL_SGD, &a, sizeof(a), aq_elementwise_grid(n), reads, 3, writes, 2, &id);
}

AQ_API aq_status_t aq_op_copy(aq_graph_t *g, aq_tensor_t src, aq_tensor_t dst) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_copy: graph is NULL");
  tensor_t *ts = aq_graph_tensor(g, src), *td = aq_graph_tensor(g, dst);
  if (!ts || !td) return aq_error(AQ_ERROR_INVALID_HANDLE, "copy: source or destination is not in this graph");
  if (ts->bytes != td->bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "copy: '%s' holds %zu bytes, '%s' %zu", ts->name, ts->bytes, td->name,
                    td->bytes);
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "copy", ts->name, td->name);
  aq_copy_args_t a = {.bytes = (int64_t)ts->bytes};
  slot_t reads[1] = {{src.id, offsetof(aq_copy_args_t, src)}};
  slot_t writes[1] = {{dst.id, offsetof(aq_copy_args_t, dst)}};
  uint32_t id;
  return aq_graph_op_task(g, name, AQ_KERNEL_COPY, &a, sizeof(a), aq_elementwise_grid((int64_t)ts->bytes / 4), reads, 1,
                       writes, 1, &id);
}

static aq_status_t state_like(aq_graph_t *g, aq_tensor_t of, const char *what, uint32_t *out) {
  tensor_t *t = aq_graph_tensor(g, of);
  char name[48];
  aq_graph_name(name, sizeof(name), what, t->name, NULL);
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, t->dims, sizeof(dims));
  uint32_t rank = t->rank;
  return aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_STATE, rank, dims, out);
}

AQ_API aq_status_t aq_op_adam(aq_graph_t *g, aq_tensor_t param, aq_tensor_t grad, const aq_adam_options_t *o) {
  if (!g || !o) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_adam: graph and options are required");
  tensor_t *tp = aq_graph_tensor(g, param), *tg = aq_graph_tensor(g, grad);
  if (!tp || !tg) return aq_error(AQ_ERROR_INVALID_HANDLE, "adam: parameter or gradient is not in this graph");
  if (tp->role != AQ_ROLE_PARAMETER) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "adam: '%s' is not a parameter", tp->name);
  if (tp->bytes != tg->bytes || tp->dtype != AQ_DTYPE_F32 || tg->dtype != AQ_DTYPE_F32)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "adam: gradient '%s' does not match parameter '%s'", tg->name, tp->name);
  float b1 = o->beta1 ? o->beta1 : 0.9f, b2 = o->beta2 ? o->beta2 : 0.999f, eps = o->eps ? o->eps : 1e-8f;
  if (!positive(o->lr) || !in_range(b1, 0.0f, 1.0f) || !in_range(b2, 0.0f, 1.0f) || !positive(eps) ||
      !in_range(o->weight_decay, 0.0f, INFINITY))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "adam(%s): lr %g and eps %g must be finite and > 0, beta1 %g and beta2 %g in [0, 1), "
                    "weight_decay %g finite and >= 0",
                    tp->name, (double)o->lr, (double)eps, (double)b1, (double)b2, (double)o->weight_decay);
  uint32_t m, v, steps;
  AQ_RETURN_IF_ERROR(state_like(g, param, "adam.m", &m));
  AQ_RETURN_IF_ERROR(state_like(g, param, "adam.v", &v));
  char name[48];
  aq_graph_name(name, sizeof(name), "adam.steps", aq_graph_tensor(g, param)->name, NULL);
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_STATE, 1, (int64_t[]){1}, &steps));
  int64_t n = (int64_t)(aq_graph_tensor(g, param)->bytes / 4);
  aq_adam_args_t a = {.n = n, .lr = o->lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = o->weight_decay,
                      .decoupled = o->decoupled ? 1 : 0};
  slot_t reads[5] = {{param.id, UINT32_MAX}, {grad.id, offsetof(aq_adam_args_t, grad)}, {m, UINT32_MAX},
                     {v, UINT32_MAX}, {steps, offsetof(aq_adam_args_t, steps)}};
  slot_t writes[3] = {{param.id, offsetof(aq_adam_args_t, w)}, {m, offsetof(aq_adam_args_t, m)},
                      {v, offsetof(aq_adam_args_t, v)}};
  aq_graph_name(name, sizeof(name), "adam", aq_graph_tensor(g, param)->name, NULL);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_ADAM, &a, sizeof(a), aq_elementwise_grid(n), reads, 5, writes,
                                   3, &id));
  aq_increment_args_t inc = {0};
  slot_t ir[1] = {{steps, UINT32_MAX}}, iw[1] = {{steps, offsetof(aq_increment_args_t, x)}};
  return aq_graph_op_task(g, "adam.count", AQ_KERNEL_INCREMENT, &inc, sizeof(inc),
                       (aq_dispatch_shape_t){{1, 1, 1}, {1, 1, 1}}, ir, 1, iw, 1, &id);
}
