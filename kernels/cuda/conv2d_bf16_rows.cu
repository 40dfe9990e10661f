// aq_conv2d_bwd_filter_bf16_rows (and _rows8, _rows_wide): bf16's backward
// filter of a filter three taps wide at unit stride, a row of taps a
// block, on tensor cores (launch.h: aq_conv2d_bf16_rows_fits and
// aq_conv2d_bf16_rows_wide_fits say where they apply).
//
// The implicit GEMM's backward filter (conv2d_bf16.cu) gathers B, x's
// windows, a column per (c, r, s): each x value is loaded and stored into
// shared memory once for every tap that reads it, an element at a time
// where s is odd. Here a block takes one filter row r, its three taps, and
// a tile of 64 filters x 32 channels; its share of dy's rows (n, p) is
// copied whole (cp.async, three stages), each with the row of x it meets
// (h = p + r - pad), as they lie in memory. A warp's B fragment of tap s is
// then x's row at an offset of s: the three taps' fragments come from the
// same two or three words, the odd taps' through a byte permute, and dy's
// rows feed A through ldmatrix. A block's warp groups (four of a block of
// 512 threads over clusters of 16, two of 256 over 8) take a row of a stage
// each and add their sums in shared memory in group order; a cluster's
// blocks split the rows and add theirs in rank order, each rank a slice of
// the tile (deterministic). Then the bias gradient's items, as the other
// split builds' (conv2d_gemm.cuh). _rows_wide stages rows of dy past
// QCHUNK positions in chunks, each with the stretch of x's row it meets.
#include "launch.h"
#include "conv2d_filter.cuh"
#include "conv2d_gemm.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_rows {

constexpr int KT = AQ_GPU_CONV2D_ROWS_FILTERS, CT = AQ_GPU_CONV2D_ROWS_CHANNELS, TAPS = 3;
constexpr int QCHUNK = AQ_GPU_CONV2D_ROWS_QCHUNK; /* dy's rows are staged in chunks of q */
constexpr int XOFF = AQ_GPU_CONV2D_ROWS_XOFF; /* x[w] at XOFF + w of a staged row; a chunk's from XOFF columns before it */
constexpr int XROW = AQ_GPU_CONV2D_ROWS_XROW, DROW = AQ_GPU_CONV2D_ROWS_DROW; /* elements a staged row */
constexpr int STAGES = 3, TILE = KT * CT * TAPS, MI = KT / 16;
static_assert(CT == 4 * 8, "groups of four warps, a warp 8 channels");

// A block of T threads: T / 128 warp groups, each a row (n, p) of a stage.
template <int T>
struct Block {
  static constexpr int THREADS = T, GROUPS = T / 128, RPS = GROUPS;
  static constexpr int DY_BYTES = RPS * KT * DROW * 2, X_BYTES = RPS * CT * XROW * 2, STAGE = DY_BYTES + X_BYTES;
  static_assert(T % 128 == 0 && STAGES * STAGE == AQ_GPU_CONV2D_ROWS_BYTES(T), "launch.h's group segment");
  static_assert(GROUPS * TILE * 4 <= STAGES * STAGE, "the groups' sums and the block's tile fit in the stages");
};
static_assert(XROW % 8 == 0 && DROW % 8 == 0 && XOFF % 8 == 0 && QCHUNK % 8 == 0, "16-byte rows and chunks");
static_assert(QCHUNK <= DROW && XOFF + QCHUNK + 2 <= XROW && XROW * 2 <= 256, "a chunk's rows: two copies a lane of x's");
/* A warp's B words: lanes (g, t) read word g * XROW / 2 + t, 32 banks apart
 * only if the row's words are an odd multiple of 4; ldmatrix's 8 rows of dy
 * fall in 8 bank groups where DROW / 8 is odd. */
static_assert((XROW / 2) % 8 == 4 && (DROW / 8) % 2 == 1, "conflict-free rows");

// One copy of U bytes into shared memory, zeros where !valid (src-size 0).
template <int U>
__device__ __forceinline__ void copy(uint32_t dst, const void *src, bool valid) {
  if constexpr (U == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(U), "r"(valid ? U : 0)
                 : "memory");
}

