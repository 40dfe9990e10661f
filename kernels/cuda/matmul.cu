// aq_matmul_f32 on GPUs at AQ_MATMUL_PRECISION_EXACT: one FFMA a term (no
// TF32; the default precision runs matmul_x3.cu's tensor-core tiles).
//
// A block of 256 threads computes 128x128 tiles of C: each warp a 64x32
// piece, each thread 8x8 outputs (two 4-row by two 4-column quads, so every
// shared-memory read is a conflict-free 16-byte vector). Products too small
// to give every SM a 128x128 tile (a training step's 256-row activations:
// 16 tiles for 132 SMs) take 64x64 tiles instead, one quad a thread, 16
// deep, four times the blocks, or split k over a cluster (matmul_split);
// products of at most 16 columns take a warp a row (matmul_skinny). Each
// way is its own kernel (aq_matmul_f32, _tile64, _split2, _tile64_split2,
// _tile64_split4, _rows; every one correct for any shape and grid), and
// launch.h's aq_gpu_op_kernel picks for the scheduler. The k loop is
// double-buffered: the next slice of A and B comes from global memory
// into registers while the current one is multiplied, and lands in the other
// shared buffer, one barrier per slice. A is kept k-major in shared memory
// (As[k][m]) so both operands are read along m / n; transposes only change
// which direction the global loads run. Loads are 16-byte vectors where the
// leading dimensions and pointers allow it, with scalar, bounds-checked
// fallbacks at the edges, so every shape (1, 7, 33, 257, ...) is exact.
//
// Launch: any grid, blocks of 256 threads (launch.h's aq_gpu_shape gives 16x16
// blocks over 64x64 tiles: the extra blocks find no tile and return). Blocks
// walk the 128x128 tiles of every batch entry in a grouped order (8 tile-rows
// at a time) so neighbouring blocks share A and B in L2. A block of any other
// size is a launch bug: the kernel traps, so the fault names it.
#include "matmul_f32.cuh"
#include "launch.h" /* AQ_GPU_MATMUL_F32_SKINNY_N, _SPLIT */

