// aq_matmul_bf16: bf16 A and B, fp32 accumulation and C, on tensor cores.
//
// Two builds of one kernel, chosen by the GPU the fatbin's code runs on:
//  - sm_90a (H100): warpgroup MMA (wgmma.mma_async, both operands read from
//    shared memory through descriptors). A block of 384 threads computes a
//    128x256 tile of C: warpgroups 0 and 1 each multiply a 64x256 half (128
//    fp32 accumulators a thread); warpgroup 2 is the producer, copying
//    64-deep slices of A (128 x 64) and B (64 x 256) with cp.async into a
//    ring of 3 48 KB stages in dynamic shared memory (128-byte swizzled, the
//    layout wgmma reads without bank conflicts). Full and empty mbarriers
//    per stage hand stages over, so the copies run two slices ahead of the
//    tensor cores and no block-wide barrier stalls them. Every transpose is
//    a layout: k-major or m/n-major operands, which wgmma takes as they are.
//    C is stored evict-first (it would push A and B out of L2).
//  - everything else (sm_80, or aq_matmul_bf16_mma on sm_90): mma.sync
//    m16n8k16 with ldmatrix from XOR-swizzled tiles, 12 warps over 192x192
//    tiles, a 3-stage cp.async pipeline in the same dynamic shared memory.
// Loads that are not 16-byte aligned (odd leading dimensions) go element by
// element, still exact. On AMD (HIP) a plain exact loop stands in.
//
// Both need AQ_GPU_MATMUL_BF16_GROUP_SEGMENT bytes of dynamic shared memory
// (launch.h: aq_gpu_op_group_segment), the packet's group_segment_size;
// less, or a block of other than AQ_GPU_MATMUL_BF16_THREADS threads, traps
// (a launch bug, reported with this kernel's name).
//
// Where the time goes (H100, aq-bench gemm --agent gpu, n = 4096): 376
// TFLOP/s, 0.50-0.51 of cuBLAS (731-749). The multiplies alone (the
// producer copying nothing) reached 569 in an earlier run, the copies alone
// (aq_matmul_bf16_nomath) 537 (469 with C stored plainly): both sides are
// near their ceilings and overlap only partly. The copies are the harder
// limit: cp.async moves 48 KB a slice through the SM's load path, about
// 5-6 TB/s over the GPU, where cuBLAS copies with TMA and multicasts B to
// two blocks of a cluster (2/3 of the L2 reads). Pairs of blocks exchanging
// halves of B through distributed shared memory (bulk copies) were slower
// here (see below); TMA needs tensor maps the kernarg struct does not carry.
#include "matmul_common.cuh"
#include "mma_bf16.cuh"
#include "wgmma.cuh"
#include "launch.h"

#ifndef AQ_HIP
extern __shared__ __align__(1024) uint8_t mm_bf16_smem[];

namespace mm_bf16 {

__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(r));
  return r;
}

// One operand's global view: rows x cols row-major (cols contiguous).
struct Operand {
  const uint16_t *base;
  int64_t ld, rows, cols;
  bool kmajor; /* cols is k */
  bool vec;    /* 16-byte chunks are aligned */
};

// The 8 bf16 at (r, c..c+7) of an operand as one 16-byte chunk, zeros past
// its edges: element by element, for operands that are not 16-byte aligned.
__device__ __forceinline__ uint4 gather8(const Operand &o, int64_t r, int64_t c) {
  const bool in = r < o.rows && c < o.cols;
  uint16_t v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = in && c + e < o.cols ? o.base[r * o.ld + c + e] : (uint16_t)0;
  uint4 w;
  w.x = v[0] | (uint32_t)v[1] << 16, w.y = v[2] | (uint32_t)v[3] << 16;
  w.z = v[4] | (uint32_t)v[5] << 16, w.w = v[6] | (uint32_t)v[7] << 16;
  return w;
}

// cp.async of the chunk at (r, c), zero-filled past the operand's edges.
__device__ __forceinline__ void copy8(const Operand &o, uint32_t dst, int64_t r, int64_t c) {
  const bool in = r < o.rows && c < o.cols;
  const int64_t left = in ? o.cols - c : 0;
  wg::cp_async16(dst, in ? o.base + r * o.ld + c : o.base, left >= 8 ? 16 : (int)left * 2);
}

