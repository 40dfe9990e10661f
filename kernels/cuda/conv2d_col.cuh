// conv2d's backward data by columns where dy's planes are small (launch.h:
// aq_conv2d_col_fits): the parts its builds share (conv2d_bf16_col.cu on
// tensor cores, conv2d_ffma_col.cu in FFMA).
//
// A block takes an item, one image and CT channels of dx, and computes the
// image's columns first,
//   D[(c, r, s)][(p, q)] = sum_k w[k][c][r][s] dy[n][k][p][q],
// a dense product over k whose operands both lie whole in memory: a row k
// of w holds the tile's (c, r, s) together, and rows k.. of an image's dy
// are one run of memory. Then each element of dx is the sum of the entries
// of D its taps reach, in tap order (col2im in shared memory, from a list
// of them a position of x, made once a block): deterministic, and no
// product multiplies the zeros between a stride's rows.
#pragma once
#include "launch.h"
#include "conv2d_filter.cuh"
#include "wgmma.cuh"

#ifndef AQ_HIP
namespace conv_col {

constexpr int CT = AQ_GPU_CONV2D_COL_CHANNELS, TAPS = AQ_GPU_CONV2D_COL_TAPS, ROWS = CT * TAPS; /* D's rows */
constexpr int NP = AQ_GPU_CONV2D_COL_POSITIONS;                                                 /* D's columns */
constexpr int DS = NP + 8; /* floats a row of D in shared memory: a half-warp's float2 stores in 16 bank pairs */
constexpr int D_BYTES = ROWS * DS * 4, PLANE = AQ_GPU_CONV2D_COL_PLANE;
constexpr int LIST_BYTES = PLANE * (TAPS * 2 + 1); /* a position's count and offsets into D */
static_assert(ROWS * DS <= 32767 + NP, "offsets in D within a channel's rows in 16 bits");

// The pass's sizes in 32-bit, and the block's item.
struct Job {
  int c, k, pq, rs, crs; /* crs: a row k of w */
  int rows;              /* D's rows this filter uses: CT rs */
  int n, c0;             /* the item: an image, its channels c0.. */
  int steps;             /* stages over k */
  __device__ explicit Job(const aq_conv2d_args_t &a, int ks) {
    c = (int)a.c, k = (int)a.k, pq = (int)(a.p * a.q), rs = (int)(a.r * a.s);
    crs = c * rs, rows = CT * rs, steps = (k + ks - 1) / ks, n = c0 = 0;
  }
  __device__ int tiles() const { return (c + CT - 1) / CT; }
};

// Rows k0..k0+KS-1 of w's tile (D's rows of the item's channels) into a
// stage of KS rows of WROW elements (E: bf16 or float), zeros past k and c.
// A pair of lanes copies 32 bytes of a row (a sector), a warp 16 rows at a
// time: rows lane/2 + 16 h, 32-byte pieces warp, warp + WARPS, ...
template <class E, int KS, int WROW, int WARPS>
__device__ __forceinline__ void stage_w(const aq_conv2d_args_t &a, const Job &jb, uint32_t st, int k0) {
  constexpr int PER = 16 / sizeof(E), PIECES = (ROWS / (2 * PER) + WARPS - 1) / WARPS; /* elements a copy; a warp's pieces */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pieces = jb.rows / (2 * PER);
  const int tile_end = (jb.c - jb.c0) * jb.rs; /* elements of a row in the tile */
  const E *w = (const E *)a.w;
#pragma unroll
  for (int h = 0; h < KS / 16; ++h) {
    const int kk = (lane >> 1) + 16 * h, row = (k0 + kk) * jb.crs + jb.c0 * jb.rs;
    const bool on = k0 + kk < jb.k;
    const uint32_t dst = st + kk * WROW * (int)sizeof(E);
#pragma unroll
    for (int j = 0; j < PIECES; ++j) {
      const int pc = warp + WARPS * j, e = (pc * 2 + (lane & 1)) * PER, left = tile_end - e;
      const int bytes = !on || left <= 0 ? 0 : left >= PER ? 16 : left * (int)sizeof(E);
      if (pc < pieces) wg::cp_async16(dst + e * (int)sizeof(E), w + (bytes ? row + e : 0), bytes);
    }
  }
}

// Elements e0..e1 of a tensor (E: bf16) into shared memory at raw, from
// the 16-byte boundary below e0 (at raw + (e0 & 7) elements), the last
// copy cut at e1: runs that start anywhere, in 16-byte copies.
template <int THREADS>
__device__ __forceinline__ void stage_run(uint32_t raw, const uint16_t *t, int e0, int e1) {
  const int a0 = e0 & ~7;
  for (int i = threadIdx.x; i * 8 < e1 - a0; i += THREADS) {
    const int left = e1 - a0 - i * 8;
    wg::cp_async16(raw + i * 16, t + a0 + i * 8, left >= 8 ? 16 : left * 2);
  }
}

// Starts an item: its image and channels, then the first STAGES - 1
// stages' copies in flight (stage(kt) issues stage kt's).
template <int STAGES, class Stage>
__device__ __forceinline__ void begin_item(Job &jb, int64_t item, int ctiles, const Stage &stage) {
  jb.n = (int)(item / ctiles), jb.c0 = (int)(item % ctiles) * CT;
  __syncthreads(); /* the previous item is done with D; the lists are made */
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    if (i < jb.steps) stage(i);
    conv::stage_commit();
  }
}