// Every .cu is one translation unit of the fatbin: names stay in a namespace per file.
namespace mm_f32 {

// Q x Q quads of 4x4 a thread; 2 x 4 warps of 8 x 4 lanes make a tile of
// 64Q x 64Q, and a k-slice of BK = 16 / Q so that A's and B's slices are one
// 16-byte vector a thread each.
template <int Q, int K = 16 / Q>
struct Geo {
  static constexpr int BM = 64 * Q, BN = 64 * Q, BK = K;
  static constexpr int V = BM * BK / (4 * THREADS); /* 16-byte vectors a thread, of A and of B, per slice */
};

template <int Q, int K = 16 / Q>
struct Tile {
  float a[2][K][Geo<Q>::BM + PAD];
  float b[2][K][Geo<Q>::BN + PAD];
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

// One thread's share of a k-slice: V float4s of A and V of B.
template <int Q, int K>
__device__ __forceinline__ void fetch(const aq_matmul_args_t &p, bool TA, bool TB, const float *a, const float *b, int64_t row0,
                                      int64_t col0, int64_t k0, int tid, bool va, bool vb, float4 *ra, float4 *rb) {
  constexpr int RV = Geo<Q, K>::BM / 4, KV = K / 4; /* float4s along a row of m (n), of k */
#pragma unroll
  for (int v = 0; v < Geo<Q, K>::V; ++v) {
    const int i = tid + v * THREADS;
    if (TA) /* A stored k x m: BM m per k */
      ra[v] = load4(a, p.lda, k0 + i / RV, row0 + (i % RV) * 4, p.k, p.m, va);
    else /* A stored m x k: BK k per m row */
      ra[v] = load4(a, p.lda, row0 + i / KV, k0 + (i % KV) * 4, p.m, p.k, va);
    if (TB) /* B stored n x k */
      rb[v] = load4(b, p.ldb, col0 + i / KV, k0 + (i % KV) * 4, p.n, p.k, vb);
    else /* B stored k x n */
      rb[v] = load4(b, p.ldb, k0 + i / RV, col0 + (i % RV) * 4, p.k, p.n, vb);
  }
}

template <int Q, int K>
__device__ __forceinline__ void stash(Tile<Q, K> &t, bool TA, bool TB, int buf, int tid, const float4 *ra,
                                      const float4 *rb) {
  constexpr int RV = Geo<Q, K>::BM / 4, KV = K / 4;
#pragma unroll
  for (int v = 0; v < Geo<Q, K>::V; ++v) {
    const int i = tid + v * THREADS;
    if (TA) {
      *reinterpret_cast<float4 *>(&t.a[buf][i / RV][(i % RV) * 4]) = ra[v];
    } else {
      int m = i / KV, k = (i % KV) * 4;
      t.a[buf][k][m] = ra[v].x, t.a[buf][k + 1][m] = ra[v].y, t.a[buf][k + 2][m] = ra[v].z, t.a[buf][k + 3][m] = ra[v].w;
    }
    if (TB) {
      int n = i / KV, k = (i % KV) * 4;
      t.b[buf][k][n] = rb[v].x, t.b[buf][k + 1][n] = rb[v].y, t.b[buf][k + 2][n] = rb[v].z, t.b[buf][k + 3][n] = rb[v].w;
    } else {
      *reinterpret_cast<float4 *>(&t.b[buf][i / RV][(i % RV) * 4]) = rb[v];
    }
  }
}

// The k loop of a T x T-a-thread tile (T = 4Q): acc[i][j] is the product's
// sum at row row0 + wm + (i / 4) * 32 + lr + i % 4 and column
// col0 + wn + (j / 4) * 16 + lc + j % 4 (tile_row / tile_col).
template <int Q, int BK>
__device__ __forceinline__ void mainloop(const aq_matmul_args_t &p, bool TA, bool TB, Tile<Q, BK> &t, const float *a,
                                         const float *b, int64_t row0, int64_t col0, bool va, bool vb,
                                         float (&acc)[4 * Q][4 * Q]) {
  constexpr int T = 4 * Q, V = Geo<Q, BK>::V;
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, warp = tid >> 5, lane = tid & 31;
  const int wm = (warp >> 2) * 32 * Q, wn = (warp & 3) * 16 * Q; /* 2 x 4 warps */
  const int lr = (lane >> 2) * 4, lc = (lane & 3) * 4;            /* 8 x 4 lanes */
#pragma unroll
  for (int i = 0; i < T; ++i)
#pragma unroll
    for (int j = 0; j < T; ++j) acc[i][j] = 0.0f;

  const int64_t nk = (p.k + BK - 1) / BK;
  float4 ra[V], rb[V];
  fetch<Q, BK>(p, TA, TB, a, b, row0, col0, 0, tid, va, vb, ra, rb);
  stash(t, TA, TB, 0, tid, ra, rb);
  __syncthreads();
  int buf = 0;
  for (int64_t kt = 0; kt < nk; ++kt) {
    const bool more = kt + 1 < nk;
    if (more) fetch<Q, BK>(p, TA, TB, a, b, row0, col0, (kt + 1) * BK, tid, va, vb, ra, rb);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[T], bv[T];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        float4 x = *reinterpret_cast<const float4 *>(&t.a[buf][k][wm + 32 * q + lr]);
        float4 y = *reinterpret_cast<const float4 *>(&t.b[buf][k][wn + 16 * q + lc]);
        av[4 * q] = x.x, av[4 * q + 1] = x.y, av[4 * q + 2] = x.z, av[4 * q + 3] = x.w;
        bv[4 * q] = y.x, bv[4 * q + 1] = y.y, bv[4 * q + 2] = y.z, bv[4 * q + 3] = y.w;
      }
#pragma unroll
      for (int i = 0; i < T; ++i)
#pragma unroll
        for (int j = 0; j < T; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) stash(t, TA, TB, buf ^ 1, tid, ra, rb);
    __syncthreads();
    buf ^= 1;
  }
}

template <int Q>
__device__ __forceinline__ int tile_row(int tid, int i) {
  return ((tid >> 5) >> 2) * 32 * Q + (i >> 2) * 32 + ((tid & 31) >> 2) * 4 + (i & 3);
}
template <int Q>
__device__ __forceinline__ int tile_col(int tid, int h) {
  return ((tid >> 5) & 3) * 16 * Q + h * 16 + (tid & 3) * 4;
}


template <int Q, int BK, bool F = false>
__device__ void tile_f32(const aq_matmul_args_t &p, bool TA, bool TB, Tile<Q, BK> &t, const float *a, const float *b,
                         float *c, int64_t row0, int64_t col0, bool va, bool vb, bool vc, const Fuse &f = Fuse{}) {
  constexpr int T = 4 * Q;
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, warp = tid >> 5, lane = tid & 31;
  const int wm = (warp >> 2) * 32 * Q, wn = (warp & 3) * 16 * Q; /* 2 x 4 warps */
  const int lr = (lane >> 2) * 4, lc = (lane & 3) * 4;            /* 8 x 4 lanes */
  float acc[T][T];
  mainloop<Q, BK>(p, TA, TB, t, a, b, row0, col0, va, vb, acc);
#pragma unroll
  for (int i = 0; i < T; ++i) {
    const int64_t r = row0 + wm + (i >> 2) * 32 + lr + (i & 3);
    if (r >= p.m) continue;
#pragma unroll
    for (int h = 0; h < Q; ++h) {
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = p.alpha * acc[i][h * 4 + j];
      finish4<F>(p, f, c, r, col0 + wn + h * 16 + lc, v, vc);
    }
  }
}

template <int Q, int BK, bool F = false>
__device__ void matmul_tiles(const aq_matmul_args_t &p, Tile<Q, BK> &t, const Fuse &f = Fuse{}) {
  constexpr int BM = Geo<Q>::BM, BN = Geo<Q>::BN;
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
      tile_f32<Q, BK, F>(p, p.trans_a != 0, p.trans_b != 0, t, a, b, c, tm * BM, tn * BN, va, vb, vc, f);
    }
  }
}