// The block's job: the pass's sizes in 32-bit, its tile and its rows.
struct Job {
  int c, h, w, k, p, q, r, pad_h, pad_w;
  int pq, kpq, hw, chw; /* strides: a filter's plane of dy, an image's; a channel's plane of x, an image's */
  int chunks;           /* a row of dy's chunks of QCHUNK positions */
  int k0, c0, tap_row;  /* the tile: filters k0.., channels c0.., filter row tap_row */
  int row0, row1;       /* the block's rows (n, p, chunk), (n * p + p) * chunks + chunk */
};

// A thread's part of every stage's copies, fixed for a tile (CHUNKED: rows
// of dy in chunks of QCHUNK). A pass of the block's threads copies PASS
// rows of 128 bytes, U bytes a copy and a row
// per 128 / U lanes: dy's rows of the tile's filters, item by item, then
// x's of its channels (a pass of 2 CT rows spans two items). So which
// tensor and item a pass copies is known at compile time, and a thread's
// rows in it but for its first, the same in every stage: their offsets in
// an image of dy or x (-1: past the tile's filters or channels) and their
// place in a stage are worked out once.
template <int U, class B, bool CHUNKED>
struct Copier {
  static constexpr int RPS = B::RPS, LANES = 128 / U, PASS = B::THREADS / 32 * (32 / LANES);
  static constexpr int DY_PASSES = RPS * KT / PASS, PASSES = DY_PASSES + RPS * CT / PASS;
  static constexpr int DYJ = KT / PASS, XJ = PASS > CT ? 1 : CT / PASS; /* a thread's rows of an item */
  static_assert(KT % PASS == 0 && (RPS * CT) % PASS == 0 && (PASS <= CT || PASS == 2 * CT), "whole passes of each tensor");
  int dyrow[DYJ], xrow[XJ];
  uint32_t dyd, xd; /* its first dy and x copies' bytes into a stage */
  int u;            /* its byte of a row */
  bool dy_on, x_on, x_more, second; /* its bytes are in dy's row, x's; a second copy of x's; the pass's second item */

  __device__ __forceinline__ Copier(const Job &jb) {
    const int lane = threadIdx.x & 31, first = (threadIdx.x >> 5) * (32 / LANES) + lane / LANES;
    u = (lane % LANES) * U;
    /* chunked: every byte of a staged row, each copy checked; else the
     * rows as they lie in memory, x's at XOFF (zeros around them since the
     * tile began: block_tile) */
    dy_on = CHUNKED || u < jb.q * 2, x_on = CHUNKED || u < jb.w * 2;
    x_more = u + 128 < (CHUNKED ? XROW * 2 : jb.w * 2);
#pragma unroll
    for (int i = 0; i < DYJ; ++i) dyrow[i] = jb.k0 + i * PASS + first < jb.k ? (jb.k0 + i * PASS + first) * jb.pq : -1;
    second = PASS > CT && first >= CT;
    const int cc = PASS > CT ? first % CT : first;
#pragma unroll
    for (int i = 0; i < XJ; ++i) xrow[i] = jb.c0 + cc + i * PASS < jb.c ? (jb.c0 + cc + i * PASS) * jb.hw : -1;
    dyd = first * DROW * 2 + u, xd = B::DY_BYTES + ((second ? CT : 0) + cc) * XROW * 2 + (CHUNKED ? 0 : XOFF * 2) + u;
  }

