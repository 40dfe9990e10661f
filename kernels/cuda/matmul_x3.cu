// aq_matmul_f32 on tensor cores at fp32 accuracy (3xTF32; ops.h's
// AQ_MATMUL_PRECISION_DEFAULT on GPUs): three TF32 mma.sync a step on
// each operand's big and small parts (mma_tf32.cuh). On an H100 that
// outruns FFMA (matmul.cu), which the 256-row products of a training
// step leave bound by shared-memory reads: `aq-bench gemm --agent gpu
// --shapes mlp` measured 18-20 us a product against 25-32.
//
// A block of 256 threads takes a 64x64 tile of C: 8 warps, 2 x 2 of 32x32
// pieces, each pair of warps on the same piece taking alternate halves of
// every 32-deep k slice ("sliced k": the pairs' sums meet in shared memory
// at the end). So each warp reuses every fragment it loads 4 or 2 times,
// and a block has 8 warps to hide latency while only 64x64 of C.
// Slices come in through cp.async, double-buffered (the next slice is asked
// for before this one is waited on; 16-deep slices in 3 or 4 stages, and
// this depth with the next slice asked for only after the barrier, measured
// 3-10% slower on an H100), in the layout they have in memory: a
// k-contiguous operand (A stored m x k, B stored n x k) as rows of 32 k
// padded to 36 floats, an m/n-contiguous one (A stored k x m, B stored
// k x n) as rows of 64 padded to 72. Either way the 32 lanes of a fragment
// load (8 rows x 4 k, or 4 k x 8 columns) fall in 32
// distinct banks. Edges and unaligned operands take bounds-checked scalar
// loads into the same layout, so every shape is correct.
//
// k split over a cluster (sm_90) as matmul.cu's split builds: the same
// partial-tile exchange (matmul_f32.cuh). On GPUs without mma.sync TF32
// (HIP) the builds run matmul.cu's exact FFMA tiles instead (matmul.cu
// comes before this file in the code object's one translation unit).
#include "matmul_f32.cuh"
#include "mma_tf32.cuh"

namespace mm_x3 {

using mm_f32::Fuse;
using mm_f32::THREADS;
constexpr int BM = 64, BN = 64, BK = 32;
using tf32x3::LDK;
using tf32x3::LDM;
static_assert(LDK == BK + 4 && LDM == BM + 8, "mma_tf32.cuh's slices are these tiles'");
constexpr int OPERAND = BM * LDK > BK * LDM ? BM * LDK : BK * LDM;
constexpr int LDP = BN + 4; /* the partial tile's rows */

union Shared {
  float stage[2][2][OPERAND]; /* [buffer][A, B] */
  float part[BM][LDP];
};

#if !defined(AQ_HIP)
__device__ __forceinline__ void cp_async16(float *dst, const float *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One slice of an operand into shared memory: `rows` x 32 k (kc: stored
// with k contiguous) or 32 k x 64 (stored with m / n contiguous), from the
// matrix at src (leading dimension ld) whose first row / column of the
// slice is mn0 (m or n) and k0; elements past mn_len or k_len read as 0.
__device__ __forceinline__ void load_slice(float *dst, const float *src, int64_t ld, bool kc, int64_t mn0,
                                           int64_t mn_len, int64_t k0, int64_t k_len, bool vec, int tid) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = tid + i * THREADS; /* 512 16-byte chunks a slice */
    const int r = kc ? e >> 3 : e >> 4, ch = kc ? e & 7 : e & 15;
    float *d = dst + r * (kc ? LDK : LDM) + ch * 4;
    const int64_t gr = kc ? mn0 + r : k0 + r, gc = kc ? k0 + ch * 4 : mn0 + ch * 4;
    const int64_t rows = kc ? mn_len : k_len, cols = kc ? k_len : mn_len;
    if (gr < rows && vec && gc + 3 < cols) {
      cp_async16(d, src + gr * ld + gc);
    } else {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gr < rows) {
        const float *s = src + gr * ld + gc;
        if (gc < cols) v.x = __ldg(s);
        if (gc + 1 < cols) v.y = __ldg(s + 1);
        if (gc + 2 < cols) v.z = __ldg(s + 2);
        if (gc + 3 < cols) v.w = __ldg(s + 3);
      }
      *reinterpret_cast<float4 *>(d) = v;
    }
  }
}

