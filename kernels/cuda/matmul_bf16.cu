// aq_matmul_bf16: bf16 A and B, fp32 accumulation and C, on tensor cores
// (mma.sync m16n8k16, the sm_80 instruction that sm_90 also runs).
//
// A block of 256 threads (8 warps, 2 x 4) computes a 128x128 tile of C, each
// warp a 64x32 piece (4 x 4 mma tiles, 64 fp32 accumulators a thread, so two
// blocks fit an SM). The k loop walks 32 deep through a 2-stage cp.async
// pipeline (32 KB; the 48 KB a block may have without the driver raising its
// limit holds a third, which spilled registers). Operands sit in shared
// memory in their global layout (k-major or m/n-major, whichever the
// transposes give), XOR-swizzled by 16-byte chunk so every ldmatrix phase
// hits 8 different banks; ldmatrix (.trans for m/n-major) gives the
// fragments. Loads that are not 16-byte aligned (odd leading dimensions) go
// element by element, still exact. On AMD (HIP) a plain exact loop stands in.
//
// Where the time goes: this reaches about a third of cuBLAS on an H100,
// whose cuBLAS runs Hopper's wgmma with TMA loads and 100+ KB of shared
// memory a block. Getting closer needs the sm_90a path (wgmma from shared
// memory, a deeper pipeline) and so dynamic shared memory above 48 KB,
// which the driver must enable per function (cuFuncSetAttribute).
#include "matmul_common.cuh"
#include "aquila/ops_gpu.h"

#ifndef AQ_HIP
namespace mm_bf16 {

constexpr int BK = 32;

// A block configuration: BM x BN tiles of C, WM x WN warps of 64 x (8 NI)
// each, STAGES slices of 32 k in flight (at most the 48 KB of static shared
// memory).
template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int NI_ = 8>
struct Config {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_, THREADS = 32 * WM_ * WN_;
  static constexpr int NI = NI_; /* mma tiles of 8 columns a warp */
  static_assert(BM == 64 * WM && BN == 8 * NI * WN && NI % 2 == 0, "64 x 8NI warp tiles");
  static_assert(STAGES * (BM + BN) * BK * 2 <= 48 * 1024, "48 KB of static shared memory");
  struct Smem {
    uint8_t a[STAGES][BM * BK * 2];
    uint8_t b[STAGES][BN * BK * 2];
  };
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Byte offset of 16-byte chunk `ch` of row `row`. K-major tiles: MN rows of
// 32 k, 4 chunks a row; m/n-major tiles: 32 rows (k) of MN values, MN / 8
// chunks a row. The XOR swizzle puts the 8 rows an ldmatrix phase reads in
// 8 different bank groups.
__device__ __forceinline__ uint32_t off_kmajor(int row, int ch) { return row * 64 + ((ch ^ ((row >> 1) & 3)) << 4); }
template <int MN>
__device__ __forceinline__ uint32_t off_mnmajor(int row, int ch) {
  return row * (MN * 2) + ((ch ^ (row & 7)) << 4);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Not volatile: a pure function of its registers, free to move among the
// ldmatrix of the next fragments.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One operand's global view: rows x cols row-major (cols contiguous).
struct Operand {
  const uint16_t *base;
  int64_t ld, rows, cols;
  bool kmajor; /* cols is k */
  bool vec;    /* 16-byte chunks are aligned */
};

// Stage one MN x 32 (k-major) or 32 x MN (m/n-major) slice starting at
// (mn0, k0) into a shared tile: MN * 4 chunks of 8 values.
template <bool KMAJOR, int MN, int THREADS>
__device__ __forceinline__ void load_slice(const Operand &o, uint8_t *tile, int64_t mn0, int64_t k0, int tid) {
  constexpr int PER = MN * 4 / THREADS, ROW_CHUNKS = MN / 8;
  static_assert(PER * THREADS == MN * 4, "whole chunks a thread");
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int q = tid + i * THREADS;
    int row, ch;
    int64_t r, c;
    uint32_t off;
    if (KMAJOR) {
      row = q >> 2, ch = q & 3, r = mn0 + row, c = k0 + ch * 8, off = off_kmajor(row, ch);
    } else {
      row = q / ROW_CHUNKS, ch = q % ROW_CHUNKS, r = k0 + row, c = mn0 + ch * 8, off = off_mnmajor<MN>(row, ch);
    }
    const bool in = r < o.rows && c < o.cols;
    if (o.vec) {
      const int64_t left = in ? o.cols - c : 0;
      const int bytes = left >= 8 ? 16 : (int)left * 2;
      cp_async16(smem_addr(tile + off), in ? o.base + r * o.ld + c : o.base, bytes);
    } else {
      uint16_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = in && c + e < o.cols ? o.base[r * o.ld + c + e] : (uint16_t)0;
      uint4 w;
      w.x = v[0] | (uint32_t)v[1] << 16, w.y = v[2] | (uint32_t)v[3] << 16;
      w.z = v[4] | (uint32_t)v[5] << 16, w.w = v[6] | (uint32_t)v[7] << 16;
      *reinterpret_cast<uint4 *>(tile + off) = w;
    }
  }
}

template <class C, bool AK, bool BKM>
__device__ void tile_bf16(const aq_matmul_args_t &p, typename C::Smem &s, const Operand &A, const Operand &B,
                          float *c, int64_t row0, int64_t col0, bool vc) {
  constexpr int STAGES = C::STAGES, THREADS = C::THREADS;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  constexpr int NI = C::NI;
  const int wm = (warp / C::WN) * 64, wn = (warp % C::WN) * (8 * NI);
  float acc[4][NI][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int64_t nk = (p.k + BK - 1) / BK;
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < nk) {
      load_slice<AK, C::BM, THREADS>(A, s.a[st], row0, (int64_t)st * BK, tid);
      load_slice<BKM, C::BN, THREADS>(B, s.b[st], col0, (int64_t)st * BK, tid);
    }
    cp_commit();
  }

