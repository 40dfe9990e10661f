// What the fp32 matmul builds share, the FFMA tiles of matmul.cu and the
// tensor-core tiles of matmul_x3.cu: the fused consumer of the write-back
// (aq_matmul_fused_f32), the epilogue, the sum of a cluster's partial tiles
// when k is split, and the kernarg checks.
#pragma once
#include "matmul_common.cuh"
#if !defined(AQ_HIP)
#include <cooperative_groups.h>
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(AQ_HIP)
#define AQ_CLUSTERS 1
#define AQ_SPLIT_CLUSTER(S) __cluster_dims__(S, 1, 1)
#else
#define AQ_SPLIT_CLUSTER(S)
#endif

namespace mm_f32 {

constexpr int THREADS = 256, PAD = 4;

// aq_matmul_fused_f32's consumer (ops.h): what the write-back does with an
// element v of the finished product instead of storing it. F = false (every
// unfused build) compiles to the plain store.
struct Fuse {
  int32_t kind;
  const float *mask;
  int64_t ldmask;
  float *velocity;
  float lr, momentum, weight_decay;
  bool vec; /* the consumer's array takes 16-byte accesses along a row */
};

// Four consecutive elements v[0..3] of a row through the consumer, 16
// bytes at a time (C, and the consumer's array, allow it: vc && f.vec).
__device__ __forceinline__ void put4(const aq_matmul_args_t &p, const Fuse &f, float *c, int64_t r, int64_t col,
                                     const float *v) {
  float4 *out = reinterpret_cast<float4 *>(c + r * p.ldc + col);
  if (f.kind == AQ_MATMUL_FUSE_RELU_MASK) {
    float4 m = __ldg(reinterpret_cast<const float4 *>(f.mask + r * f.ldmask + col));
    *out = make_float4(m.x > 0.0f ? v[0] : 0.0f, m.y > 0.0f ? v[1] : 0.0f, m.z > 0.0f ? v[2] : 0.0f,
                       m.w > 0.0f ? v[3] : 0.0f);
    return;
  }
  float4 *vp = reinterpret_cast<float4 *>(f.velocity + r * p.ldc + col);
  float4 w4 = *out, u4 = *vp;
  float w[4] = {w4.x, w4.y, w4.z, w4.w}, u[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float g = v[j] + f.weight_decay * w[j];
    u[j] = f.momentum * u[j] + g;
    w[j] = w[j] - f.lr * u[j];
  }
  *vp = make_float4(u[0], u[1], u[2], u[3]);
  *out = make_float4(w[0], w[1], w[2], w[3]);
}

template <bool F>
__device__ __forceinline__ void put(const aq_matmul_args_t &p, const Fuse &f, float *c, int64_t r, int64_t col, float v) {
  float *out = c + r * p.ldc + col;
  if (!F) {
    *out = v;
  } else if (f.kind == AQ_MATMUL_FUSE_RELU_MASK) {
    *out = f.mask[r * f.ldmask + col] > 0.0f ? v : 0.0f;
  } else { /* SGD: v is the gradient of the weight at out (aq_sgd_momentum_f32's rule) */
    float *vel = f.velocity + r * p.ldc + col, w = *out;
    float g = v + f.weight_decay * w;
    float u = f.momentum * *vel + g;
    *vel = u;
    *out = w - f.lr * u;
  }
}

// The write-back of four products v[0..3] (alpha times the sums) of row
// r < m, columns col..col+3 (those past n are dropped): beta * C, bias,
// activation, or the fused consumer; 16-byte accesses where C (vc) and the
// consumer allow.
template <bool F>
__device__ __forceinline__ void finish4(const aq_matmul_args_t &p, const Fuse &f, float *c, int64_t r, int64_t col,
                                        float (&v)[4], bool vc) {
  float *out = c + r * p.ldc + col;
  if (F && vc && f.vec && col + 3 < p.n) {
    const float4 o = p.beta != 0.0f ? *reinterpret_cast<const float4 *>(out) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float ov[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (p.beta != 0.0f) v[j] += p.beta * ov[j];
      if (p.bias) v[j] += p.bias[col + j];
      v[j] = activate(v[j], p.activation);
    }
    put4(p, f, c, r, col, v);
  } else if (!F && vc && col + 3 < p.n) {
    if (p.beta != 0.0f) {
      float4 o = *reinterpret_cast<const float4 *>(out);
      v[0] += p.beta * o.x, v[1] += p.beta * o.y, v[2] += p.beta * o.z, v[3] += p.beta * o.w;
    }
    if (p.bias) {
      float4 bi = __ldg(reinterpret_cast<const float4 *>(p.bias + col));
      v[0] += bi.x, v[1] += bi.y, v[2] += bi.z, v[3] += bi.w;
    }
    *reinterpret_cast<float4 *>(out) = make_float4(activate(v[0], p.activation), activate(v[1], p.activation),
                                                   activate(v[2], p.activation), activate(v[3], p.activation));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (col + j >= p.n) break;
      float x = v[j];
      if (p.beta != 0.0f) x += p.beta * out[j];
      if (p.bias) x += p.bias[col + j];
      put<F>(p, f, c, r, col + j, activate(x, p.activation));
    }
  }
}