  // Stages rows j.. j + RPS - 1 (those below job.row1; zeros for the rest)
  // into the stage at st: (a chunk of) dy's row, and x's at h = p + r - pad
  // (zeros off the plane). Chunked, x's from XOFF columns before the
  // chunk's and zeros past q in dy's: every byte the products read is
  // written, a copy's U bytes on or off x's row whole (U divides its bytes,
  // 16 the chunk's offset).
  __device__ __forceinline__ void stage(const uint16_t *dy, const uint16_t *x, const Job &jb, uint32_t st, int j) const {
    if constexpr (CHUNKED) return stage_chunked(dy, x, jb, st, j);
    int dyi[RPS], xi[RPS]; /* the items' offsets in dy and x (32-bit: fewer registers) */
    bool live[RPS], xlive[RPS];
    int n = j / jb.p, p = j - n * jb.p;
#pragma unroll
    for (int g = 0; g < RPS; ++g) {
      if (g && ++p == jb.p) p = 0, ++n;
      const int hh = p + jb.tap_row - jb.pad_h;
      live[g] = j + g < jb.row1, xlive[g] = live[g] && hh >= 0 && hh < jb.h;
      dyi[g] = n * jb.kpq + p * jb.q, xi[g] = n * jb.chw + hh * jb.w;
    }
#pragma unroll
    for (int m = 0; m < PASSES; ++m) {
      if (m < DY_PASSES) {
        const int g = m * PASS / KT, i = m * PASS % KT / PASS;
        const bool v = live[g] && dyrow[i] >= 0;
        const uint8_t *src = (const uint8_t *)(dy + (v ? dyi[g] + dyrow[i] : 0)) + u;
        if (dy_on) copy<U>(st + (g * KT + i * PASS) * DROW * 2 + dyd, src, v);
      } else {
        const int at = (m - DY_PASSES) * PASS, g0 = at / CT, i = PASS > CT ? 0 : at % CT / PASS;
        const int g = PASS > CT && second ? g0 + 1 : g0;
        const bool v = xlive[g] && xrow[i] >= 0;
        const uint8_t *src = (const uint8_t *)(x + (v ? xi[g] + xrow[i] : 0)) + u;
        const uint32_t dst = st + (g0 * CT + i * PASS) * XROW * 2 + xd;
        if (x_on) copy<U>(dst, src, v);
        if (x_more) copy<U>(dst + 128, src + 128, v);
      }
    }
  }

  // The same in chunks: a pair of items at a time (a pass of x may span
  // two), fewer registers for the chunks' bounds.
  __device__ __forceinline__ void stage_chunked(const uint16_t *dy, const uint16_t *x, const Job &jb, uint32_t st, int j) const {
    static_assert(RPS % 2 == 0 && (2 * CT) % PASS == 0, "x's passes within a pair of items");
    int ch = j % jb.chunks, n = j / jb.chunks, p = n % jb.p;
    n /= jb.p;
#pragma unroll
    for (int g2 = 0; g2 < RPS; g2 += 2) {
      int dyi[2], xi[2], w0[2]; /* the items' offsets in dy and x; their chunks' first columns */
      bool live[2], xlive[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (g2 + h && ++ch == jb.chunks && (ch = 0, ++p == jb.p)) p = 0, ++n;
        const int hh = p + jb.tap_row - jb.pad_h;
        w0[h] = ch * QCHUNK;
        live[h] = j + g2 + h < jb.row1, xlive[h] = live[h] && hh >= 0 && hh < jb.h;
        dyi[h] = n * jb.kpq + p * jb.q + w0[h], xi[h] = n * jb.chw + hh * jb.w + w0[h] - XOFF;
      }
#pragma unroll
      for (int m = g2 * KT / PASS; m < (g2 + 2) * KT / PASS; ++m) { /* the pair's dy rows */
        const int g = m * PASS / KT, h = g - g2, i = m * PASS % KT / PASS;
        const bool v = live[h] && dyrow[i] >= 0 && u < (jb.q - w0[h]) * 2; /* zeros past q */
        const uint8_t *src = (const uint8_t *)(dy + (v ? dyi[h] + dyrow[i] : 0)) + u;
        copy<U>(st + (g * KT + i * PASS) * DROW * 2 + dyd, src, v);
      }
#pragma unroll
      for (int m = g2 * CT / PASS; m < (g2 + 2) * CT / PASS; ++m) { /* the pair's x rows */
        const int at = m * PASS, g0 = at / CT, i = PASS > CT ? 0 : at % CT / PASS;
        const int h = (PASS > CT && second ? g0 + 1 : g0) - g2;
        const int at0 = (w0[h] - XOFF) * 2 + u; /* the copy's first byte's place in x's row */
        const bool v = xlive[h] && xrow[i] >= 0, v0 = v && at0 >= 0 && at0 < jb.w * 2,
                   v1 = v && at0 + 128 >= 0 && at0 + 128 < jb.w * 2;
        const uint8_t *src = (const uint8_t *)(x + (v ? xi[h] + xrow[i] : 0)) + u;
        const uint32_t dst = st + (g0 * CT + i * PASS) * XROW * 2 + xd;
        copy<U>(dst, v0 ? src : (const uint8_t *)x, v0);
        if (x_more) copy<U>(dst + 128, v1 ? src + 128 : (const uint8_t *)x, v1);
      }
    }
  }
};