// C[r, col..col+1] = epilogue(v0, v1) (col + 1 only where it is inside C).
__device__ __forceinline__ void store_pair(const aq_matmul_args_t &p, float *c, int64_t r, int64_t col, float v0,
                                           float v1, bool vc) {
  if (r >= p.m || col >= p.n) return;
  float *out = c + r * p.ldc + col;
  v0 *= p.alpha, v1 *= p.alpha;
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

// Walks every tile of every batch entry this block owns (grid-stride, in
// groups of GROUP tile-rows so that a wave's blocks share rows of A and
// columns of B in L2; `blocks` of the grid's x-y blocks take part), calling
// f(A, B, C, row0, col0) with op(A) m x k and op(B) k x n as stored: A is
// m x k (k-major) unless transposed; B is n x k (k-major) when transposed.
template <int BM, int BN, int GROUP, class F>
__device__ __forceinline__ void for_each_tile(const aq_matmul_args_t &p, bool va, bool vb, int64_t blocks, F f) {
  const int64_t tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const uint16_t *a = (const uint16_t *)p.a + z * p.stride_a, *b = (const uint16_t *)p.b + z * p.stride_b;
    const Operand A = p.trans_a ? Operand{a, p.lda, p.k, p.m, false, va} : Operand{a, p.lda, p.m, p.k, true, va};
    const Operand B = p.trans_b ? Operand{b, p.ldb, p.n, p.k, true, vb} : Operand{b, p.ldb, p.k, p.n, false, vb};
    float *c = p.c + z * p.stride_c;
    for (int64_t id = (int64_t)blockIdx.y * gridDim.x + blockIdx.x; id < tiles; id += blocks) {
      const int64_t per_group = GROUP * tiles_n, first = (id / per_group) * GROUP;
      const int64_t rows = tiles_m - first < GROUP ? tiles_m - first : GROUP;
      const int64_t tm = first + (id % per_group) % rows, tn = (id % per_group) / rows;
      f(A, B, c, tm * BM, tn * BN);
    }
  }
}

struct Layout {
  bool va, vb, vc;
};
__device__ __forceinline__ Layout layout_of(const aq_matmul_args_t &p) {
  const bool b1 = p.batch <= 1;
  return {aligned16(p.a) && p.lda % 8 == 0 && (b1 || p.stride_a % 8 == 0),
          aligned16(p.b) && p.ldb % 8 == 0 && (b1 || p.stride_b % 8 == 0),
          ((uintptr_t)p.c & 7) == 0 && p.ldc % 2 == 0 && (b1 || p.stride_c % 2 == 0)};
}

// A launch bug (wrong block size, too little shared memory): fault, naming
// this kernel.
__device__ __forceinline__ void check_launch(uint32_t threads, uint32_t smem) {
  if (blockDim.x * blockDim.y * blockDim.z != threads || dynamic_smem_size() < smem) __trap();
}

// ============================================================================
// mma.sync path (sm_80 and up)
// ============================================================================
namespace mma {

constexpr int BK = 32;

// A block configuration: BM x BN tiles of C, WM x WN warps of 64 x (8 NI)
// each, STAGES slices of 32 k in flight.
template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int NI_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_, THREADS = 32 * WM_ * WN_;
  static constexpr int NI = NI_; /* mma tiles of 8 columns a warp */
  static_assert(BM == 64 * WM && BN == 8 * NI * WN && NI % 2 == 0, "64 x 8NI warp tiles");
  struct Smem {
    uint8_t a[STAGES][BM * BK * 2];
    uint8_t b[STAGES][BN * BK * 2];
  };
  static_assert(sizeof(Smem) <= AQ_GPU_MATMUL_BF16_GROUP_SEGMENT, "fits the group segment");
};

// Byte offset of 16-byte chunk `ch` of row `row`. K-major tiles (MN rows of
// 32 k, 4 chunks a row) use the tensor-core helpers' swizzle (mma_bf16.cuh);
// m/n-major tiles: 32 rows (k) of MN values, MN / 8 chunks a row, the XOR
// putting the 8 rows an ldmatrix phase reads in 8 different bank groups.
using tc::ldsm_x4;
using tc::mma;
using tc::off_kmajor;
template <int MN>
__device__ __forceinline__ uint32_t off_mnmajor(int row, int ch) {
  return row * (MN * 2) + ((ch ^ (row & 7)) << 4);
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

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
    if (o.vec) copy8(o, wg::smem_addr(tile + off), r, c);
    else *reinterpret_cast<uint4 *>(tile + off) = gather8(o, r, c);
  }
}