  /* Per-lane ldmatrix coordinates (see the fragment layouts of mma.m16n8k16). */
  const int l8 = lane & 7, l3 = (lane >> 3) & 1, l4 = lane >> 4;
  int read = 0, write = STAGES - 1; /* stage indices, rotating */
  for (int64_t kt = 0; kt < nk; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    const int64_t next = kt + STAGES - 1;
    if (next < nk) {
      load_slice<AK, C::BM, THREADS>(A, s.a[write], row0, next * BK, tid);
      load_slice<BKM, C::BN, THREADS>(B, s.b[write], col0, next * BK, tid);
    }
    cp_commit();
    const uint32_t ta = smem_addr(s.a[read]), tb = smem_addr(s.b[read]);
    read = read + 1 == STAGES ? 0 : read + 1;
    write = write + 1 == STAGES ? 0 : write + 1;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      /* B's fragments for the whole warp tile, A's one 16-row slice ahead
       * of the mma that use it (fewer live registers than all of A). */
      uint32_t af[2][4], bf[NI / 2][4];
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        if (BKM)
          ldsm_x4(tb + off_kmajor(wn + nj * 16 + l8 + l4 * 8, ks * 2 + l3), bf[nj]);
        else
          ldsm_x4_t(tb + off_mnmajor<C::BN>(ks * 16 + l8 + l3 * 8, (wn + nj * 16 + l4 * 8) >> 3), bf[nj]);
      }
#pragma unroll
      for (int mi = 0; mi < 5; ++mi) {
        if (mi < 4) {
          if (AK)
            ldsm_x4(ta + off_kmajor(wm + mi * 16 + l8 + l3 * 8, ks * 2 + l4), af[mi & 1]);
          else
            ldsm_x4_t(ta + off_mnmajor<C::BM>(ks * 16 + l8 + l4 * 8, (wm + mi * 16 + l3 * 8) >> 3), af[mi & 1]);
        }
        if (mi > 0) {
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
            mma(acc[mi - 1][ni], af[(mi - 1) & 1], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
        }
      }
    }
  }
  cp_wait<0>();
  __syncthreads(); /* the next tile's prologue reuses the stages */

