// aq_conv2d_f32_wino, aq_conv2d_bwd_data_f32_wino, aq_conv2d_bwd_filter_f32_wino(_thin):
// aq_conv2d_f32's three passes for 3x3 filters at unit stride and dilation
// as Winograd's minimal filtering (Lavin and Gray); aq_conv2d_bf16_wino and
// aq_conv2d_bwd_data_bf16_wino run the bf16 passes' forward and backward
// data the same way, their inputs widened as loaded. The forward's 2x2
// output tiles are A^T [sum over channels of (G g G^T) . (B^T d B)] A,
// F(2x2, 3x3): 16 multiplies a tile and channel pair where a direct
// convolution makes 36, the rest additions; the backward data is the
// forward over dy with each filter turned half a circle and its channels
// swapped, padded 2 - pad; the backward filter is F(3x3, 2x2), dy's 2x2
// tiles the filter (below). cuDNN's fp32 passes at stride 1 are FFT and
// Winograd algorithms; the direct implicit GEMMs (conv2d_x3.cu,
// conv2d_ffma.cu) make 2.25x the multiplies. The transforms' additions
// cost accuracy: a few fp32 roundings a term where a direct pass has one
// (within the tests' 1e-4 of a double reference).
//
// A block of 256 threads takes 32 tiles by 32 output channels through all
// 16 of the transform's elements: its threads are 16 groups, one an element
// e, each thread 8 tiles by 8 channels of e's product (a GEMM over the
// input channels). Input channels go 8 at a time: each thread transforms
// one 4x4 patch of the input (B^T d B, zero outside the image) and one
// filter (G g G^T) into shared memory, then every thread multiplies its 8
// x 8 over those 8 channels (two 16-byte loads of each operand a channel
// for 64 FMAs) while its next patch's loads are in flight (which elements
// of the patch lie inside the image found once a block tile). The sums
// leave through shared memory half the channels at a time, A^T M A giving
// each tile's 2x2 outputs (with the bias). The bf16 builds run the same
// tile's products on tensor cores at fp32's accuracy (below). Sums run
// over the channels (the backward filter's over the tiles, then the
// cluster's ranks) in order: results depend on the shape only. Where a
// pass does not apply (blocks of other than 256 threads, other filters or
// strides, tensors past 32-bit indices, AMD GPUs) the kernels run the
// direct loops.
#include "conv2d_direct.cuh"
#include "conv2d_gemm.cuh"
#include "conv2d_tiled.cuh"
#include "launch.h"
#include "mma_tf32.cuh"

#ifndef AQ_HIP
namespace conv_wino {

constexpr int THREADS = 256, TILES = 32, COLS = 32, CC = 8; /* a block's tiles, channels; input channels a step */
constexpr int LDS = TILES + 4;                              /* row stride of U and V (TILES == COLS) */
constexpr int HALF = COLS / 2, LDM = HALF + 1;              /* the sums' way out: half the channels at a time */
static_assert(TILES == COLS && THREADS == 16 * 16 && CC * TILES == THREADS, "16 elements x 4 x 4 threads of 8 x 8");

union Shared {
  struct {
    float u[16][CC][LDS]; /* B^T d B: [element][channel][tile] */
    float v[16][CC][LDS]; /* G g G^T: [element][channel][output channel] */
  } s;
  float m[16][TILES][LDM]; /* the sums of half the output channels: [element][tile][channel] */
};

// A pass as a forward convolution: in[n][cin][hin][win] * filter -> out[n][cout][hout][wout].
// E: the element type of in and the filters (float, or uint16_t holding
// bf16, widened as loaded: the bf16 passes' Winograd builds).
template <typename E>
struct Pass {
  const E *in, *w;
  const float *bias;
  float *out;
  int n, cin, hin, win, cout, hout, wout, pad, th, tw, tiles;
  bool flip; /* the backward data: filter (co, ci, r, s) = w[ci][co][2 - r][2 - s] */
};

template <typename E>
__device__ inline Pass<E> make_pass(const aq_conv2d_args_t &a, int pass) {
  Pass<E> p;
  p.n = (int)a.n, p.flip = pass == 1;
  if (!p.flip) {
    p.in = (const E *)a.x, p.out = a.y, p.bias = a.bias, p.cin = (int)a.c, p.hin = (int)a.h, p.win = (int)a.wd;
    p.cout = (int)a.k, p.hout = (int)a.p, p.wout = (int)a.q, p.pad = a.pad_h;
  } else {
    p.in = (const E *)a.dy, p.out = a.dx, p.bias = NULL, p.cin = (int)a.k, p.hin = (int)a.p, p.win = (int)a.q;
    p.cout = (int)a.c, p.hout = (int)a.h, p.wout = (int)a.wd, p.pad = 2 - a.pad_h;
  }
  p.w = (const E *)a.w, p.th = (p.hout + 1) / 2, p.tw = (p.wout + 1) / 2, p.tiles = p.n * p.th * p.tw;
  return p;
}

// Tile t's first input element (its patch's top left, maybe outside the
// image) and where it is: image n, patch row y0, column x0.
template <class P>
__device__ __forceinline__ void tile_at(const P &p, int t, int *n, int *y0, int *x0) {
  const int per = p.th * p.tw, q = t % per;
  *n = t / per, *y0 = q / p.tw * 2 - p.pad, *x0 = q % p.tw * 2 - p.pad;
}

// A thread's patch: tile t's top left element in channel 0 (maybe outside
// the image) and which of its 16 elements lie inside (none past the
// tiles), found once a block tile; a step then loads channel ci's, a step
// ahead, so that the loads' latency passes under the current step's
// multiplies.
template <typename E>
struct Patch {
  const E *at;
  uint32_t in; /* bit 4 i + j: element (i, j) inside the image */
};
template <typename E>
__device__ __forceinline__ Patch<E> patch_of(const Pass<E> &p, int t) {
  int n, y0, x0;
  tile_at(p, t, &n, &y0, &x0);
  Patch<E> q = {p.in + (int64_t)n * p.cin * p.hin * p.win + (int64_t)y0 * p.win + x0, 0};
#pragma unroll
  for (int k = 0; k < 16; ++k)
    q.in |= (t < p.tiles && (unsigned)(y0 + k / 4) < (unsigned)p.hin && (unsigned)(x0 + k % 4) < (unsigned)p.win ? 1u : 0u) << k;
  return q;
}
template <typename E>
__device__ __forceinline__ void load_patch(const Pass<E> &p, const Patch<E> &q, int ci, float d[16]) {
  const E *src = q.at + (int64_t)ci * p.hin * p.win;
  const uint32_t in = ci < p.cin ? q.in : 0;
#pragma unroll
  for (int k = 0; k < 16; ++k) d[k] = in >> k & 1 ? conv::ld(src + (k / 4) * p.win + k % 4) : 0.0f;
}
// load_patch for bf16, the values kept as loaded two a register (the
// tensor cores' tile holds its next patch across the products: in 16
// registers it spilled), and widened.
__device__ __forceinline__ void load_patch(const Pass<uint16_t> &p, const Patch<uint16_t> &q, int ci, uint32_t d[8]) {
  const uint16_t *src = q.at + (int64_t)ci * p.hin * p.win;
  const uint32_t in = ci < p.cin ? q.in : 0;
#pragma unroll
  for (int k = 0; k < 16; k += 2) {
    const uint32_t a = in >> k & 1 ? __ldg(src + (k / 4) * p.win + k % 4) : 0,
                   b = in >> (k + 1) & 1 ? __ldg(src + (k / 4) * p.win + k % 4 + 1) : 0;
    d[k / 2] = a | b << 16;
  }
}
__device__ __forceinline__ void widen(const uint32_t r[8], float d[16]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) d[2 * k] = __uint_as_float(r[k] << 16), d[2 * k + 1] = __uint_as_float(r[k] & 0xffff0000u);
}
// The filter from input channel ci to output channel co (zeros past the
// channels); the backward data's turned half a circle.
template <typename E>
__device__ __forceinline__ void load_filter(const Pass<E> &p, int co, int ci, float g[9]) {
  const bool f = co < p.cout && ci < p.cin;
  const E *w = p.flip ? p.w + ((int64_t)ci * p.cout + co) * 9 : p.w + ((int64_t)co * p.cin + ci) * 9;
#pragma unroll
  for (int k = 0; k < 9; ++k) g[k] = f ? conv::ld(w + (p.flip ? 8 - k : k)) : 0.0f;
}