// The products of one staged row (dy's at dys, x's at xs) into a warp's
// tile, 64 filters x its 8 channels x 3 taps; ODD: x's pairs for tap 0
// start at odd elements (XOFF - pad_w odd).
template <bool ODD>
__device__ __forceinline__ void row_products(float (&acc)[MI][TAPS][4], const uint8_t *dys, const uint8_t *xs,
                                             const Job &jb, int w4, int lane) {
  const int g8 = lane >> 2, t = lane & 3;
  const uint32_t ta = tc::smem_addr(dys) + ((lane & 15) * DROW + (lane >> 4) * 8) * 2;
  /* the word holding element e0 (even) or e0 - 1 (odd) of the warp's channel's row */
  const uint32_t *xw = reinterpret_cast<const uint32_t *>(xs + ((w4 * 8 + g8) * XROW) * 2) +
                       ((XOFF - jb.pad_w + 2 * t) >> 1);
  const int steps = ((jb.q < QCHUNK ? jb.q : QCHUNK) + 15) >> 4;
  for (int ks = 0; ks < steps; ++ks) {
    uint32_t b[TAPS][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t *wd = xw + ks * 8 + h * 4;
      const uint32_t w0 = wd[0], w1 = wd[1];
      if constexpr (ODD) {
        const uint32_t w2 = wd[2];
        b[0][h] = __byte_perm(w0, w1, 0x5432), b[1][h] = w1, b[2][h] = __byte_perm(w1, w2, 0x5432);
      } else {
        b[0][h] = w0, b[1][h] = __byte_perm(w0, w1, 0x5432), b[2][h] = w1;
      }
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t af[4];
      tc::ldsm_x4(ta + (mi * 16 * DROW + ks * 16) * 2, af);
#pragma unroll
      for (int s = 0; s < TAPS; ++s) tc::mma(acc[mi][s], af, b[s][0], b[s][1]);
    }
  }
}