// Split k. A product with fewer tiles than SMs and a deep k gives each
// tile a cluster of S blocks (sm_90), each block a slice of k: a training
// step's 1024 x 1024 weight gradients over a batch of 256 (64 tiles of
// 128x128, split 2: 128 blocks of the 8x8-a-thread tiles), its 256 x 1024
// activations (64 tiles of 64x64, split 2). The partial tiles meet in
// distributed shared memory, 64 rows at a time (inside the static limit:
// 33 KB a block for 128-wide tiles): every block leaves its rows in its own
// shared memory, and after a cluster barrier each block sums an S-th of
// them over the cluster's partials, always in rank order, and writes them
// back through the epilogue. Results depend on the shape and S only, never
// on timing, and no global workspace is needed. Clusters stay small (see
// launch.h: 16 clusters of 8 took two waves on an H100). Without clusters
// (sm_80, HIP) the first block of each cluster's worth computes the whole
// tile and the others return.
constexpr int PHASE = 64; /* rows of the partial tile exchanged at a time */

template <int Q>
union SplitShared {
  Tile<Q, 16> t;
  float part[PHASE][64 * Q + PAD]; /* +4: a warp's rows 4 apart fall in distinct banks */
};

template <int Q, int S, bool F>
__device__ void tile_split(const aq_matmul_args_t &p, SplitShared<Q> &u, const float *a, const float *b, float *c,
                           int64_t row0, int64_t col0, const Fuse &f) {
  const bool TA = p.trans_a != 0, TB = p.trans_b != 0;
#ifdef AQ_CLUSTERS
  constexpr int LD = 64 * Q + PAD, ROW4 = 16 * Q; /* float4s a row of the tile */
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
  const aq_matmul_args_t q = k_slice<S>(p, a, b);
  float acc[4 * Q][4 * Q];
  mainloop<Q, 16>(q, TA, TB, u.t, q.a, q.b, row0, col0, aligned16(q.a) && p.lda % 4 == 0,
                  aligned16(q.b) && p.ldb % 4 == 0, acc);
  const bool vc = aligned16(c) && p.ldc % 4 == 0 && (!p.bias || aligned16(p.bias));
#pragma unroll
  for (int phase = 0; phase < Q; ++phase) {
    /* 64x64 tiles: every warp's rows are in the one phase; 128x128: warps
     * 0-3 hold rows 0-63, warps 4-7 rows 64-127. */
    if (Q == 1 || (tid >> 7) == phase)
#pragma unroll
      for (int i = 0; i < 4 * Q; ++i)
#pragma unroll
        for (int h = 0; h < Q; ++h)
          *reinterpret_cast<float4 *>(&u.part[tile_row<Q>(tid, i) - PHASE * phase][tile_col<Q>(tid, h)]) =
              make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
    emit_part<S, F>(p, f, &u.part[0][0], LD, PHASE, ROW4, row0 + PHASE * phase, col0, c, vc);
  }
#else
  const bool va = aligned16(a) && p.lda % 4 == 0, vb = aligned16(b) && p.ldb % 4 == 0;
  const bool vc = aligned16(c) && p.ldc % 4 == 0 && (!p.bias || aligned16(p.bias));
  tile_f32<Q, 16, F>(p, TA, TB, u.t, a, b, c, row0, col0, va, vb, vc, f);
#endif
}

