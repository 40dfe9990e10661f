// aq_conv2d_bwd_data_f32_col: fp32's backward data by columns where dy's
// planes are small, in FFMA (exact fp32 products, either precision;
// conv2d_col.cuh: the scheme; launch.h: aq_conv2d_col_fits says where it
// applies).
//
// The FFMA and 3xTF32 tiles (conv2d_ffma.cu, conv2d_x3.cu) run a strided
// backward data a GEMM a phase, gathering both operands an element at a
// time. Here D's rows (the tile's (c, r, s)) are w's rows as they lie, 16
// rows k a stage (16-byte copies), and dy's 16 rows of the image are
// copied an element at a time into rows of NP floats (4-byte copies: a row
// of p q floats starts anywhere). A thread takes 72 of D's entries: rows
// 32 i + 2 ty + {0, 1} (i < 9) by positions 4 tx.. 4 tx + 3, so that a
// row k costs it nine 8-byte and one 16-byte shared loads for 72 FMAs (a
// warp's: 2 rows' pairs and 16 positions' quads). Sums run over k in order.
#include "conv2d_col.cuh"

#ifndef AQ_HIP
namespace conv_col_f32 {

using namespace conv_col;
constexpr int THREADS = AQ_GPU_CONV2D_COL_F32_THREADS, WARPS = THREADS / 32;
constexpr int KS = 16, STAGES = 4;          /* rows k a stage; copies in flight two stages ahead */
constexpr int RI = ROWS / 32;               /* a thread's row pairs, 32 rows apart */
constexpr int W_BYTES = KS * ROWS * 4, B_BYTES = KS * NP * 4, STAGE = W_BYTES + B_BYTES;
constexpr int LISTS = D_BYTES > STAGES * STAGE ? D_BYTES : STAGES * STAGE; /* D reuses the stages */
static_assert(THREADS == 256 && NP == 64 && ROWS % 32 == 0, "16 x 16 threads: 2 rows x 4 positions each, RI times");
static_assert(LISTS + LIST_BYTES <= AQ_GPU_CONV2D_COL_F32_BYTES, "launch.h's group segment");

// dy's rows k0.. of the image into rows of NP floats, a copy an element
// (zeros past k; positions past p q are left, their columns of D unused).
__device__ __forceinline__ void stage_dy(const aq_conv2d_args_t &a, const Job &jb, float *b, int k0) {
  const float *dy = a.dy + ((int64_t)jb.n * jb.k + k0) * jb.pq;
  for (int i = threadIdx.x; i < KS * jb.pq; i += THREADS) {
    const int kk = i / jb.pq, pos = i - kk * jb.pq;
    const bool on = k0 + kk < jb.k;
    conv::stage_one(b + kk * NP + pos, on ? dy + i : a.dy, on);
  }
}

// One stage's products into the thread's 72 entries: every row pair, as
// a branch a pair cost more than the pairs past a smaller filter's rows
// (their entries, from rows no copy wrote, are never read).
__device__ __forceinline__ void products(float (&acc)[RI][2][4], const float *ws, const float *bs) {
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  ws += ty * 2, bs += tx * 4;
#pragma unroll 2
  for (int kk = 0; kk < KS; ++kk) {
    const float4 b = *reinterpret_cast<const float4 *>(bs + kk * NP);
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const float2 w = *reinterpret_cast<const float2 *>(ws + kk * ROWS + i * 32);
      acc[i][0][0] = fmaf(w.x, b.x, acc[i][0][0]), acc[i][0][1] = fmaf(w.x, b.y, acc[i][0][1]);
      acc[i][0][2] = fmaf(w.x, b.z, acc[i][0][2]), acc[i][0][3] = fmaf(w.x, b.w, acc[i][0][3]);
      acc[i][1][0] = fmaf(w.y, b.x, acc[i][1][0]), acc[i][1][1] = fmaf(w.y, b.y, acc[i][1][1]);
      acc[i][1][2] = fmaf(w.y, b.z, acc[i][1][2]), acc[i][1][3] = fmaf(w.y, b.w, acc[i][1][3]);
    }
  }
}

extern __shared__ __align__(16) uint8_t col_f32_smem[];

__device__ void run(const aq_conv2d_args_t &a) {
  uint8_t *smem = col_f32_smem, *cnt = smem + LISTS;
  int16_t *offs = reinterpret_cast<int16_t *>(cnt + PLANE);
  make_lists<THREADS>(a, cnt, offs);
  Job jb(a, KS);
  const int ctiles = jb.tiles(), ri = jb.rows / 32, tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  auto stage = [&](int kt) {
    const uint32_t st = base + kt % STAGES * STAGE;
    stage_w<float, KS, ROWS, WARPS>(a, jb, st, kt * KS);
    stage_dy(a, jb, reinterpret_cast<float *>(smem + kt % STAGES * STAGE + W_BYTES), kt * KS);
  };
  for (int64_t item = grid_block(); item < a.n * ctiles; item += grid_blocks()) {
    begin_item<STAGES>(jb, item, ctiles, stage);
    float acc[RI][2][4] = {};
    for (int it = 0; it < jb.steps; ++it) {
      conv::stage_wait<STAGES - 2>(); /* stage it is in */
      __syncthreads();                /* for everyone; stage it - 1 is read */
      if (it + STAGES - 1 < jb.steps) stage(it + STAGES - 1);
      conv::stage_commit();
      const float *st = reinterpret_cast<const float *>(smem + it % STAGES * STAGE);
      products(acc, st, st + W_BYTES / 4);
    }
    conv::stage_wait<0>();
    __syncthreads(); /* the stages are free for D */
    float *d = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int i = 0; i < RI; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (i < ri)
          *reinterpret_cast<float4 *>(d + (i * 32 + ty * 2 + j) * DS + tx * 4) =
              make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
    __syncthreads();
    col2im<THREADS>(a, jb, d, cnt, offs);
  }
}

__device__ inline bool applies(const aq_conv2d_args_t &a) {
  return aq_conv2d_col_fits(&a, 4) && !((uintptr_t)a.w & 15) && !((uintptr_t)a.dy & 3) && block_threads() == THREADS &&
         conv::dynamic_smem() >= AQ_GPU_CONV2D_COL_F32_BYTES;
}

}  // namespace conv_col_f32
#endif  // !AQ_HIP

// Two blocks an SM: at most 128 registers a thread.
AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_COL_F32_THREADS, 2) aq_conv2d_bwd_data_f32_col(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
#ifndef AQ_HIP
  if (conv_col_f32::applies(a)) return conv_col_f32::run(a);
#endif
  conv::backward_data(a, a.w, a.dy);
}
