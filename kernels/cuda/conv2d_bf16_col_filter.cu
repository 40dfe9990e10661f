// aq_conv2d_bwd_filter_bf16_col: bf16's backward filter by columns where
// dy's planes are small (a ResNet's last stages and the stride-2 layers
// into them), on tensor cores (launch.h: aq_conv2d_col_fits says where it
// applies, as for the backward data's columns builds, conv2d_col.cuh).
//
// The implicit GEMM's backward filter gathers x's windows a column per
// (c, r, s) an element at a time, and the rows builds (conv2d_bf16_rows.cu)
// take unit strides and even rows only. Here a cluster takes a tile of dw,
// 64 filters by 32 channels' taps (c, r, s), and its blocks split the batch.
// For each image a block copies the 32 channels' planes of x and the 64
// filters' plane of dy whole (two runs of memory, cp.async) and puts dy
// position-major for ldmatrix; a plane of dy past 64 positions goes in
// chunks of 64 (launch.h: AQ_GPU_CONV2D_COL_FILTER_CHUNKS), the block's
// images a chunk at a time, each copying x's planes whole and a run of
// the chunk's positions a filter; a warp's B fragments, the image's columns
// X[(c, r, s)][(p, q)] (x at each tap's position, zeros off the plane),
// are read from x's planes where they lie: a thread's 48 elements of X a
// fragment step are at offsets fixed for the tile (its rows (c, r, s) and
// positions), worked out once. It adds dy X^T into its tile (a warp: 64
// filters by 3 n8 tiles of X's rows). The cluster sums its blocks' tiles
// in rank order (conv::cluster_sums), then the bias gradient's items;
// deterministic.
#include "conv2d_col.cuh"
#include "conv2d_gemm.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_col_filter {

using namespace conv_col;
constexpr int THREADS = AQ_GPU_CONV2D_COL_FILTER_THREADS, WARPS = THREADS / 32;
constexpr int KT = AQ_GPU_CONV2D_COL_FILTERS, MI = KT / 16, NI = ROWS / 8 / WARPS; /* a warp: all filters, NI n8 tiles */
constexpr int STAGES = 4; /* copies in flight two images ahead */
constexpr int CHUNKS = AQ_GPU_CONV2D_COL_FILTER_CHUNKS, DYROW = NP + 8; /* a chunk's run of a filter, from 16 bytes below */
constexpr int X_RUN = (CT * PLANE + 8) * 2, X_RAW = X_RUN + 16; /* x's run, then 16 bytes of zeros */
constexpr int DY_RAW = (KT * NP + 8) * 2 > KT * DYROW * 2 ? (KT * NP + 8) * 2 : KT * DYROW * 2;
constexpr int STAGE = X_RAW + DY_RAW, TAB = TAPS * 32 * CHUNKS; /* TAB: words of the chunks' offsets */
constexpr int ROW = NP * 2, BUF = KT * ROW; /* an image's dy, position-major: 64 positions a row */
constexpr int STEPS = NP / 16;               /* 16 positions a fragment step */
constexpr int MAIN = STAGES * STAGE + 2 * BUF, TILE = KT * ROWS;
static_assert(MI == 4 && ROW == 128 && X_RAW < 65536, "8 chunks a row; byte offsets in a stage's planes in 16 bits");
static_assert(STAGE % 16 == 0 && X_RAW % 16 == 0 && TILE * 4 <= MAIN, "16-byte copies; the tile over the stages");
static_assert(MAIN + TAB * 4 <= AQ_GPU_CONV2D_COL_FILTER_BYTES && DYROW * 2 % 16 == 0, "launch.h's group segment");

// Byte offset of 16-byte chunk ch (positions 8ch..) of row r of dy:
// XOR-swizzled so that ldmatrix's 8 rows fall in 8 bank groups.
__device__ __forceinline__ int at(int r, int ch) { return r * ROW + ((ch ^ (r & 7)) << 4); }

// The tile's sizes in 32-bit.
struct Tile {
  int c, k, hw, pq, rs, crs, rows; /* rows: X's, CT rs */
  int k0, c0, cn, kn;              /* the tile: filters k0.., channels c0.. (cn, kn of them in the pass) */
  int chunks;                      /* of dy's plane, NP positions each */
};