// B^T d B of a 4x4 patch d into u[e] (e = 4 i + j).
__device__ __forceinline__ void input_transform(const float d[16], float u[16]) {
  float b[4][4]; /* B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3 */
#pragma unroll
  for (int j = 0; j < 4; ++j)
    b[0][j] = d[j] - d[8 + j], b[1][j] = d[4 + j] + d[8 + j], b[2][j] = d[8 + j] - d[4 + j], b[3][j] = d[4 + j] - d[12 + j];
#pragma unroll
  for (int i = 0; i < 4; ++i) /* (B^T d) B: the same on the columns */
    u[4 * i] = b[i][0] - b[i][2], u[4 * i + 1] = b[i][1] + b[i][2], u[4 * i + 2] = b[i][2] - b[i][1],
          u[4 * i + 3] = b[i][1] - b[i][3];
}

// G g G^T of a 3x3 filter g into v[e].
__device__ __forceinline__ void filter_transform(const float g[9], float v[16]) {
  float h[4][3]; /* G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 */
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    const float e = 0.5f * (g[s] + g[6 + s]), o = 0.5f * g[3 + s];
    h[0][s] = g[s], h[1][s] = e + o, h[2][s] = e - o, h[3][s] = g[6 + s];
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float e = 0.5f * (h[i][0] + h[i][2]), o = 0.5f * h[i][1];
    v[4 * i] = h[i][0], v[4 * i + 1] = e + o, v[4 * i + 2] = e - o, v[4 * i + 3] = h[i][2];
  }
}

// ---- products on tensor cores ----------------------------------------------
// The bf16 passes' forward and backward data and the thin backward filter
// run their element GEMMs in 3xTF32 (mma_tf32.cuh), a warp two elements
// (2 w, 2 w + 1) as m16n8k8 tiles: three tensor-core products a step
// issue a fraction of FFMA's instructions. (One TF32 pass would not do
// for bf16: the transforms' sums of a few bf16 values outgrow TF32's 11
// bits, and the tests hold the bf16 passes to fp32 sums.) A step's
// operands sit in shared memory as element pairs side by side (one 8-byte
// access each), in rows of the step's depth k: the backward filter's, two
// steps in 48 KB, unpadded, their columns (M or N) swizzled (XOR by k)
// against bank conflicts; the forward's padded.
// The swizzle: the half-warp of an 8-byte fragment load (k of 4 by columns
// of 4) and of a transform's store (8 k by 2 columns) each fall in 16
// distinct bank pairs.
__device__ __forceinline__ int swz(int k) { return (k & 3) << 2 | (k & 4) >> 1; }

// tf32x3::split without its guard for infinities: an infinite input makes
// NaNs here as in the transforms' differences, so that the guard's two
// instructions a value buy nothing.
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// Column c of row k: swizzled where SWZ, else (padded rows) as is, a
// lane's fragments then at constant offsets from one address.
template <bool SWZ>
__device__ __forceinline__ int col_of(int c, int k) { return SWZ ? c ^ swz(k) : c; }
// A's fragments, split, of both elements of a pair's m16 tile at row m0
// (PTX's layout: row g (+8), k q (+4); g = lane / 4, q = lane % 4).
template <bool SWZ, int W>
__device__ __forceinline__ void frag_a(const float2 (*s)[W], int m0, int g, int q, uint32_t (&hi)[2][4], uint32_t (&lo)[2][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = m0 + g + (j & 1) * 8, k = q + (j >> 1) * 4;
    const float2 x = s[k][col_of<SWZ>(r, k)];
    split(x.x, hi[0][j], lo[0][j]), split(x.y, hi[1][j], lo[1][j]);
  }
}
// B's, of the n8 tile at column n0 (k q (+4), column g).
template <bool SWZ, int W>
__device__ __forceinline__ void frag_b(const float2 (*s)[W], int n0, int g, int q, uint32_t (&hi)[2][2], uint32_t (&lo)[2][2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int k = q + j * 4;
    const float2 x = s[k][col_of<SWZ>(n0 + g, k)];
    split(x.x, hi[0][j], lo[0][j]), split(x.y, hi[1][j], lo[1][j]);
  }
}
// d += a b in 3xTF32, the smaller terms first.
__device__ __forceinline__ void mma_x3(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                       const uint32_t (&bl)[2]) {
  tf32x3::mma(d, al, bh);
  tf32x3::mma(d, ah, bl);
  tf32x3::mma(d, ah, bh);
}

// T where C, else F (a tile's shared memory: the tensor cores' or FFMA's).
template <bool C, class T, class F>
struct pick_t {
  using type = T;
};
template <class T, class F>
struct pick_t<false, T, F> {
  using type = F;
};

// The forward's operands for tensor cores: pair k of a step's B^T d B at
// u[k][channel][tile], of G g G^T at v[k][channel][output channel], rows
// padded (a fragment load's half-warp: 4 rows 4 bank pairs apart by 4
// columns); the way out as Shared's.
union TCShared {
  struct {
    float2 u[8][CC][LDS];
    float2 v[8][CC][LDS];
  } s;
  float m[16][TILES][LDM];
};

