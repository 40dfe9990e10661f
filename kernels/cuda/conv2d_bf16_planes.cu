// aq_conv2d_bf16_planes: bf16's forward of 3x3 filters where x's planes
// are small (launch.h: aq_conv2d_bf16_planes_fits; a ResNet's last two
// stages), on tensor cores.
//
// The implicit GEMM's forward (conv2d_bf16.cu) gathers x through im2col an
// element at a time from global memory, again for every tile of filters.
// Here a block takes one image, a tile of its positions (launch.h:
// aq_conv2d_bf16_planes_tiles) and AQ_GPU_CONV2D_PLANES_FILTERS filters:
// C[k][(p, q)] = sum over (c, r, s) of
// w[k][c][r][s] x[c][tap's position]. Both operands are copied whole, by
// cp.async, a stage of 16 channels at a time: the filters' rows of w (the
// stage's (c, r, s) together in each) and the channels' planes of x (one
// run of memory). The stage's im2col (a position's 144 taps, zero where
// they fall in the padding) is then built in shared memory from the staged
// planes, a thread two channels of a position as whole words, through a
// list of each position's tap offsets made once an item, while the warps
// multiply the previous stage. Deterministic: each sum in depth order.
#include "launch.h"
#include "conv2d_col.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_planes_bf16 {

constexpr int THREADS = AQ_GPU_BLOCK, KT = AQ_GPU_CONV2D_PLANES_FILTERS; /* filters a block */
constexpr int KC = 16, TAPS = 9, DEPTH = KC * TAPS;                     /* channels a stage, its depth */
constexpr int NP = AQ_GPU_CONV2D_COL_POSITIONS, PLANE = AQ_GPU_CONV2D_PLANES_PLANE;
/* A staged row of w, or of a position's taps: the stage's depth and 16
 * bytes more, an odd number of 16-byte chunks, so that ldmatrix's eight
 * rows fall in eight bank groups. */
constexpr int ROW = DEPTH + 8, W_BYTES = KT * ROW * 2, RAW_BYTES = (KC * PLANE + 8) * 2;
/* Stages of w three deep (a stage's rows are multiplied while the next
 * stage's wait and the one after lands), of x two (a stage's planes are
 * read by the im2col built a stage ahead, before the copies into their
 * slot are issued): x's past w's (X_AT), then two im2col tiles (TS). */
constexpr int STAGES = 3, X_AT = STAGES * W_BYTES, T_BYTES = NP * ROW * 2;
constexpr int TS = X_AT + 2 * RAW_BYTES, LIST = TS + 2 * T_BYTES; /* then the tap offsets */
constexpr int MI = 2, NI = 2;                      /* a warp: 32 filters (2 of 4 warps' rows) by 16 positions */
static_assert((ROW / 8) % 2 == 1 && W_BYTES % 16 == 0 && RAW_BYTES % 16 == 0 && T_BYTES % 16 == 0,
              "odd chunks a row; 16-byte copies");
static_assert(2 * 16 * MI == KT && 4 * 8 * NI == NP && THREADS == 8 * 32, "the warps cover the tile");
static_assert(LIST + NP * TAPS * 2 <= AQ_GPU_CONV2D_PLANES_BYTES, "launch.h's group segment");
static_assert(THREADS * 2 == NP * (KC / 2), "a thread two units (a position's channel pair) of a stage's im2col");

// The filters' rows of the stage's channels c0..c0+KC-1, zeros past c and k.
__device__ __forceinline__ void stage_w(const aq_conv2d_args_t &a, uint32_t st, int k0, int c0) {
  const int c = (int)a.c, k = (int)a.k, crs = c * TAPS, left = (c - c0) * TAPS; /* elements of a row in the stage */
  const uint16_t *w = (const uint16_t *)a.w;
  for (int i = threadIdx.x; i < KT * (DEPTH / 8); i += THREADS) {
    const int row = i / (DEPTH / 8), ch = i - row * (DEPTH / 8), e = ch * 8, rest = left - e;
    const int bytes = k0 + row >= k || rest <= 0 ? 0 : rest >= 8 ? 16 : rest * 2;
    wg::cp_async16(st + (row * ROW + e) * 2, w + (bytes ? (k0 + row) * crs + c0 * TAPS + e : 0), bytes);
  }
}