template <class C, bool AK, bool BKM>
__device__ void tile(const aq_matmul_args_t &p, typename C::Smem &s, const Operand &A, const Operand &B, float *c,
                     int64_t row0, int64_t col0, bool vc) {
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
    const uint32_t ta = wg::smem_addr(s.a[read]), tb = wg::smem_addr(s.b[read]);
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
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
        store_pair(p, c, row0 + wm + mi * 16 + g + h * 8, col0 + wn + ni * 8 + t2, acc[mi][ni][h * 2],
                   acc[mi][ni][h * 2 + 1], vc);
}

template <class C>
__device__ __forceinline__ void matmul(const aq_matmul_args_t &p) {
  check_launch(C::THREADS, sizeof(typename C::Smem));
  typename C::Smem &s = *reinterpret_cast<typename C::Smem *>(mm_bf16_smem);
  const Layout l = layout_of(p);
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y;
  for_each_tile<C::BM, C::BN, 8>(p, l.va, l.vb, blocks, [&](const Operand &A, const Operand &B, float *c, int64_t r0,
                                                            int64_t c0) {
    if (A.kmajor) {
      if (B.kmajor) tile<C, true, true>(p, s, A, B, c, r0, c0, l.vc);
      else tile<C, true, false>(p, s, A, B, c, r0, c0, l.vc);
    } else {
      if (B.kmajor) tile<C, false, true>(p, s, A, B, c, r0, c0, l.vc);
      else tile<C, false, false>(p, s, A, B, c, r0, c0, l.vc);
    }
  });
}

/* 12 warps of 64x48 over 192x192, 3 stages (72 KB); figures below, beside the wgmma build's. */
typedef Config<192, 192, 3, 4, 3, 6> Twelve;
static_assert(Twelve::THREADS == AQ_GPU_MATMUL_BF16_THREADS, "one block size for both builds");

}  // namespace mma

