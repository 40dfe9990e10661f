// Seeded dropout: the same (seed, index) hash as the CPU kernels, so both
// agents drop the same elements.
#include "common.cuh"

__device__ inline uint32_t dropout_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

__device__ inline void dropout_at(const aq_dropout_args_t &p, int64_t i) {
  uint32_t cut = (uint32_t)((double)p.p * 4294967296.0);
  p.y[i] = dropout_hash(p.seed, (uint64_t)i) >= cut ? p.x[i] * (1.0f / (1.0f - p.p)) : 0.0f;
}

AQ_KERNEL void aq_dropout_f32(aq_dropout_args_t p) {
  int64_t i = global_x();
  if (i < p.n) dropout_at(p, i);
}
AQ_KERNEL void aq_dropout_bwd_f32(aq_dropout_args_t p) {
  int64_t i = global_x();
  if (i < p.n) dropout_at(p, i);
}