// Half h of the output channels' sums, parked in m: each thread makes two
// (tile, channel) pairs' 2x2 outputs, A^T M A (with the bias), as
// block_tile's way out does inline (through this function the compiler
// scheduled the FFMA tile's slower).
template <typename E>
__device__ __forceinline__ void emit_half(const Pass<E> &p, const float (*m)[TILES][LDM], int t0, int c0, int h) {
#pragma unroll
  for (int q = threadIdx.x; q < TILES * HALF; q += THREADS) {
    const int i = q % TILES, co = c0 + h * HALF + q / TILES, t = t0 + i;
    if (t >= p.tiles || co >= p.cout) continue;
    float s[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) s[k] = m[k][i][q / TILES];
    float r[2][4]; /* A^T s: rows s0 + s1 + s2, s1 - s2 - s3 */
#pragma unroll
    for (int j = 0; j < 4; ++j) r[0][j] = s[j] + s[4 + j] + s[8 + j], r[1][j] = s[4 + j] - s[8 + j] - s[12 + j];
    int n, y0, x0;
    tile_at(p, t, &n, &y0, &x0);
    const int y = y0 + p.pad, x = x0 + p.pad;
    const float b = p.bias ? __ldg(p.bias + co) : 0.0f;
    float *dst = p.out + ((int64_t)n * p.cout + co) * p.hout * p.wout;
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      if (y + a >= p.hout) continue;
      dst[(y + a) * p.wout + x] = r[a][0] + r[a][1] + r[a][2] + b;
      if (x + 1 < p.wout) dst[(y + a) * p.wout + x + 1] = r[a][1] - r[a][2] - r[a][3] + b;
    }
  }
}

// The block tile of tiles [t0, t0 + TILES) and output channels [c0, c0 + COLS).
template <typename E>
__device__ __forceinline__ void block_tile(const Pass<E> &p, Shared &sh, int t0, int c0) {
  const int tid = threadIdx.x, e = tid >> 4, ts = (tid >> 2) & 3, cs = tid & 3; /* e's 4 x 4 threads */
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  /* A thread's share of each step: the patch of channel tid / 32 of the
   * step and tile tid % 32; the filter of output channel tid % 32 and
   * channel tid / 32, or, forward, whose filters lie 9 floats a channel
   * apart (w[co][ci]), of output channel tid / 8 and channel tid % 8, so
   * that a warp reads 4 runs of 72 floats rather than 32 scattered
   * filters. */
  const int c = tid / TILES, i = tid % TILES, fc = p.flip ? c : tid % CC, fo = p.flip ? i : tid / CC;
  const Patch<E> patch = patch_of(p, t0 + i);
  float raw[16];
  load_patch(p, patch, c, raw);
  for (int ci0 = 0; ci0 < p.cin; ci0 += CC) {
    {
      float x[16], y[16], g[9];
      load_filter(p, c0 + fo, ci0 + fc, g);
      input_transform(raw, x);
      filter_transform(g, y);
      __syncthreads(); /* the last step's operands are read */
#pragma unroll
      for (int k = 0; k < 16; ++k) sh.s.u[k][c][i] = x[k], sh.s.v[k][fc][fo] = y[k];
      __syncthreads();
    }
    if (ci0 + CC < p.cin) load_patch(p, patch, ci0 + CC + c, raw);
#pragma unroll
    for (int c = 0; c < CC; ++c) {
      const float4 u0 = *reinterpret_cast<const float4 *>(&sh.s.u[e][c][ts * 8]),
                   u1 = *reinterpret_cast<const float4 *>(&sh.s.u[e][c][ts * 8 + 4]),
                   v0 = *reinterpret_cast<const float4 *>(&sh.s.v[e][c][cs * 8]),
                   v1 = *reinterpret_cast<const float4 *>(&sh.s.v[e][c][cs * 8 + 4]);
      const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w}, v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(u[i], v[j], acc[i][j]);
    }
  }

  /* Out, half the output channels at a time: the threads holding them park
   * their sums, then each thread makes two (tile, channel) pairs' outputs. */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __syncthreads(); /* the operands, or the last half, are done with */
    if (cs / 2 == h)
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) sh.m[e][ts * 8 + i][(cs % 2) * 8 + j] = acc[i][j];
    __syncthreads();
#pragma unroll
    for (int q = tid; q < TILES * HALF; q += THREADS) {
      const int i = q % TILES, co = c0 + h * HALF + q / TILES, t = t0 + i;
      if (t >= p.tiles || co >= p.cout) continue;
      float m[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) m[k] = sh.m[k][i][q / TILES];
      float r[2][4]; /* A^T m: rows m0 + m1 + m2, m1 - m2 - m3 */
#pragma unroll
      for (int j = 0; j < 4; ++j) r[0][j] = m[j] + m[4 + j] + m[8 + j], r[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
      int n, y0, x0;
      tile_at(p, t, &n, &y0, &x0);
      const int y = y0 + p.pad, x = x0 + p.pad;
      const float b = p.bias ? __ldg(p.bias + co) : 0.0f;
      float *dst = p.out + ((int64_t)n * p.cout + co) * p.hout * p.wout;
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        if (y + a >= p.hout) continue;
        dst[(y + a) * p.wout + x] = r[a][0] + r[a][1] + r[a][2] + b;
        if (x + 1 < p.wout) dst[(y + a) * p.wout + x + 1] = r[a][1] - r[a][2] - r[a][3] + b;
      }
    }
  }
}

// block_tile on tensor cores (the bf16 passes'): the same operands and
// way out, a warp a pair of elements' 32 x 32 (2 x 4 tiles of m16n8).
__device__ __forceinline__ void block_tile_tc(const Pass<uint16_t> &p, TCShared &sh, int t0, int c0) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  float acc[2][2][4][4] = {}; /* [element][m16][n8][fragment] */
  const int c = tid / TILES, i = tid % TILES, fc = p.flip ? c : tid % CC, fo = p.flip ? i : tid / CC; /* as block_tile's */
  const Patch<uint16_t> patch = patch_of(p, t0 + i);
  uint32_t raw[8];
  load_patch(p, patch, c, raw);
  for (int ci0 = 0; ci0 < p.cin; ci0 += CC) {
    {
      float d[16], x[16], y[16], f[9];
      load_filter(p, c0 + fo, ci0 + fc, f);
      widen(raw, d);
      input_transform(d, x);
      filter_transform(f, y);
      __syncthreads(); /* the last step's operands are read */
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        sh.s.u[k][c][i] = make_float2(x[2 * k], x[2 * k + 1]);
        sh.s.v[k][fc][fo] = make_float2(y[2 * k], y[2 * k + 1]);
      }
      __syncthreads();
    }
    if (ci0 + CC < p.cin) load_patch(p, patch, ci0 + CC + c, raw);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      uint32_t ah[2][4], al[2][4];
      frag_a<false>(sh.s.u[w], mi * 16, g, q, ah, al);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        uint32_t bh[2][2], bl[2][2];
        frag_b<false>(sh.s.v[w], ni * 8, g, q, bh, bl);
#pragma unroll
        for (int el = 0; el < 2; ++el) mma_x3(acc[el][mi][ni], ah[el], al[el], bh[el], bl[el]);
      }
    }
  }
  /* Out, half the output channels (n8 tiles 2 h, 2 h + 1) at a time;
   * fragment element k at tile g (+8), channel 2 q (+1). */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __syncthreads(); /* the operands, or the last half, are done with */
#pragma unroll
    for (int el = 0; el < 2; ++el)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int k = 0; k < 4; ++k)
            sh.m[2 * w + el][mi * 16 + g + (k >> 1) * 8][n * 8 + 2 * q + (k & 1)] = acc[el][mi][2 * h + n][k];
    __syncthreads();
    emit_half(p, sh.m, t0, c0, h);
  }
}