// Image n's runs into stage st: the tile's channels' planes of x, its
// filters' plane of dy (both from the 16-byte boundary below them); of a
// plane in chunks, chunk ch's positions a filter, each run DYROW apart.
template <bool CHUNKS_>
__device__ __forceinline__ void stage(const aq_conv2d_args_t &a, const Tile &tl, uint32_t st, int n, int ch) {
  const int ex = n * tl.c + tl.c0, ed = n * tl.k + tl.k0;
  stage_run<THREADS>(st, (const uint16_t *)a.x, ex * tl.hw, (ex + tl.cn) * tl.hw);
  if (!CHUNKS_) return stage_run<THREADS>(st + X_RAW, (const uint16_t *)a.dy, ed * tl.pq, (ed + tl.kn) * tl.pq);
  constexpr int PIECES = DYROW / 8; /* 16-byte copies a run */
  const uint16_t *dy = (const uint16_t *)a.dy;
  for (int i = threadIdx.x; i < tl.kn * PIECES; i += THREADS) {
    const int kk = i / PIECES, j = i - kk * PIECES, e0 = (ed + kk) * tl.pq + ch * NP;
    const int e1 = min(e0 + NP, (ed + kk + 1) * tl.pq), a0 = (e0 & ~7) + 8 * j, left = e1 - a0;
    if (left > 0) wg::cp_async16(st + X_RAW + kk * DYROW * 2 + j * 16, dy + a0, left >= 8 ? 16 : left * 2);
  }
}

// Image n's dy rows of chunk ch (positions past p q zero) from its runs in
// the stage at raw into buf: a warp a row at a time, a lane a pair of
// positions.
template <bool CHUNKS_>
__device__ __forceinline__ void build(const Tile &tl, const uint8_t *raw, uint8_t *buf, int n, int ch) {
  const int warp = threadIdx.x >> 5, pp = threadIdx.x & 31, chunk = pp >> 2, word = (pp & 3) * 4;
  const int e0 = (n * tl.k + tl.k0) * tl.pq, left = CHUNKS_ ? min(NP, tl.pq - ch * NP) : tl.pq;
  const uint16_t *dr = reinterpret_cast<const uint16_t *>(raw + X_RAW);
  for (int kk = warp; kk < KT; kk += WARPS) {
    const bool on = kk < tl.kn;
    const uint16_t *row = !CHUNKS_ ? dr + (e0 & 7) + kk * tl.pq : dr + kk * DYROW + ((e0 + kk * tl.pq + ch * NP) & 7);
    const uint32_t lo = on && 2 * pp < left ? row[2 * pp] : 0, hi = on && 2 * pp + 1 < left ? row[2 * pp + 1] : 0;
    *reinterpret_cast<uint32_t *>(buf + at(kk, chunk) + word) = lo | hi << 16;
  }
}

// A thread's elements of X for the tile: for each of its 3 rows (c, r, s)
// and each fragment step, the byte offsets from a stage's x planes of the
// pairs of positions its B registers hold (16 bits each). Off the plane,
// past p q, or past the tile's channels an offset is X_RUN's, into the
// zeros past the run (for any of the run's 8 starts below 16 bytes), so a
// B register is two loads and no tests.
struct XOffsets {
  uint32_t o[NI][STEPS][2];
  __device__ __forceinline__ XOffsets(const Tile &tl, const int32_t *tab, int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int j = (warp * NI + ni) * 8 + g, c = j / tl.rs, tap = j - c * tl.rs;
      const bool on = j < tl.rows && c < tl.cn;
#pragma unroll
      for (int ks = 0; ks < STEPS; ++ks)
#pragma unroll
        for (int h = 0; h < 2; ++h) { /* positions 16 ks + 2t + 8h and the next: the pair tab holds at index 8 ks + t + 4h */
          const int32_t pr = on ? tab[tap * 32 + ks * 8 + h * 4 + t] : -1;
          const int lo = (int16_t)(pr & 0xffff), hi = pr >> 16;
          o[ni][ks][h] = (uint32_t)(lo < 0 ? X_RUN : (c * tl.hw + lo) * 2) | (uint32_t)(hi < 0 ? X_RUN : (c * tl.hw + hi) * 2) << 16;
        }
    }
  }
};

// The element of x at byte offset o of planes xr (zero past the run).
__device__ __forceinline__ uint32_t x_at(const uint8_t *xr, uint32_t o) { return *reinterpret_cast<const uint16_t *>(xr + o); }

// One image's products: dy (A, 64 filters, ldmatrix) by the warp's NI n8
// tiles of X's rows (B, from x's planes at xr), 16 positions a step.
__device__ __forceinline__ void products(float (&acc)[MI][NI][4], const XOffsets &xo, const uint8_t *xr, uint32_t buf,
                                         int steps, int lane) {
#pragma unroll
  for (int ks = 0; ks < STEPS; ++ks) {
    if (ks >= steps) break;
    uint32_t b[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t o = xo.o[ni][ks][h];
        b[ni][h] = __byte_perm(x_at(xr, o & 0xffff), x_at(xr, o >> 16), 0x5410);
      }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t af[4];
      tc::ldsm_x4(buf + at(mi * 16 + (lane & 15), ks * 2 + (lane >> 4)), af);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) tc::mma(acc[mi][ni], af, b[ni][0], b[ni][1]);
    }
  }
}