template <int Q, int S, bool F = false>
__device__ void matmul_split(const aq_matmul_args_t &p, SplitShared<Q> &u, const Fuse &f = Fuse{}) {
  constexpr int B = Geo<Q>::BM;
#ifndef AQ_CLUSTERS
  if (blockIdx.x % S) return; /* one block a cluster's worth does the whole tile */
#endif
  const int64_t tiles_m = (p.m + B - 1) / B, tiles_n = (p.n + B - 1) / B, tiles = tiles_m * tiles_n;
  const int64_t groups_x = gridDim.x / S, groups = groups_x * gridDim.y;
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z)
    for (int64_t id = (int64_t)blockIdx.y * groups_x + blockIdx.x / S; id < tiles; id += groups) {
      const int64_t per_group = 8 * tiles_n, first = (id / per_group) * 8;
      const int64_t rows = tiles_m - first < 8 ? tiles_m - first : 8;
      const int64_t tm = first + (id % per_group) % rows, tn = (id % per_group) / rows;
      tile_split<Q, S, F>(p, u, p.a + z * p.stride_a, p.b + z * p.stride_b, p.c + z * p.stride_c, tm * B, tn * B, f);
    }
}

// Products with a handful of columns (a classifier's logits and their
// gradients: n = 10) would leave every tile mostly empty with a long k loop
// in each of very few blocks. Here a block takes a few rows of C
// (aq_matmul_f32_rows_per_block: enough blocks to fill the GPU) and its 8
// warps split k; each thread keeps SKINNY_N column sums per row, and the
// sums meet through shuffles and shared memory in a fixed order, so the
// result depends on the shape only, never on the grid. Which way the lanes
// run follows A's layout, so A's loads are always contiguous across a warp:
//  - A stored m x k: the lanes of a warp take consecutive k of each row;
//  - A stored k x m (trans_a, a weight gradient h^T dy): a warp a row, A
//    staged through shared memory.
// B's SKINNY_N-wide panel is small and read from L1/L2 by every block.
// Wider products go SKINNY_N columns at a time (correct, not fast).
constexpr int SKINNY_N = AQ_GPU_MATMUL_F32_SKINNY_N, WARPS = THREADS / 32, SKINNY_KC = 256;

union Skinny {
  struct {                        /* skinny_k_lanes */
    float part[WARPS][4][SKINNY_N];
    float b[WARPS][32][SKINNY_N + 1]; /* each warp's chunk of B's panel; +1: lanes' rows in distinct banks */
  } lanes;
  struct {                        /* skinny_staged */
    float a[WARPS][SKINNY_KC + 1];
    float b[SKINNY_KC][SKINNY_N + 1]; /* +1: lanes' k rows fall in distinct banks */
  } staged;
};

__device__ __forceinline__ float skinny_b(const aq_matmul_args_t &p, const float *b, int64_t k, int64_t j) {
  return __ldg(p.trans_b ? b + j * p.ldb + k : b + k * p.ldb + j);
}

