// Embedding lookup (a row per thread) and its backward (a column per thread).
#include "common.cuh"

AQ_KERNEL void aq_embedding_f32(aq_embedding_args_t p) {
  int64_t i = global_x();
  if (i >= p.count) return;
  int32_t id = p.ids[i];
  if (id < 0 || id >= p.vocab) return; /* the CPU kernel faults; here the row is left alone */
  for (int64_t j = 0; j < p.dim; ++j) p.out[i * p.dim + j] = p.table[(int64_t)id * p.dim + j];
}

AQ_KERNEL void aq_embedding_bwd_f32(aq_embedding_args_t p) {
  int64_t j = global_x();
  if (j >= p.dim) return;
  for (int64_t i = 0; i < p.count; ++i) {
    int32_t id = p.ids[i];
    if (id >= 0 && id < p.vocab) p.dtable[(int64_t)id * p.dim + j] += p.dout[i * p.dim + j];
  }
}