// The bf16 passes' products on tensor cores, fp32's in FFMA.
template <int PASS, typename E = float>
__device__ __forceinline__ void convolve(const aq_conv2d_args_t &a) {
  constexpr bool TC = sizeof(E) == 2;
  __shared__ __align__(16) typename pick_t<TC, TCShared, Shared>::type sh;
  const Pass<E> p = make_pass<E>(a, PASS);
  const int64_t tiles_t = (p.tiles + TILES - 1) / TILES, blocks = tiles_t * ((p.cout + COLS - 1) / COLS);
  for (int64_t id = grid_block(); id < blocks; id += grid_blocks()) {
    if constexpr (TC)
      block_tile_tc(p, sh, (int)(id % tiles_t) * TILES, (int)(id / tiles_t) * COLS);
    else
      block_tile(p, sh, (int)(id % tiles_t) * TILES, (int)(id / tiles_t) * COLS);
  }
}

// 3x3 filters, unit strides and dilations, the padding a 3x3 window's
// (0 to 2, the same both ways), 32-bit indices, blocks of the build's
// threads.
__device__ inline bool applies(const aq_conv2d_args_t &a, int threads = THREADS) {
  return block_threads() == threads && aq_conv2d_wino_shape(&a) && aq_conv2d_fits32(&a);
}

// ---- the backward filter: F(3x3, 2x2) --------------------------------------
// dw[k][c] (3x3) sums, over images and 2x2 tiles of dy, the correlation of
// x's 4x4 patch under the tile with the tile: A^T [(G dy G^T) . (B^T x B)] A
// with F(3x3, 2x2)'s matrices (B^T's last row d3 - d1, G 4x2, A^T 3x4),
// the sum over tiles taken in the transformed domain: for each element e a
// GEMM of K x C over a depth of tiles, 8 tiles a step, a block FK filters
// by 32 channels (each thread FK / 4 x 8 of one element's) and a cluster
// of S blocks each a share of the tiles. dw has few tiles and the clusters
// alone split dy's: the thin build (FK = 16, S = 16) makes four times the
// blocks of the wide one (32, 8), for dw of too few wide tiles to keep
// the SMs busy, at the cost of each patch transformed twice (launch.h:
// aq_conv2d_wino), its products on tensor cores (below); the square one
// (32, 12) runs the wide tile's products on tensor cores, for dw of tiles
// enough to fill clusters of 12 once. The wide tile's dw leaves FQ
// channels at a time, a (filter, channel) pair a thread: A^T M A, then
// summed over the cluster in rank order (conv::cluster_sums). Then
// dbias's items.
constexpr int FSTEP = 8; /* tiles a step */
static_assert(FSTEP * COLS == THREADS, "one patch and at most one dy tile a thread a step");

template <int FK>
struct FTile {
  static constexpr int MI = FK / 4, Q = THREADS / FK; /* a thread's filters; channels a round out */
  static_assert(FK <= COLS && MI % 4 == 0 && Q % 8 == 0, "whole float4s; a thread's 8 channels in one round");
};

template <int FK>
union FShared {
  struct {
    float u[16][FSTEP][LDS]; /* B^T x B: [element][tile][channel] */
    float v[16][FSTEP][LDS]; /* G dy G^T: [element][tile][filter] */
  } s;
  struct {
    float m[16][FK][FTile<FK>::Q + 1]; /* a round's sums: [element][filter][channel] */
    float part[FK * FTile<FK>::Q * 9]; /* its dw: [filter][channel][r][s] */
  } q;
};

// Tile t's x patch in channel c and dy tile in filter k, raw, zeros outside
// the image, past dy's edge, past the tiles or channels.
__device__ __forceinline__ void load_fraw(const aq_conv2d_args_t &a, int th, int tw, int t, int tiles, int c, int k,
                                          float d[16], float g[4]) {
  const int per = th * tw, n = t / per, q = t % per, ty = q / tw * 2, tx = q % tw * 2;
  const int y0 = ty - a.pad_h, x0 = tx - a.pad_w, h = (int)a.h, w = (int)a.wd, p = (int)a.p, qq = (int)a.q;
  const bool tin = t < tiles;
  const float *xs = a.x + ((int64_t)n * a.c + c) * h * w, *gs = a.dy + ((int64_t)n * a.k + k) * p * qq;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int y = y0 + i, x = x0 + j;
      d[4 * i + j] = tin && c < a.c && (unsigned)y < (unsigned)h && (unsigned)x < (unsigned)w ? __ldg(xs + y * w + x) : 0.0f;
    }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      g[2 * i + j] = tin && k < a.k && ty + i < p && tx + j < qq ? __ldg(gs + (ty + i) * qq + tx + j) : 0.0f;
}