template <bool F>
__device__ __forceinline__ void skinny_store(const aq_matmul_args_t &p, const Fuse &f, float *c, int64_t i, int64_t j,
                                             float sum) {
  float *out = c + i * p.ldc + j, v = p.alpha * sum;
  if (p.beta != 0.0f) v += p.beta * *out;
  if (p.bias) v += p.bias[j];
  put<F>(p, f, c, i, j, activate(v, p.activation));
}

// A stored m x k: R rows a block, lanes along k. Each warp stages B's
// panel 32 rows of k at a time in shared memory, read along whichever
// direction is contiguous: read straight from global memory, each lane's
// own k row of a 10-wide panel made 85% of the sectors loaded excess.
template <int R, bool F>
__device__ void skinny_k_lanes(const aq_matmul_args_t &p, Skinny &s, const float *a, const float *b, float *c,
                               int64_t i0, int64_t j0, int64_t n, const Fuse &f) {
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)), warp = tid / 32,
            lane = tid % 32;
  const int64_t slice = (p.k + WARPS - 1) / WARPS, k0 = warp * slice, k1 = k0 + slice < p.k ? k0 + slice : p.k;
  float acc[R][SKINNY_N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < SKINNY_N; ++j) acc[r][j] = 0.0f;
  float(*bw)[SKINNY_N + 1] = s.lanes.b[warp];
  const int nn = (int)n;
  /* A chunk's loads, every one issued before any is used: this lane's k of
   * R rows of A, and its share (lane + 32i) of B's 32 x nn panel, in the
   * order of its contiguous direction. Where each share sits in B and in
   * the staged panel is the same for every chunk, so it is worked out once:
   * a division per element per chunk made the kernel issue-bound (49 us
   * for a 256 x 10 x 1024 product under ncu). */
  int kks[SKINNY_N], js[SKINNY_N];
#pragma unroll
  for (int i = 0; i < SKINNY_N; ++i) {
    const int e = lane + 32 * i;
    kks[i] = i >= nn ? 32 : p.trans_b ? lane : e / nn; /* 32: never loaded */
    js[i] = p.trans_b ? i : e % nn;
  }
  float av[R], tb[SKINNY_N];
  auto fetch = [&](int64_t kc) {
    const int kn = k1 - kc < 32 ? (int)(k1 - kc) : 32;
#pragma unroll
    for (int r = 0; r < R; ++r) av[r] = i0 + r < p.m && lane < kn ? __ldg(a + (i0 + r) * p.lda + kc + lane) : 0.0f;
    const float *panel = p.trans_b ? b + j0 * p.ldb + kc : b + kc * p.ldb + j0;
#pragma unroll
    for (int i = 0; i < SKINNY_N; ++i)
      tb[i] = kks[i] < kn ? __ldg(panel + (p.trans_b ? js[i] * p.ldb + kks[i] : kks[i] * p.ldb + js[i])) : 0.0f;
  };
  if (k0 < k1) fetch(k0);
  for (int64_t kc = k0; kc < k1; kc += 32) {
    __syncwarp(); /* the last chunk's panel is read */
#pragma unroll
    for (int i = 0; i < SKINNY_N; ++i)
      if (kks[i] < 32) bw[kks[i]][js[i]] = tb[i];
    float ac[R];
#pragma unroll
    for (int r = 0; r < R; ++r) ac[r] = av[r];
    if (kc + 32 < k1) fetch(kc + 32); /* in flight while this chunk is multiplied */
    __syncwarp();
    float bv[SKINNY_N];
#pragma unroll
    for (int j = 0; j < SKINNY_N; ++j) bv[j] = j < nn ? bw[lane][j] : 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < SKINNY_N; ++j) acc[r][j] = fmaf(ac[r], bv[j], acc[r][j]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < SKINNY_N; ++j) {
      if (j >= nn) break; /* uniform across the warp */
      float v = acc[r][j];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) s.lanes.part[warp][r][j] = v;
    }
  __syncthreads();
  for (int e = tid; e < R * SKINNY_N; e += THREADS) {
    const int r = e / SKINNY_N, j = e % SKINNY_N;
    if (i0 + r >= p.m || j >= n) continue;
    float sum = 0.0f;
    for (int w = 0; w < WARPS; ++w) sum += s.lanes.part[w][r][j];
    skinny_store<F>(p, f, c, i0 + r, j0 + j, sum);
  }
  __syncthreads();
}

