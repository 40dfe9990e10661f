// aq_conv2d_bwd_data_bf16_col: bf16's backward data by columns where dy's
// planes are small (a ResNet's last stages and the strided layers into
// them), on tensor cores (conv2d_col.cuh: the scheme; launch.h:
// aq_conv2d_col_fits says where it applies).
//
// The implicit GEMM's backward data (conv2d_bf16.cu) runs a GEMM a phase of
// a strided dx and gathers both of its operands an element at a time: dy
// along its depth k is strided by p q, w by c r s. Here D's rows (the tile's
// (c, r, s)) come from w's staged rows through ldmatrix.trans, and 32 rows
// k of the image's dy, copied as one run of memory, are put position-major
// for ldmatrix (a warp of 3 m16 tiles of D's rows by every position).
#include "conv2d_col.cuh"
#include "mma_bf16.cuh"

#ifndef AQ_HIP
namespace conv_col_bf16 {

using namespace conv_col;
constexpr int THREADS = AQ_GPU_CONV2D_COL_BF16_THREADS, WARPS = THREADS / 32;
constexpr int NI = NP / 8, MI = ROWS / 16 / WARPS; /* a warp's n8 tiles of positions, m16 tiles of D's rows */
constexpr int KS = 32, STAGES = 4;                 /* depth a stage; copies in flight two stages ahead */
/* A staged row of w: ROWS elements and 16 bytes more, so that ldmatrix's
 * eight rows (296 elements apart) fall in eight bank groups. */
constexpr int WROW = ROWS + 8, W_BYTES = KS * WROW * 2;
constexpr int RAW_BYTES = (KS * NP + 8) * 2; /* dy's run, from the 16-byte boundary below it */
constexpr int STAGE = W_BYTES + RAW_BYTES, T_BYTES = NP * KS * 2;
constexpr int MAIN = STAGES * STAGE + 2 * T_BYTES; /* the stages, and dy position-major twice */
constexpr int LISTS = D_BYTES > MAIN ? D_BYTES : MAIN; /* D reuses the stages */
static_assert(ROWS % (16 * WARPS) == 0 && NP % 16 == 0 && WROW % 8 == 0 && THREADS % 16 == 0, "whole tiles, 16-byte rows");
static_assert((WROW / 2) % 8 == 4, "ldmatrix.trans's rows of w in distinct bank groups");
static_assert(STAGE % 16 == 0 && T_BYTES % 16 == 0, "16-byte copies");
static_assert(LISTS + LIST_BYTES <= AQ_GPU_CONV2D_COL_BF16_BYTES, "launch.h's group segment");

// The run of rows k0.. (raw) position-major into t: a position's 32 k in
// four swizzled 16-byte chunks (mma_bf16.cuh's k-major rows), zeros past k
// and past the plane. A thread a pair of rows k, positions 12 apart.
__device__ __forceinline__ void transpose(const Job &jb, const uint8_t *raw, uint8_t *t, int k0, int nf) {
  const int off = ((jb.n * jb.k + k0) * jb.pq) & 7, kp = threadIdx.x & 15, kn = jb.k - k0;
  const uint16_t *r0 = reinterpret_cast<const uint16_t *>(raw) + off + kp * 2 * jb.pq, *r1 = r0 + jb.pq;
  const bool on0 = kp * 2 < kn, on1 = kp * 2 + 1 < kn;
  uint8_t *tt = t + (kp & 3) * 4;
  for (int pos = threadIdx.x >> 4; pos < nf * 8; pos += THREADS / 16) {
    const bool on = pos < jb.pq;
    const uint32_t lo = on && on0 ? r0[pos] : 0, hi = on && on1 ? r1[pos] : 0;
    *reinterpret_cast<uint32_t *>(tt + tc::off_kmajor(pos, kp >> 2)) = lo | hi << 16;
  }
}

// One stage's products: the warp's MI m16 tiles of D's rows (w's staged
// rows through ldmatrix.trans) by nf n8 tiles of positions.
__device__ __forceinline__ void products(float (&acc)[MI][NI][4], uint32_t ws, uint32_t ts, int warp, int lane, int nf) {
  const int l8 = lane & 7, mat = lane >> 3;
#pragma unroll
  for (int ks = 0; ks < KS / 16; ++ks) {
    uint32_t af[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) /* matrices (rows 0-7, 8-15) x (k 0-7, 8-15), rows along a staged row */
      tc::ldsm_x4_trans(ws + ((ks * 16 + (mat >> 1) * 8 + l8) * WROW + (warp * MI + mi) * 16 + (mat & 1) * 8) * 2, af[mi]);
#pragma unroll
    for (int np = 0; np < NI / 2; ++np) {
      if (2 * np >= nf) break;
      uint32_t bf[4]; /* n8 tiles 2np and 2np + 1, k 0-7 and 8-15 each */
      tc::ldsm_x4(ts + tc::off_kmajor((2 * np + (mat >> 1)) * 8 + l8, ks * 2 + (mat & 1)), bf);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        tc::mma(acc[mi][2 * np], af[mi], bf[0], bf[1]);
        if (2 * np + 1 < nf) tc::mma(acc[mi][2 * np + 1], af[mi], bf[2], bf[3]);
      }
    }
  }
}