// The 64x64 tile at (row0, col0) of the product q (k already sliced), its
// sums left in u.part.
__device__ __forceinline__ void tile_sums(const aq_matmul_args_t &q, Shared &u, int64_t row0, int64_t col0) {
  const bool ta = q.trans_a != 0, tb = q.trans_b != 0;
  const bool va = aligned16(q.a) && q.lda % 4 == 0, vb = aligned16(q.b) && q.ldb % 4 == 0;
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, warp = tid >> 5, lane = tid & 31;
  const int half = warp >> 2, wm = ((warp >> 1) & 1) * 32, wn = (warp & 1) * 32;
  float acc[2][4][4] = {};

  const int64_t nk = (q.k + BK - 1) / BK;
  auto load = [&](int buf, int64_t k0) {
    load_slice(u.stage[buf][0], q.a, q.lda, !ta, row0, q.m, k0, q.k, va, tid);
    load_slice(u.stage[buf][1], q.b, q.ldb, tb, col0, q.n, k0, q.k, vb, tid);
    cp_async_commit();
  };
  if (nk > 0) load(0, 0);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int buf = (int)(kt & 1);
    if (kt + 1 < nk) {
      load(buf ^ 1, (kt + 1) * BK);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < 2; ++s)
      tf32x3::warp_step(acc, u.stage[buf][0], u.stage[buf][1], ta, tb, wm, wn, (half * 2 + s) * 8, lane);
    __syncthreads();
  }

  /* The two halves of k meet: C fragment element j of tile (mi, ni) is at
   * row g (+8 for j >= 2), column 2t (+1 for odd j). */
  const int g = lane >> 2, t = lane & 3;
  for (int h = 1; h >= 0; --h) {
    if (half == h)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int j = 0; j < 4; j += 2) {
            float2 *pp = reinterpret_cast<float2 *>(&u.part[wm + mi * 16 + g + (j >> 1) * 8][wn + ni * 8 + 2 * t]);
            float2 v = make_float2(acc[mi][ni][j], acc[mi][ni][j + 1]);
            if (h == 0) v.x += pp->x, v.y += pp->y;
            *pp = v;
          }
    __syncthreads();
  }
}
#endif  // !AQ_HIP

template <int S, bool F>
__device__ void matmul_x3(const aq_matmul_args_t &p, Shared &u, const Fuse &f) {
#if defined(AQ_HIP)
  (void)u;
  __shared__ __align__(16) mm_f32::Tile<1> t;
  mm_f32::matmul_tiles<1, 16, F>(p, t, f);
#else
#ifndef AQ_CLUSTERS
  if (S > 1 && blockIdx.x % S) return; /* one block a cluster's worth does the whole tile */
#endif
  const int64_t tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int64_t groups_x = gridDim.x / S, groups = groups_x * gridDim.y;
  const bool vc0 = p.ldc % 4 == 0 && (p.batch <= 1 || p.stride_c % 4 == 0) && (!p.bias || aligned16(p.bias));
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const float *a = p.a + z * p.stride_a, *b = p.b + z * p.stride_b;
    float *c = p.c + z * p.stride_c;
    for (int64_t id = (int64_t)blockIdx.y * groups_x + blockIdx.x / S; id < tiles; id += groups) {
      /* Grouped order: 8 tile-rows share each B panel while it is in L2. */
      const int64_t per_group = 8 * tiles_n, first = (id / per_group) * 8;
      const int64_t rows = tiles_m - first < 8 ? tiles_m - first : 8;
      const int64_t tm = first + (id % per_group) % rows, tn = (id % per_group) / rows;
      const aq_matmul_args_t q = mm_f32::k_slice<S>(p, a, b);
      tile_sums(q, u, tm * BM, tn * BN);
      mm_f32::emit_part<S, F>(p, f, &u.part[0][0], LDP, BM, BN / 4, tm * BM, tn * BN, c, vc0 && aligned16(c));
    }
  }
#endif
}

}  // namespace mm_x3

// Blocks come in clusters of S along x, as matmul.cu's split builds.
#define AQ_MATMUL_X3(S, NAME, FUSED)                                                                       \
  AQ_KERNEL void AQ_SPLIT_CLUSTER(S) __launch_bounds__(256, 2) NAME(aq_matmul_args_t p) {              \
    if (!matmul_prologue(p)) return;                                                                   \
    __shared__ __align__(16) mm_x3::Shared u;                                                          \
    mm_x3::matmul_x3<S, false>(p, u, mm_f32::Fuse{});                                                  \
  }                                                                                                    \
  AQ_KERNEL void AQ_SPLIT_CLUSTER(S) __launch_bounds__(256, 2) FUSED(aq_matmul_fused_args_t a) {        \
    mm_f32::Fuse f;                                                                                    \
    if (!fused_prologue(a, f)) return;                                                                 \
    __shared__ __align__(16) mm_x3::Shared u;                                                          \
    mm_x3::matmul_x3<S, true>(a.mm, u, f);                                                             \
  }
AQ_MATMUL_X3(1, aq_matmul_f32_x3, aq_matmul_fused_f32_x3)
AQ_MATMUL_X3(2, aq_matmul_f32_x3_split2, aq_matmul_fused_f32_x3_split2)
AQ_MATMUL_X3(4, aq_matmul_f32_x3_split4, aq_matmul_fused_f32_x3_split4)
