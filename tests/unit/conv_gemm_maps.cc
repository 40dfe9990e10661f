/* The GPU implicit GEMMs' index maps (kernels/cuda/conv2d_gemm_map.cuh),
 * built for the host: every pass of every case, fp32 chunks of 4 and bf16
 * chunks of 8, computed through the maps' gathers and write-back as a
 * plain GEMM, against a direct convolution; each output written once; the
 * chunks of A and B through taps (conv2d_x3.cu) the same as the gathers'; a
 * strided backward data through its phases, and the phases' tile walk
 * covering dx once over several grids with as many tiles as launch.h
 * counts. The tensor cores' arithmetic is the GPU suites'; the index maps,
 * where a wrong stride or a lost tap hides, run here without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "../conv_taps.h"
#include "cuda_host.h"
#include "kernels/cuda/conv2d_gemm_map.cuh"

using conv_gemm::Gemm;

typedef struct {
  int64_t n, c, h, w, k, r, s;
  int32_t sh, sw, ph, pw, dh, dw;
} map_case_t;

static const map_case_t cases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1},      {2, 3, 7, 9, 4, 3, 2, 2, 1, 1, 0, 1, 2},
    {3, 5, 33, 17, 7, 5, 5, 1, 1, 2, 2, 1, 1},    {2, 4, 12, 10, 3, 3, 3, 3, 2, 2, 1, 2, 1},
    {1, 3, 9, 11, 2, 3, 3, 2, 2, 1, 1, 1, 1},     {2, 3, 11, 10, 5, 3, 3, 2, 1, 1, 1, 2, 1},
    {3, 19, 9, 11, 67, 3, 2, 2, 2, 1, 0, 1, 2},   {2, 33, 13, 11, 7, 3, 3, 2, 2, 1, 1, 2, 1},
    {4, 3, 31, 29, 64, 7, 7, 2, 2, 3, 3, 1, 1},   {2, 40, 7, 8, 66, 1, 1, 2, 2, 0, 0, 1, 1},
    {2, 33, 5, 4, 64, 5, 5, 3, 3, 2, 2, 1, 1},    {1, 36, 6, 7, 40, 3, 3, 2, 2, 1, 1, 3, 3},
    {2, 34, 9, 9, 33, 4, 4, 4, 4, 0, 0, 2, 2},    {2, 3, 32, 32, 64, 16, 16, 16, 16, 0, 0, 1, 1},
    {2, 8, 14, 14, 8, 3, 3, 2, 2, 1, 1, 1, 1},    {1, 64, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1},
};

static float bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}
static uint16_t to_bf16(float f) { return (uint16_t)(__float_as_uint(f) >> 16); }

static float dot(uint4 a, uint4 b, float) {
  float x[4], y[4];
  memcpy(x, &a, 16), memcpy(y, &b, 16);
  return x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
}
static float dot(uint4 a, uint4 b, uint16_t) {
  uint16_t x[8], y[8];
  memcpy(x, &a, 16), memcpy(y, &b, 16);
  float s = 0;
  for (int i = 0; i < 8; ++i) s += bf16(x[i]) * bf16(y[i]);
  return s;
}

/* n elements at `shift` elements past a 16-byte boundary, within whole
 * 16-byte chunks (as GPU allocations are: an unaligned gather reads the
 * aligned chunks that hold a tensor's first and last elements); the rest
 * of the chunks NaN, which a gather that keeps an element outside the
 * tensor brings into the sums. */
template <class E>
static E *chunks(int64_t n, int shift, void **block) {
  const int64_t whole = (n + shift + 16 / (int64_t)sizeof(E)) * sizeof(E) / 16 * 16;
  E *p = (E *)aligned_alloc(16, whole);
  for (int64_t i = 0; i < whole / (int64_t)sizeof(E); ++i) p[i] = sizeof(E) == 2 ? (E)0x7fc0 : (E)NAN;
  *block = p;
  return p + shift;
}