// B^T d B with F(3x3, 2x2)'s B^T (rows d0 - d2, d1 + d2, d2 - d1, d3 - d1).
__device__ __forceinline__ void finput_transform(const float d[16], float u[16]) {
  float b[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    b[0][j] = d[j] - d[8 + j], b[1][j] = d[4 + j] + d[8 + j], b[2][j] = d[8 + j] - d[4 + j], b[3][j] = d[12 + j] - d[4 + j];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    u[4 * i] = b[i][0] - b[i][2], u[4 * i + 1] = b[i][1] + b[i][2], u[4 * i + 2] = b[i][2] - b[i][1],
          u[4 * i + 3] = b[i][3] - b[i][1];
}
// G g G^T of a 2x2 dy tile (G's rows g0, (g0 + g1) / 2, (g0 - g1) / 2, g1).
__device__ __forceinline__ void ftile_transform(const float g[4], float v[16]) {
  float h[4][2];
#pragma unroll
  for (int j = 0; j < 2; ++j)
    h[0][j] = g[j], h[1][j] = 0.5f * (g[j] + g[2 + j]), h[2][j] = 0.5f * (g[j] - g[2 + j]), h[3][j] = g[2 + j];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[4 * i] = h[i][0], v[4 * i + 1] = 0.5f * (h[i][0] + h[i][1]), v[4 * i + 2] = 0.5f * (h[i][0] - h[i][1]),
          v[4 * i + 3] = h[i][1];
}

// A^T m A: an element-major 4x4 of sums m into a 3x3 of dw (A^T's rows
// m0 + m1 + m2, m1 - m2, m1 + m2 + m3).
__device__ __forceinline__ void foutput_transform(const float m[16], float o[9]) {
  float r[3][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    r[0][j] = m[j] + m[4 + j] + m[8 + j], r[1][j] = m[4 + j] - m[8 + j], r[2][j] = m[4 + j] + m[8 + j] + m[12 + j];
#pragma unroll
  for (int i = 0; i < 3; ++i)
    o[3 * i] = r[i][0] + r[i][1] + r[i][2], o[3 * i + 1] = r[i][1] - r[i][2], o[3 * i + 2] = r[i][1] + r[i][2] + r[i][3];
}

// The rank's share [t0, t1) of the tiles for dw's filters [k0, k0 + FK) and
// channels [c0, c0 + 32), summed over the cluster into dw.
template <int FK, int S>
__device__ __forceinline__ void filter_tile(const aq_conv2d_args_t &a, FShared<FK> &sh, int th, int tw, int tiles, int t0,
                                            int t1, int k0, int c0, int rank, int ranks) {
  const int tid = threadIdx.x, e = tid >> 4, ks = (tid >> 2) & 3, cs = tid & 3;
  const int tt = tid % FSTEP, oc = tid / FSTEP; /* the thread's tile of a step, and channel (patch) or filter (dy tile) */
  constexpr int FMI = FTile<FK>::MI, FQ = FTile<FK>::Q;
  float acc[FMI][8];
#pragma unroll
  for (int i = 0; i < FMI; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  float d[16], g[4];
  const int fk = oc < FK ? k0 + oc : (int)a.k; /* the threads past the tile's filters load no dy */
  if (t0 < t1) load_fraw(a, th, tw, t0 + tt < t1 ? t0 + tt : tiles, tiles, c0 + oc, fk, d, g);
  for (int ts = t0; ts < t1; ts += FSTEP) {
    {
      float u[16], v[16];
      finput_transform(d, u);
      ftile_transform(g, v);
      __syncthreads(); /* the last step's operands are read */
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        sh.s.u[k][tt][oc] = u[k];
        if (oc < FK) sh.s.v[k][tt][oc] = v[k];
      }
      __syncthreads();
    }
    const int nt = ts + FSTEP + tt;
    if (ts + FSTEP < t1) load_fraw(a, th, tw, nt < t1 ? nt : tiles, tiles, c0 + oc, fk, d, g);
#pragma unroll
    for (int t = 0; t < FSTEP; ++t) {
      float v[FMI], u[8];
#pragma unroll
      for (int i = 0; i < FMI; i += 4)
        *reinterpret_cast<float4 *>(&v[i]) = *reinterpret_cast<const float4 *>(&sh.s.v[e][t][ks * FMI + i]);
#pragma unroll
      for (int j = 0; j < 8; j += 4)
        *reinterpret_cast<float4 *>(&u[j]) = *reinterpret_cast<const float4 *>(&sh.s.u[e][t][cs * 8 + j]);
#pragma unroll
      for (int i = 0; i < FMI; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(v[i], u[j], acc[i][j]);
    }
  }
  /* Out FQ channels at a time: the threads holding them park their sums,
   * each thread makes one (filter, channel) pair's 3x3, and the cluster
   * sums them. */
#pragma unroll
  for (int h = 0; h < COLS / FQ; ++h) {
    __syncthreads(); /* the operands, or the last round, are done with */
    if (cs * 8 / FQ == h)
#pragma unroll
      for (int i = 0; i < FMI; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) sh.q.m[e][ks * FMI + i][cs * 8 % FQ + j] = acc[i][j];
    __syncthreads();
    {
      const int k = tid / FQ, c = tid % FQ;
      float m[16];
#pragma unroll
      for (int x = 0; x < 16; ++x) m[x] = sh.q.m[x][k][c];
      foutput_transform(m, sh.q.part + (k * FQ + c) * 9);
    }
    auto store = [&](int64_t i, float sum) {
      const int k = (int)(i / (FQ * 9)), c = (int)(i / 9 % FQ), rs = (int)(i % 9), kk = k0 + k, cc = c0 + h * FQ + c;
      if (kk < a.k && cc < a.c) a.dw[((int64_t)kk * a.c + cc) * 9 + rs] = sum;
    };
    if (ranks > 1) {
      conv::cluster_sums<S>(sh.q.part, FK * FQ * 9, rank, store);
    } else {
      __syncthreads();
      for (int i = tid; i < FK * FQ * 9; i += THREADS) store(i, sh.q.part[i]);
    }
  }
}

// ---- the thin build's products on tensor cores ------------------------------
// The thin tile's (16 filters by 32 channels) 16 GEMMs in 3xTF32
// (mma_tf32.cuh), a warp two elements' 16 x 32, 8 tiles deep a step: the
// FFMA loop issued more instructions than its multiplies. The operands of
// two steps fit the 48 KB a block has without asking, so a step's patches
// are transformed into one buffer while the other's products run, one
// barrier a step. A warp's two elements sit side by side (one 8-byte
// access each), in unpadded rows whose columns are swizzled (XOR by the
// tile) against bank conflicts. The patches' loads go under predicates
// from one address a row, and each thread's tile moves on without
// divisions: left to the compiler, the loads' addressing cost as many
// instructions as the products.
constexpr int TK = 16; /* the thin tile's filters */
static_assert(TK == AQ_GPU_CONV2D_WINO_FILTER_THIN, "launch.h's thin tiles");
// The way out in one round: the sums of all 32 channels parked (m), then
// each thread's two (filter, channel) pairs' 3x3 (part, over m once read).
union TOut {
  float m[16][TK][COLS + 1]; /* [element][filter][channel] */
  float part[TK * COLS * 9]; /* [filter][channel][r][s] */
};
template <int FK>
union TShared {
  struct { /* element pairs (2 e, 2 e + 1) side by side: a warp's two elements in one 8-byte access */
    float2 u[2][8][FSTEP][COLS]; /* B^T x B: [buffer][pair][tile][channel ^ swz(tile)] */
    float2 v[2][8][FSTEP][FK];   /* G dy G^T: [buffer][pair][tile][filter ^ swz(tile)] */
  } s;
  TOut q; /* FK / TK rounds out */
};
static_assert(sizeof(TShared<TK>) <= 48 * 1024, "two steps in the 48 KB a block has without asking");
static_assert(sizeof(TShared<COLS>) == AQ_GPU_CONV2D_WINO_TC_BYTES, "launch.h's group segment of the square tile");

// A thread's tile of a step: image n, tile row ty, column tx (a step on:
// FSTEP tiles further, no divisions), and its index t.
struct FPos {
  int n, ty, tx, t;
};
__device__ __forceinline__ FPos fpos_of(int t, int th, int tw) {
  const int per = th * tw, q = t % per;
  return {t / per, q / tw, q % tw, t};
}
__device__ __forceinline__ void fpos_step(FPos &p, int th, int tw, int step = FSTEP) {
  p.t += step, p.tx += step;
  while (p.tx >= tw) {
    p.tx -= tw;
    if (++p.ty == th) p.ty = 0, ++p.n;
  }
}

// *p, or 0 where !ok: the load under a predicate, at an immediate offset
// OFF (bytes) from p, so that a patch row's four loads share one address
// (left to the compiler, each predicated load recomputed its own).
template <int OFF>
__device__ __forceinline__ float ldg_or0(const float *p, uint32_t ok) {
  float v;
  asm("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.b32 %0, 0f00000000;\n\t@q ld.global.nc.f32 %0, [%1+%3];\n\t}"
      : "=f"(v)
      : "l"(p), "r"(ok), "n"(OFF));
  return v;
}
// Row i of a patch or dy tile: n elements from row, those whose bit in in
// (bit 4 i + j: element (i, j) inside) is set.
template <int N>
__device__ __forceinline__ void load_row(const float *row, uint32_t in, int i, float *d) {
  d[0] = ldg_or0<0>(row, in & 1u << 4 * i);
  d[1] = ldg_or0<4>(row, in & 2u << 4 * i);
  if (N > 2) d[2] = ldg_or0<8>(row, in & 4u << 4 * i), d[3] = ldg_or0<12>(row, in & 8u << 4 * i);
}
// Bits 4 i + j for i < n and j < n: rows i (bits of rows) by columns j
// (bits of cols) inside.
__device__ __forceinline__ uint32_t inside(int y0, int x0, int h, int w, int n) {
  uint32_t rows = 0, cols = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (i < n) rows |= ((unsigned)(y0 + i) < (unsigned)h ? 0xfu : 0u) << 4 * i, cols |= ((unsigned)(x0 + i) < (unsigned)w ? 1u : 0u) << i;
  return rows & cols * 0x1111u;
}

// Tile p's x patch in channel c (zeros outside the image or past the
// channels; none where dead) and, where dy, its dy tile in filter k.
__device__ __forceinline__ void load_xpatch(const aq_conv2d_args_t &a, const FPos &p, int c, bool live, float d[16]) {
  const int h = (int)a.h, w = (int)a.wd, y0 = 2 * p.ty - a.pad_h, x0 = 2 * p.tx - a.pad_w;
  const uint32_t xin = live && c < a.c ? inside(y0, x0, h, w, 4) : 0;
  const float *xs = a.x + ((p.n * (int)a.c + c) * h + y0) * w + x0;
#pragma unroll
  for (int i = 0; i < 4; ++i) load_row<4>(xs + i * w, xin, i, d + 4 * i);
}
__device__ __forceinline__ void load_dytile(const aq_conv2d_args_t &a, const FPos &p, int k, bool live, float g[4]) {
  const int pp = (int)a.p, qq = (int)a.q, ty = 2 * p.ty, tx = 2 * p.tx;
  /* dy's tile starts inside: only its second row and column may not be */
  const uint32_t r1 = ty + 1 < pp, c1 = tx + 1 < qq;
  const uint32_t gin = live && k < a.k ? 1u | c1 << 1 | r1 << 4 | (r1 & c1) << 5 : 0;
  const float *gs = a.dy + ((p.n * (int)a.k + k) * pp + ty) * qq + tx;
  float gr[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) load_row<2>(gs + i * qq, gin, i, gr[i]);
  g[0] = gr[0][0], g[1] = gr[0][1], g[2] = gr[1][0], g[3] = gr[1][1];
}
__device__ __forceinline__ void load_fpatch(const aq_conv2d_args_t &a, const FPos &p, int c, int k, bool live, bool dy,
                                            float d[16], float g[4]) {
  load_xpatch(a, p, c, live, d);
  load_dytile(a, p, k, live && dy, g);
}

// One step's products from buffer b: warp w's elements 2 w and 2 w + 1,
// an FK x 32 each as FK / 16 x 4 tiles of m16n8k8 (PTX's fragment layout:
// g = lane / 4, q = lane % 4), a column of tiles at a time: every row's A
// fragments split once and held, each column's B fragments split once.
template <int FK>
__device__ __forceinline__ void tc_step(const TShared<FK> &sh, int b, float (&acc)[FK / TK][2][4][4]) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const float2(*su)[COLS] = sh.s.u[b][w];
  const float2(*sv)[FK] = sh.s.v[b][w];
  uint32_t ah[FK / TK][2][4], al[FK / TK][2][4]; /* A (filter, tile), B (tile, channel) */
#pragma unroll
  for (int mi = 0; mi < FK / TK; ++mi) frag_a<true>(sv, mi * TK, g, q, ah[mi], al[mi]);
#pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    uint32_t bh[2][2], bl[2][2];
    frag_b<true>(su, ni * 8, g, q, bh, bl);
#pragma unroll
    for (int mi = 0; mi < FK / TK; ++mi)
#pragma unroll
      for (int el = 0; el < 2; ++el) mma_x3(acc[mi][el][ni], ah[mi][el], al[mi][el], bh[el], bl[el]);
  }
}

// The tile's way out: every thread parks its sums (element 2 w + el's
// filter g (+8), channel 8 ni + 2 q (+1)), makes two (filter, channel)
// pairs' 3x3, A^T M A, and the cluster sums them into dw in rank order.
template <int S>
__device__ __forceinline__ void tc_out(const aq_conv2d_args_t &a, TOut &o, const float (&acc)[2][4][4], int k0, int c0,
                                       int rank, int ranks) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  __syncthreads(); /* the operands are done with */
#pragma unroll
  for (int el = 0; el < 2; ++el)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) o.m[2 * w + el][g + (i >> 1) * 8][ni * 8 + 2 * q + (i & 1)] = acc[el][ni][i];
  __syncthreads();
  float out[2][9];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int k = (tid + j * THREADS) / COLS, c = tid % COLS;
    float m[16];
