// aq_matmul_f32 on GPUs: exact fp32 (FFMA, no TF32).
//
// A block of 256 threads computes 128x128 tiles of C: each warp a 64x32
// piece, each thread 8x8 outputs (two 4-row by two 4-column quads, so every
// shared-memory read is a conflict-free 16-byte vector). The k loop walks 8
// deep, double-buffered: the next slice of A and B comes from global memory
// into registers while the current one is multiplied, and lands in the other
// shared buffer, one barrier per slice. A is kept k-major in shared memory
// (As[k][m]) so both operands are read along m / n; transposes only change
// which direction the global loads run. Loads are 16-byte vectors where the
// leading dimensions and pointers allow it, with scalar, bounds-checked
// fallbacks at the edges, so every shape (1, 7, 33, 257, ...) is exact.
//
// Launch: any grid, blocks of 256 threads (ops.h's aq_gpu_shape gives 16x16
// blocks over 64x64 tiles: the extra blocks find no tile and return). Blocks
// walk the 128x128 tiles of every batch entry in a grouped order (8 tile-rows
// at a time) so neighbouring blocks share A and B in L2. A block of any other
// size is a launch bug: the kernel traps, so the fault names it.
#include "matmul_common.cuh"

// Every .cu is one translation unit of the fatbin: names stay in a namespace per file.
namespace mm_f32 {

constexpr int BM = 128, BN = 128, BK = 8, THREADS = 256, PAD = 4;

struct Tile {
  float a[2][BK][BM + PAD];
  float b[2][BK][BN + PAD];
};

// Four consecutive elements (r, c..c+3) of a rows x cols row-major matrix,
// zero outside it.
__device__ __forceinline__ float4 load4(const float *base, int64_t ld, int64_t r, int64_t c, int64_t rows,
                                        int64_t cols, bool vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (r >= rows) return v;
  const float *p = base + r * ld + c;
  if (vec && c + 3 < cols) return __ldg(reinterpret_cast<const float4 *>(p));
  if (c < cols) v.x = __ldg(p);
  if (c + 1 < cols) v.y = __ldg(p + 1);
  if (c + 2 < cols) v.z = __ldg(p + 2);
  if (c + 3 < cols) v.w = __ldg(p + 3);
  return v;
}

// One thread's share of a k-slice: a float4 of A and one of B.
__device__ __forceinline__ void fetch(const aq_matmul_args_t &p, bool TA, bool TB, const float *a, const float *b, int64_t row0,
                                      int64_t col0, int64_t k0, int tid, bool va, bool vb, float4 &ra, float4 &rb) {
  if (TA) /* A stored k x m: a row of 128 m per k */
    ra = load4(a, p.lda, k0 + (tid >> 5), row0 + (tid & 31) * 4, p.k, p.m, va);
  else /* A stored m x k: 8 k per m row */
    ra = load4(a, p.lda, row0 + (tid >> 1), k0 + (tid & 1) * 4, p.m, p.k, va);
  if (TB) /* B stored n x k */
    rb = load4(b, p.ldb, col0 + (tid >> 1), k0 + (tid & 1) * 4, p.n, p.k, vb);
  else /* B stored k x n */
    rb = load4(b, p.ldb, k0 + (tid >> 5), col0 + (tid & 31) * 4, p.k, p.n, vb);
}

__device__ __forceinline__ void stash(Tile &t, bool TA, bool TB, int buf, int tid, const float4 &ra, const float4 &rb) {
  if (TA) {
    *reinterpret_cast<float4 *>(&t.a[buf][tid >> 5][(tid & 31) * 4]) = ra;
  } else {
    int m = tid >> 1, k = (tid & 1) * 4;
    t.a[buf][k][m] = ra.x, t.a[buf][k + 1][m] = ra.y, t.a[buf][k + 2][m] = ra.z, t.a[buf][k + 3][m] = ra.w;
  }
  if (TB) {
    int n = tid >> 1, k = (tid & 1) * 4;
    t.b[buf][k][n] = rb.x, t.b[buf][k + 1][n] = rb.y, t.b[buf][k + 2][n] = rb.z, t.b[buf][k + 3][n] = rb.w;
  } else {
    *reinterpret_cast<float4 *>(&t.b[buf][tid >> 5][(tid & 31) * 4]) = rb;
  }
}

__device__ void tile_f32(const aq_matmul_args_t &p, bool TA, bool TB, Tile &t, const float *a, const float *b, float *c, int64_t row0,
                         int64_t col0, bool va, bool vb, bool vc) {
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, warp = tid >> 5, lane = tid & 31;
  const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32; /* 2 x 4 warps */
  const int lr = (lane >> 2) * 4, lc = (lane & 3) * 4;   /* 8 x 4 lanes */
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int64_t nk = (p.k + BK - 1) / BK;
  float4 ra, rb;
  fetch(p, TA, TB, a, b, row0, col0, 0, tid, va, vb, ra, rb);
  stash(t, TA, TB, 0, tid, ra, rb);
  __syncthreads();
  int buf = 0;
  for (int64_t kt = 0; kt < nk; ++kt) {
    const bool more = kt + 1 < nk;
    if (more) fetch(p, TA, TB, a, b, row0, col0, (kt + 1) * BK, tid, va, vb, ra, rb);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[8], bv[8];
      float4 x0 = *reinterpret_cast<const float4 *>(&t.a[buf][k][wm + lr]);
      float4 x1 = *reinterpret_cast<const float4 *>(&t.a[buf][k][wm + 32 + lr]);
      float4 y0 = *reinterpret_cast<const float4 *>(&t.b[buf][k][wn + lc]);
      float4 y1 = *reinterpret_cast<const float4 *>(&t.b[buf][k][wn + 16 + lc]);
      av[0] = x0.x, av[1] = x0.y, av[2] = x0.z, av[3] = x0.w, av[4] = x1.x, av[5] = x1.y, av[6] = x1.z, av[7] = x1.w;
      bv[0] = y0.x, bv[1] = y0.y, bv[2] = y0.z, bv[3] = y0.w, bv[4] = y1.x, bv[5] = y1.y, bv[6] = y1.z, bv[7] = y1.w;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) stash(t, TA, TB, buf ^ 1, tid, ra, rb);
    __syncthreads();
    buf ^= 1;
  }

