// conv2d's passes as implicit GEMMs: the index map of each pass, the
// gathers of 16-byte chunks of either operand, where a row of C goes, and
// the walk of a strided backward data's phases. Thread-level code only
// (no shared memory of its own, no warp collectives), so that a host
// build checks the maps against a plain convolution (tests/unit/
// conv_gemm_maps.cc); conv2d_gemm.cuh holds the block-level parts.
//
// A pass is C[rows x cols] = A[rows x depth] * B[cols x depth]^T:
//           rows     cols  depth    A (gathered)         B (runs along depth)
//  forward  (n,p,q)  k     (c,r,s)  x through im2col     w[k][c,r,s]
//  bwd data (n,h,w)  c     (k,r,s)  dy through col2im    w[k][c][r,s]
//  bwd filt (c,r,s)  k     (n,p,q)  x through im2col     dy[n][k][p,q]
// Neither operand is materialised. A strided backward data is one GEMM a
// phase of dx (launch.h, aq_conv2d_phase): its rows are the phase's
// positions, its depth the taps that reach them. A chunk is 16 bytes of
// consecutive depth of one row or column: 8 bf16 (E = uint16_t) or 4
// floats. The gather's index map: A's element (row, depth (i0,i1,i2)) is
// a[base + i0 step0 + y aw + z] with (base, y0, z0) per row (row_base),
// y = y0 + i1 step1 and z = z0 + i2 step2, zero outside [0,ah) x [0,aw).
// B's runs are contiguous but in a phase, so a chunk is one 16-byte load
// where runs are multiples of a chunk and aligned. A bf16 backward filter
// at stride 1 along rows pads its depth's rows (q) to whole chunks (qrow), so
// that a chunk of either operand lies in one row of x or dy: one or two
// aligned 16-byte loads, shifted and masked, rather than a load an element.
// The depth's divisions are by multiply and shift (Div). Indices are
// 32-bit (fits32): larger tensors take the direct loops.
#pragma once
#include <stdint.h>

#include "launch.h"

