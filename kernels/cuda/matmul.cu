// aq_matmul_f32 on NVIDIA GPUs: 64x64 tiles of C per block of 16x16 threads,
// each thread 4x4 outputs from shared-memory tiles 16 deep; transposes are
// folded into the loads; bias, beta and relu in the epilogue.
#include "common.cuh"

enum { TILE = 64, DEPTH = 16, PER = 4 };

__device__ inline float load_a(const aq_matmul_args_t &p, const float *a, int64_t i, int64_t k) {
  if (i >= p.m || k >= p.k) return 0.0f;
  return p.trans_a ? a[k * p.lda + i] : a[i * p.lda + k];
}
__device__ inline float load_b(const aq_matmul_args_t &p, const float *b, int64_t k, int64_t j) {
  if (k >= p.k || j >= p.n) return 0.0f;
  return p.trans_b ? b[j * p.ldb + k] : b[k * p.ldb + j];
}

AQ_KERNEL void aq_matmul_f32(aq_matmul_args_t p) {
  __shared__ float As[DEPTH][TILE + 4];
  __shared__ float Bs[DEPTH][TILE + 4];
  const float *a = p.a + blockIdx.z * p.stride_a, *b = p.b + blockIdx.z * p.stride_b;
  float *c = p.c + blockIdx.z * p.stride_c;
  int64_t row0 = (int64_t)blockIdx.y * TILE, col0 = (int64_t)blockIdx.x * TILE;
  int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  float acc[PER][PER] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += DEPTH) {
    /* Consecutive threads read consecutive addresses: along k where the
     * operand is stored k-minor (A as is, B transposed), else along m / n. */
    for (int e = tid; e < DEPTH * TILE; e += 256) {
      int kk = p.trans_a ? e / TILE : e % DEPTH, r = p.trans_a ? e % TILE : e / DEPTH;
      As[kk][r] = load_a(p, a, row0 + r, k0 + kk);
      kk = p.trans_b ? e % DEPTH : e / TILE, r = p.trans_b ? e / DEPTH : e % TILE;
      Bs[kk][r] = load_b(p, b, k0 + kk, col0 + r);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < DEPTH; ++kk) {
      float av[PER], bv[PER];
#pragma unroll
      for (int q = 0; q < PER; ++q) av[q] = As[kk][ty + 16 * q], bv[q] = Bs[kk][tx + 16 * q];
#pragma unroll
      for (int i = 0; i < PER; ++i)
#pragma unroll
        for (int j = 0; j < PER; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < PER; ++i) {
    int64_t r = row0 + ty + 16 * i;
    if (r >= p.m) continue;
    for (int j = 0; j < PER; ++j) {
      int64_t col = col0 + tx + 16 * j;
      if (col >= p.n) continue;
      float v = p.alpha * acc[i][j];
      if (p.beta != 0.0f) v += p.beta * c[r * p.ldc + col];
      if (p.bias) v += p.bias[col];
      if (p.activation == AQ_ACTIVATION_RELU) v = v > 0.0f ? v : 0.0f;
      c[r * p.ldc + col] = v;
    }
  }
}