// An item's image and chunk of dy's plane, in the block's order (a
// chunk's images, then the next chunk's): stepped, not divided out.
struct Item {
  int n, ch;
  __device__ __forceinline__ void advance(int n0, int n1) {
    if (++n == n1) n = n0, ++ch;
  }
};

// The block's sums over images n0..n1 of the tile into part[kk * ROWS + j]:
// items it = chunk x images + image, each its image's x and its chunk of
// dy (CHUNKS_: dy's plane in more than one chunk; else an item an image).
template <bool CHUNKS_>
__device__ void block_tile(const aq_conv2d_args_t &a, const Tile &tl, uint8_t *smem, const int32_t *tab, int n0, int n1,
                           float *part) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, count = n1 - n0, items = CHUNKS_ ? count * tl.chunks : count;
  const uint32_t base = tc::smem_addr(smem), bufs = base + STAGES * STAGE;
  uint8_t *buf = smem + STAGES * STAGE;
  const bool busy = warp * NI * 8 < tl.rows;
  XOffsets xo(tl, tab, warp, lane);
  float acc[MI][NI][4] = {};
  __syncthreads(); /* the previous tile is done with shared memory (its sums over the stages) */
  if (threadIdx.x < STAGES) *reinterpret_cast<uint4 *>(smem + threadIdx.x * STAGE + X_RUN) = make_uint4(0, 0, 0, 0);
  Item fut{n0, 0}; /* item it + STAGES - 1's */
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    if (i < items) stage<CHUNKS_>(a, tl, base + i * STAGE, fut.n, fut.ch), fut.advance(n0, n1);
    conv::stage_commit();
  }
  conv::stage_wait<STAGES - 2>();
  __syncthreads();
  if (items > 0) build<CHUNKS_>(tl, smem, buf, n0, 0);
  Item cur{n0, 0};
  for (int it = 0; it < items; ++it) {
    conv::stage_wait<STAGES - 3>(); /* item it + 1 is in */
    __syncthreads();                /* for everyone; item it - 1's buffers are read */
    const int next = it + STAGES - 1, ch = CHUNKS_ ? cur.ch : 0, n = cur.n;
    if (next < items) stage<CHUNKS_>(a, tl, base + next % STAGES * STAGE, fut.n, fut.ch), fut.advance(n0, n1);
    conv::stage_commit();
    Item after = cur;
    after.advance(n0, n1);
    if (it + 1 < items) build<CHUNKS_>(tl, smem + (it + 1) % STAGES * STAGE, buf + (it + 1) % 2 * BUF, after.n, after.ch);
    if (CHUNKS_ && ch && n == n0) xo = XOffsets(tl, tab + ch * TAPS * 32, warp, lane); /* a new chunk's positions */
    const uint8_t *xr = smem + it % STAGES * STAGE + (n * tl.c + tl.c0) * tl.hw % 8 * 2;
    if (busy) products(acc, xo, xr, bufs + it % 2 * BUF, CHUNKS_ ? (min(NP, tl.pq - ch * NP) + 15) / 16 : (tl.pq + 15) / 16, lane);
    cur = after;
  }
  conv::stage_wait<0>();
  __syncthreads(); /* the stages are free for the tile */
  const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      float *o = part + (mi * 16 + g) * ROWS + (warp * NI + ni) * 8 + t2;
      *reinterpret_cast<float2 *>(o) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2 *>(o + 8 * ROWS) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
}

// Each chunk's taps' offsets in a plane of x of the positions (p, q) a
// lane's pair holds (-1 off the plane, and past p q), two 16-bit halves a
// word: chunk ch's at tab[ch * TAPS * 32 ..].
__device__ void make_tab(const aq_conv2d_args_t &a, int32_t *tab) {
  const int pq = (int)(a.p * a.q), q = (int)a.q, h = (int)a.h, w = (int)a.wd;
  for (int i = threadIdx.x; i < TAB; i += THREADS) {
    const int ch = i / (TAPS * 32), tap = i / 32 % TAPS, r = tap / (int)a.s, s = tap - r * (int)a.s;
    int off[2];
    for (int e = 0; e < 2; ++e) {
      const int pos = ch * NP + (i % 32) * 2 + e, p = pos / q, qq = pos - p * q;
      const int y = p * a.stride_h - a.pad_h + r * a.dil_h, x = qq * a.stride_w - a.pad_w + s * a.dil_w;
      off[e] = pos < pq && r < a.r && y >= 0 && y < h && x >= 0 && x < w ? y * w + x : -1;
    }
    tab[i] = (int32_t)(((uint32_t)off[0] & 0xffffu) | (uint32_t)off[1] << 16);
  }
}

