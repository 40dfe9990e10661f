/* The convolutional ops: conv2d, max-pool, batch norm, reshape. Each checks
 * its operands, makes its outputs and appends its kernel's task; what the
 * backward needs is kept on the task (its kernarg, its saved tensors). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/graph_internal.h"

static task_t *last_task(aq_graph_t *g) { return &g->tasks[g->ntasks - 1]; }

static aq_status_t f32_of_rank(aq_graph_t *g, const char *op, aq_tensor_t t, uint32_t rank, tensor_t **out) {
  tensor_t *x = aq_graph_tensor(g, t);
  if (!x) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: tensor %u is not in this graph", op, t.id);
  if (x->dtype != AQ_DTYPE_F32 || x->rank != rank)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: '%s' must be a rank-%u f32 tensor", op, x->name, rank);
  *out = x;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_conv2d(aq_graph_t *g, aq_tensor_t x, aq_tensor_t w, aq_tensor_t bias,
                                const aq_conv2d_options_t *o, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_conv2d: graph and out are required");
  aq_conv2d_options_t none = {0};
  if (!o) o = &none;
  tensor_t *tx, *tw, *tb = NULL;
  AQ_RETURN_IF_ERROR(f32_of_rank(g, "conv2d", x, 4, &tx));
  AQ_RETURN_IF_ERROR(f32_of_rank(g, "conv2d", w, 4, &tw));
  if (bias.id) AQ_RETURN_IF_ERROR(f32_of_rank(g, "conv2d", bias, 1, &tb));
  aq_conv2d_args_t a = {.n = tx->dims[0], .c = tx->dims[1], .h = tx->dims[2], .wd = tx->dims[3], .k = tw->dims[0],
                        .r = tw->dims[2], .s = tw->dims[3], .stride_h = o->stride_h ? o->stride_h : 1,
                        .stride_w = o->stride_w ? o->stride_w : 1, .pad_h = o->pad_h, .pad_w = o->pad_w,
                        .dil_h = o->dil_h ? o->dil_h : 1, .dil_w = o->dil_w ? o->dil_w : 1};
  if (tw->dims[1] != a.c)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "conv2d: '%s' has %lld channels, filters '%s' expect %lld", tx->name,
                    (long long)a.c, tw->name, (long long)tw->dims[1]);
  if (tb && tb->dims[0] != a.k)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "conv2d: bias '%s' has %lld entries for %lld filters", tb->name,
                    (long long)tb->dims[0], (long long)a.k);
  if (a.stride_h < 0 || a.stride_w < 0 || a.pad_h < 0 || a.pad_w < 0 || a.dil_h < 0 || a.dil_w < 0)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "conv2d: negative stride, padding or dilation");
  a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w);
  /* The dilated filter must fit the padded input: the division above
   * truncates towards zero, so a stride larger than the overhang gave 1. */
  if (a.h + 2 * (int64_t)a.pad_h < (int64_t)a.dil_h * (a.r - 1) + 1 ||
      a.wd + 2 * (int64_t)a.pad_w < (int64_t)a.dil_w * (a.s - 1) + 1 || a.p <= 0 || a.q <= 0)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "conv2d: a %lldx%lld filter leaves no output of a %lldx%lld input",
                    (long long)a.r, (long long)a.s, (long long)a.h, (long long)a.wd);
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "conv2d", tx->name, tw->name);
  uint32_t y;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "conv.out", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 4,
                                      (int64_t[]){a.n, a.k, a.p, a.q}, &y));
  slot_t reads[3] = {{x.id, offsetof(aq_conv2d_args_t, x)}, {w.id, offsetof(aq_conv2d_args_t, w)},
                     {bias.id, offsetof(aq_conv2d_args_t, bias)}};
  slot_t writes[1] = {{y, offsetof(aq_conv2d_args_t, y)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_CONV2D, &a, sizeof(a), aq_planes_grid(a.n * a.k), reads,
                                   bias.id ? 3 : 2, writes, 1, &id));
  task_t *t = last_task(g);
  t->op = OP_CONV2D;
  t->in[0] = x.id, t->in[1] = w.id, t->in[2] = bias.id, t->out = y;
  out->id = y;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_max_pool2d(aq_graph_t *g, aq_tensor_t x, const aq_pool_options_t *o, aq_tensor_t *out) {
  if (!g || !o || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_max_pool2d: graph, options and out are required");
  tensor_t *tx;
  AQ_RETURN_IF_ERROR(f32_of_rank(g, "max_pool2d", x, 4, &tx));
  if (o->kernel_h <= 0 || o->kernel_w <= 0 || o->stride_h < 0 || o->stride_w < 0 || o->pad_h < 0 || o->pad_w < 0 ||
      o->pad_h >= o->kernel_h || o->pad_w >= o->kernel_w)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "max_pool2d: kernel sizes must be > 0, padding smaller than them");
  aq_pool_args_t a = {.planes = tx->dims[0] * tx->dims[1], .h = tx->dims[2], .w = tx->dims[3], .kh = o->kernel_h,
                      .kw = o->kernel_w, .stride_h = o->stride_h ? o->stride_h : o->kernel_h,
                      .stride_w = o->stride_w ? o->stride_w : o->kernel_w, .pad_h = o->pad_h, .pad_w = o->pad_w};
  /* Checked before dividing: (3 - 5) / 5 + 1 truncates to an output of 1. */
  if (a.h + 2 * (int64_t)a.pad_h < a.kh || a.w + 2 * (int64_t)a.pad_w < a.kw)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "max_pool2d: the %dx%d window is larger than '%s' (%lldx%lld, padding %d,%d)",
                    a.kh, a.kw, tx->name, (long long)a.h, (long long)a.w, a.pad_h, a.pad_w);
  a.p = (a.h + 2 * (int64_t)a.pad_h - a.kh) / a.stride_h + 1, a.q = (a.w + 2 * (int64_t)a.pad_w - a.kw) / a.stride_w + 1;
  int64_t dims[4] = {tx->dims[0], tx->dims[1], a.p, a.q};
  char name[TASK_NAME_MAX];
  aq_graph_name(name, sizeof(name), "max_pool2d", tx->name, NULL);
  uint32_t y, arg;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "pool.out", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 4, dims, &y));
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "pool.argmax", AQ_DTYPE_I32, AQ_ROLE_ACTIVATION, 4, dims, &arg));
  slot_t reads[1] = {{x.id, offsetof(aq_pool_args_t, x)}};
  slot_t writes[2] = {{y, offsetof(aq_pool_args_t, y)}, {arg, offsetof(aq_pool_args_t, argmax)}};
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_MAX_POOL, &a, sizeof(a), aq_planes_grid(a.planes), reads, 1,
                                   writes, 2, &id));
  task_t *t = last_task(g);
  t->op = OP_POOL;
  t->in[0] = x.id, t->out = y, t->aux = arg;
  out->id = y;
  return AQ_OK;
}