// ============================================================================
// wgmma path (sm_90a)
// ============================================================================
namespace wgp {

constexpr int BK = 64;

// A block shape: CONSUMERS warpgroups of 64 x BN each over a (64 CONSUMERS)
// x BN tile, then PRODUCER threads (a warpgroup) copying, STAGES slices in
// flight. STREAM: C is stored evict-first, so that it does not push A and
// B out of L2 (at n = 2048 / 4096 on an H100: 261 -> 318, 328 -> 361
// TFLOP/s). DIAG (measurement only): 2 the consumers multiply nothing (the
// copies alone).
template <int BN_, int STAGES_, int STREAM_ = 1, int DIAG_ = 0>
struct Config {
  static constexpr int BN = BN_, STAGES = STAGES_, CONSUMERS = 2, BM = 64 * CONSUMERS, PRODUCER = 128;
  static constexpr int THREADS = 128 * CONSUMERS + PRODUCER;
  static constexpr int STREAM = STREAM_, DIAG = DIAG_;
  static constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE = A_BYTES + B_BYTES;
  /* the stages, a full and an empty barrier per stage, and slack to align
   * the stages to 1024 bytes */
  static constexpr uint32_t SMEM = STAGES * STAGE + 16 * STAGES + 1024;
  static_assert(BN == 128 || BN == 256, "a warpgroup's 64 x BN is one wgmma shape");
};

// The stage barriers: full[s] (the slice is in), empty[s] (every consumer
// is done with it).
template <class C>
struct Bars {
  uint32_t base;
  __device__ uint32_t full(uint32_t s) const { return base + 8 * s; }
  __device__ uint32_t empty(uint32_t s) const { return base + 8 * (C::STAGES + s); }
};

// One 64-deep slice of an operand, MN (m or n) wide, into a stage: 16-byte
// chunks spread over the producer's P threads, consecutive threads on
// consecutive global chunks. K-major: MN rows of 64 k (one 128-byte row
// each); m/n-major: 64-wide blocks of MN, each 64 rows of k. Where a row's
// chunks divide the P threads, a thread keeps one chunk column and steps
// down the rows, so its addresses are one pointer and a stride.
template <bool KMAJOR, int MN, bool VEC, int P>
__device__ __forceinline__ void load_slice(const Operand &o, uint8_t *tile, int64_t mn0, int64_t k0, int t) {
  constexpr int ROW_CHUNKS = KMAJOR ? BK / 8 : MN / 8, ROWS = KMAJOR ? MN : BK;
  const uint32_t base = wg::smem_addr(tile);
  if constexpr (VEC && P % ROW_CHUNKS == 0) {
    constexpr int STEP = P / ROW_CHUNKS, PER = ROWS / STEP;
    static_assert(PER * STEP == ROWS, "whole passes");
    const int row0 = t / ROW_CHUNKS, ch = t % ROW_CHUNKS;
    const int64_t r = (KMAJOR ? mn0 : k0) + row0, c = (KMAJOR ? k0 : mn0) + ch * 8, left = o.cols - c;
    const uint32_t dst = base + (KMAJOR ? 0 : (ch >> 3) * (64 * 128));
    const uint16_t *src = o.base + r * o.ld + c;
    const int bytes = left >= 8 ? 16 : left > 0 ? (int)left * 2 : 0;
#pragma unroll 8 /* fully unrolled, the hoisted addresses spill */
    for (int i = 0; i < PER; ++i) {
      const bool in = bytes && r + i * STEP < o.rows;
      wg::cp_async16(dst + wg::swz128(row0 + i * STEP, ch & 7), in ? src + i * STEP * o.ld : o.base, in ? bytes : 0);
    }
  } else {
#pragma unroll 1
    for (int q = t; q < ROWS * ROW_CHUNKS; q += P) {
      const int row = q / ROW_CHUNKS, ch = q % ROW_CHUNKS;
      const int64_t r = (KMAJOR ? mn0 : k0) + row, c = (KMAJOR ? k0 : mn0) + ch * 8;
      const uint32_t dst = base + (KMAJOR ? 0 : (ch >> 3) * (64 * 128)) + wg::swz128(row, ch & 7);
      if (VEC) {
        copy8(o, dst, r, c);
      } else {
        const uint4 v = gather8(o, r, c);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
      }
    }
  }
}

// The producer warpgroup: fills stage after stage, each once the consumers
// have released it. `it` counts slices over all of this block's tiles: slice
// it uses stage it % STAGES for the (it / STAGES)-th time.
template <class C, bool AK, bool BKM, bool VEC>
__device__ void produce(uint8_t *stages, Bars<C> bars, const Operand &A, const Operand &B, int64_t row0,
                        int64_t col0, int64_t k, uint32_t &it) {
  const int t = threadIdx.x - 128 * C::CONSUMERS;
  for (int64_t k0 = 0; k0 < k; k0 += BK, ++it) {
    const uint32_t s = it % C::STAGES, use = it / C::STAGES;
    if (use > 0) wg::mbar_wait(bars.empty(s), (use - 1) & 1);
    uint8_t *st = stages + s * C::STAGE;
    load_slice<AK, C::BM, VEC, C::PRODUCER>(A, st, row0, k0, t);
    load_slice<BKM, C::BN, VEC, C::PRODUCER>(B, st + C::A_BYTES, col0, k0, t);
    if (VEC) wg::mbar_arrive_cp_async(bars.full(s));
    else wg::mbar_arrive(bars.full(s));
  }
}

#ifdef AQ_WGMMA
template <int BN, int TA, int TB>
__device__ __forceinline__ void wgmma(float (&d)[BN / 2], uint64_t da, uint64_t db) {
  if constexpr (BN == 256) wg::wgmma_n256<TA, TB>(d, da, db);
  else wg::wgmma_n128<TA, TB>(d, da, db);
}

// C rows r and r + 8 of a consumer thread's fragment: accumulators 4j..4j+3
// are columns 8j + t2, 8j + t2 + 1 of those rows.
template <int BN, int STREAM>
__device__ __forceinline__ void store_rows(const aq_matmul_args_t &p, const float (&acc)[BN / 2], float *c, int64_t r,
                                           int64_t col, bool vc) {
  const bool plain = p.beta == 0.0f && !p.bias && p.activation == AQ_ACTIVATION_NONE;
  if (plain && vc && r + 8 < p.m && col + BN - 7 < p.n) {
    /* inside C, nothing but alpha: a store per pair, no checks */
    float2 *o0 = reinterpret_cast<float2 *>(c + r * p.ldc + col);
    float2 *o1 = reinterpret_cast<float2 *>(c + (r + 8) * p.ldc + col);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const float2 v0 = make_float2(p.alpha * acc[j * 4], p.alpha * acc[j * 4 + 1]);
      const float2 v1 = make_float2(p.alpha * acc[j * 4 + 2], p.alpha * acc[j * 4 + 3]);
      if (STREAM) __stcs(o0 + j * 4, v0), __stcs(o1 + j * 4, v1);
      else o0[j * 4] = v0, o1[j * 4] = v1;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store_pair(p, c, r + h * 8, col + j * 8, acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1], vc);
}

// A consumer warpgroup (wgi 0 .. CONSUMERS-1): rows 64 wgi .. 64 wgi + 63
// of the tile.
template <class C, bool AK, bool BKM>
__device__ void consume(const aq_matmul_args_t &p, uint32_t stages, Bars<C> bars, float *c, int64_t row0,
                        int64_t col0, int wgi, uint32_t &it, bool vc) {
  constexpr int TA = AK ? 0 : 1, TB = BKM ? 0 : 1;
  float acc[C::BN / 2];
#pragma unroll
  for (int i = 0; i < C::BN / 2; ++i) acc[i] = 0.0f;
  const int lane = threadIdx.x & 31;
  const int64_t nk = (p.k + BK - 1) / BK;
  for (int64_t kt = 0; kt < nk; ++kt, ++it) {
    const uint32_t s = it % C::STAGES;
    wg::mbar_wait(bars.full(s), (it / C::STAGES) & 1);
    wg::fence_proxy_async();
    const uint32_t a = stages + s * C::STAGE + wgi * (64 * 128), b = stages + s * C::STAGE + C::A_BYTES;
    if (C::DIAG != 2) {
      wg::fence_regs(acc);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        /* k-major: 16 k further into each 128-byte row; m/n-major: 16 rows of k on */
        const uint64_t da = AK ? wg::desc128(a + kk * 32, 16, 1024) : wg::desc128(a + kk * 2048, 64 * 128, 1024);
        const uint64_t db = BKM ? wg::desc128(b + kk * 32, 16, 1024) : wg::desc128(b + kk * 2048, 64 * 128, 1024);
        wgmma<C::BN, TA, TB>(acc, da, db);
      }
      wg::wgmma_commit();
      /* the previous slice's products are done: its stage goes back */
      wg::wgmma_wait<1>();
    }
    if (kt > 0 && lane == 0) wg::mbar_arrive(bars.empty((it - 1) % C::STAGES));
  }
  wg::wgmma_wait<0>();
  wg::fence_regs(acc);
  if (nk > 0 && lane == 0) wg::mbar_arrive(bars.empty((it - 1) % C::STAGES));

