/* Embedding lookup and its backward (a column per work-item: no races on
 * repeated ids). */
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int embedding(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_embedding_args_t *a = kernarg;
  if (!a->table || !a->ids || !a->out || a->dim <= 0 || a->count < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->count, &lo, &hi)) return 0;
  for (int64_t i = lo; i < hi; ++i) {
    int32_t id = a->ids[i];
    if (id < 0 || id >= a->vocab) return 2;
    memcpy(a->out + i * a->dim, a->table + (int64_t)id * a->dim, (size_t)a->dim * sizeof(float));
  }
  return 0;
}

static int embedding_bwd(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_embedding_args_t *a = kernarg;
  if (!a->ids || !a->dout || !a->dtable || a->dim <= 0 || a->count < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->dim, &lo, &hi)) return 0;
  for (int64_t i = 0; i < a->count; ++i) {
    int32_t id = a->ids[i];
    if (id < 0 || id >= a->vocab) return 2;
    for (int64_t j = lo; j < hi; ++j) a->dtable[(int64_t)id * a->dim + j] += a->dout[i * a->dim + j];
  }
  return 0;
}

const aq_kernel_desc_t aq_cpu_embedding_desc = {AQ_KERNEL_EMBEDDING, embedding, sizeof(aq_embedding_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_embedding_bwd_desc = {AQ_KERNEL_EMBEDDING_BWD, embedding_bwd, sizeof(aq_embedding_args_t),
                                                    8, 0, 0};
