// aq_conv2d_bf16, aq_conv2d_bwd_data_bf16, aq_conv2d_bwd_filter_bf16:
// conv2d's three passes reading bf16 and writing fp32 (ops_gpu.h), as
// implicit GEMMs on tensor cores (mma.sync m16n8k16, fp32 accumulators).
//
// A pass is C[rows x cols] = A[rows x depth] * B[cols x depth]^T:
//           rows     cols  depth    A (gathered)         B (runs along depth)
//  forward  (n,p,q)  k     (c,r,s)  x through im2col     w[k][c,r,s]
//  bwd data (n,h,w)  c     (k,r,s)  dy through col2im    w[k][c][r,s]
//  bwd filt (c,r,s)  k     (n,p,q)  x through im2col     dy[n][k][p,q]
// Neither operand is materialised. A block stages a slice of depth (32 per
// warp group) of both operands: each thread gathers whole 16-byte chunks
// (8 consecutive depth values of one row) into registers while the warps
// multiply the previous slice out of shared memory (two stages, one barrier
// a slice), then stores them k-major and swizzled (mma_bf16.cuh), so both
// operands take plain ldmatrix. A's chunks are handed out row-fastest (a
// warp gathers 32 neighbouring positions of one depth index: consecutive x
// or dy for stride 1); B's chunk-fastest (a warp reads 8 rows of 64
// contiguous bytes), with one 16-byte load a chunk where runs along depth
// are multiples of 8 and aligned. The gather's index map: A's element
// (row, depth (i0,i1,i2)) is a[base + i0 step0 + y aw + z] with (base, y0,
// z0) per row, computed once a tile into shared memory, y = y0 + i1 step1
// and z = z0 + i2 step2 (divided by the stride in the backward data, where
// it must divide), zero outside [0,ah) x [0,aw).
//
// Where there are few tiles (and always in the backward filter, whose depth
// n*p*q is long and whose dw is small), they are small (64x64) and two warp
// groups split each slice's depth, their partial tiles summed through
// shared memory in a fixed order.
// Everything is deterministic. Indices are 32-bit: tensors of 2^31
// elements or more take the direct path (conv2d_direct.cuh), as do blocks
// of other than 256 threads and AMD GPUs.
//
// Where the time goes (H100, aq-bench conv --agent gpu, against cuDNN's
// bf16 convolutions): forward 0.5-0.95x, backward data 0.6x at stride 1
// (3.6x on LeNet's, where cuDNN picks a slow algorithm) but 0.18x at
// stride 2, whose implicit GEMM multiplies three zeros in four; backward
// filter 0.02-0.13x where dw has few tiles (LeNet's, a 64-channel ResNet
// layer: 1 to 9 blocks on 132 SMs), 0.6x where it has many. The next steps:
// split the backward filter's depth over a cluster of blocks summed through
// distributed shared memory (as aq_matmul_f32_split does), and split a
// strided backward data by output phase so it skips the zeros.
#include "launch.h"
#include "conv2d_filter.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_bf16 {

constexpr int THREADS = AQ_GPU_CONV2D_BF16_THREADS;

// BM x BN tiles of C; WM x WN warps of (16 MI) x (8 NI) each, times WK
// warp groups that split the depth of a slice (32 deep each).
template <int BM_, int BN_, int WM_, int WN_, int WK_, int MI_, int NI_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, WK = WK_, MI = MI_, NI = NI_;
  static constexpr int SLICE = 32 * WK;                            /* depth a stage holds */
  static constexpr int A_BYTES = BM * 64, B_BYTES = BN * 64;       /* one group's 32-deep tiles */
  static constexpr int STAGE = WK * (A_BYTES + B_BYTES);
  static constexpr int SMEM = 2 * STAGE + BM * 16;                 /* two stages and the rows' gather bases */
  static constexpr int NA = BM * 4 * WK / THREADS, NB = BN * 4 * WK / THREADS; /* chunks a thread stages */
  static_assert(32 * WM * WN * WK == THREADS, "256 threads");
  static_assert(BM == 16 * MI * WM && BN == 8 * NI * WN, "warp tiles cover the tile");
  static_assert(NA * THREADS == BM * 4 * WK && NB * THREADS == BN * 4 * WK, "whole chunks a thread");
  static_assert(SMEM <= 48 * 1024, "static shared memory");
  static_assert((WK - 1) * BM * BN * 4 <= 2 * STAGE, "the groups' partial tiles fit in the stages");
};
/* The tiles aq_conv2d_bf16_gpu_tiles (launch.h) chooses among. */
typedef Tile<128, 128, 2, 4, 1, 4, 4> Wide;   /* more than AQ_GPU_CONV2D_BF16_NARROW columns */
typedef Tile<256, 64, 4, 2, 1, 4, 4> Narrow;  /* at most that many: 64 columns, twice the rows */
typedef Tile<64, 64, 2, 2, 2, 2, 4> Small;    /* few tiles, and the backward filter: depth split in two */
static_assert(Narrow::BN == AQ_GPU_CONV2D_BF16_NARROW, "launch.h's shape counts these tiles");