extern __shared__ __align__(16) uint8_t colf_smem[];

// The pass over clusters of S: a cluster a tile, rank by rank a share of
// the batch; then the bias gradient's items.
template <int S>
__device__ void run(const aq_conv2d_args_t &a) {
  int ranks;
  const int rank = conv::split_rank<S>(&ranks);
  uint8_t *smem = colf_smem;
  int32_t *tab = reinterpret_cast<int32_t *>(smem + MAIN);
  float *part = reinterpret_cast<float *>(smem);
  make_tab(a, tab);
  __syncthreads(); /* the offsets are in before a tile's threads read them */
  Tile tl;
  tl.c = (int)a.c, tl.k = (int)a.k, tl.hw = (int)(a.h * a.wd), tl.pq = (int)(a.p * a.q), tl.rs = (int)(a.r * a.s);
  tl.crs = tl.c * tl.rs, tl.rows = CT * tl.rs, tl.chunks = (tl.pq + NP - 1) / NP;
  const int ctiles = (tl.c + CT - 1) / CT;
  const int64_t tiles = (int64_t)ctiles * ((tl.k + KT - 1) / KT), clusters = grid_blocks() / S;
  const int64_t bias_items = a.dbias ? (a.k + 7) / 8 : 0;
  for (int64_t id = grid_block() / S; id < tiles + (bias_items + S - 1) / S; id += clusters) {
    if (id >= tiles) {
      conv_gemm::bias_items<S, uint16_t>(a, id - tiles, bias_items, rank, ranks);
      continue;
    }
    if (rank < 0) continue;
    tl.c0 = (int)(id % ctiles) * CT, tl.k0 = (int)(id / ctiles) * KT;
    tl.cn = min(CT, tl.c - tl.c0), tl.kn = min(KT, tl.k - tl.k0);
    const int n0 = (int)(a.n * rank / ranks), n1 = (int)(a.n * (rank + 1) / ranks);
    if (tl.chunks > 1) block_tile<true>(a, tl, smem, tab, n0, n1, part);
    else block_tile<false>(a, tl, smem, tab, n0, n1, part);
    auto out = [&](int64_t i, float sum) {
      const int kk = (int)(i / ROWS), j = (int)(i - (int64_t)kk * ROWS);
      if (kk < tl.kn && j < tl.cn * tl.rs) a.dw[(int64_t)(tl.k0 + kk) * tl.crs + tl.c0 * tl.rs + j] = sum;
    };
#ifdef AQ_CONV_CLUSTERS
    if (ranks > 1) {
      conv::cluster_sums<S>(part, TILE, rank, out);
      continue;
    }
#endif
    __syncthreads();
    for (int i = threadIdx.x; i < TILE; i += THREADS) out(i, part[i]);
  }
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return aq_conv2d_bf16_col_filter_fits(&a) && !(((uintptr_t)a.x | (uintptr_t)a.dy) & 15) && block_threads() == THREADS &&
         conv::dynamic_smem() >= AQ_GPU_CONV2D_COL_FILTER_BYTES;
}

}  // namespace conv_col_filter
#endif  // !AQ_HIP

// The builds' body over clusters of SPLIT: by columns where the shape
// takes them, else the plain backward filter.
template <int SPLIT>
__device__ __forceinline__ void col_filter_entry(const aq_conv2d_args_t &a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_col_filter::applies(a)) return conv_col_filter::run<SPLIT>(a);
#endif
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// A block an SM (its shared memory), clusters of AQ_GPU_CONV2D_COL_FILTER_SPLIT,
// and of _SPLIT2 and _SPLIT3.
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_COL_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_COL_FILTER_THREADS, 1)
    aq_conv2d_bwd_filter_bf16_col(aq_conv2d_args_t a) {
  col_filter_entry<AQ_GPU_CONV2D_COL_FILTER_SPLIT>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_COL_FILTER_SPLIT2) __launch_bounds__(AQ_GPU_CONV2D_COL_FILTER_THREADS, 1)
    aq_conv2d_bwd_filter_bf16_col2(aq_conv2d_args_t a) {
  col_filter_entry<AQ_GPU_CONV2D_COL_FILTER_SPLIT2>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_COL_FILTER_SPLIT3) __launch_bounds__(AQ_GPU_CONV2D_COL_FILTER_THREADS, 1)
    aq_conv2d_bwd_filter_bf16_col3(aq_conv2d_args_t a) {
  col_filter_entry<AQ_GPU_CONV2D_COL_FILTER_SPLIT3>(a);
}