// Two channels (2 cp, 2 cp + 1) of a position's im2col row from the staged
// planes (xs: the stage's first channel), as 9 words at t, zeros where a
// tap is out (off < 0) or a channel past the last (on).
__device__ __forceinline__ void put_pair(uint32_t *t, const uint16_t *xs, const int (&off)[TAPS], int hw, int cp,
                                         bool on0, bool on1) {
  uint16_t v[2 * TAPS];
#pragma unroll
  for (int j = 0; j < 2 * TAPS; ++j) {
    const bool on = j < TAPS ? on0 : on1;
    const int o = off[j % TAPS];
    v[j] = on && o >= 0 ? xs[(2 * cp + j / TAPS) * hw + o] : 0;
  }
#pragma unroll
  for (int j = 0; j < TAPS; ++j) t[j] = v[2 * j] | (uint32_t)v[2 * j + 1] << 16;
}

// One stage's products: the warp's MI m16 tiles of filters by its NI n8
// tiles of positions (those past the plane skipped), over the stage's depth.
__device__ __forceinline__ void products(float (&acc)[MI][NI][4], uint32_t ws, uint32_t ts, int wm, int wn, int lane,
                                         int pq) {
  const int l8 = lane & 7, l3 = (lane >> 3) & 1, l4 = lane >> 4;
#pragma unroll
  for (int ks = 0; ks < DEPTH / 16; ++ks) {
    uint32_t bf[4];
    tc::ldsm_x4(ts + ((wn + l8 + l4 * 8) * ROW + (ks * 2 + l3) * 8) * 2, bf);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t af[4];
      tc::ldsm_x4(ws + ((wm + mi * 16 + l8 + l3 * 8) * ROW + (ks * 2 + l4) * 8) * 2, af);
      tc::mma(acc[mi][0], af, bf[0], bf[1]);
      if (wn + 8 < pq) tc::mma(acc[mi][1], af, bf[2], bf[3]);
    }
  }
}

extern __shared__ __align__(16) uint8_t planes_smem[];

