// bf16 tensor-core building blocks (sm_80's mma.sync m16n8k16 and ldmatrix,
// which sm_90 also runs) for kernels that stage k-major operand tiles in
// shared memory: rows of 32 bf16 (64 bytes, four 16-byte chunks), XOR-
// swizzled by chunk. The same layout and fragment order as matmul_bf16.cu's
// k-major case, which has its own copies of these. NVIDIA only: under HIP
// (AQ_HIP) none of this exists and the kernels take their exact paths.
#pragma once
#include "common.cuh"

#ifndef AQ_HIP
namespace tc {

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Byte offset of 16-byte chunk `ch` (k = 8ch..8ch+7) of row `row` in a
// k-major tile. The swizzle puts the 8 rows an ldmatrix phase reads, and the
// 8 chunks a quarter-warp stores (8 rows at one chunk, or 2 rows at all
// four), in 8 different bank groups.
__device__ __forceinline__ uint32_t off_kmajor(int row, int ch) { return row * 64 + ((ch ^ ((row >> 1) & 3)) << 4); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two 8x8 matrices (lanes 0-15's rows): one n8 tile's B fragment.
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// The same, each 8x8 matrix transposed: rows of 16 bytes in memory become
// columns of the fragment (an operand stored the other way round).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b on one 16x8x16 tile, fp32 accumulators. Not volatile: a pure
// function of its registers, free to move among the ldmatrix around it.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A warp's fragments of one 16-deep step: rows `r0`..`r0+16MI-1` of the
// k-major tile at `ta` (m16 A tiles) against columns `c0`..`c0+8NI-1` of the
// tile at `tb` (n8 B tiles), chunk pair `ks` (k = 16ks..16ks+15), added into
// acc[MI][NI].
template <int MI, int NI>
__device__ __forceinline__ void warp_step(float (&acc)[MI][NI][4], uint32_t ta, uint32_t tb, int r0, int c0, int ks,
                                          int lane) {
  static_assert(NI % 2 == 0, "B fragments come in pairs of n8 tiles");
  const int l8 = lane & 7, l3 = (lane >> 3) & 1, l4 = lane >> 4;
  uint32_t bf[NI / 2][4];
#pragma unroll
  for (int nj = 0; nj < NI / 2; ++nj) ldsm_x4(tb + off_kmajor(c0 + nj * 16 + l8 + l4 * 8, ks * 2 + l3), bf[nj]);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    uint32_t af[4];
    ldsm_x4(ta + off_kmajor(r0 + mi * 16 + l8 + l3 * 8, ks * 2 + l4), af);
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) mma(acc[mi][ni], af, bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
  }
}

}  // namespace tc
#endif  // !AQ_HIP