  /* Epilogue: alpha, beta * C, bias, activation; 16-byte stores where C allows. */
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = row0 + wm + (i >> 2) * 32 + lr + (i & 3);
    if (r >= p.m) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t col = col0 + wn + h * 16 + lc;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = p.alpha * acc[i][h * 4 + j];
      float *out = c + r * p.ldc + col;
      if (vc && col + 3 < p.n) {
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
          out[j] = activate(x, p.activation);
        }
      }
    }
  }
}



__device__ void matmul_tiles(const aq_matmul_args_t &p, Tile &t) {
  const int64_t tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y;
  /* 16-byte loads need 16-byte aligned rows in every batch entry. */
  const bool va = aligned16(p.a) && p.lda % 4 == 0 && (p.batch <= 1 || p.stride_a % 4 == 0);
  const bool vb = aligned16(p.b) && p.ldb % 4 == 0 && (p.batch <= 1 || p.stride_b % 4 == 0);
  const bool vc = aligned16(p.c) && p.ldc % 4 == 0 && (p.batch <= 1 || p.stride_c % 4 == 0) &&
                  (!p.bias || aligned16(p.bias));
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const float *a = p.a + z * p.stride_a, *b = p.b + z * p.stride_b;
    float *c = p.c + z * p.stride_c;
    for (int64_t id = (int64_t)blockIdx.y * gridDim.x + blockIdx.x; id < tiles; id += blocks) {
      /* Grouped order: 8 tile-rows share each B panel while it is in L2. */
      const int64_t per_group = 8 * tiles_n, first = (id / per_group) * 8;
      const int64_t rows = tiles_m - first < 8 ? tiles_m - first : 8;
      const int64_t tm = first + (id % per_group) % rows, tn = (id % per_group) / rows;
      tile_f32(p, p.trans_a != 0, p.trans_b != 0, t, a, b, c, tm * BM, tn * BN, va, vb, vc);
    }
  }
}

}  // namespace mm_f32

// At most 256 threads a block (2 blocks an SM keep 128 registers a thread).
AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_f32(aq_matmul_args_t p) {
  using namespace mm_f32;
  if (!matmul_valid(p)) return;
  if (p.batch <= 0) p.batch = 1; /* as the CPU grid: batch 0 is one matrix */
  if (p.m == 0 || p.n == 0) return;
  /* The tiles assume 256 threads; another launch shape is the caller's bug,
   * and faulting names this kernel (the CPU kernels fault the same way). */
  if (blockDim.x * blockDim.y * blockDim.z != THREADS) __trap();
  __shared__ __align__(16) Tile t;
  matmul_tiles(p, t);
}