/* C = A B^T through the maps, each output's writes counted at out - base. */
template <bool PH, class E>
static void gemm(const Gemm<E> &g, int *writes, const float *base) {
  for (int row = 0; row < g.rows; ++row) {
    const int4 rb = conv_gemm::row_base(g, row);
    for (int col = 0; col < g.cols; ++col) {
      float acc = 0;
      for (int d = 0; d < g.depth; d += Gemm<E>::CHUNK) {
        const uint4 va = conv_gemm::gather_a(g, rb, d);
        if (col == 0 && !g.qrow) { /* the same chunk through the taps (conv2d_x3.cu's gather) */
          conv_gemm::Tap t[Gemm<E>::CHUNK];
          for (int e = 0; e < Gemm<E>::CHUNK; ++e) t[e] = conv_gemm::tap_of(g, d + e);
          const uint4 vt = conv_gemm::gather_taps(conv_gemm::a_row(g, rb), t);
          cr_assert(!memcmp(&va, &vt, sizeof(va)), "row %d depth %d: the taps' chunk differs", row, d);
        }
        const uint4 vb = conv_gemm::gather_b<PH>(g, col, d);
        if (row == 0 && !g.qrow) { /* and B's */
          int t[Gemm<E>::CHUNK];
          for (int e = 0; e < Gemm<E>::CHUNK; ++e) t[e] = conv_gemm::btap_of(g, d + e);
          const uint4 vt = conv_gemm::gather_b_taps(conv_gemm::b_col(g, col), t);
          cr_assert(!memcmp(&vb, &vt, sizeof(vb)), "col %d depth %d: the taps' chunk of B differs", col, d);
        }
        acc += dot(va, vb, E());
      }
      float *o = conv_gemm::out_at<PH>(g, 1, row, col, 0, 0);
      cr_assert(o, "row %d col %d of %d x %d has no place", row, col, g.rows, g.cols);
      *o = acc + (g.bias ? g.bias[col] : 0.0f);
      writes[o - base]++;
    }
  }
}

static void expect(const char *what, const map_case_t *t, const float *got, const double *want, const int *writes,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    cr_assert(writes[i] == 1 && fabs(got[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])),
              "%s[%ld] (n=%ld c=%ld h=%ld w=%ld k=%ld r=%ld s=%ld stride %d,%d dil %d,%d): got %g want %g, written %d "
              "times",
              what, (long)i, (long)t->n, (long)t->c, (long)t->h, (long)t->w, (long)t->k, (long)t->r, (long)t->s, t->sh,
              t->sw, t->dh, t->dw, got[i], want[i], writes[i]);
}

/* Every pass of case t with elements E (x, w, dy as E, outputs fp32). */
template <class E>
static void run_case(const map_case_t *t, const aq_conv2d_args_t *shape, const float *x, const float *w,
                     const float *dy, const float *bias, const double *ry, const double *rdx, const double *rdw,
                     int shift) {
  aq_conv2d_args_t a = *shape;
  const int64_t nx = a.n * a.c * a.h * a.wd, nw = a.k * a.c * a.r * a.s, ny = a.n * a.k * a.p * a.q;
  void *bx, *bw, *bdy;
  E *xe = chunks<E>(nx, shift, &bx), *we = chunks<E>(nw, shift, &bw), *dye = chunks<E>(ny, shift, &bdy);
  for (int64_t i = 0; i < nx; ++i) xe[i] = sizeof(E) == 2 ? (E)to_bf16(x[i]) : (E)x[i];
  for (int64_t i = 0; i < nw; ++i) we[i] = sizeof(E) == 2 ? (E)to_bf16(w[i]) : (E)w[i];
  for (int64_t i = 0; i < ny; ++i) dye[i] = sizeof(E) == 2 ? (E)to_bf16(dy[i]) : (E)dy[i];
  float *y = (float *)malloc(ny * 4), *dx = (float *)malloc(nx * 4), *dw = (float *)malloc(nw * 4);
  int *wy = (int *)calloc(ny, sizeof(int)), *wx = (int *)calloc(nx, sizeof(int)), *ww = (int *)calloc(nw, sizeof(int));
  a.x = (const float *)xe, a.w = (const float *)we, a.dy = (const float *)dye, a.bias = bias;
  a.y = y, a.dx = dx, a.dw = dw;
  gemm<false>(conv_gemm::make_gemm<E>(a, 0), wy, y);
  gemm<false>(conv_gemm::make_gemm<E>(a, 2), ww, dw);
  if (aq_conv2d_phased(&a)) {
    for (int ph = 0; ph < a.stride_h && ph < a.h; ++ph)
      for (int pw = 0; pw < a.stride_w && pw < a.wd; ++pw)
        gemm<true>(conv_gemm::make_phase<E>(a, ph * a.stride_w + pw), wx, dx);
  } else {
    gemm<false>(conv_gemm::make_gemm<E>(a, 1), wx, dx);
  }
  expect(sizeof(E) == 2 ? "bf16 y" : "y", t, y, ry, wy, ny);
  expect(sizeof(E) == 2 ? "bf16 dx" : "dx", t, dx, rdx, wx, nx);
  expect(sizeof(E) == 2 ? "bf16 dw" : "dw", t, dw, rdw, ww, nw);
  free(bx), free(bw), free(bdy), free(y), free(dx), free(dw), free(wy), free(wx), free(ww);
}