#pragma unroll
    for (int x = 0; x < 16; ++x) m[x] = o.m[x][k][c];
    foutput_transform(m, out[j]);
  }
  __syncthreads(); /* part overwrites m */
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int i = 0; i < 9; ++i) o.part[(tid + j * THREADS) * 9 + i] = out[j][i];
  auto store = [&](int64_t i, float sum) {
    const int k = (int)(i / (COLS * 9)), c = (int)(i / 9 % COLS), rs = (int)(i % 9), kk = k0 + k, cc = c0 + c;
    if (kk < a.k && cc < a.c) a.dw[((int64_t)kk * a.c + cc) * 9 + rs] = sum;
  };
  if (ranks > 1) {
    conv::cluster_sums<S>(o.part, TK * COLS * 9, rank, store);
  } else {
    __syncthreads();
    for (int i = tid; i < TK * COLS * 9; i += THREADS) store(i, o.part[i]);
  }
}

// filter_tile on tensor cores: FK filters by 32 channels (the thin tile's
// TK, the square one's 32), two buffers of operands, one barrier a step.
template <int FK, int S>
__device__ __forceinline__ void filter_tile_tc(const aq_conv2d_args_t &a, TShared<FK> &sh, int th, int tw, int t0, int t1,
                                               int k0, int c0, int rank, int ranks) {
  const int tid = threadIdx.x, tt = tid % FSTEP, oc = tid / FSTEP; /* the thread's tile a step; channel, filter */
  const bool dy = oc < FK;
  float acc[FK / TK][2][4][4] = {};
  auto put = [&](int b, const float d[16], const float g[4]) {
    float u[16], v[16];
    finput_transform(d, u);
    ftile_transform(g, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      sh.s.u[b][k][tt][oc ^ swz(tt)] = make_float2(u[2 * k], u[2 * k + 1]);
      if (dy) sh.s.v[b][k][tt][oc ^ swz(tt)] = make_float2(v[2 * k], v[2 * k + 1]);
    }
  };
  float d[16], g[4];
  FPos p = fpos_of(t0 + tt, th, tw);
  __syncthreads(); /* the last tile's way out is done with the buffers */
  if (t0 < t1) {
    load_fpatch(a, p, c0 + oc, k0 + oc, p.t < t1, dy, d, g);
    put(0, d, g);
  }
  __syncthreads();
  int b = 0;
  for (int ts = t0; ts < t1; ts += FSTEP, b ^= 1) {
    /* the next step's loads (none past the share: no branch, so that the
     * loads, products and transforms schedule as one block) */
    fpos_step(p, th, tw);
    load_fpatch(a, p, c0 + oc, k0 + oc, p.t < t1, dy, d, g);
    tc_step<FK>(sh, b, acc);
    put(b ^ 1, d, g);
    __syncthreads();
  }
#pragma unroll
  for (int mi = 0; mi < FK / TK; ++mi) tc_out<S>(a, sh.q, acc[mi], k0 + mi * TK, c0, rank, ranks);
}