// The block's sums of its rows into part[(kk * CT + cc) * TAPS + s]: the
// rows through the stages (copies of U bytes), then the other groups' sums
// added to group 0's in group order.
template <int U, class B, bool CHUNKED>
__device__ __forceinline__ void block_tile(const aq_conv2d_args_t &a, const Job &jb, uint8_t *smem, float *part) {
  constexpr int GROUPS = B::GROUPS, RPS = B::RPS, STAGE = B::STAGE;
  const uint16_t *dy = (const uint16_t *)a.dy, *x = (const uint16_t *)a.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = warp >> 2, w4 = warp & 3;
  __syncthreads(); /* the previous tile is done with shared memory; its job is out */
  if (!CHUNKED) { /* the zeros around the rows the copies leave */
    for (int i = tid; i < STAGES * STAGE / 16; i += B::THREADS) reinterpret_cast<uint4 *>(smem)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  float acc[MI][TAPS][4] = {};
  const int steps = (jb.row1 - jb.row0 + RPS - 1) / RPS;
  const Copier<U, B, CHUNKED> copier(jb);
  const uint32_t base = tc::smem_addr(smem);
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    if (i < steps) copier.stage(dy, x, jb, base + i * STAGE, jb.row0 + i * RPS);
    conv::stage_commit();
  }
  const bool odd = (XOFF - jb.pad_w) & 1;
  for (int it = 0; it < steps; ++it) {
    conv::stage_wait<STAGES - 2>();
    __syncthreads(); /* stage it is in for everyone; stage it - 1 is read */
    if (it + STAGES - 1 < steps)
      copier.stage(dy, x, jb, base + (it + STAGES - 1) % STAGES * STAGE, jb.row0 + (it + STAGES - 1) * RPS);
    conv::stage_commit();
    const uint8_t *st = smem + it % STAGES * STAGE;
    if (jb.row0 + it * RPS + grp < jb.row1) {
      const uint8_t *dys = st + grp * KT * DROW * 2, *xs = st + B::DY_BYTES + grp * CT * XROW * 2;
      if (odd) row_products<true>(acc, dys, xs, jb, w4, lane);
      else row_products<false>(acc, dys, xs, jb, w4, lane);
    }
  }
  conv::stage_wait<0>();
  __syncthreads(); /* the stages are free */
  float *red = reinterpret_cast<float *>(smem);
  constexpr int REGS = MI * TAPS * 4;
  if (grp > 0)
#pragma unroll
    for (int j = 0; j < REGS; ++j) red[(((grp - 1) * 4 + w4) * REGS + j) * 32 + lane] = acc[j / (TAPS * 4)][(j / 4) % TAPS][j % 4];
  __syncthreads();
  if (grp > 0) return;
  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
  for (int j = 0; j < REGS; ++j) {
    const int mi = j / (TAPS * 4), s = (j / 4) % TAPS, e = j % 4;
    const int kk = mi * 16 + g8 + (e >> 1) * 8, cc = w4 * 8 + t2 + (e & 1);
    float sum = acc[mi][s][e];
    for (int g = 1; g < GROUPS; ++g) sum += red[(((g - 1) * 4 + w4) * REGS + j) * 32 + lane];
    part[(kk * CT + cc) * TAPS + s] = sum;
  }
}

// Writes element i of the tile (its sum, over the cluster) to dw.
__device__ __forceinline__ void put(const aq_conv2d_args_t &a, const Job &jb, int i, float sum) {
  const int s = i % TAPS, cc = (i / TAPS) % CT, kk = i / (TAPS * CT);
  if (jb.k0 + kk < jb.k && jb.c0 + cc < jb.c)
    a.dw[((int64_t)(jb.k0 + kk) * jb.c + jb.c0 + cc) * jb.r * TAPS + jb.tap_row * TAPS + s] = sum;
}

// The pass over clusters of S: a cluster a tile, rank by rank a share of
// the rows; U: the copies' bytes.
template <int S, int U, class B, bool CHUNKED>
__device__ void run(const aq_conv2d_args_t &a, uint8_t *smem) {
  constexpr int THREADS = B::THREADS, GROUPS = B::GROUPS;
  int ranks;
  const int rank = conv::split_rank<S>(&ranks);
  /* In shared memory rather than registers, which the accumulators and
   * the copies' addresses need (it spilled). */
  __shared__ Job jb;
  const int ctiles = (int)((a.c + CT - 1) / CT), rows = (int)(a.n * a.p * (CHUNKED ? (a.q + QCHUNK - 1) / QCHUNK : 1));
  const int64_t tiles = aq_conv2d_bf16_rows_tiles(&a), clusters = grid_blocks() / S;
  const int64_t bias_items = a.dbias ? (a.k + 7) / 8 : 0;
  float *part = reinterpret_cast<float *>(smem) + (GROUPS - 1) * TILE; /* past groups 1..'s sums */
  for (int64_t id = grid_block() / S; id < tiles + (bias_items + S - 1) / S; id += clusters) {
    if (id >= tiles) {
      conv_gemm::bias_items<S, uint16_t>(a, id - tiles, bias_items, rank, ranks);
      continue;
    }
    if (rank < 0) continue;
    __syncthreads(); /* the previous tile's job is done with */
    if (threadIdx.x == 0) {
      jb.c = (int)a.c, jb.h = (int)a.h, jb.w = (int)a.wd, jb.k = (int)a.k, jb.p = (int)a.p, jb.q = (int)a.q;
      jb.r = (int)a.r, jb.pad_h = a.pad_h, jb.pad_w = a.pad_w;
      jb.pq = jb.p * jb.q, jb.kpq = jb.k * jb.pq, jb.hw = jb.h * jb.w, jb.chw = jb.c * jb.hw;
      jb.chunks = CHUNKED ? (jb.q + QCHUNK - 1) / QCHUNK : 1;
      jb.tap_row = (int)(id % a.r), jb.c0 = (int)(id / a.r % ctiles) * CT, jb.k0 = (int)(id / a.r / ctiles) * KT;
      jb.row0 = (int)((int64_t)rows * rank / ranks), jb.row1 = (int)((int64_t)rows * (rank + 1) / ranks);
    }
    block_tile<U, B, CHUNKED>(a, jb, smem, part); /* its first barrier publishes the job */
#ifdef AQ_CONV_CLUSTERS
    if (ranks > 1) {
      conv::cluster_sums<S>(part, TILE, rank, [&](int64_t i, float sum) { put(a, jb, (int)i, sum); });
      continue;
    }
#endif
    __syncthreads();
    for (int i = threadIdx.x; i < TILE; i += THREADS) put(a, jb, i, part[i]);
  }
}