/* A batch norm pass's partial sums: two doubles a slice of a channel (ops.h),
 * as an f32 tensor of twice the elements. */
aq_status_t aq_batch_norm_partial(aq_graph_t *g, int64_t channels, int32_t slices, const char *name, uint32_t *out) {
  return aq_graph_new_tensor(g, name, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){channels * slices * 4}, out);
}

AQ_API aq_status_t aq_op_batch_norm(aq_graph_t *g, aq_tensor_t x, aq_tensor_t gamma, aq_tensor_t beta,
                                    aq_tensor_t running_mean, aq_tensor_t running_var,
                                    const aq_batch_norm_options_t *o, aq_tensor_t *out) {
  if (!g || !o || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_batch_norm: graph, options and out are required");
  tensor_t *tx = aq_graph_tensor(g, x);
  if (!tx || tx->dtype != AQ_DTYPE_F32 || tx->rank < 2)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "batch_norm: x must be an f32 tensor of rank 2 or more of this graph");
  aq_tensor_t per_channel[4] = {gamma, beta, running_mean, running_var};
  for (int i = 0; i < 4; ++i) {
    tensor_t *t = aq_graph_tensor(g, per_channel[i]);
    if (!t || t->dtype != AQ_DTYPE_F32 || t->rank != 1 || t->dims[0] != tx->dims[1])
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "batch_norm: %s must be f32 with %lld entries (the channels of '%s')",
                      (const char *[]){"gamma", "beta", "running_mean", "running_var"}[i], (long long)tx->dims[1],
                      tx->name);
  }
  int64_t hw = 1;
  for (uint32_t d = 2; d < tx->rank; ++d) hw *= tx->dims[d];
  aq_batch_norm_args_t a = {.n = tx->dims[0], .c = tx->dims[1], .hw = hw, .eps = o->eps > 0 ? o->eps : 1e-5f,
                            .momentum = o->momentum > 0 ? o->momentum : 0.1f, .training = o->training ? 1 : 0,
                            .slices = aq_batch_norm_slices(tx->dims[0], tx->dims[1], hw)};
  int64_t dims[AQ_MAX_RANK];
  memcpy(dims, tx->dims, sizeof(dims));
  uint32_t rank = tx->rank, y, mean, rstd, partial = 0, id;
  char name[TASK_NAME_MAX];
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "bn.out", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, rank, dims, &y));
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "bn.mean", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){a.c}, &mean));
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, "bn.rstd", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){a.c}, &rstd));
  if (a.training) { /* the statistics' first kernel: sums over slices of the channels */
    AQ_RETURN_IF_ERROR(aq_batch_norm_partial(g, a.c, a.slices, "bn.partial", &partial));
    aq_graph_name(name, sizeof(name), "batch_norm_stats", tx->name, NULL);
    slot_t sreads[1] = {{x.id, offsetof(aq_batch_norm_args_t, x)}};
    slot_t swrites[1] = {{partial, offsetof(aq_batch_norm_args_t, partial)}};
    AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_BATCH_NORM_STATS, &a, sizeof(a),
                                        aq_planes_grid(a.c * a.slices), sreads, 1, swrites, 1, &id));
  }
  aq_graph_name(name, sizeof(name), "batch_norm", tx->name, NULL);
  slot_t reads[6] = {{x.id, offsetof(aq_batch_norm_args_t, x)}, {gamma.id, offsetof(aq_batch_norm_args_t, gamma)},
                     {beta.id, offsetof(aq_batch_norm_args_t, beta)},
                     {running_mean.id, offsetof(aq_batch_norm_args_t, running_mean)},
                     {running_var.id, offsetof(aq_batch_norm_args_t, running_var)},
                     {partial, offsetof(aq_batch_norm_args_t, partial)}};
  slot_t writes[5] = {{y, offsetof(aq_batch_norm_args_t, y)}, {mean, offsetof(aq_batch_norm_args_t, mean)},
                      {rstd, offsetof(aq_batch_norm_args_t, rstd)}, {running_mean.id, UINT32_MAX},
                      {running_var.id, UINT32_MAX}};
  AQ_RETURN_IF_ERROR(aq_graph_op_task(g, name, AQ_KERNEL_BATCH_NORM_APPLY, &a, sizeof(a), aq_planes_grid(a.c * a.slices),
                                      reads, a.training ? 6 : 5, writes, a.training ? 5 : 3, &id));
  task_t *t = last_task(g);
  t->op = a.training ? OP_BATCH_NORM : OP_OTHER; /* inference is not differentiated */
  t->in[0] = x.id, t->in[1] = gamma.id, t->in[2] = beta.id, t->out = y, t->aux = mean;
  out->id = y;
  return AQ_OK;
}

AQ_API aq_status_t aq_op_reshape(aq_graph_t *g, aq_tensor_t x, uint32_t rank, const int64_t *dims, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_op_reshape: graph and out are required");
  tensor_t *tx = aq_graph_tensor(g, x);
  if (!tx) return aq_error(AQ_ERROR_INVALID_HANDLE, "reshape: tensor %u is not in this graph", x.id);
  char name[48];
  aq_graph_fit(name, sizeof(name) - 1 - strlen(".view"), tx->name);
  strcat(name, ".view");
  aq_dtype_t dtype = tx->dtype;
  size_t bytes = tx->bytes;
  uint32_t y;
  AQ_RETURN_IF_ERROR(aq_graph_new_tensor(g, name, dtype, AQ_ROLE_ACTIVATION, rank, dims, &y));
  if (g->tensors[y].bytes != bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "reshape: '%s' holds %zu bytes, the new shape %zu", g->tensors[x.id].name,
                    bytes, g->tensors[y].bytes);
  AQ_RETURN_IF_ERROR(aq_op_copy(g, x, (aq_tensor_t){y}));
  task_t *t = last_task(g);
  t->op = OP_RESHAPE;
  t->in[0] = x.id, t->out = y;
  out->id = y;
  return AQ_OK;
}