  const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + wm + mi * 16 + g + h * 8;
      if (r >= p.m) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int64_t col = col0 + wn + ni * 8 + t2;
        if (col >= p.n) continue;
        float *out = c + r * p.ldc + col;
        float v0 = p.alpha * acc[mi][ni][h * 2], v1 = p.alpha * acc[mi][ni][h * 2 + 1];
        if (vc && col + 1 < p.n) {
          if (p.beta != 0.0f) {
            float2 o = *reinterpret_cast<const float2 *>(out);
            v0 += p.beta * o.x, v1 += p.beta * o.y;
          }
          if (p.bias) v0 += p.bias[col], v1 += p.bias[col + 1];
          *reinterpret_cast<float2 *>(out) = make_float2(activate(v0, p.activation), activate(v1, p.activation));
        } else {
          if (p.beta != 0.0f) v0 += p.beta * out[0];
          if (p.bias) v0 += p.bias[col];
          out[0] = activate(v0, p.activation);
          if (col + 1 < p.n) {
            if (p.beta != 0.0f) v1 += p.beta * out[1];
            if (p.bias) v1 += p.bias[col + 1];
            out[1] = activate(v1, p.activation);
          }
        }
      }
    }
}

// The whole kernel for one configuration: checks, then every tile of every
// batch entry in grouped order.
template <class C>
__device__ __forceinline__ void matmul(aq_matmul_args_t &p) {
  if (blockDim.x * blockDim.y * blockDim.z != C::THREADS) __trap(); /* a launch bug: fault, naming this kernel */
  __shared__ __align__(128) typename C::Smem s;
  const int64_t tiles_m = (p.m + C::BM - 1) / C::BM, tiles_n = (p.n + C::BN - 1) / C::BN, tiles = tiles_m * tiles_n;
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y;
  const bool b1 = p.batch <= 1;
  const bool va = aligned16(p.a) && p.lda % 8 == 0 && (b1 || p.stride_a % 8 == 0);
  const bool vb = aligned16(p.b) && p.ldb % 8 == 0 && (b1 || p.stride_b % 8 == 0);
  const bool vc = ((uintptr_t)p.c & 7) == 0 && p.ldc % 2 == 0 && (b1 || p.stride_c % 2 == 0);
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const uint16_t *a = (const uint16_t *)p.a + z * p.stride_a, *b = (const uint16_t *)p.b + z * p.stride_b;
    /* op(A) is m x k: stored m x k (k-major) unless transposed; op(B) is
     * k x n: stored n x k (k-major) when transposed. */
    const Operand A = p.trans_a ? Operand{a, p.lda, p.k, p.m, false, va} : Operand{a, p.lda, p.m, p.k, true, va};
    const Operand B = p.trans_b ? Operand{b, p.ldb, p.n, p.k, true, vb} : Operand{b, p.ldb, p.k, p.n, false, vb};
    float *c = p.c + z * p.stride_c;
    for (int64_t id = (int64_t)blockIdx.y * gridDim.x + blockIdx.x; id < tiles; id += blocks) {
      const int64_t per_group = 8 * tiles_n, first = (id / per_group) * 8;
      const int64_t rows = tiles_m - first < 8 ? tiles_m - first : 8;
      const int64_t tm = first + (id % per_group) % rows, tn = (id % per_group) / rows;
      const int64_t r0 = tm * C::BM, c0 = tn * C::BN;
      if (A.kmajor) {
        if (B.kmajor) tile_bf16<C, true, true>(p, s, A, B, c, r0, c0, vc);
        else tile_bf16<C, true, false>(p, s, A, B, c, r0, c0, vc);
      } else {
        if (B.kmajor) tile_bf16<C, false, true>(p, s, A, B, c, r0, c0, vc);
        else tile_bf16<C, false, false>(p, s, A, B, c, r0, c0, vc);
      }
    }
  }
}