__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }

// One pass as a GEMM (see the top of the file), 32-bit.
struct Gemm {
  int rows, cols, depth;
  int rd1, rd2, rbase, rmul1, radd1, rmul2, radd2; /* row = (j0 rd1 + j1) rd2 + j2 -> base j0 rbase, y0, z0 */
  int d1, d2, step0, step1, step2, ah, aw, sh, sw; /* depth = (i0 d1 + i1) d2 + i2 -> A's element */
  int run, outer;                                  /* B's element (col, d) = b[col run + (d / run) outer + d % run] */
  int plane;                                       /* C's (row, col) = out[(row / plane) cols plane + col plane + row % plane] */
  bool bvec;
  const uint16_t *a, *b;
  float *out;
  const float *bias;
};

__device__ inline bool fits32(const aq_conv2d_args_t &a) {
  const int64_t lim = INT32_MAX;
  return a.n * a.c * a.h * a.wd < lim && a.k * a.c * a.r * a.s < lim && a.n * a.k * a.p * a.q < lim &&
         a.h + 2 * (int64_t)a.pad_h < lim && a.wd + 2 * (int64_t)a.pad_w < lim && a.p * a.stride_h < lim &&
         a.q * a.stride_w < lim && a.r * a.dil_h < lim && a.s * a.dil_w < lim;
}

__device__ inline Gemm make_gemm(const aq_conv2d_args_t &a, int pass) {
  const int n = (int)a.n, c = (int)a.c, h = (int)a.h, w = (int)a.wd, k = (int)a.k, r = (int)a.r, s = (int)a.s;
  const int p = (int)a.p, q = (int)a.q;
  Gemm g;
  g.sh = g.sw = 1;
  g.bias = NULL;
  if (pass == 0) {
    g.rows = n * p * q, g.cols = k, g.depth = c * r * s;
    g.rd1 = p, g.rd2 = q, g.rbase = c * h * w, g.rmul1 = a.stride_h, g.radd1 = -a.pad_h, g.rmul2 = a.stride_w,
    g.radd2 = -a.pad_w;
    g.d1 = r, g.d2 = s, g.step0 = h * w, g.step1 = a.dil_h, g.step2 = a.dil_w, g.ah = h, g.aw = w;
    g.run = c * r * s, g.outer = 0, g.plane = p * q;
    g.a = (const uint16_t *)a.x, g.b = (const uint16_t *)a.w, g.out = a.y, g.bias = a.bias;
  } else if (pass == 1) {
    g.rows = n * h * w, g.cols = c, g.depth = k * r * s;
    g.rd1 = h, g.rd2 = w, g.rbase = k * p * q, g.rmul1 = 1, g.radd1 = a.pad_h, g.rmul2 = 1, g.radd2 = a.pad_w;
    g.d1 = r, g.d2 = s, g.step0 = p * q, g.step1 = -a.dil_h, g.step2 = -a.dil_w, g.ah = p, g.aw = q;
    g.sh = a.stride_h, g.sw = a.stride_w;
    g.run = r * s, g.outer = c * r * s, g.plane = h * w;
    g.a = (const uint16_t *)a.dy, g.b = (const uint16_t *)a.w, g.out = a.dx;
  } else {
    g.rows = c * r * s, g.cols = k, g.depth = n * p * q;
    g.rd1 = r, g.rd2 = s, g.rbase = h * w, g.rmul1 = a.dil_h, g.radd1 = -a.pad_h, g.rmul2 = a.dil_w,
    g.radd2 = -a.pad_w;
    g.d1 = p, g.d2 = q, g.step0 = c * h * w, g.step1 = a.stride_h, g.step2 = a.stride_w, g.ah = h, g.aw = w;
    g.run = p * q, g.outer = k * p * q, g.plane = c * r * s;
    g.a = (const uint16_t *)a.x, g.b = (const uint16_t *)a.dy, g.out = a.dw;
  }
  g.bvec = g.run % 8 == 0 && ((uintptr_t)g.b & 15) == 0;
  return g;
}