// ---- the warp build: an element a warp ------------------------------------
// The square tile (32 filters by 32 channels) with a warp an element: 16
// warps, 8 tiles a step, half the threads transforming patches of x and
// half tiles of dy, one block an SM over clusters of 6 (launch.h:
// aq_conv2d_wino). The square build's warps hold two elements' sums and a
// patch ahead in more registers than a thread has (it spilled in its
// loop, the spills' latency under every step); here a thread holds one
// element's 32 x 32 in 32 registers. The tensor cores' sums round coarser
// than fp32's, so they run WFLUSH steps at a time, then each thread adds
// them in fp32 to its own totals in shared memory (registers would not
// hold them beside the products). A step's operands (two buffers), the
// totals and the way out in the group segment, within an A100's opt-in.
constexpr int WTHREADS = 512, WSTEP = 8, WFK = 32, WFLUSH = 8; /* the block; tiles a step; filters a tile; steps a total */
static_assert(WTHREADS == AQ_GPU_CONV2D_WINO_WARP_THREADS && 2 * WSTEP * COLS == WTHREADS && WTHREADS / 32 == 16,
              "a patch or a dy tile a thread a step; a warp an element");
struct WShared {
  union {
    struct {
      float u[2][16][COLS][WSTEP]; /* B^T x B: [buffer][element][channel][wpos(tile)] */
      float v[2][16][WFK][WSTEP];  /* G dy G^T: [buffer][element][filter][wpos(tile)] */
    } s;
    float m[16][WFK][COLS + 1]; /* the way out's sums: [element][filter][channel] */
  };
  union {
    float4 total[8][WTHREADS]; /* a thread's sums in fp32: [fragment / 4][thread] */
    float part[WFK * COLS * 9]; /* the way out's dw: [filter][channel][r][s] */
  };
};
static_assert(sizeof(WShared) == AQ_GPU_CONV2D_WINO_WARP_BYTES, "launch.h's group segment of the warp build");

// Where tile k of a step sits in an operand row: a lane's fragment pair
// (k, k + 4) side by side, one 8-byte load. A half-warp's fragment load (4
// rows by 4 pairs) and a warp's store (8 tiles by 4 rows) each fall in
// distinct banks.
__device__ __forceinline__ int wpos(int k) { return 2 * (k & 3) + (k >> 2); }

// One step's products from buffer b: warp e's element, 32 x 32 as 2 x 4
// tiles of m16n8k8 (PTX's fragments: A's row g (+8), k q (+4), B's k q
// (+4), column g).
__device__ __forceinline__ void warp_step(const WShared &sh, int b, float (&acc)[2][4][4]) {
  const int lane = threadIdx.x & 31, e = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const float(*sv)[WSTEP] = sh.s.v[b][e];
  const float(*su)[WSTEP] = sh.s.u[b][e];
  uint32_t ah[2][4], al[2][4]; /* A (filter, tile), B (tile, channel) */
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float2 x = *reinterpret_cast<const float2 *>(&sv[mi * 16 + g + j * 8][wpos(q)]);
      split(x.x, ah[mi][j], al[mi][j]), split(x.y, ah[mi][j + 2], al[mi][j + 2]);
    }
#pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    uint32_t bh[2], bl[2];
    const float2 x = *reinterpret_cast<const float2 *>(&su[ni * 8 + g][wpos(q)]);
    split(x.x, bh[0], bl[0]), split(x.y, bh[1], bl[1]);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) mma_x3(acc[mi][ni], ah[mi], al[mi], bh, bl);
  }
}

// The tensor cores' sums into the thread's fp32 totals (first: set them),
// and zeroed.
__device__ __forceinline__ void warp_flush(WShared &sh, float (&acc)[2][4][4], bool first) {
  float4 *t = &sh.total[0][threadIdx.x];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float *x = acc[i / 4][i % 4];
    const float4 o = first ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : t[i * WTHREADS];
    t[i * WTHREADS] = make_float4(o.x + x[0], o.y + x[1], o.z + x[2], o.w + x[3]);
    x[0] = x[1] = x[2] = x[3] = 0.0f;
  }
}

// The way out: warp e parks its element's totals (filter 16 mi + g (+8),
// channel 8 ni + 2 q (+1)), each thread makes two (filter, channel) pairs'
// 3x3, and the cluster sums them into dw in rank order.
template <int S>
__device__ __forceinline__ void warp_out(const aq_conv2d_args_t &a, WShared &sh, int k0, int c0, int rank, int ranks) {
  const int tid = threadIdx.x, lane = tid & 31, e = tid >> 5, g = lane >> 2, q = lane & 3;
  float4 tot[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) tot[i] = sh.total[i][tid];
  __syncthreads(); /* the operands are done with */
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float x[4] = {tot[i].x, tot[i].y, tot[i].z, tot[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) sh.m[e][i / 4 * 16 + g + (j >> 1) * 8][i % 4 * 8 + 2 * q + (j & 1)] = x[j];
  }
  __syncthreads(); /* part overwrites the totals */
#pragma unroll
  for (int j = 0; j < WFK * COLS / WTHREADS; ++j) {
    const int p = tid + j * WTHREADS;
    float m[16];
#pragma unroll
    for (int x = 0; x < 16; ++x) m[x] = sh.m[x][p / COLS][p % COLS];
    foutput_transform(m, sh.part + p * 9);
  }
  auto store = [&](int64_t i, float sum) {
    const int k = (int)(i / (COLS * 9)), c = (int)(i / 9 % COLS), kk = k0 + k, cc = c0 + c;
    if (kk < a.k && cc < a.c) a.dw[((int64_t)kk * a.c + cc) * 9 + i % 9] = sum;
  };
  if (ranks > 1) {
    conv::cluster_sums<S>(sh.part, WFK * COLS * 9, rank, store);
  } else {
    __syncthreads();
    for (int i = tid; i < WFK * COLS * 9; i += WTHREADS) store(i, sh.part[i]);
  }
}