namespace conv_gemm {

// x / d for 0 <= x < 2^31 as a multiply and a shift (Granlund and
// Montgomery's, as CUTLASS's FastDivmod): the depth's divisors are known
// per pass, the divisions done per chunk.
struct Div {
  int d;
  uint32_t mul, shr; /* mul 0: d is 1 */
};
// mul = ceil(2^(31+l) / d), l = ceil(log2 d). One thread of each block
// makes the pass's Divs while the others wait, so not by a 64-bit integer
// division (a long subroutine on GPUs): a double's quotient, within one of
// the floor, corrected by the remainder.
__host__ __device__ inline Div make_div(int d) {
  Div v = {d, 0, 0};
  if (d <= 1) return v;
  uint32_t l = 0;
  while ((1u << l) < (uint32_t)d) ++l;
  const uint64_t num = 1ull << (31 + l), ud = (uint64_t)d;
  uint64_t q = (uint64_t)((double)num / (double)d); /* < 2^32, the floor's error under 2^-21 */
  const int64_t rem = (int64_t)(num - q * ud);
  q = rem < 0 ? q - 1 : rem >= (int64_t)ud ? q + 1 : q; /* the floor */
  v.mul = (uint32_t)(q * ud == num ? q : q + 1), v.shr = l - 1;
  return v;
}
__device__ __forceinline__ int operator/(int x, const Div &v) {
  return v.mul ? (int)(__umulhi((uint32_t)x, v.mul) >> v.shr) : x;
}

template <class E>
struct Gemm {
  static constexpr int CHUNK = 16 / sizeof(E); /* elements a 16-byte chunk */
  int rows, cols, depth;
  int rd1, rd2, rbase, rmul1, radd1, rmul2, radd2; /* row = (j0 rd1 + j1) rd2 + j2 -> base j0 rbase, y0, z0 */
  Div d1, d2;                                      /* depth = (i0 d1 + i1) d2 + i2 -> A's element: */
  int step0, step1, step2, ah, aw;                 /* a[base + i0 step0 + y aw + z], y, z from i1, i2 */
  int qrow; /* > 0: the backward filter's rows of q (d2 that padded to whole chunks), q */
  /* B's element (col, d = j run + i1 bd2 + i2) = b[col bcol + j outer + boff + i1 bs1 + i2 bs2] */
  Div run;
  int outer, bcol, boff, bd2, bs1, bs2;
  /* C's (row, col) = out[img cols plane + col plane + ooff + jh oh + jw ow], row = img rplane + jh rd2 + jw */
  int plane, rplane, ooff, oh, ow;
  Div rpl, rq; /* rplane and rd2, for C's rows: a division an output element otherwise */
  bool bvec;
  const E *a, *b;
  float *out;
  const float *bias;
};

__device__ inline bool fits32(const aq_conv2d_args_t &a) { return aq_conv2d_fits32(&a); }

// Pass 0, 1 or 2 (a strided backward data's phase 0: see make_phase).
template <class E>
__device__ inline Gemm<E> make_gemm(const aq_conv2d_args_t &a, int pass) {
  const int n = (int)a.n, c = (int)a.c, h = (int)a.h, w = (int)a.wd, k = (int)a.k, r = (int)a.r, s = (int)a.s;
  const int p = (int)a.p, q = (int)a.q;
  Gemm<E> g;
  g.bias = NULL, g.qrow = 0;
  if (pass == 0) {
    g.rows = n * p * q, g.cols = k, g.depth = c * r * s;
    g.rd1 = p, g.rd2 = q, g.rbase = c * h * w, g.rmul1 = a.stride_h, g.radd1 = -a.pad_h, g.rmul2 = a.stride_w,
    g.radd2 = -a.pad_w;
    g.d1 = make_div(r), g.d2 = make_div(s), g.step0 = h * w, g.step1 = a.dil_h, g.step2 = a.dil_w, g.ah = h, g.aw = w;
    g.run = make_div(c * r * s), g.outer = 0, g.plane = p * q;
    g.a = (const E *)a.x, g.b = (const E *)a.w, g.out = a.y, g.bias = a.bias;
  } else if (pass == 1) {
    g.rows = n * h * w, g.cols = c, g.depth = k * r * s;
    g.rd1 = h, g.rd2 = w, g.rbase = k * p * q, g.rmul1 = 1, g.radd1 = a.pad_h, g.rmul2 = 1, g.radd2 = a.pad_w;
    g.d1 = make_div(r), g.d2 = make_div(s), g.step0 = p * q, g.step1 = -a.dil_h, g.step2 = -a.dil_w, g.ah = p, g.aw = q;
    g.run = make_div(r * s), g.outer = c * r * s, g.plane = h * w;
    g.a = (const E *)a.dy, g.b = (const E *)a.w, g.out = a.dx;
  } else {
    /* At stride 1 along rows, bf16's q padded to whole chunks (qrow): fp32's
     * chunks of 4 measured faster as elements, the kernel's registers held
     * for the x3 sums rather than for two 16-byte loads a chunk. */
    const int qc = (q + Gemm<E>::CHUNK - 1) / Gemm<E>::CHUNK * Gemm<E>::CHUNK; /* the padding's depth in 32 bits */
    const bool qrow = a.stride_w == 1 && sizeof(E) == 2 && (int64_t)n * p * qc < INT32_MAX;
    const int qd = qrow ? qc : q;
    g.rows = c * r * s, g.cols = k, g.depth = n * p * qd;
    g.rd1 = r, g.rd2 = s, g.rbase = h * w, g.rmul1 = a.dil_h, g.radd1 = -a.pad_h, g.rmul2 = a.dil_w, g.radd2 = -a.pad_w;
    g.d1 = make_div(p), g.d2 = make_div(qd), g.step0 = c * h * w, g.step1 = a.stride_h, g.step2 = a.stride_w;
    g.ah = h, g.aw = w, g.qrow = qrow ? q : 0;
    g.run = make_div(p * q), g.outer = k * p * q, g.plane = c * r * s;
    g.a = (const E *)a.x, g.b = (const E *)a.dy, g.out = a.dw;
  }
  g.bcol = g.bd2 = g.run.d, g.boff = 0, g.bs1 = 0, g.bs2 = 1;
  g.rplane = g.plane, g.ooff = 0, g.oh = 0, g.ow = 1;
  g.rpl = make_div(g.rplane), g.rq = make_div(g.rd2);
  g.bvec = g.run.d % Gemm<E>::CHUNK == 0 && ((uintptr_t)g.b & 15) == 0;
  return g;
}

// A strided backward data's phase ph (of stride_h x stride_w, row-major):
// dx's positions (hh stride_h + ph / stride_w, ww stride_w + ph %
// stride_w), the taps that reach them.
template <class E>
__device__ inline Gemm<E> make_phase(const aq_conv2d_args_t &a, int ph) {
  Gemm<E> g = make_gemm<E>(a, 1);
  const aq_conv2d_phase_t th = aq_conv2d_phase(a.h, a.r, a.stride_h, a.pad_h, a.dil_h, ph / a.stride_w),
                          tw = aq_conv2d_phase(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w, ph % a.stride_w);
  g.rows = (int)a.n * th.outs * tw.outs, g.depth = (int)a.k * th.count * tw.count;
  g.rd1 = th.outs, g.rd2 = tw.outs, g.radd1 = th.add, g.radd2 = tw.add;
  g.d1 = make_div(th.count), g.d2 = make_div(tw.count), g.step1 = -th.dstep, g.step2 = -tw.dstep;
  g.run = make_div(th.count * tw.count), g.bcol = (int)(a.r * a.s), g.boff = th.first * (int)a.s + tw.first;
  g.bd2 = tw.count, g.bs1 = th.step * (int)a.s, g.bs2 = tw.step, g.bvec = false;
  g.rplane = th.outs * tw.outs, g.ooff = (ph / a.stride_w) * (int)a.wd + ph % a.stride_w;
  g.rpl = make_div(g.rplane), g.rq = make_div(g.rd2);
  g.oh = a.stride_h * (int)a.wd, g.ow = a.stride_w;
  return g;
}

// A row's gather base: (offset of its image or channel, y0, z0, in range).
template <class E>
__device__ inline int4 row_base(const Gemm<E> &g, int row) {
  if (row >= g.rows) return make_int4(0, 0, 0, 0);
  const int t = row / g.rq, j2 = row - t * g.rd2, j0 = t / g.rd1, j1 = t - j0 * g.rd1;
  return make_int4(j0 * g.rbase, j1 * g.rmul1 + g.radd1, j2 * g.rmul2 + g.radd2, 1);
}

// Element e of a chunk, into the chunk's words.
__device__ __forceinline__ void put(uint32_t (&v)[4], int e, uint16_t x) { v[e >> 1] |= (uint32_t)x << (16 * (e & 1)); }
__device__ __forceinline__ void put(uint32_t (&v)[4], int e, float x) { v[e] = __float_as_uint(x); }

// A chunk of row[z..] (z may be negative) with its elements outside
// [lo, hi) zero, in two steps: start_run issues the loads of the one or
// two aligned 16-byte chunks that hold a kept element, finish shifts and
// masks them once they arrive, so that a kernel may multiply meanwhile.
// Reads nothing outside [row + lo, row + hi)'s aligned chunks, so nothing
// outside the tensor.
struct Run {
  uint4 lo, hi;
  uint32_t at; /* the chunk's first byte in lo, and its kept bytes: shift | first << 8 | end << 16 */
};

template <class E>
__device__ __forceinline__ Run start_run(const E *row, int z, int lo, int hi) {
  constexpr int CHUNK = 16 / sizeof(E), SZ = sizeof(E);
  const int e0 = lo - z > 0 ? lo - z : 0, e1 = hi - z < CHUNK ? hi - z : CHUNK;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if (e0 >= e1) return Run{zero, zero, 0};
  const uintptr_t u = (uintptr_t)row + (intptr_t)z * SZ;
  const uint4 *at = reinterpret_cast<const uint4 *>(u & ~(uintptr_t)15);
  const int sh = (int)(u & 15), b0 = e0 * SZ, b1 = e1 * SZ; /* kept bytes of the chunk */
  return Run{sh + b0 < 16 ? __ldg(at) : zero, sh + b1 > 16 ? __ldg(at + 1) : zero, (uint32_t)(sh | b0 << 8 | b1 << 16)};
}

__device__ __forceinline__ uint4 finish(uint4 v) { return v; }
__device__ __forceinline__ uint4 finish(const Run &r) {
  const uint32_t x[8] = {r.lo.x, r.lo.y, r.lo.z, r.lo.w, r.hi.x, r.hi.y, r.hi.z, r.hi.w};
  const int sh = r.at & 15, b0 = (r.at >> 8) & 31, b1 = r.at >> 16;
  /* The shift: by two words, by one, then the bytes within a word (selects
   * on the shift's bits rather than an indexed array, which would leave the
   * registers for local memory). */
  uint32_t w2[6], w1[5], v[4];
#pragma unroll
  for (int k = 0; k < 6; ++k) w2[k] = sh & 8 ? x[k + 2] : x[k];
#pragma unroll
  for (int k = 0; k < 5; ++k) w1[k] = sh & 4 ? w2[k + 1] : w2[k];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __funnelshift_r(w1[i], w1[i + 1], (sh & 3) * 8);
  if (b0 != 0 || b1 != 16) /* a chunk at a row's ends: word i keeps its bits [8 b0 - 32 i, 8 b1 - 32 i) */
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int lo = 8 * b0 - 32 * i, hi = 8 * b1 - 32 * i;
      v[i] &= __funnelshift_lc(~0u, 0u, hi > 0 ? hi : 0) & ~__funnelshift_lc(~0u, 0u, lo > 0 ? lo : 0);
    }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// A qrow pass's chunks of A (one row of x, its positions past q zero) and
// of B (one row of dy), started.
template <class E>
__device__ __forceinline__ Run start_a(const Gemm<E> &g, int4 rb, int d0) {
  const int t = d0 / g.d2, i0 = t / g.d1, y = rb.y + (t - i0 * g.d1.d) * g.step1;
  if (!rb.w || d0 >= g.depth || (unsigned)y >= (unsigned)g.ah) return start_run(g.a, 0, 0, 0);
  return start_run(g.a + rb.x + i0 * g.step0 + y * g.aw, rb.z + d0 - t * g.d2.d, 0,
                   rb.z + g.qrow < g.aw ? rb.z + g.qrow : g.aw);
}
template <class E>
__device__ __forceinline__ Run start_b(const Gemm<E> &g, int col, int d0) {
  const int t = d0 / g.d2, i0 = t / g.d1;
  if (col >= g.cols || d0 >= g.depth) return start_run(g.b, 0, 0, 0);
  return start_run(g.b + col * g.bcol + i0 * g.outer + (t - i0 * g.d1.d) * g.qrow, d0 - t * g.d2.d, 0, g.qrow);
}

// A's chunk of depth d0.. for the row whose base is rb.
template <class E>
__device__ __forceinline__ uint4 gather_a(const Gemm<E> &g, int4 rb, int d0) {
  if (g.qrow) return finish(start_a(g, rb, d0));
  uint32_t v[4] = {0, 0, 0, 0};
  if (rb.w && d0 < g.depth) {
    const int t = d0 / g.d2;
    int i2 = d0 - t * g.d2.d, i0 = t / g.d1, i1 = t - i0 * g.d1.d, off = rb.x + i0 * g.step0;
#pragma unroll
    for (int e = 0; e < Gemm<E>::CHUNK; ++e) {
      const int y = rb.y + i1 * g.step1, z = rb.z + i2 * g.step2;
      if (d0 + e < g.depth && (unsigned)y < (unsigned)g.ah && (unsigned)z < (unsigned)g.aw)
        put(v, e, __ldg(g.a + off + y * g.aw + z));
      if (++i2 == g.d2.d) {
        i2 = 0;
        if (++i1 == g.d1.d) i1 = 0, off += g.step0;
      }
    }
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// The same gather through a table of taps, for a kernel that keeps its
// rows in registers and builds its slices' taps once a block (conv2d_x3.cu):
// an element costs a tap's read, two bound checks and a load, where
// gather_a's walk over the depth's indices branches at every wrap.
// A depth index as a tap: its element's offset from the row's (ARow.base)
// and how far it moves y and z; past the depth, y moves out of every row.
struct Tap {
  int off, y, z, pad;
};
constexpr int TAP_OUT = -(1 << 29);
template <class E>
__device__ __forceinline__ Tap tap_of(const Gemm<E> &g, int d) {
  if (d >= g.depth) return Tap{0, TAP_OUT, 0, 0};
  const int t = d / g.d2, i2 = d - t * g.d2.d, i0 = t / g.d1, i1 = t - i0 * g.d1.d;
  const int y = i1 * g.step1, z = i2 * g.step2;
  return Tap{i0 * g.step0 + y * g.aw + z, y, z, 0};
}
// A row of A as gather_taps reads it (row_base's, with g's extents).
template <class E>
struct ARow {
  const E *a;
  int base, y, z, ah, aw;
};
template <class E>
__device__ __forceinline__ ARow<E> a_row(const Gemm<E> &g, int4 rb) {
  return ARow<E>{g.a, rb.x + rb.y * g.aw + rb.z, rb.w ? rb.y : TAP_OUT, rb.z, g.ah, g.aw};
}
template <class E>
__device__ __forceinline__ uint4 gather_taps(const ARow<E> &r, const Tap *t) {
  uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < Gemm<E>::CHUNK; ++e) {
    const Tap k = t[e];
    if ((unsigned)(r.y + k.y) < (unsigned)r.ah && (unsigned)(r.z + k.z) < (unsigned)r.aw) put(v, e, __ldg(r.a + r.base + k.off));
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// B's depth index as an offset from its column's first element (b_col),
// -1 past the depth: gather_b's map, a phase's or not (outside a phase bd2
// is the run and bs2 1), for gather_b_taps where B's chunks cross runs.
template <class E>
__device__ __forceinline__ int btap_of(const Gemm<E> &g, int d) {
  if (d >= g.depth) return -1;
  const int j = d / g.run, o = d - j * g.run.d, i1 = o / g.bd2;
  return j * g.outer + i1 * g.bs1 + (o - i1 * g.bd2) * g.bs2;
}
template <class E>
__device__ __forceinline__ const E *b_col(const Gemm<E> &g, int col) {
  return col < g.cols ? g.b + col * g.bcol + g.boff : NULL;
}
template <class E>
__device__ __forceinline__ uint4 gather_b_taps(const E *col, const int *t) {
  uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < Gemm<E>::CHUNK; ++e)
    if (col && t[e] >= 0) put(v, e, __ldg(col + t[e]));
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// B's chunk of depth d0.. for column col; PH: of a phase (make_phase),
// whose runs are strided.
template <bool PH, class E>
__device__ __forceinline__ uint4 gather_b(const Gemm<E> &g, int col, int d0) {
  if (!PH && g.qrow) return finish(start_b(g, col, d0));
  if (col >= g.cols || d0 >= g.depth) return make_uint4(0, 0, 0, 0);
  const int j = d0 / g.run;
  int o = d0 - j * g.run.d;
  uint32_t v[4] = {0, 0, 0, 0};
  if (PH) {
    const E *run = g.b + col * g.bcol + j * g.outer + g.boff;
    int i1 = o / g.d2, i2 = o - i1 * g.bd2; /* a phase's d2 divides by bd2 */
#pragma unroll
    for (int e = 0; e < Gemm<E>::CHUNK; ++e) {
      if (d0 + e < g.depth) put(v, e, __ldg(run + i1 * g.bs1 + i2 * g.bs2));
      if (++i2 == g.bd2) {
        i2 = 0;
        if (++i1 * g.bd2 == g.run.d) i1 = 0, run += g.outer;
      }
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
  }
  const E *b = g.b + col * g.run.d + j * g.outer + o;
  if (g.bvec) return __ldg(reinterpret_cast<const uint4 *>(b)); /* a chunk never crosses a run */
#pragma unroll
  for (int e = 0; e < Gemm<E>::CHUNK; ++e) {
    if (d0 + e < g.depth) put(v, e, __ldg(b));
    if (++o == g.run.d)
      o = 0, b += g.outer - g.run.d + 1;
    else
      ++b;
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// Where C's row r starts (its column 0); columns are plane apart. PH: a
// phase's row (make_phase).
template <bool PH, class E>
__device__ __forceinline__ int64_t row_at(const Gemm<E> &g, int r) {
  const int img = r / g.rpl, j = r - img * g.rplane; /* rplane is plane outside a phase */
  const int64_t o = (int64_t)img * g.cols * g.plane;
  if (!PH) return o + j;
  const int jh = j / g.rq;
  return o + g.ooff + jh * g.oh + (j - jh * g.rd2) * g.ow;
}

// C's element (row, col) of the tile at (row0, col0): its place in the
// output, or NULL past the edges (and past a tile of bm rows).
template <bool PH, class E>
__device__ __forceinline__ float *out_at(const Gemm<E> &g, int bm, int row0, int col0, int row, int col) {
  if (row >= bm || row0 + row >= g.rows || col0 + col >= g.cols) return NULL;
  return g.out + row_at<PH>(g, row0 + row) + (int64_t)(col0 + col) * g.plane;
}

// A strided backward data's tiles, phase after phase as launch.h counts
// them (aq_conv2d_gemm_tiles), grid-stride over them all (block of
// blocks); gs, in shared memory, holds the phase of the block's tiles.
// tile(row0, col0) takes one (every thread of the block calls it).
template <int BM, int BN, class E, class Tile>
__device__ void phases(const aq_conv2d_args_t &a, Gemm<E> &gs, int64_t block, int64_t blocks, Tile tile) {
  const int64_t tiles_n = (a.c + BN - 1) / BN;
  int64_t first = 0;
  for (int ph = 0; ph < a.stride_h && ph < a.h; ++ph)
    for (int pw = 0; pw < a.stride_w && pw < a.wd; ++pw) {
      const int64_t rows = a.n * aq_conv2d_phase(a.h, a.r, a.stride_h, a.pad_h, a.dil_h, ph).outs *
                           aq_conv2d_phase(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w, pw).outs;
      const int64_t tiles_m = (rows + BM - 1) / BM, end = first + tiles_m * tiles_n;
      int64_t id = first + ((block - first) % blocks + blocks) % blocks; /* the block's first of the phase */
      if (id < end) {
        __syncthreads(); /* the block is done with the previous phase */
        if (threadIdx.x == 0) gs = make_phase<E>(a, ph * a.stride_w + pw);
        __syncthreads();
        for (; id < end; id += blocks) tile((int)((id - first) % tiles_m) * BM, (int)((id - first) / tiles_m) * BN);
      }
      first = end;
    }
}

}  // namespace conv_gemm