// A row's gather base: (offset of its image or channel, y0, z0, in range).
__device__ inline int4 row_base(const Gemm &g, int row) {
  if (row >= g.rows) return make_int4(0, 0, 0, 0);
  const int t = row / g.rd2, j2 = row - t * g.rd2, j0 = t / g.rd1, j1 = t - j0 * g.rd1;
  return make_int4(j0 * g.rbase, j1 * g.rmul1 + g.radd1, j2 * g.rmul2 + g.radd2, 1);
}

__device__ __forceinline__ void put(uint32_t (&v)[4], int e, uint16_t x) { v[e >> 1] |= (uint32_t)x << (16 * (e & 1)); }

// A's chunk of depth d0..d0+7 for the row whose base is rb.
template <bool DIV>
__device__ __forceinline__ uint4 gather_a(const Gemm &g, int4 rb, int d0) {
  uint32_t v[4] = {0, 0, 0, 0};
  if (rb.w && d0 < g.depth) {
    const int t = d0 / g.d2;
    int i2 = d0 - t * g.d2, i0 = t / g.d1, i1 = t - i0 * g.d1, off = rb.x + i0 * g.step0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (d0 + e < g.depth) {
        int y = rb.y + i1 * g.step1, z = rb.z + i2 * g.step2;
        bool in = true;
        if (DIV) { /* dy[p] feeds dx[h] only where p * stride lands exactly on h */
          const int yq = y / g.sh, zq = z / g.sw;
          in = y >= 0 && z >= 0 && yq * g.sh == y && zq * g.sw == z;
          y = yq, z = zq;
        }
        if (in && (unsigned)y < (unsigned)g.ah && (unsigned)z < (unsigned)g.aw) put(v, e, __ldg(g.a + off + y * g.aw + z));
      }
      if (++i2 == g.d2) {
        i2 = 0;
        if (++i1 == g.d1) i1 = 0, off += g.step0;
      }
    }
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// B's chunk of depth d0..d0+7 for column col.
__device__ __forceinline__ uint4 gather_b(const Gemm &g, int col, int d0) {
  if (col >= g.cols || d0 >= g.depth) return make_uint4(0, 0, 0, 0);
  const int j = d0 / g.run;
  int o = d0 - j * g.run;
  const uint16_t *b = g.b + col * g.run + j * g.outer + o;
  if (g.bvec) return __ldg(reinterpret_cast<const uint4 *>(b)); /* a chunk never crosses a run */
  uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if (d0 + e < g.depth) put(v, e, __ldg(b));
    if (++o == g.run) o = 0, b += g.outer - g.run + 1;
    else ++b;
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// One tile of C: rows row0.., columns col0.., over the whole depth.
template <class T, bool DIV>
__device__ __noinline__ void tile(const Gemm &g, uint8_t *smem, int row0, int col0) {
  constexpr int MI = T::MI, NI = T::NI, WARPS = T::WM * T::WN;
  int4 *bases = reinterpret_cast<int4 *>(smem + 2 * T::STAGE);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = warp / WARPS, wmn = warp % WARPS, wm = (wmn / T::WN) * 16 * MI, wn = (wmn % T::WN) * 8 * NI;

  __syncthreads(); /* the previous tile is done with shared memory */
  for (int i = tid; i < T::BM; i += THREADS) bases[i] = row_base(g, row0 + i);
  __syncthreads();

  uint4 ra[T::NA], rb[T::NB];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < T::NA; ++i) {
      const int q = tid + i * THREADS, row = q % T::BM, rest = q / T::BM;
      ra[i] = gather_a<DIV>(g, bases[row], k0 + (rest >> 2) * 32 + (rest & 3) * 8);
    }
#pragma unroll
    for (int i = 0; i < T::NB; ++i) {
      const int q = tid + i * THREADS, col = (q >> 2) % T::BN, gr = (q >> 2) / T::BN;
      rb[i] = col0 + col < g.cols ? gather_b(g, col0 + col, k0 + gr * 32 + (q & 3) * 8) : make_uint4(0, 0, 0, 0);
    }
  };
  auto store = [&](uint8_t *stage) {
#pragma unroll
    for (int i = 0; i < T::NA; ++i) {
      const int q = tid + i * THREADS, row = q % T::BM, rest = q / T::BM;
      *reinterpret_cast<uint4 *>(stage + (rest >> 2) * T::A_BYTES + tc::off_kmajor(row, rest & 3)) = ra[i];
    }
#pragma unroll
    for (int i = 0; i < T::NB; ++i) {
      const int q = tid + i * THREADS, col = (q >> 2) % T::BN, gr = (q >> 2) / T::BN;
      *reinterpret_cast<uint4 *>(stage + T::WK * T::A_BYTES + gr * T::B_BYTES + tc::off_kmajor(col, q & 3)) = rb[i];
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int nk = (g.depth + T::SLICE - 1) / T::SLICE;
  fetch(0);
  store(smem);
  __syncthreads();
  for (int kt = 0; kt < nk; ++kt) {
    uint8_t *cur = smem + (kt & 1) * T::STAGE;
    /* The next slice's loads are in flight while this one multiplies; the
     * stage they go to was last read before the previous barrier. */
    if (kt + 1 < nk) fetch((kt + 1) * T::SLICE);
    const uint32_t ta = tc::smem_addr(cur + grp * T::A_BYTES), tb = tc::smem_addr(cur + T::WK * T::A_BYTES + grp * T::B_BYTES);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) tc::warp_step<MI, NI>(acc, ta, tb, wm, wn, ks, lane);
    if (kt + 1 < nk) store(smem + ((kt + 1) & 1) * T::STAGE);
    __syncthreads();
  }

  if (T::WK > 1) { /* groups 1.. hand their partial tiles to group 0, summed in group order */
    constexpr int REGS = MI * NI * 4;
    float *red = reinterpret_cast<float *>(smem); /* the stages are free: the loop ended with a barrier */
    if (grp > 0)
#pragma unroll
      for (int j = 0; j < REGS; ++j) red[(((grp - 1) * WARPS + wmn) * REGS + j) * 32 + lane] = acc[j / (NI * 4)][(j / 4) % NI][j % 4];
    __syncthreads();
    if (grp > 0) return;
    for (int gr = 1; gr < T::WK; ++gr)
#pragma unroll
      for (int j = 0; j < REGS; ++j) acc[j / (NI * 4)][(j / 4) % NI][j % 4] += red[(((gr - 1) * WARPS + wmn) * REGS + j) * 32 + lane];
  }

  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + wm + mi * 16 + g8 + h * 8;
      if (row >= g.rows) continue;
      const int img = row / g.plane;
      float *o = g.out + (int64_t)img * g.cols * g.plane + (row - img * g.plane);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = col0 + wn + ni * 8 + t2 + e;
          if (col < g.cols) o[(int64_t)col * g.plane] = acc[mi][ni][h * 2 + e] + (g.bias ? g.bias[col] : 0.0f);
        }
    }
}