/* aq_matmul_bf16's shape, and candidates timed beside it (aq-bench gemm
 * --bf16-kernel). Measured on an H100, n = 1024 / 2048 / 4096 / 8192, in
 * TFLOP/s: 8 warps of 64x32 over 128x128, 2 stages: 60 / 207 / 232 / 243;
 * 4 warps of 64x64 over 128x128: 35 / 147 / 183 / 208 (3 stages spill and
 * ran slower); 8 warps of 64x64 over 128x256 or 256x128: 33 / 137-142 /
 * 183-195 / 207-212. More warps an SM hide the ldmatrix -> mma latency
 * better than bigger warp tiles save shared-memory traffic. */
typedef Config<128, 128, 2, 4, 2, 4> Eight;
typedef Config<128, 128, 2, 4, 3, 4> Eight3;  /* a third stage (spills a little) */
typedef Config<128, 256, 2, 8, 2, 4> Wide16;  /* 16 warps of 64x32 over 128x256 */
typedef Config<256, 128, 4, 4, 2, 4> Tall16;  /* 16 warps of 64x32 over 256x128 */

}  // namespace mm_bf16

#endif  // !AQ_HIP

// 128 threads, 2 blocks an SM (up to 255 registers a thread).
AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_bf16(aq_matmul_args_t p) {
  if (!matmul_valid(p)) return;
  if (p.batch <= 0) p.batch = 1;
  if (p.m == 0 || p.n == 0) return;
#ifdef AQ_HIP
  /* AMD: no tensor-core path yet (MFMA would be the next step); an element
   * per thread, grid-stride, exact, for any launch shape. */
  const uint16_t *A = (const uint16_t *)p.a, *B = (const uint16_t *)p.b;
  for (int64_t e = grid_thread(); e < p.batch * p.m * p.n; e += grid_threads()) {
    const int64_t z = e / (p.m * p.n), i = (e / p.n) % p.m, j = e % p.n;
    const uint16_t *a = A + z * p.stride_a, *b = B + z * p.stride_b;
    float s = 0.0f;
    for (int64_t k = 0; k < p.k; ++k) {
      const uint16_t x = p.trans_a ? a[k * p.lda + i] : a[i * p.lda + k];
      const uint16_t y = p.trans_b ? b[j * p.ldb + k] : b[k * p.ldb + j];
      s = fmaf(__uint_as_float((uint32_t)x << 16), __uint_as_float((uint32_t)y << 16), s);
    }
    float *out = p.c + z * p.stride_c + i * p.ldc + j;
    float v = p.alpha * s;
    if (p.beta != 0.0f) v += p.beta * *out;
    if (p.bias) v += p.bias[j];
    *out = activate(v, p.activation);
  }
#else
  mm_bf16::matmul<mm_bf16::Eight>(p);
#endif
}

#ifndef AQ_HIP
// Candidate shapes, timed beside aq_matmul_bf16 (aq-bench gemm --bf16-kernel).
#define AQ_BF16_CANDIDATE(name, config, threads, min_blocks)        \
  AQ_KERNEL void __launch_bounds__(threads, min_blocks) name(aq_matmul_args_t p) { \
    if (!matmul_valid(p)) return;                                   \
    if (p.batch <= 0) p.batch = 1;                                  \
    if (p.m == 0 || p.n == 0) return;                               \
    mm_bf16::matmul<mm_bf16::config>(p);                            \
  }
AQ_BF16_CANDIDATE(aq_matmul_bf16_eight3, Eight3, 256, 2)
AQ_BF16_CANDIDATE(aq_matmul_bf16_wide16, Wide16, 512, 1)
AQ_BF16_CANDIDATE(aq_matmul_bf16_tall16, Tall16, 512, 1)
#endif