// This block's slice of k when a cluster of S splits it: the product of
// A's and B's columns / rows k0..k1 (a multiple of 8 deep, so 16-byte loads
// stay aligned). Without clusters, all of k.
template <int S>
__device__ __forceinline__ aq_matmul_args_t k_slice(const aq_matmul_args_t &p, const float *a, const float *b) {
  aq_matmul_args_t q = p;
  q.a = a, q.b = b;
#ifdef AQ_CLUSTERS
  if (S > 1) {
    const int64_t rank = cooperative_groups::this_cluster().block_rank();
    const int64_t slice = ((p.k + S - 1) / S + 7) / 8 * 8;
    const int64_t k0 = rank * slice < p.k ? rank * slice : p.k, k1 = k0 + slice < p.k ? k0 + slice : p.k;
    q.a = p.trans_a ? a + k0 * p.lda : a + k0, q.b = p.trans_b ? b + k0 : b + k0 * p.ldb, q.k = k1 - k0;
  }
#endif
  return q;
}

// The write-back of a tile whose k was split over a cluster of S blocks
// (S = 1: not split). Every block of the cluster has left its partial sums
// of `rows` rows of the tile in its own shared `part` (row stride ld
// floats, row4 float4s a row),
// the row of part[0] being C's row r0; each block sums its S-th of the rows
// over the cluster's partials, always in rank order (results depend on the
// shape and S, never on timing), and writes them back through finish4. The
// barriers on either side order the partials' writes before the reads, and
// the reads before anyone overwrites them.
template <int S, bool F>
__device__ __forceinline__ void emit_part(const aq_matmul_args_t &p, const Fuse &f, float *part, int ld, int rows,
                                          int row4, int64_t r0, int64_t col0, float *c, bool vc) {
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
#ifdef AQ_CLUSTERS
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = S > 1 ? (int)cluster.block_rank() : 0;
  if (S > 1) cluster.sync(); else __syncthreads();
#else
  const int rank = 0;
  __syncthreads();
#endif
  for (int e = tid; e < rows / S * row4; e += THREADS) {
    const int row = rank * (rows / S) + e / row4, col = (e % row4) * 4;
    const int64_t r = r0 + row;
    if (r >= p.m || col0 + col >= p.n) continue;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < S; ++s) {
#ifdef AQ_CLUSTERS
      const float *src = S > 1 ? cluster.map_shared_rank(part, s) : part;
#else
      const float *src = part;
#endif
      const float4 x = *reinterpret_cast<const float4 *>(&src[row * ld + col]);
      v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] *= p.alpha;
    finish4<F>(p, f, c, r, col0 + col, v, vc);
  }
#ifdef AQ_CLUSTERS
  if (S > 1) cluster.sync(); else __syncthreads();
#else
  __syncthreads();
#endif
}

}  // namespace mm_f32

// The CPU kernel's checks and launch rules, shared by every build: each
// takes blocks of exactly 256 threads.
__device__ __forceinline__ bool matmul_prologue(aq_matmul_args_t &p) {
  if (!matmul_valid(p)) return false;
  if (p.batch <= 0) p.batch = 1; /* as the CPU grid: batch 0 is one matrix */
  if (p.m == 0 || p.n == 0) return false;
  /* The tiles assume 256 threads; another launch shape is the caller's bug,
   * and faulting names this kernel (the CPU kernels fault the same way). */
  if (blockDim.x * blockDim.y * blockDim.z != mm_f32::THREADS) __trap();
  return true;
}

// aq_matmul_fused_f32 (ops.h): the same builds with the consumer in the
// write-back. The rules the CPU kernel faults on leave everything untouched.
__device__ __forceinline__ bool fused_prologue(aq_matmul_fused_args_t &a, mm_f32::Fuse &f) {
  const aq_matmul_args_t &p = a.mm;
  if (p.bias || p.activation != AQ_ACTIVATION_NONE || p.batch > 1) return false;
  if (a.fuse == AQ_MATMUL_FUSE_RELU_MASK ? !a.mask || a.ldmask < p.n
      : a.fuse != AQ_MATMUL_FUSE_SGD || !a.velocity || p.beta != 0.0f || p.k > AQ_MATMUL_FUSE_SGD_MAX_K)
    return false;
  const bool vec = a.fuse == AQ_MATMUL_FUSE_RELU_MASK ? aligned16(a.mask) && a.ldmask % 4 == 0 : aligned16(a.velocity);
  f = mm_f32::Fuse{a.fuse, a.mask, a.ldmask, a.velocity, a.lr, a.momentum, a.weight_decay, vec};
  return matmul_prologue(a.mm);
}