/* The phases' walk over grids of several sizes: each dx element in one
 * tile of one block, and as many tiles as launch.h launches blocks for. */
static void walk_phases(const aq_conv2d_args_t *a) {
  const int64_t nx = a->n * a->c * a->h * a->wd, grids[] = {1, 3, 7, 100};
  int *seen = (int *)malloc(nx * sizeof(int));
  for (int gi = 0; gi < 4; ++gi) {
    memset(seen, 0, nx * sizeof(int));
    int64_t tiles = 0;
    for (int64_t b = 0; b < grids[gi]; ++b) {
      Gemm<float> gs;
      conv_gemm::phases<64, 64>(*a, gs, b, grids[gi], [&](int row0, int col0) {
        tiles++;
        for (int r = row0; r < row0 + 64 && r < gs.rows; ++r)
          for (int c = col0; c < col0 + 64 && c < gs.cols; ++c) seen[conv_gemm::row_at<true>(gs, r) + (int64_t)c * gs.plane]++;
      });
    }
    for (int64_t i = 0; i < nx; ++i) cr_assert_eq(seen[i], 1, "grid of %ld: dx[%ld] in %d tiles", (long)grids[gi], (long)i, seen[i]);
    cr_assert_eq(tiles, aq_conv2d_gemm_tiles(a, 1, 64, 64));
  }
  free(seen);
}

typedef struct {
  const float *x, *w, *bias, *dy;
  double *y, *dx, *dw;
} ref_t;
static void ref_tap(void *ctx, int64_t o, int64_t k, int64_t xi, int64_t wi) {
  ref_t *r = (ref_t *)ctx;
  if (xi < 0) {
    r->y[o] += r->bias[k];
    return;
  }
  r->y[o] += (double)r->w[wi] * r->x[xi], r->dx[xi] += (double)r->w[wi] * r->dy[o], r->dw[wi] += (double)r->x[xi] * r->dy[o];
}