// The lists of D's entries that reach each position of x: counts at cnt,
// at most TAPS offsets (tap DS + position) a position at offs, in tap order.
template <int THREADS>
__device__ void make_lists(const aq_conv2d_args_t &a, uint8_t *cnt, int16_t *offs) {
  const int h = (int)a.h, w = (int)a.wd, s = (int)a.s, q = (int)a.q, p = (int)a.p;
  for (int i = threadIdx.x; i < h * w; i += THREADS) {
    const int ih = i / w, iw = i - ih * w;
    int n = 0;
    for (int r = 0; r < a.r; ++r) {
      const int y = ih + a.pad_h - r * a.dil_h;
      if (y < 0 || y % a.stride_h || y / a.stride_h >= p) continue;
      for (int t = 0; t < s; ++t) {
        const int x = iw + a.pad_w - t * a.dil_w;
        if (x < 0 || x % a.stride_w || x / a.stride_w >= q) continue;
        offs[i * TAPS + n++] = (int16_t)((r * s + t) * DS + y / a.stride_h * q + x / a.stride_w);
      }
    }
    cnt[i] = (uint8_t)n;
  }
}

// The item's dx from D in shared memory (rows (c, r, s) of DS floats): a
// thread eight channels of a position at a time, their entries summed in
// tap order, positions fastest (stores along dx's rows).
template <int THREADS>
__device__ __forceinline__ void col2im(const aq_conv2d_args_t &a, const Job &jb, const float *d, const uint8_t *cnt,
                                       const int16_t *offs) {
  const int hw = (int)(a.h * a.wd), cn = min(CT, jb.c - jb.c0), groups = (cn + 7) / 8, crow = jb.rs * DS;
  float *dx = a.dx + ((int64_t)jb.n * jb.c + jb.c0) * hw;
  int at = threadIdx.x, cg = 0;
  while (at >= hw) at -= hw, ++cg;
  while (cg < groups) {
    const int n = cnt[at];
    const float *dc = d + cg * 8 * crow;
    float sum[8] = {};
    for (int e = 0; e < n; ++e) {
      const float *de = dc + offs[at * TAPS + e];
#pragma unroll
      for (int c8 = 0; c8 < 8; ++c8) sum[c8] += de[c8 * crow];
    }
    float *out = dx + cg * 8 * hw + at;
#pragma unroll
    for (int c8 = 0; c8 < 8; ++c8)
      if (cg * 8 + c8 < cn) out[c8 * hw] = sum[c8];
    for (at += THREADS; at >= hw;) at -= hw, ++cg;
  }
}

}  // namespace conv_col
#endif  // !AQ_HIP