__device__ void run(const aq_conv2d_args_t &a) {
  uint8_t *smem = planes_smem;
  int16_t *list = reinterpret_cast<int16_t *>(smem + LIST);
  const int c = (int)a.c, k = (int)a.k, hw = (int)(a.h * a.wd), q = (int)a.q;
  int64_t tile_np;
  const int ptiles = (int)aq_conv2d_bf16_planes_tiles(&a, &tile_np), np = (int)tile_np, pq_all = (int)(a.p * a.q);
  /* A thread's im2col units: channel pair cp of positions pos0 and pos0 + NP / 2, every stage. */
  const int cp = threadIdx.x % (KC / 2), pos0 = threadIdx.x / (KC / 2);
  int off[2][TAPS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = (warp & 1) * 16 * MI, wn = (warp >> 1) * 8 * NI;
  const int steps = (c + KC - 1) / KC, ktiles = (k + KT - 1) / KT;
  const uint32_t base = tc::smem_addr(smem), tbase = base + TS;
  int n = 0, k0 = 0, p0 = 0, pq = 0; /* the item: its image, filters k0.., positions p0.. (pq of them) */
  auto stage = [&](int kt) {
    stage_w(a, base + kt % STAGES * W_BYTES, k0, kt * KC);
    const int e = (n * c + kt * KC) * hw; /* the stage's planes: one run */
    conv_col::stage_run<THREADS>(base + X_AT + kt % 2 * RAW_BYTES, (const uint16_t *)a.x, e, e + min(KC, c - kt * KC) * hw);
  };
  auto im2col = [&](int kt) {
    const uint16_t *xs = reinterpret_cast<const uint16_t *>(smem + X_AT + kt % 2 * RAW_BYTES) + (((n * c + kt * KC) * hw) & 7);
    uint32_t *t = reinterpret_cast<uint32_t *>(smem + TS + kt % 2 * T_BYTES);
    const bool on0 = kt * KC + 2 * cp < c, on1 = kt * KC + 2 * cp + 1 < c;
#pragma unroll
    for (int u = 0; u < 2; ++u) put_pair(t + ((pos0 + u * NP / 2) * ROW + cp * 2 * TAPS) / 2, xs, off[u], hw, cp, on0, on1);
  };
  for (int64_t item = grid_block(); item < a.n * ptiles * ktiles; item += grid_blocks()) {
    const int64_t image = item / ktiles; /* an image's tiles of positions, each's tiles of filters in turn */
    n = (int)(image / ptiles), p0 = (int)(image % ptiles) * np, pq = min(np, pq_all - p0), k0 = (int)(item % ktiles) * KT;
    __syncthreads(); /* the previous item is done with the stages and the list */
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < steps) stage(i);
      conv::stage_commit();
    }
    for (int i = threadIdx.x; i < NP * TAPS; i += THREADS) { /* a position's taps: offsets in its plane, -1 outside */
      const int pos = i / TAPS, t = i - pos * TAPS, p = (p0 + pos) / q, y = p * a.stride_h - a.pad_h + t / 3 * a.dil_h,
                x = (p0 + pos - p * q) * a.stride_w - a.pad_w + t % 3 * a.dil_w;
      list[i] = (int16_t)(pos < pq && y >= 0 && y < a.h && x >= 0 && x < a.wd ? y * a.wd + x : -1);
    }
    conv::stage_wait<STAGES - 2>();
    __syncthreads();
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int t = 0; t < TAPS; ++t) off[u][t] = list[(pos0 + u * NP / 2) * TAPS + t];
    im2col(0);
    float acc[MI][NI][4] = {};
    for (int it = 0; it < steps; ++it) {
      conv::stage_wait<STAGES - 3>(); /* stage it + 1 is in */
      __syncthreads(); /* for everyone; stage it - 1 and its im2col are read */
      if (it + STAGES - 1 < steps) stage(it + STAGES - 1);
      conv::stage_commit();
      if (it + 1 < steps) im2col(it + 1);
      if (wn < pq) products(acc, base + it % STAGES * W_BYTES, tbase + it % 2 * T_BYTES, wm, wn, lane, pq);
    }
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    float *y = a.y + ((int64_t)n * k + k0) * pq_all + p0;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int kk = wm + mi * 16 + g + h * 8;
        if (k0 + kk >= k) continue;
        const float b = a.bias ? __ldg(a.bias + k0 + kk) : 0.0f;
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int pos = wn + ni * 8 + t2 + e;
            if (pos < pq) y[kk * pq_all + pos] = acc[mi][ni][h * 2 + e] + b;
          }
      }
  }
  conv::stage_wait<0>();
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return aq_conv2d_bf16_planes_fits(&a) && !(((uintptr_t)a.w | (uintptr_t)a.x) & 15) && block_threads() == THREADS &&
         conv::dynamic_smem() >= AQ_GPU_CONV2D_PLANES_BYTES;
}

}  // namespace conv_planes_bf16
#endif  // !AQ_HIP

// Two blocks an SM: at most 128 registers a thread.
AQ_KERNEL void __launch_bounds__(AQ_GPU_BLOCK, 2) aq_conv2d_bf16_planes(aq_conv2d_args_t a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_planes_bf16::applies(a)) return conv_planes_bf16::run(a);
#endif
  conv::forward(a, (const uint16_t *)a.x, (const uint16_t *)a.w);
}