  const int warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t2 = (lane & 3) * 2;
  store_rows<C::BN, C::STREAM>(p, acc, c, row0 + wgi * 64 + warp * 16 + g, col0 + t2, vc);
}
#endif

template <class C>
__device__ __forceinline__ void matmul(const aq_matmul_args_t &p) {
#ifdef AQ_WGMMA
  check_launch(C::THREADS, C::SMEM);
  const uint32_t raw = wg::smem_addr(mm_bf16_smem), base = (raw + 1023) & ~1023u;
  uint8_t *stages = mm_bf16_smem + (base - raw);
  const Bars<C> bars{base + C::STAGES * C::STAGE};
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      wg::mbar_init(bars.full(s), C::PRODUCER);
      wg::mbar_init(bars.empty(s), 4 * C::CONSUMERS); /* a lane of each consumer warp */
    }
  }
  __syncthreads();
  const Layout l = layout_of(p);
  const bool vec = l.va && l.vb;
  /* consumer warpgroups first, then the producer */
  const int role = threadIdx.x / 128;
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y;
  uint32_t it = 0;
  if (role == C::CONSUMERS) {
    for_each_tile<C::BM, C::BN, 8>(p, l.va, l.vb, blocks, [&](const Operand &A, const Operand &B, float *, int64_t r0,
                                                              int64_t c0) {
      if (vec) {
        if (A.kmajor) {
          if (B.kmajor) produce<C, true, true, true>(stages, bars, A, B, r0, c0, p.k, it);
          else produce<C, true, false, true>(stages, bars, A, B, r0, c0, p.k, it);
        } else {
          if (B.kmajor) produce<C, false, true, true>(stages, bars, A, B, r0, c0, p.k, it);
          else produce<C, false, false, true>(stages, bars, A, B, r0, c0, p.k, it);
        }
      } else {
        if (A.kmajor) {
          if (B.kmajor) produce<C, true, true, false>(stages, bars, A, B, r0, c0, p.k, it);
          else produce<C, true, false, false>(stages, bars, A, B, r0, c0, p.k, it);
        } else {
          if (B.kmajor) produce<C, false, true, false>(stages, bars, A, B, r0, c0, p.k, it);
          else produce<C, false, false, false>(stages, bars, A, B, r0, c0, p.k, it);
        }
      }
    });
    asm volatile("cp.async.wait_all;\n" ::: "memory"); /* no copy outlives its thread */
  } else {
    const int wgi = role;
    for_each_tile<C::BM, C::BN, 8>(p, l.va, l.vb, blocks, [&](const Operand &A, const Operand &B, float *c, int64_t r0,
                                                              int64_t c0) {
      if (A.kmajor) {
        if (B.kmajor) consume<C, true, true>(p, base, bars, c, r0, c0, wgi, it, l.vc);
        else consume<C, true, false>(p, base, bars, c, r0, c0, wgi, it, l.vc);
      } else {
        if (B.kmajor) consume<C, false, true>(p, base, bars, c, r0, c0, wgi, it, l.vc);
        else consume<C, false, false>(p, base, bars, c, r0, c0, wgi, it, l.vc);
      }
    });
  }