Test(conv_gemm_maps, every_pass_and_phase_against_a_direct_convolution) {
  uint32_t rng = 12345;
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    const map_case_t *t = &cases[ci];
    aq_conv2d_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = t->n, a.c = t->c, a.h = t->h, a.wd = t->w, a.k = t->k, a.r = t->r, a.s = t->s;
    a.stride_h = t->sh, a.stride_w = t->sw, a.pad_h = t->ph, a.pad_w = t->pw, a.dil_h = t->dh, a.dil_w = t->dw;
    a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, a.stride_w, a.pad_w, a.dil_w);
    const int64_t nx = a.n * a.c * a.h * a.wd, nw = a.k * a.c * a.r * a.s, ny = a.n * a.k * a.p * a.q;
    float *x = (float *)malloc(nx * 4), *w = (float *)malloc(nw * 4), *dy = (float *)malloc(ny * 4);
    float *bias = (float *)malloc(a.k * 4);
    float *all[] = {x, w, dy, bias};
    const int64_t sizes[] = {nx, nw, ny, a.k};
    for (int v = 0; v < 4; ++v)
      for (int64_t i = 0; i < sizes[v]; ++i) {
        rng = rng * 1664525u + 1013904223u;
        /* values bf16 holds exactly, so that both element types match one reference */
        all[v][i] = bf16(to_bf16((float)((rng >> 8) & 0xffff) / 65536.0f - 0.5f));
      }
    double *ry = (double *)calloc(ny, 8), *rdx = (double *)calloc(nx, 8), *rdw = (double *)calloc(nw, 8);
    ref_t ref = {x, w, bias, dy, ry, rdx, rdw};
    conv_taps(&a, ref_tap, &ref);
    /* aligned tensors, and tensors an element past a 16-byte boundary */
    for (int shift = 0; shift < 2; ++shift) {
      run_case<float>(t, &a, x, w, dy, bias, ry, rdx, rdw, shift);
      run_case<uint16_t>(t, &a, x, w, dy, bias, ry, rdx, rdw, shift);
    }
    if (aq_conv2d_phased(&a)) walk_phases(&a);
    free(x), free(w), free(dy), free(bias), free(ry), free(rdx), free(rdw);
  }
}

/* A bf16 backward filter's chunks element by element where q runs along rows
 * padded to whole chunks (qrow): each element x's or dy's at its tap, or 0
 * past q, in the padding or outside the tensor (which a sum of products
 * could hide: a kept element whose partner is 0). */
template <class E>
static void filter_chunks(const aq_conv2d_args_t *shape, int shift) {
  aq_conv2d_args_t a = *shape;
  const int64_t nx = a.n * a.c * a.h * a.wd, ny = a.n * a.k * a.p * a.q;
  void *bx, *bdy;
  E *x = chunks<E>(nx, shift, &bx), *dy = chunks<E>(ny, shift, &bdy);
  for (int64_t i = 0; i < nx; ++i) x[i] = (E)(i % 9973 + 1);
  for (int64_t i = 0; i < ny; ++i) dy[i] = (E)(i % 9967 + 1);
  a.x = (const float *)x, a.dy = (const float *)dy;
  const Gemm<E> g = conv_gemm::make_gemm<E>(a, 2);
  cr_assert_eq(g.qrow, a.q);
  const int qd = g.d2.d, C = Gemm<E>::CHUNK;
  cr_assert(qd % C == 0 && qd >= a.q && qd < a.q + C && g.depth == a.n * a.p * qd);
  for (int d = 0; d < g.depth; d += C) {
    for (int row = 0; row < g.rows; ++row) {
      E got[16 / sizeof(E)];
      const uint4 v = conv_gemm::gather_a(g, conv_gemm::row_base(g, row), d);
      memcpy(got, &v, 16);
      const int c = row / (int)(a.r * a.s), r = row / (int)a.s % (int)a.r, s_ = row % (int)a.s;
      for (int e = 0; e < C; ++e) {
        const int n = (d + e) / qd / (int)a.p, pp = (d + e) / qd % (int)a.p, qq = (d + e) % qd;
        const int64_t y = pp * a.stride_h + r * a.dil_h - a.pad_h, z = qq + s_ * a.dil_w - a.pad_w;
        const E want =
            qq < a.q && y >= 0 && y < a.h && z >= 0 && z < a.wd ? x[((n * a.c + c) * a.h + y) * a.wd + z] : 0;
        cr_assert_eq(got[e], want, "A(%d, %d) of x %ldx%ldx%ldx%ld (k %ld, %ldx%ld, pad %d, dil %d): got %d want %d",
                     row, d + e, (long)a.n, (long)a.c, (long)a.h, (long)a.wd, (long)a.k, (long)a.r, (long)a.s, a.pad_w,
                     a.dil_w, (int)got[e], (int)want);
      }
    }
    for (int col = 0; col < g.cols; ++col) {
      E got[16 / sizeof(E)];
      const uint4 v = conv_gemm::gather_b<false>(g, col, d);
      memcpy(got, &v, 16);
      for (int e = 0; e < C; ++e) {
        const int n = (d + e) / qd / (int)a.p, pp = (d + e) / qd % (int)a.p, qq = (d + e) % qd;
        const E want = qq < a.q ? dy[((n * a.k + col) * a.p + pp) * a.q + qq] : 0;
        cr_assert_eq(got[e], want, "B(%d, %d): got %d want %d", col, d + e, (int)got[e], (int)want);
      }
    }
  }
  free(bx), free(bdy);
}