// dbias[k] for 8 channels, a warp each, lanes striding over (n, p, q).
__device__ inline void bias_grad(const aq_conv2d_args_t &a, int64_t item) {
  const int64_t k = item * 8 + (threadIdx.x >> 5), pq = a.p * a.q;
  const int lane = threadIdx.x & 31;
  if (k >= a.k) return;
  const uint16_t *dy = (const uint16_t *)a.dy + k * pq;
  float acc = 0.0f;
  for (int64_t n = 0; n < a.n; ++n, dy += a.k * pq)
    for (int64_t j = lane; j < pq; j += 32) acc += conv::ld(dy + j);
  acc = warp_sum(acc);
  if (lane == 0) a.dbias[k] = acc;
}

// Every tile of the pass (and the bias gradient's items after them),
// grid-stride; a tile's row tiles are consecutive blocks, which share its
// B tile in L2.
template <class T, bool DIV>
__device__ void run(const aq_conv2d_args_t &a, const Gemm &g, uint8_t *smem, int64_t extra) {
  const int64_t tiles_m = (g.rows + T::BM - 1) / T::BM, tiles = tiles_m * ((g.cols + T::BN - 1) / T::BN);
  for (int64_t id = grid_block(); id < tiles + extra; id += grid_blocks()) {
    if (id < tiles) tile<T, DIV>(g, smem, (int)(id % tiles_m) * T::BM, (int)(id / tiles_m) * T::BN);
    else bias_grad(a, id - tiles);
  }
}