// A stored k x m: a warp a row, its lanes splitting k. The block's 8 rows
// of A and B's panel come through shared memory a k-chunk at a time, loaded
// along whichever dimension is contiguous (read straight from global
// memory, each lane's own k made every load touch 32 sectors).
template <bool F>
__device__ void skinny_staged(const aq_matmul_args_t &p, Skinny &u, const float *a, const float *b, float *c,
                              int64_t i0, int64_t j0, int tid, const Fuse &f) {
  auto &s = u.staged;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t n = p.n - j0 < SKINNY_N ? p.n - j0 : SKINNY_N, i = i0 + warp;
  float acc[SKINNY_N];
#pragma unroll
  for (int j = 0; j < SKINNY_N; ++j) acc[j] = 0.0f;
  for (int64_t k0 = 0; k0 < p.k; k0 += SKINNY_KC) {
    const int64_t kc = p.k - k0 < SKINNY_KC ? p.k - k0 : SKINNY_KC;
    for (int e = tid; e < WARPS * SKINNY_KC; e += THREADS) {
      const int r = p.trans_a ? e % WARPS : e / SKINNY_KC, kk = p.trans_a ? e / WARPS : e % SKINNY_KC;
      const bool in = i0 + r < p.m && kk < kc;
      s.a[r][kk] = !in ? 0.0f : __ldg(p.trans_a ? a + (k0 + kk) * p.lda + i0 + r : a + (i0 + r) * p.lda + k0 + kk);
    }
    for (int e = tid; e < SKINNY_KC * SKINNY_N; e += THREADS) {
      const int j = p.trans_b ? e / SKINNY_KC : e % SKINNY_N, kk = p.trans_b ? e % SKINNY_KC : e / SKINNY_N;
      const bool in = j < n && kk < kc;
      s.b[kk][j] = !in ? 0.0f : __ldg(p.trans_b ? b + (j0 + j) * p.ldb + k0 + kk : b + (k0 + kk) * p.ldb + j0 + j);
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = lane; kk < SKINNY_KC; kk += 32) {
      const float av = s.a[warp][kk];
#pragma unroll
      for (int j = 0; j < SKINNY_N; ++j) acc[j] = fmaf(av, s.b[kk][j], acc[j]);
    }
    __syncthreads();
  }
  float mine = 0.0f;
#pragma unroll
  for (int j = 0; j < SKINNY_N; ++j) {
    float v = acc[j];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == j) mine = v;
  }
  if (i < p.m && lane < n) skinny_store<F>(p, f, c, i, j0 + lane, mine);
}

template <bool F = false>
__device__ void matmul_skinny(const aq_matmul_args_t &p, Skinny &s, const Fuse &f = Fuse{}) {
  const int64_t block = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
  const int64_t blocks = (int64_t)gridDim.x * gridDim.y * gridDim.z;
  const int rows = aq_matmul_f32_rows_per_block(&p);
  const int64_t groups = (p.m + rows - 1) / rows;
  for (int64_t g = block; g < groups * p.batch; g += blocks) {
    const int64_t z = g / groups, i0 = g % groups * rows;
    const float *a = p.a + z * p.stride_a, *b = p.b + z * p.stride_b;
    float *c = p.c + z * p.stride_c;
    for (int64_t j0 = 0; j0 < p.n; j0 += SKINNY_N) {
      const int64_t n = p.n - j0 < SKINNY_N ? p.n - j0 : SKINNY_N;
      if (p.trans_a)
        skinny_staged<F>(p, s, a, b, c, i0, j0, threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z), f);
      else if (rows == 4) skinny_k_lanes<4, F>(p, s, a, b, c, i0, j0, n, f);
      else if (rows == 2) skinny_k_lanes<2, F>(p, s, a, b, c, i0, j0, n, f);
      else skinny_k_lanes<1, F>(p, s, a, b, c, i0, j0, n, f);
    }
  }
}

}  // namespace mm_f32