// filter_tile_tc's loop for the warp build: a thread's patch (the first
// half's) or dy tile (the second's) a step, tile tid % 8, channel or
// filter tid / 8 % 32; one barrier a step.
template <int S>
__device__ __forceinline__ void filter_tile_warp(const aq_conv2d_args_t &a, WShared &sh, int th, int tw, int t0, int t1,
                                                 int k0, int c0, int rank, int ranks) {
  const int tid = threadIdx.x, tt = tid % WSTEP, oc = tid / WSTEP % 32;
  const bool dy = tid >= WTHREADS / 2;
  float acc[2][4][4] = {};
  auto load = [&](const FPos &p, float d[16], float g[4]) {
    if (dy)
      load_dytile(a, p, k0 + oc, p.t < t1, g);
    else
      load_xpatch(a, p, c0 + oc, p.t < t1, d);
  };
  auto put = [&](int b, const float d[16], const float g[4]) {
    float u[16];
    if (dy) {
      ftile_transform(g, u);
#pragma unroll
      for (int k = 0; k < 16; ++k) sh.s.v[b][k][oc][wpos(tt)] = u[k];
    } else {
      finput_transform(d, u);
#pragma unroll
      for (int k = 0; k < 16; ++k) sh.s.u[b][k][oc][wpos(tt)] = u[k];
    }
  };
  float d[16], g[4];
  FPos p = fpos_of(t0 + tt, th, tw);
  warp_flush(sh, acc, true);
  __syncthreads(); /* the last tile's way out is done with the buffers */
  if (t0 < t1) {
    load(p, d, g);
    put(0, d, g);
  }
  __syncthreads();
  int b = 0, n = 0;
  for (int ts = t0; ts < t1; ts += WSTEP, b ^= 1) {
    fpos_step(p, th, tw, WSTEP);
    load(p, d, g);
    warp_step(sh, b, acc);
    put(b ^ 1, d, g);
    if (++n == WFLUSH) n = 0, warp_flush(sh, acc, false);
    __syncthreads();
  }
  warp_flush(sh, acc, false);
  warp_out<S>(a, sh, k0, c0, rank, ranks);
}

// dw's tiles of FK x 32 a cluster of S, each rank a share of dy's tiles in
// whole steps, then dbias's 8-channel items, S a cluster. B, the build:
// FFMA (the wide one), TC (tensor cores, a warp two elements: the thin
// tile's in static shared memory, the square one's past 48 KB in the
// group segment) or WARP (a warp an element, in the group segment).
enum { FFMA, TC, WARP };
template <int FK, int B>
using FSh = typename pick_t<B == WARP, WShared, typename pick_t<B == TC, TShared<FK>, FShared<FK>>::type>::type;
// Whether this launch gave the build the threads and shared memory it needs.
template <int FK, int B>
__device__ inline bool filter_fits(const aq_conv2d_args_t &a) {
  if (!applies(a, B == WARP ? WTHREADS : THREADS)) return false;
  if constexpr (sizeof(FSh<FK, B>) > 48 * 1024) return conv::dynamic_smem() >= sizeof(FSh<FK, B>);
  return true;
}
template <int FK, int S, int B>
__device__ __forceinline__ void filter(const aq_conv2d_args_t &a) {
  using Sh = FSh<FK, B>;
  Sh *shp;
  if constexpr (sizeof(Sh) > 48 * 1024) {
    extern __shared__ __align__(16) uint8_t wino_smem[];
    shp = reinterpret_cast<Sh *>(wino_smem);
  } else {
    __shared__ __align__(16) Sh sh_static;
    shp = &sh_static;
  }
  Sh &sh = *shp;
  int ranks;
  const int rank = conv::split_rank<S>(&ranks);
  constexpr int step = B == WARP ? WSTEP : FSTEP;
  const int th = (int)(a.p + 1) / 2, tw = (int)(a.q + 1) / 2, tiles = (int)a.n * th * tw;
  const int share = ((tiles + ranks - 1) / ranks + step - 1) / step * step;
  const int64_t tk = (a.k + FK - 1) / FK, blocks_out = aq_conv2d_wino_filter_tiles(&a, FK);
  const int64_t bias_items = a.dbias ? (a.k + 7) / 8 : 0, clusters = grid_blocks() / S;
  for (int64_t id = grid_block() / S; id < blocks_out + (bias_items + S - 1) / S; id += clusters) {
    if (id >= blocks_out) {
      conv_gemm::bias_items<S, float>(a, id - blocks_out, bias_items, rank, ranks);
      continue;
    }
    if (rank < 0) continue;
    const int t0 = rank * share, t1 = t0 + share < tiles ? t0 + share : tiles, k0 = (int)(id % tk) * FK,
              c0 = (int)(id / tk) * COLS;
    if constexpr (B == WARP)
      filter_tile_warp<S>(a, sh, th, tw, t0, t1, k0, c0, rank, ranks);
    else if constexpr (B == TC)
      filter_tile_tc<FK, S>(a, sh, th, tw, t0, t1, k0, c0, rank, ranks);
    else
      filter_tile<FK, S>(a, sh, th, tw, tiles, t0, t1, k0, c0, rank, ranks);
  }
}

}  // namespace conv_wino
#endif  // !AQ_HIP

template <int PASS, typename E = float>
__device__ __forceinline__ void wino_pass(const aq_conv2d_args_t &a) {
  conv::pass_entry<PASS, E>(a, [&] {
#ifndef AQ_HIP
    if (conv_wino::applies(a)) return conv_wino::convolve<PASS, E>(a), true;
#endif
    return false;
  });
}

// Two blocks an SM: at most 128 registers a thread.
AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_f32_wino(aq_conv2d_args_t a) { wino_pass<0>(a); }
AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_bwd_data_f32_wino(aq_conv2d_args_t a) { wino_pass<1>(a); }
// The bf16 passes' (ops_gpu.h): bf16 x, w and dy widened as loaded, the
// transforms and sums in fp32, as the fp32 builds'.
AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_bf16_wino(aq_conv2d_args_t a) { wino_pass<0, uint16_t>(a); }
AQ_KERNEL void __launch_bounds__(256, 2) aq_conv2d_bwd_data_bf16_wino(aq_conv2d_args_t a) { wino_pass<1, uint16_t>(a); }

// A cluster of S a tile of dw (ops_gpu.h: the grid's x a multiple of the
// cluster), FK filters by 32 channels: the wide build over clusters of 8
// in FFMA, the thin one over clusters of 16 and the square one over
// clusters of 12 on tensor cores, the warp build over clusters of 6 at
// one block of 512 threads an SM (launch.h: aq_conv2d_wino); the square
// and warp ones where launched with their group segments.
template <int FK, int S, int B>
__device__ __forceinline__ void wino_filter(const aq_conv2d_args_t &a) {
  conv::pass_entry<2>(a, [&] {
#ifndef AQ_HIP
    if (conv_wino::filter_fits<FK, B>(a)) return conv_wino::filter<FK, S, B>(a), true;
#endif
    return false;
  });
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_wino(aq_conv2d_args_t a) {
  wino_filter<AQ_GPU_CONV2D_WINO_COLS, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, conv_wino::FFMA>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_WINO_THIN_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_wino_thin(aq_conv2d_args_t a) {
  wino_filter<AQ_GPU_CONV2D_WINO_FILTER_THIN, AQ_GPU_CONV2D_WINO_THIN_SPLIT, conv_wino::TC>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_WINO_TC_SPLIT) __launch_bounds__(256, 2)
    aq_conv2d_bwd_filter_f32_wino_tc(aq_conv2d_args_t a) {
  wino_filter<AQ_GPU_CONV2D_WINO_COLS, AQ_GPU_CONV2D_WINO_TC_SPLIT, conv_wino::TC>(a);
}
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_WINO_WARP_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_WINO_WARP_THREADS, 1)
    aq_conv2d_bwd_filter_f32_wino_warp(aq_conv2d_args_t a) {
  wino_filter<AQ_GPU_CONV2D_WINO_COLS, AQ_GPU_CONV2D_WINO_WARP_SPLIT, conv_wino::WARP>(a);
}