template <int PASS>
__device__ __forceinline__ void convolve(const aq_conv2d_args_t &a) {
  constexpr int SMEM = PASS == 2 ? Small::SMEM : max_int(max_int(Wide::SMEM, Narrow::SMEM), Small::SMEM);
  __shared__ __align__(128) uint8_t smem[SMEM];
  /* In shared memory rather than registers, which the accumulators, the
   * staged chunks and the fragments need more. */
  __shared__ Gemm gs;
  if (threadIdx.x == 0) gs = make_gemm(a, PASS);
  __syncthreads();
  const Gemm &g = gs;
  if (PASS == 2) return run<Small, false>(a, g, smem, a.dbias ? (a.k + 7) / 8 : 0);
  int tm, tn;
  aq_conv2d_bf16_gpu_tiles(&a, PASS, &tm, &tn);
  const bool div = PASS == 1 && (a.stride_h > 1 || a.stride_w > 1);
  if (tm == Small::BM) return div ? run<Small, true>(a, g, smem, 0) : run<Small, false>(a, g, smem, 0);
  if (tm == Narrow::BM) return div ? run<Narrow, true>(a, g, smem, 0) : run<Narrow, false>(a, g, smem, 0);
  return div ? run<Wide, true>(a, g, smem, 0) : run<Wide, false>(a, g, smem, 0);
}

__device__ inline bool tensor_cores(const aq_conv2d_args_t &a) { return block_threads() == THREADS && fits32(a); }

}  // namespace conv_bf16
#endif  // !AQ_HIP

// Two blocks an SM: at most 128 registers a thread.
AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bf16(aq_conv2d_args_t a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<0>(a);
#endif
  conv::forward(a, (const uint16_t *)a.x, (const uint16_t *)a.w);
}

AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bwd_data_bf16(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<1>(a);
#endif
  conv::backward_data(a, (const uint16_t *)a.w, (const uint16_t *)a.dy);
}

AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_BF16_THREADS, 2) aq_conv2d_bwd_filter_bf16(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_bf16::tensor_cores(a)) return conv_bf16::convolve<2>(a);
#endif
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// Where a filter's planes fit shared memory (a LeNet's: dw has too few
// tiles for the tensor cores to fill a GPU), fp32's tiled backward filter
// on bf16 x and dy, the batch split over a cluster (launch.h; ops_gpu.h:
// the grid's x a multiple of the cluster).
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_TILED_FILTER_BLOCK)
    aq_conv2d_bwd_filter_bf16_split(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  if (conv::tiled(a, 2)) return conv::backward_filter_tiled<AQ_GPU_CONV2D_BWD_FILTER_SPLIT, uint16_t>(a);
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}

// The staged build on bf16 x and dy (conv2d_filter.cuh; ops_gpu.h).
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_FILTER_WARPS * 32)
    aq_conv2d_bwd_filter_bf16_staged(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  if (conv::filter_staged<AQ_GPU_CONV2D_BWD_FILTER_SPLIT>(a))
    return conv::backward_filter_staged<AQ_GPU_CONV2D_BWD_FILTER_SPLIT, uint16_t>(a);
  conv::backward_filter(a, (const uint16_t *)a.x, (const uint16_t *)a.dy);
}