// The builds (at most 256 threads a block: 2 blocks an SM keep 128
// registers a thread; the rows build runs one an SM) are separate kernels,
// not branches of one: sharing a kernel, the 64x64 path pushed the 128x128
// one into spills and cost it 10% at n = 4096.
AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_f32(aq_matmul_args_t p) {
  if (!matmul_prologue(p)) return;
  __shared__ __align__(16) mm_f32::Tile<2> t;
  mm_f32::matmul_tiles<2, 8>(p, t);
}

AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_f32_tile64(aq_matmul_args_t p) {
  if (!matmul_prologue(p)) return;
  __shared__ __align__(16) mm_f32::Tile<1> t;
  mm_f32::matmul_tiles<1, 16>(p, t);
}

// Blocks come in clusters of S along x: the grid's x must hold a whole
// number of them (aq_matmul_f32_gpu_shape's does). The partial rows take
// the k loop's buffers once the loop is done.
// 128x128 tiles take one block an SM (215-240 registers, no spills; at
// 128 they spilled); 64x64 tiles two.
#define AQ_MATMUL_SPLIT(S, Q, MIN, NAME)                                                              \
  AQ_KERNEL void AQ_SPLIT_CLUSTER(S) __launch_bounds__(256, MIN) NAME(aq_matmul_args_t p) {            \
    if (!matmul_prologue(p)) return;                                                                   \
    __shared__ __align__(16) mm_f32::SplitShared<Q> u;                                                 \
    mm_f32::matmul_split<Q, S>(p, u);                                                                  \
  }
AQ_MATMUL_SPLIT(2, 2, 1, aq_matmul_f32_split2)
AQ_MATMUL_SPLIT(2, 1, 2, aq_matmul_f32_tile64_split2)
AQ_MATMUL_SPLIT(4, 1, 2, aq_matmul_f32_tile64_split4)

// One block an SM: at two (128 registers a thread) the column sums of four
// rows spilled; a classifier's products are 128 blocks or fewer.
AQ_KERNEL void __launch_bounds__(256, 1) aq_matmul_f32_rows(aq_matmul_args_t p) {
  if (!matmul_prologue(p)) return;
  __shared__ mm_f32::Skinny s;
  mm_f32::matmul_skinny(p, s);
}

// aq_matmul_fused_f32 (ops.h): the same builds with the consumer in the
// write-back; aq_gpu_op_kernel picks one by the product's shape.
AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_fused_f32(aq_matmul_fused_args_t a) {
  mm_f32::Fuse f;
  if (!fused_prologue(a, f)) return;
  __shared__ __align__(16) mm_f32::Tile<2> t;
  mm_f32::matmul_tiles<2, 8, true>(a.mm, t, f);
}

AQ_KERNEL void __launch_bounds__(256, 2) aq_matmul_fused_f32_tile64(aq_matmul_fused_args_t a) {
  mm_f32::Fuse f;
  if (!fused_prologue(a, f)) return;
  __shared__ __align__(16) mm_f32::Tile<1> t;
  mm_f32::matmul_tiles<1, 16, true>(a.mm, t, f);
}

#define AQ_MATMUL_FUSED_SPLIT(S, Q, MIN, NAME)                                                     \
  AQ_KERNEL void AQ_SPLIT_CLUSTER(S) __launch_bounds__(256, MIN) NAME(aq_matmul_fused_args_t a) {      \
    mm_f32::Fuse f;                                                                                    \
    if (!fused_prologue(a, f)) return;                                                                 \
    __shared__ __align__(16) mm_f32::SplitShared<Q> u;                                                 \
    mm_f32::matmul_split<Q, S, true>(a.mm, u, f);                                                      \
  }
AQ_MATMUL_FUSED_SPLIT(2, 2, 1, aq_matmul_fused_f32_split2)
AQ_MATMUL_FUSED_SPLIT(2, 1, 2, aq_matmul_fused_f32_tile64_split2)
AQ_MATMUL_FUSED_SPLIT(4, 1, 2, aq_matmul_fused_f32_tile64_split4)

AQ_KERNEL void __launch_bounds__(256, 1) aq_matmul_fused_f32_rows(aq_matmul_fused_args_t a) {
  mm_f32::Fuse f;
  if (!fused_prologue(a, f)) return;
  __shared__ mm_f32::Skinny s;
  mm_f32::matmul_skinny<true>(a.mm, s, f);
}