/* The padded depth stays in 32 bits: a shape whose n p q fits but whose
 * q padded to whole chunks would not keeps its rows unpadded. */
Test(conv_gemm_maps, a_padded_depth_past_32_bits_keeps_q) {
  aq_conv2d_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = 1 << 27, a.c = 1, a.h = 2, a.wd = 1, a.k = 1, a.r = 1, a.s = 1, a.p = 2, a.q = 1;
  a.stride_h = a.stride_w = a.dil_h = a.dil_w = 1;
  Gemm<uint16_t> g = conv_gemm::make_gemm<uint16_t>(a, 2);
  cr_assert_eq(g.qrow, 0);
  cr_assert_eq(g.depth, (int)(a.n * a.p * a.q));
  a.n = 1 << 20;
  g = conv_gemm::make_gemm<uint16_t>(a, 2);
  cr_assert_eq(g.qrow, 1);
  cr_assert_eq(g.depth, (int)(a.n * a.p * 8));
}

Test(conv_gemm_maps, backward_filter_chunks_hold_their_taps_and_zeros) {
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    const map_case_t *t = &cases[ci];
    if (t->sw != 1) continue; /* qrow is stride 1's */
    aq_conv2d_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = t->n, a.c = t->c, a.h = t->h, a.wd = t->w, a.k = t->k, a.r = t->r, a.s = t->s;
    a.stride_h = t->sh, a.stride_w = 1, a.pad_h = t->ph, a.pad_w = t->pw, a.dil_h = t->dh, a.dil_w = t->dw;
    a.p = aq_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h), a.q = aq_conv_out(a.wd, a.s, 1, a.pad_w, a.dil_w);
    for (int shift = 0; shift < 2; ++shift) filter_chunks<uint16_t>(&a, shift);
  }
}

/* make_div's multiplier by 64-bit integer division: ceil(2^(31+l) / d). */
static uint32_t exact_mul(int d) {
  uint32_t l = 0;
  while ((1u << l) < (uint32_t)d) ++l;
  return d <= 1 ? 0 : (uint32_t)(((1ull << (31 + l)) + (uint64_t)d - 1) / (uint64_t)d);
}

/* The depth's divisions by multiply and shift: every divisor to 2^16 at
 * the quotients' edges, and large divisors and dividends. */
Test(conv_gemm_maps, division_by_multiply_and_shift_is_exact) {
  uint32_t rng = 7;
  for (int d : {INT32_MAX, INT32_MAX - 1, (1 << 30) + 1, 1 << 30, (1 << 30) - 1, 3 << 29, 1000003, 999999937})
    cr_assert_eq(conv_gemm::make_div(d).mul, exact_mul(d), "d %d", d);
  for (int d = 1; d < (1 << 16) + 5; ++d) {
    const conv_gemm::Div v = conv_gemm::make_div(d);
    cr_assert_eq(v.mul, exact_mul(d), "d %d", d);
    const int xs[] = {
        0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 1000 * d - 1, INT32_MAX / d * d, INT32_MAX / d * d - 1, INT32_MAX};
    for (int x : xs)
      if (x >= 0) cr_assert_eq(x / v, x / d, "%d / %d: got %d", x, d, x / v);
  }
  for (int i = 0; i < 1000000; ++i) {
    rng = rng * 1664525u + 1013904223u;
    const int d = (int)(rng >> 1) >> (rng % 31) | 1;
    rng = rng * 1664525u + 1013904223u;
    const int x = (int)(rng >> 1);
    const conv_gemm::Div v = conv_gemm::make_div(d);
    cr_assert_eq(v.mul, exact_mul(d), "d %d", d);
    cr_assert_eq(x / v, x / d, "%d / %d: got %d", x, d, x / v);
  }
}