#else
  (void)p;
  __trap(); /* built only where wgmma exists */
#endif
}

/* aq_matmul_bf16's shape: 128x256, 3 stages (146 KB, which A100s offer
 * too), C stored evict-first. Measured on H100s at n = 1024 / 2048 / 4096 /
 * 8192, in TFLOP/s (aq-bench gemm --bf16-kernel, each against the plain
 * shape in the same run): C stored plainly 60 / 261 / 328 / 366 against 75 /
 * 318 / 361 / 379; a fourth stage (194 KB) +0-3%; 128x128 tiles (4 stages)
 * 97-113 / 250-293 / 318-337 / 336-358; A and B copied evict-last 55 / 235 /
 * 268 / 279 against 79 / 329 / 376 / 400; groups of 16 tile-rows in the
 * raster order, no change; pairs of blocks (clusters) sharing B, each
 * copying half and sending it to the other's shared memory with a bulk
 * copy, 42-50 / 192-216 / 232-245 / 251-256, their copies alone 283 at 4096
 * against 469 for a block alone; 192x192 tiles with a producer warp (416
 * threads, 128 registers) 91 at 4096. The mma.sync build (12 warps of
 * 64x48 over 192x192, 3 stages) reaches 37 / 174 / 198 / 228 on an H100;
 * the 8-warp 128x128 build it replaced, 2 blocks an SM in 32 KB each, 60 /
 * 207 / 232 / 243. */
typedef Config<256, 3> Wide;
typedef Config<256, 4> Wide4;              /* a fourth stage: 194 KB, H100 only */
typedef Config<256, 3, 1, 2> WideNoMath;   /* measurement: the copies alone */
static_assert(Wide::THREADS == AQ_GPU_MATMUL_BF16_THREADS && Wide::SMEM <= AQ_GPU_MATMUL_BF16_GROUP_SEGMENT &&
                  Wide::BN == AQ_GPU_MATMUL_BF16_TILE_N && Wide::BM == AQ_GPU_MATMUL_BF16_TILE_M,
              "launch.h's launch rule");

}  // namespace wgp
}  // namespace mm_bf16

#endif  // !AQ_HIP

AQ_KERNEL void __launch_bounds__(384, 1) aq_matmul_bf16(aq_matmul_args_t p) {
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
#elif defined(AQ_WGMMA)
  mm_bf16::wgp::matmul<mm_bf16::wgp::Wide>(p);
#else
  mm_bf16::mma::matmul<mm_bf16::mma::Twelve>(p);
#endif
}

#ifndef AQ_HIP
// Candidates, timed beside aq_matmul_bf16 (aq-bench gemm --bf16-kernel) and
// tested with it: the mma.sync build on any GPU (what sm_80 runs), and other
// wgmma shapes (sm_90a only; elsewhere they trap).
#define AQ_BF16_CANDIDATE(name, threads, min_blocks, body)           \
  AQ_KERNEL void __launch_bounds__(threads, min_blocks) name(aq_matmul_args_t p) { \
    if (!matmul_valid(p)) return;                                   \
    if (p.batch <= 0) p.batch = 1;                                  \
    if (p.m == 0 || p.n == 0) return;                               \
    body(p);                                                        \
  }
AQ_BF16_CANDIDATE(aq_matmul_bf16_mma, 384, 1, mm_bf16::mma::matmul<mm_bf16::mma::Twelve>)
AQ_BF16_CANDIDATE(aq_matmul_bf16_wide4, 384, 1, mm_bf16::wgp::matmul<mm_bf16::wgp::Wide4>)
AQ_BF16_CANDIDATE(aq_matmul_bf16_nomath, 384, 1, mm_bf16::wgp::matmul<mm_bf16::wgp::WideNoMath>)
#endif
