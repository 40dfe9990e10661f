// fp32 products on tensor cores at fp32 accuracy (3xTF32), the building
// blocks matmul_x3.cu and conv2d_x3.cu share: operand tiles staged in shared
// memory as rows of 32 k (padded to LDK floats) or, for matmul_x3's
// m/n-contiguous operands, 32 rows of 64 (padded to LDM).
//
// A TF32 tensor-core product keeps 11 of a float's 24 significant bits, so
// on its own it is not an fp32 product. Split each operand x into a big part
// hi = tf32(x) and a small one lo = x - hi (exact in fp32), which the tensor
// cores read to TF32's 11 bits: x = hi + lo to 23 bits or so, and
// a * b = a.hi*b.hi + a.hi*b.lo + a.lo*b.hi up to the dropped a.lo*b.lo and
// lo's lost bits, about 2^-22 of each term, where one fp32 rounding is
// 2^-24: over k terms the sums' own rounding is of the same order. Three
// mma.sync a step, accumulated in fp32, smaller terms first.
// NVIDIA only: under HIP none of this exists.
#pragma once
#include "common.cuh"

#if !defined(AQ_HIP)
namespace tf32x3 {

constexpr int LDK = 32 + 4, LDM = 64 + 8; /* row strides of k-contiguous / m,n-contiguous slices */

// x = hi + lo: hi is x rounded to TF32's 19 bits (to nearest, ties away,
// as cvt.rna would, but in two integer operations: the conversion
// instruction runs at a fraction of the ALU's rate, and bound a version of
// the matmul that used it at FFMA's speed), lo = x - hi exactly, whose low
// bits the tensor cores drop, as they drop any TF32 operand's. An infinite
// or NaN x keeps lo = 0 (x - hi would be NaN), so infinities come out as
// FFMA's would. (A finite x within half a TF32 step of FLT_MAX rounds to
// infinity: 3.4e38, past any value a training step meets.)
__device__ __forceinline__ void split(float x, uint32_t &hi, uint32_t &lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  const float r = x - __uint_as_float(hi);
  lo = r == r ? __float_as_uint(r) : 0u;
}

// d += a * b on a 16x8x8 tile.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp's 8-deep step at k offset kk of a slice: its 32x32 piece at
// (wm, wn), as 2 x 4 tiles of m16n8. sa holds A's slice, sb B's: k-
// contiguous rows of LDK (ta / tb false / true), or m / n-contiguous rows
// of LDM. Fragment element (row, k) of A sits at row g (+8) and k t (+4) of
// the tile, B's (k, col) at k t (+4) and column g, where g = lane / 4 and
// t = lane % 4 (PTX's m16n8k8 layout). Either layout puts the 32 lanes of a
// fragment load in 32 distinct banks.
__device__ __forceinline__ void warp_step(float (&acc)[2][4][4], const float *sa, const float *sb, bool ta, bool tb,
                                          int wm, int wn, int kk, int lane) {
  const int g = lane >> 2, t = lane & 3;
  uint32_t bh[4][2], bl[4][2];
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = wn + ni * 8 + g, k = kk + t + j * 4;
      split(tb ? sb[n * LDK + k] : sb[k * LDM + n], bh[ni][j], bl[ni][j]);
    }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) { /* A's fragments one m16 tile at a time: fewer registers live */
    uint32_t ah[4], al[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = wm + mi * 16 + g + (j & 1) * 8, k = kk + t + (j >> 1) * 4;
      split(ta ? sa[k * LDM + r] : sa[r * LDK + k], ah[j], al[j]);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      mma(acc[mi][ni], al, bh[ni]);
      mma(acc[mi][ni], ah, bl[ni]);
      mma(acc[mi][ni], ah, bh[ni]);
    }
  }
}

}  // namespace tf32x3
#endif  // !AQ_HIP