extern __shared__ __align__(16) uint8_t rows_smem[];

// The copies' width: 16 bytes where every row and both tensors allow, else
// 8, else 4 (launch.h requires even rows).
template <int S, int T, bool CHUNKED>
__device__ void build(const aq_conv2d_args_t &a) {
  const uintptr_t at = (uintptr_t)a.x | (uintptr_t)a.dy;
  const int64_t rowbytes = (a.q * 2) | (a.wd * 2);
  if (!((at | rowbytes) & 15)) return run<S, 16, Block<T>, CHUNKED>(a, rows_smem);
  if (!((at | rowbytes) & 7)) return run<S, 8, Block<T>, CHUNKED>(a, rows_smem);
  run<S, 4, Block<T>, CHUNKED>(a, rows_smem);
}

template <int T, bool CHUNKED>
__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return (CHUNKED ? aq_conv2d_bf16_rows_wide_fits(&a) : aq_conv2d_bf16_rows_fits(&a)) &&
         !(((uintptr_t)a.x | (uintptr_t)a.dy) & 3) && block_threads() == T &&
         conv::dynamic_smem() >= AQ_GPU_CONV2D_ROWS_BYTES(T);
}

}  // namespace conv_rows
#endif  // !AQ_HIP

template <int S, bool CHUNKED = false>
__device__ __forceinline__ void bwd_filter_rows(const aq_conv2d_args_t &a) {
  constexpr int T = AQ_GPU_CONV2D_ROWS_THREADS(S);
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_rows::applies<T, CHUNKED>(a)) return conv_rows::build<S, T, CHUNKED>(a);
#endif
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// Clusters of 16 (few tiles): a block of 512 threads an SM; of 8 (more):
// two of 256 an SM. At most 128 registers a thread either way.
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_SPLIT16) __launch_bounds__(AQ_GPU_CONV2D_ROWS_THREADS(AQ_GPU_CONV2D_SPLIT16), 1)
    aq_conv2d_bwd_filter_bf16_rows(aq_conv2d_args_t a) {
  bwd_filter_rows<AQ_GPU_CONV2D_SPLIT16>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT)
    __launch_bounds__(AQ_GPU_CONV2D_ROWS_THREADS(AQ_GPU_CONV2D_BWD_FILTER_SPLIT), 2)
        aq_conv2d_bwd_filter_bf16_rows8(aq_conv2d_args_t a) {
  bwd_filter_rows<AQ_GPU_CONV2D_BWD_FILTER_SPLIT>(a);
}
// Rows of dy past QCHUNK, in chunks, over clusters of 16: a kernel of its
// own, whose registers leave the others' alone (one kernel of both ran
// them up to a third slower).
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_SPLIT16) __launch_bounds__(AQ_GPU_CONV2D_ROWS_THREADS(AQ_GPU_CONV2D_SPLIT16), 1)
    aq_conv2d_bwd_filter_bf16_rows_wide(aq_conv2d_args_t a) {
  bwd_filter_rows<AQ_GPU_CONV2D_SPLIT16, true>(a);
}