// The warp's sums into D (rows of DS floats).
__device__ __forceinline__ void put_d(const float (&acc)[MI][NI][4], float *d, int warp, int lane, int nf) {
  const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      if (ni >= nf) break;
      float *at = d + ((warp * MI + mi) * 16 + g) * DS + ni * 8 + t2;
      *reinterpret_cast<float2 *>(at) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2 *>(at + 8 * DS) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
}

extern __shared__ __align__(16) uint8_t col_smem[];

__device__ void run(const aq_conv2d_args_t &a) {
  uint8_t *smem = col_smem, *cnt = smem + LISTS, *tbuf = smem + STAGES * STAGE;
  int16_t *offs = reinterpret_cast<int16_t *>(cnt + PLANE);
  make_lists<THREADS>(a, cnt, offs);
  Job jb(a, KS);
  const int ctiles = jb.tiles(), nf = (jb.pq + 7) / 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t base = tc::smem_addr(smem);
  const bool busy = warp * MI * 16 < jb.rows; /* a filter of fewer taps leaves warps without rows */
  auto stage = [&](int kt) {
    const uint32_t st = base + kt % STAGES * STAGE;
    stage_w<uint16_t, KS, WROW, WARPS>(a, jb, st, kt * KS);
    const int e = jb.n * jb.k + kt * KS; /* dy's rows k0.. of the image: one run */
    stage_run<THREADS>(st + W_BYTES, (const uint16_t *)a.dy, e * jb.pq, min(e + KS, (jb.n + 1) * jb.k) * jb.pq);
  };
  for (int64_t item = grid_block(); item < a.n * ctiles; item += grid_blocks()) {
    begin_item<STAGES>(jb, item, ctiles, stage);
    conv::stage_wait<STAGES - 2>();
    __syncthreads();
    transpose(jb, smem + W_BYTES, tbuf, 0, nf);
    float acc[MI][NI][4] = {};
    for (int it = 0; it < jb.steps; ++it) {
      conv::stage_wait<STAGES - 3>(); /* stage it + 1 is in */
      __syncthreads(); /* for everyone; stage it - 1 and its dy are read */
      if (it + STAGES - 1 < jb.steps) stage(it + STAGES - 1);
      conv::stage_commit();
      if (it + 1 < jb.steps)
        transpose(jb, smem + (it + 1) % STAGES * STAGE + W_BYTES, tbuf + (it + 1) % 2 * T_BYTES, (it + 1) * KS, nf);
      if (busy) products(acc, base + it % STAGES * STAGE, base + STAGES * STAGE + it % 2 * T_BYTES, warp, lane, nf);
    }
    conv::stage_wait<0>();
    __syncthreads(); /* the stages are free for D */
    if (busy) put_d(acc, reinterpret_cast<float *>(smem), warp, lane, nf);
    __syncthreads();
    col2im<THREADS>(a, jb, reinterpret_cast<const float *>(smem), cnt, offs);
  }
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return aq_conv2d_col_fits(&a, 2) && !(((uintptr_t)a.w | (uintptr_t)a.dy) & 15) && block_threads() == THREADS &&
         conv::dynamic_smem() >= AQ_GPU_CONV2D_COL_BF16_BYTES;
}

}  // namespace conv_col_bf16
#endif  // !AQ_HIP

// Two blocks an SM: at most 168 registers a thread.
AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_COL_BF16_THREADS, 2) aq_conv2d_bwd_data_bf16_col(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_col_bf16::applies(a)) return conv_col_bf16::run(a);
#endif
  conv::backward_data(a, (const uint16_t *)a.w, (const uint16_t *)a.dy);
}
