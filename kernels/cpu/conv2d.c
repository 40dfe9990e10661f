/* conv2d, NCHW, forward and both backwards, through the GEMM engine with an
 * implicit im2col (the packers read the image directly, so no column matrix
 * is ever written), or a direct loop nest where that measures faster (a
 * handful of filters or a tiny filter volume, as LeNet's first layer).
 *
 *   forward:     y[n] (K x PQ)   = W (K x CRS) . col(x[n]) (CRS x PQ) + bias
 *   bwd data:    dcol (CRS x PQ) = W^T . dy[n], then col2im adds it into dx[n]
 *                (in column chunks, so the buffer stays in the group segment)
 *   bwd filter:  dW (K x CRS)    = dy (K x N*PQ) . col(x)^T, the batch in one
 *                GEMM (its depth runs over every image's pixels)
 *
 * The grids are aq_planes_grid of n*k, n*c, k*c (at most 64 groups of
 * planes, which the direct loops walk); like matmul, the GEMM paths cut the
 * work into AQ_MATMUL_PARTS_PER_WORKER parts per worker of the agent (over
 * images first: a part then packs each image once) and the groups past the
 * last part return at once.
 * AQ_CONV_ALGO=direct|gemm forces a path (tests run both). */
#include <stdlib.h>
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/conv2d_avx2.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

static int valid(const aq_conv2d_args_t *a) {
  return a->n > 0 && a->c > 0 && a->h > 0 && a->wd > 0 && a->k > 0 && a->r > 0 && a->s > 0 && a->p > 0 && a->q > 0 &&
         a->stride_h > 0 && a->stride_w > 0 && a->dil_h > 0 && a->dil_w > 0 && a->pad_h >= 0 && a->pad_w >= 0 &&
         a->p == aq_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h) &&
         a->q == aq_conv_out(a->wd, a->s, a->stride_w, a->pad_w, a->dil_w) &&
         (a->precision == AQ_MATMUL_PRECISION_DEFAULT || a->precision == AQ_MATMUL_PRECISION_EXACT);
}

/* ---- choosing the path ------------------------------------------------------ */

enum { ALGO_AUTO = 0, ALGO_DIRECT = 1, ALGO_GEMM = 2 };

/* The fewest filters a part of the padded-width filter gradient takes
 * before its parts are cut by taps instead. */
enum { WIDE_PART_K = 4 };

static int forced_algo(void) {
  static int cached = -1;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    uint32_t a = aq_cpu_settings()->conv_algo; /* AQ_CONV_ALGO: 0 measured, 1 gemm, 2 direct */
    v = a == 2 ? ALGO_DIRECT : a == 1 ? ALGO_GEMM : ALGO_AUTO;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* Measured (aq-bench conv and a serial harness): the GEMM path beats the
 * direct loops on every shape tried, LeNet's 6 5x5 filters over one channel
 * included (13.6 against 3.5 GFLOP/s forward on one core), so the direct
 * loops are the fallback only: forced by AQ_CONV_ALGO=direct, or for a data
 * gradient whose filter is too large for the column buffer. */
static int use_gemm(const aq_conv2d_args_t *a) {
  (void)a;
  return forced_algo() != ALGO_DIRECT;
}

/* How many parts this dispatch is cut into: AQ_MATMUL_PARTS_PER_WORKER per
 * worker (see ops.h), at most the grid's groups. */
static int64_t part_count(const aq_dispatch_ctx_t *ctx) {
  int64_t workers = (ctx->worker_count > 0 ? ctx->worker_count : 1) * AQ_MATMUL_PARTS_PER_WORKER;
  int64_t groups = (int64_t)ctx->group_count[0] * ctx->group_count[1] * ctx->group_count[2];
  return workers < groups ? workers : groups;
}

static int64_t group_index(const aq_dispatch_ctx_t *ctx) {
  return ((int64_t)ctx->group_id[2] * ctx->group_count[1] + ctx->group_id[1]) * ctx->group_count[0] +
         ctx->group_id[0];
}

/* ---- implicit im2col packers -------------------------------------------------- */

typedef struct conv_pack {
  const aq_conv2d_args_t *a;
  const float *x; /* one image: c x h x wd */
} conv_pack_t;

/* B = col(x) (CRS x PQ): columns are output pixels j = (p, q), depth l =
 * (c, r, s). A panel's nr pixels are a few runs along output rows; for one
 * tap (r, s) each run reads one input row, contiguously when stride_w is 1,
 * so the panel is filled by short copies with zeros where the tap falls
 * into the padding. */
typedef struct run {
  int32_t p, q0, len, col; /* output row, first column, length, panel column */
} run_t;

static inline __attribute__((always_inline)) void pack_col_body(const void *vctx, int64_t first, int64_t count,
                                                                int64_t l0, int64_t kc, int64_t nr, float *dst) {
  const conv_pack_t *cp = vctx;
  const aq_conv2d_args_t *a = cp->a;
  const int32_t H = (int32_t)a->h, W = (int32_t)a->wd, RS = (int32_t)(a->r * a->s), S = (int32_t)a->s;
  const int32_t Q = (int32_t)a->q, sh = a->stride_h, sw = a->stride_w, ph = a->pad_h, pw = a->pad_w;
  /* Each depth row's tap, once per call rather than once per panel. */
  int64_t tap_c[GEMM_KC];
  int32_t tap_dr[GEMM_KC], tap_ds[GEMM_KC];
  {
    int32_t c = (int32_t)(l0 / RS), rs = (int32_t)(l0 % RS);
    for (int64_t l = 0; l < kc; ++l) {
      tap_c[l] = (int64_t)c * H * W, tap_dr[l] = (rs / S) * a->dil_h - ph, tap_ds[l] = (rs % S) * a->dil_w - pw;
      if (++rs == RS) rs = 0, ++c;
    }
  }
  for (int64_t c0 = 0; c0 < count; c0 += nr, dst += kc * nr) {
    int32_t cols = (int32_t)(count - c0 < nr ? count - c0 : nr);
    run_t runs[GEMM_NR];
    int nruns = 0;
    for (int32_t j = 0; j < cols;) {
      int64_t pix = first + c0 + j;
      int32_t p = (int32_t)(pix / Q), q = (int32_t)(pix % Q), len = Q - q < cols - j ? Q - q : cols - j;
      runs[nruns++] = (run_t){p, q, len, j};
      j += len;
    }
    for (int64_t l = 0; l < kc; ++l) {
      const float *xc = cp->x + tap_c[l];
      int32_t dr = tap_dr[l], ds = tap_ds[l];
      float *d = dst + l * nr;
      for (int i = 0; i < nruns; ++i) {
        const run_t *u = &runs[i];
        float *o = d + u->col;
        int32_t ih = u->p * sh + dr;
        if ((uint32_t)ih >= (uint32_t)H) {
          for (int32_t t = 0; t < u->len; ++t) o[t] = 0.0f;
          continue;
        }
        const float *xr = xc + (int64_t)ih * W;
        if (sw == 1) {
          /* iw = q + ds: inside the row for q in [-ds, W - ds). */
          int32_t lo = -ds - u->q0, hi = W - ds - u->q0;
          lo = lo < 0 ? 0 : lo > u->len ? u->len : lo;
          hi = hi > u->len ? u->len : hi < lo ? lo : hi;
          const float *src = xr + u->q0 + ds;
          for (int32_t t = 0; t < lo; ++t) o[t] = 0.0f;
          for (int32_t t = lo; t < hi; ++t) o[t] = src[t];
          for (int32_t t = hi; t < u->len; ++t) o[t] = 0.0f;
        } else {
          for (int32_t t = 0; t < u->len; ++t) {
            int32_t iw = (u->q0 + t) * sw + ds;
            o[t] = (uint32_t)iw < (uint32_t)W ? xr[iw] : 0.0f;
          }
        }
      }
      for (int32_t t = cols; t < nr; ++t) d[t] = 0.0f;
    }
  }
}

/* B = col(x)^T (N*PQ x CRS), for the filter gradient: columns are filter
 * taps j = (c, r, s), depth l = pixels (n, p, q) of every image, so one GEMM
 * sums over the whole batch. The panel is filled a block of 64 pixels at a
 * time (the block's rows stay in L1): the block's pixels are a few runs
 * along output rows, and for each tap each run reads one input row,
 * contiguously when stride_w is 1. cp->x is the first image. */
enum { COLT_BLOCK = 64 };

static inline __attribute__((always_inline)) void pack_colt_body(const void *vctx, int64_t first, int64_t count,
                                                                 int64_t l0, int64_t kc, int64_t nr, float *dst) {
  const conv_pack_t *cp = vctx;
  const aq_conv2d_args_t *a = cp->a;
  const int32_t H = (int32_t)a->h, W = (int32_t)a->wd, RS = (int32_t)(a->r * a->s), S = (int32_t)a->s;
  const int32_t Q = (int32_t)a->q, sh = a->stride_h, sw = a->stride_w;
  const int64_t PQ = a->p * a->q, CHW = a->c * a->h * a->wd;
  for (int64_t c0 = 0; c0 < count; c0 += nr, dst += kc * nr) {
    int32_t cols = (int32_t)(count - c0 < nr ? count - c0 : nr);
    int64_t tap_c[GEMM_NR];
    int32_t tap_dr[GEMM_NR], tap_ds[GEMM_NR];
    for (int32_t j = 0; j < cols; ++j) {
      int64_t tap = first + c0 + j;
      int32_t c = (int32_t)(tap / RS), rs = (int32_t)(tap % RS);
      tap_c[j] = (int64_t)c * H * W;
      tap_dr[j] = (rs / S) * a->dil_h - a->pad_h, tap_ds[j] = (rs % S) * a->dil_w - a->pad_w;
    }
    for (int64_t lb = 0; lb < kc; lb += COLT_BLOCK) {
      int32_t len = (int32_t)(kc - lb < COLT_BLOCK ? kc - lb : COLT_BLOCK);
      run_t runs[COLT_BLOCK];
      const float *img[COLT_BLOCK];
      int nruns = 0;
      for (int32_t i = 0; i < len;) {
        int64_t pix = l0 + lb + i, n = pix / PQ, rem = pix % PQ;
        int32_t p = (int32_t)(rem / Q), q = (int32_t)(rem % Q), m = Q - q < len - i ? Q - q : len - i;
        img[nruns] = cp->x + n * CHW;
        runs[nruns++] = (run_t){p, q, m, i};
        i += m;
      }
      float *blk = dst + lb * nr;
      for (int32_t j = 0; j < nr; ++j) {
        float *d = blk + j;
        if (j >= cols) {
          for (int32_t i = 0; i < len; ++i) d[i * nr] = 0.0f;
          continue;
        }
        int32_t dr = tap_dr[j], ds = tap_ds[j];
        for (int u = 0; u < nruns; ++u) {
          const run_t *r = &runs[u];
          float *o = d + (int64_t)r->col * nr;
          int32_t ih = r->p * sh + dr;
          if ((uint32_t)ih >= (uint32_t)H) {
            for (int32_t t = 0; t < r->len; ++t) o[t * nr] = 0.0f;
            continue;
          }
          const float *xr = img[u] + tap_c[j] + (int64_t)ih * W;
          if (sw == 1) {
            int32_t lo = -ds - r->q0, hi = W - ds - r->q0;
            lo = lo < 0 ? 0 : lo > r->len ? r->len : lo;
            hi = hi > r->len ? r->len : hi < lo ? lo : hi;
            const float *src = xr + r->q0 + ds;
            for (int32_t t = 0; t < lo; ++t) o[t * nr] = 0.0f;
            for (int32_t t = lo; t < hi; ++t) o[t * nr] = src[t];
            for (int32_t t = hi; t < r->len; ++t) o[t * nr] = 0.0f;
          } else {
            for (int32_t t = 0; t < r->len; ++t) {
              int32_t iw = (r->q0 + t) * sw + ds;
              o[t * nr] = (uint32_t)iw < (uint32_t)W ? xr[iw] : 0.0f;
            }
          }
        }
      }
    }
  }
}

/* A = dy viewed as K x (N*PQ): rows are filters k, depth l = pixels (n, p, q)
 * of every image; mr-row panels p[l * mr + r]. Each row is read
 * contiguously within an image. */
static void pack_dy(const void *vctx, int64_t first, int64_t count, int64_t l0, int64_t kc, int64_t mr, float *dst) {
  const conv_pack_t *cp = vctx;
  const aq_conv2d_args_t *a = cp->a;
  const int64_t PQ = a->p * a->q;
  for (int64_t r0 = 0; r0 < count; r0 += mr, dst += kc * mr) {
    int64_t rows = count - r0 < mr ? count - r0 : mr;
    if (rows < mr) memset(dst, 0, (size_t)(kc * mr) * sizeof(float));
    for (int64_t r = 0; r < rows; ++r) {
      int64_t k = first + r0 + r;
      for (int64_t l = 0; l < kc;) {
        int64_t pix = l0 + l, n = pix / PQ, pq = pix % PQ, len = PQ - pq < kc - l ? PQ - pq : kc - l;
        const float *src = a->dy + (n * a->k + k) * PQ + pq;
        float *d = dst + l * mr + r;
        for (int64_t t = 0; t < len; ++t) d[t * mr] = src[t];
        l += len;
      }
    }
  }
}

/* The packers compiled once for each ISA (the body inlined under its
 * target), so that pick_col's choice runs that ISA's vector code. */
#define PACK_COL_FOR(TARGET, isa)                                                                                 \
  TARGET static void pack_col_##isa(const void *c, int64_t f, int64_t n, int64_t l0, int64_t kc, int64_t w,     \
                                    float *d) {                                                                 \
    pack_col_body(c, f, n, l0, kc, w, d);                                                                       \
  }                                                                                                             \
  TARGET static void pack_colt_##isa(const void *c, int64_t f, int64_t n, int64_t l0, int64_t kc, int64_t w,    \
                                     float *d) {                                                                \
    pack_colt_body(c, f, n, l0, kc, w, d);                                                                      \
  }
PACK_COL_FOR(, generic)
#if defined(__x86_64__)
PACK_COL_FOR(AQ_TARGET_AVX512, avx512)
PACK_COL_FOR(AQ_TARGET_AVX2, avx2)
#endif

static gemm_pack_fn pick_col(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return pack_col_avx512;
    case AQ_CPU_ISA_AVX2: return pack_col_avx2;
    default: break;
  }
#endif
  return pack_col_generic;
}

static gemm_pack_fn pick_colt(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return pack_colt_avx512;
    case AQ_CPU_ISA_AVX2: return pack_colt_avx2;
    default: break;
  }
#endif
  return pack_colt_generic;
}

/* ---- GEMM paths ------------------------------------------------------------------ */

/* Splits `parts` over `images` first: each image range, then (when there are
 * more parts than images) rows x columns of one image's product. */
typedef struct split {
  int64_t n0, n1;          /* images */
  int64_t m0, m1, j0, j1;  /* rows and columns of the per-image product */
} split_t;

static int split_part(int64_t images, int64_t rows, int64_t cols, int64_t parts, int64_t g, split_t *s) {
  if (parts <= images) {
    gemm_range(images, parts, g, 1, &s->n0, &s->n1);
    s->m0 = 0, s->m1 = rows, s->j0 = 0, s->j1 = cols;
    return s->n0 < s->n1;
  }
  int64_t per = parts / images; /* sub-parts per image */
  if (g >= per * images) return 0;
  s->n0 = g / per, s->n1 = s->n0 + 1;
  int64_t pm, pn, sub = g % per;
  gemm_split(rows, cols, per, &pm, &pn);
  if (sub >= pm * pn) return 0;
  gemm_range(rows, pm, sub / pn, GEMM_MR, &s->m0, &s->m1);
  gemm_range(cols, pn, sub % pn, GEMM_NR, &s->j0, &s->j1);
  return s->m0 < s->m1 && s->j0 < s->j1;
}

/* Images a forward's GEMM takes as one batch (gemm_part_t.batch). */
enum { FWD_BATCH = 64 };

static int gemm_fwd(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t pq = a->p * a->q, crs = a->c * a->r * a->s;
  split_t s;
  if (!split_part(a->n, a->k, pq, part_count(ctx), group_index(ctx), &s)) return 0;
  /* Small filter volumes: the direct loop on the padded-width grid, when
   * parts are whole images (conv2d_avx2.c). */
  if (part_count(ctx) <= a->n && aq_cpu_isa() >= AQ_CPU_ISA_AVX2 && conv2d_wide_fits(a) && forced_algo() == ALGO_AUTO) {
    conv2d_fwd_wide_avx2(a, s.n0, s.n1, ctx->group_segment);
    return 0;
  }
  static gemm_pack_fn col_fn;
  gemm_pack_fn col = __atomic_load_n(&col_fn, __ATOMIC_RELAXED);
  if (!col) col = pick_col(), __atomic_store_n(&col_fn, col, __ATOMIC_RELAXED);
  /* The part's images as one batch: the filters are packed once a depth
   * slice for all of them (an image's product alone repacks them, which
   * costs as much as its multiply-adds where its plane is small). */
  conv_pack_t cp[FWD_BATCH];
  for (int64_t n0 = s.n0; n0 < s.n1; n0 += FWD_BATCH) {
    int64_t count = s.n1 - n0 < FWD_BATCH ? s.n1 - n0 : FWD_BATCH;
    for (int64_t i = 0; i < count; ++i) cp[i] = (conv_pack_t){a, a->x + (n0 + i) * a->c * a->h * a->wd};
    gemm_part_t g = {.a = a->w, .c = a->y + n0 * a->k * pq, .bias_row = a->bias, .pack_b = col, .pack_ctx = cp,
                     .lda = crs, .ldc = pq, .m0 = s.m0, .n0 = s.j0, .mc = s.m1 - s.m0, .nc = s.j1 - s.j0,
                     .k = crs, .alpha = 1.0f, .beta = 0.0f, .batch = count, .c_stride = a->k * pq,
                     .ctx_stride = sizeof(conv_pack_t)};
    gemm_part(&g, ctx->group_segment);
  }
  return 0;
}

/* The column buffer of the data gradient, after the GEMM's own scratch. */
#define COL_FLOATS (1 << 20)
#define CONV_SCRATCH ((uint32_t)(GEMM_SCRATCH_BYTES + (size_t)COL_FLOATS * sizeof(float) + 64))

/* dx[n, c] += col2im(dcol rows of channels [c0, c1), pixels [j0, j0 + nc)),
 * by runs along output rows as in the packer. */
static void col2im_add(const aq_conv2d_args_t *a, const float *dcol, int64_t ld, int64_t c0, int64_t c1, int64_t j0,
                       int64_t nc, float *dx) {
  const int64_t rs = a->r * a->s, H = a->h, W = a->wd, Q = a->q;
  for (int64_t c = c0; c < c1; ++c) {
    float *dxc = dx + c * H * W;
    for (int64_t t = 0; t < rs; ++t) {
      const float *row = dcol + ((c - c0) * rs + t) * ld;
      int64_t dr = (t / a->s) * a->dil_h - a->pad_h, ds = (t % a->s) * a->dil_w - a->pad_w;
      for (int64_t j = 0; j < nc;) {
        int64_t pix = j0 + j, p = pix / Q, q0 = pix % Q, len = Q - q0 < nc - j ? Q - q0 : nc - j;
        int64_t ih = p * a->stride_h + dr;
        if ((uint64_t)ih < (uint64_t)H) {
          float *dr_row = dxc + ih * W;
          const float *src = row + j;
          if (a->stride_w == 1) {
            int64_t lo = -ds - q0, hi = W - ds - q0;
            lo = lo < 0 ? 0 : lo > len ? len : lo;
            hi = hi > len ? len : hi < lo ? lo : hi;
            float *o = dr_row + q0 + ds;
            for (int64_t u = lo; u < hi; ++u) o[u] += src[u];
          } else {
            for (int64_t u = 0; u < len; ++u) {
              int64_t iw = (q0 + u) * a->stride_w + ds;
              if ((uint64_t)iw < (uint64_t)W) dr_row[iw] += src[u];
            }
          }
        }
        j += len;
      }
    }
  }
}

/* The data gradient of a stride-1 convolution is the forward of dy, padded
 * by r - 1 - pad, through the filters flipped and turned (C x K x R x S):
 * through the padded-width direct loop where that fits (conv2d_avx2.c),
 * for images [n0, n1). Returns 0 where it does not. */
static int wide_bwd_data(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, void *scratch) {
  if (aq_cpu_isa() < AQ_CPU_ISA_AVX2 || forced_algo() != ALGO_AUTO || a->pad_h > a->r - 1 || a->pad_w > a->s - 1)
    return 0;
  aq_conv2d_args_t b = {.x = a->dy, .y = a->dx, .n = a->n, .c = a->k, .h = a->p, .wd = a->q, .k = a->c, .r = a->r,
                        .s = a->s, .p = a->h, .q = a->wd, .stride_h = 1, .stride_w = 1,
                        .pad_h = (int32_t)a->r - 1 - a->pad_h, .pad_w = (int32_t)a->s - 1 - a->pad_w, .dil_h = 1,
                        .dil_w = 1};
  int64_t rs = a->r * a->s, kcrs = a->k * a->c * rs;
  size_t planes = (conv2d_wide_fwd_floats(&b) + 15) / 16 * 16;
  if (!conv2d_wide_fits(&b) || a->stride_h != 1 || a->stride_w != 1 || a->dil_h != 1 || a->dil_w != 1 ||
      (planes + (size_t)kcrs) * sizeof(float) > CONV_SCRATCH - 64)
    return 0;
  float *flip = (float *)scratch + planes;
  for (int64_t c = 0; c < a->c; ++c)
    for (int64_t k = 0; k < a->k; ++k)
      for (int64_t t = 0; t < rs; ++t) flip[(c * a->k + k) * rs + t] = a->w[(k * a->c + c) * rs + rs - 1 - t];
  b.w = flip;
  conv2d_fwd_wide_avx2(&b, n0, n1, scratch);
  return 1;
}

/* The data gradient of small filter volumes as their column matrix, image
 * by image: dcol = W^T dy[n] from a direct loop (conv2d_avx2.c), added
 * into dx[n] by col2im, for images [n0, n1). Returns 0 where it does not
 * fit the scratch, or costs more multiply-adds than the padded-width
 * forward of dy (stride 1: each computes every position of a padded grid,
 * this one only the real ones, plus the adds of col2im). */
static int cols_bwd_data(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, void *scratch) {
  if (aq_cpu_isa() < AQ_CPU_ISA_AVX2 || forced_algo() != ALGO_AUTO || !conv2d_col2im_fits(a)) return 0;
  int64_t ld = conv2d_cols_ld(a), rs = a->r * a->s, crs = a->c * rs, hw = a->h * a->wd;
  if ((size_t)((a->k + crs) * ld + 2 * COLS_GUARD) * sizeof(float) > CONV_SCRATCH - 64) return 0;
  if (a->dil_h == 1 && a->dil_w == 1 && a->pad_h <= a->r - 1 && a->pad_w <= a->s - 1) {
    int64_t wide = (a->h * (a->wd + 2 * (a->s - 1 - a->pad_w)) + 15) / 16 * 16 * ((a->c + 5) / 6 * 6) * a->k * rs;
    if ((crs + 5) / 6 * 6 * ld * a->k + 2 * crs * a->p * a->q > wide) return 0;
  }
  float *dyc = scratch, *dcol = dyc + a->k * ld + COLS_GUARD;
  for (int64_t n = n0; n < n1; ++n) {
    conv2d_bwd_data_cols_avx2(a, n, dyc, dcol);
    conv2d_col2im_avx2(a, dcol, ld, a->dx + n * a->c * hw);
  }
  return 1;
}

static int gemm_bwd_data(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t pq = a->p * a->q, rs = a->r * a->s, crs = a->c * rs, hw = a->h * a->wd;
  /* Parts own whole input planes (col2im adds into them): images, then
   * channel ranges. */
  int64_t parts = part_count(ctx), g = group_index(ctx), n0, n1, c0 = 0, c1 = a->c;
  if (parts <= a->n) {
    gemm_range(a->n, parts, g, 1, &n0, &n1);
    if (n0 < n1 && (cols_bwd_data(a, n0, n1, ctx->group_segment) || wide_bwd_data(a, n0, n1, ctx->group_segment)))
      return 0;
  }
  if (parts <= a->n) {
    gemm_range(a->n, parts, g, 1, &n0, &n1);
  } else {
    int64_t per = parts / a->n < a->c ? parts / a->n : a->c;
    if (g >= per * a->n) return 0;
    n0 = g / per, n1 = n0 + 1;
    gemm_range(a->c, per, g % per, 1, &c0, &c1);
  }
  if (n0 >= n1 || c0 >= c1) return 0;
  float *dcol = (float *)((char *)ctx->group_segment + GEMM_SCRATCH_BYTES);
  dcol = (float *)(((uintptr_t)dcol + 63) & ~(uintptr_t)63);
  /* Channels per pass and pixels per chunk, so that the column buffer holds
   * (channels x r x s) rows of at least min(pq, 256) pixels. */
  int64_t wmin = pq < 256 ? pq : 256, cpb = COL_FLOATS / (rs * wmin);
  if (cpb < 1) return 3; /* the entry point sends such filters to the direct path */
  for (int64_t n = n0; n < n1; ++n) {
    float *dxn = a->dx + n * a->c * hw;
    memset(dxn + c0 * hw, 0, (size_t)((c1 - c0) * hw) * sizeof(float));
    for (int64_t cb = c0; cb < c1; cb += cpb) {
      int64_t ce = c1 - cb < cpb ? c1 : cb + cpb, rows = (ce - cb) * rs;
      int64_t chunk = COL_FLOATS / rows;
      if (chunk >= pq) chunk = pq;
      else chunk = chunk / GEMM_NR * GEMM_NR > wmin ? chunk / GEMM_NR * GEMM_NR : wmin;
      for (int64_t j0 = 0; j0 < pq; j0 += chunk) {
        int64_t nc = pq - j0 < chunk ? pq - j0 : chunk;
        /* dcol = W^T rows (c, r, s) for c in [cb, ce), times dy[n] columns
         * [j0, j0 + nc): W is K x CRS, read transposed from column cb r s. */
        gemm_part_t gp = {.a = a->w + cb * rs, .b = a->dy + n * a->k * pq + j0, .c = dcol, .lda = crs, .ldb = pq,
                          .ldc = nc, .trans_a = 1, .m0 = 0, .n0 = 0, .mc = rows, .nc = nc, .k = a->k,
                          .alpha = 1.0f, .beta = 0.0f};
        gemm_part(&gp, ctx->group_segment);
        col2im_add(a, dcol, nc, cb, ce, j0, nc, dxn);
      }
    }
  }
  return 0;
}

/* out = the sum of `planes` planes of pq floats, `stride` apart: 16 float
 * lanes kept across the planes, each plane's tail and at the end the lanes
 * added in double (one dependent add per value, as a plain loop has, runs
 * at a quarter of a vector loop's speed or less; the lanes' 16 once a
 * plane cost as much as a plane of 100). */
AQ_INLINE void planes_total_body(const float *x, int64_t planes, int64_t stride, int64_t pq, double *out) {
  aq_f32x8 s0 = {0}, s1 = {0};
  double t = 0;
  for (int64_t n = 0; n < planes; ++n, x += stride) {
    int64_t i = 0;
    for (; i + 16 <= pq; i += 16) s0 += AQ_LOAD8(x + i), s1 += AQ_LOAD8(x + i + 8);
    for (; i < pq; ++i) t += x[i];
  }
  *out = aq_lanes_sum(&s0, &s1) + t;
}
AQ_VECTORISE(planes_total, (const float *x, int64_t planes, int64_t stride, int64_t pq, double *out),
             (x, planes, stride, pq, out))

/* dbias[k] for filters [k0, k1): each a sum over the batch. */
static void bias_gradient(const aq_conv2d_args_t *a, int64_t k0, int64_t k1) {
  int64_t pq = a->p * a->q;
  for (int64_t k = k0; k < k1; ++k) {
    double b;
    planes_total(a->dy + k * pq, a->n, a->k * pq, pq, &b);
    a->dbias[k] = (float)b;
  }
}

static int gemm_bwd_filter(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t pq = a->p * a->q, crs = a->c * a->r * a->s;
  int64_t parts = part_count(ctx), pm, pn, g = group_index(ctx);
  int64_t k0, k1, j0, j1;
  /* Small filter volumes: the direct loop on the padded-width grid
   * (conv2d_avx2.c), parts cut by filters while each keeps WIDE_PART_K,
   * then by taps (a part copies each image's channels it reads and its
   * filters' planes of dy). */
  if (aq_cpu_isa() >= AQ_CPU_ISA_AVX2 && conv2d_wide_fits(a) && forced_algo() == ALGO_AUTO) {
    int64_t unit = conv2d_dw_filter_unit(a), pk = a->k / (unit > WIDE_PART_K ? unit : WIDE_PART_K), pt, l0, l1;
    pk = pk < 1 ? 1 : pk > parts ? parts : pk;
    pt = parts / pk < crs ? parts / pk : crs;
    if (g >= pk * pt) return 0;
    gemm_range(a->k, pk, g / pt, unit, &k0, &k1);
    gemm_range(crs, pt, g % pt, 1, &l0, &l1);
    if (k0 >= k1 || l0 >= l1) return 0;
    conv2d_bwd_filter_wide_avx2(a, k0, k1, l0, l1, ctx->group_segment);
    if (a->dbias && l0 == 0) bias_gradient(a, k0, k1);
    return 0;
  }
  gemm_split(a->k, crs, parts, &pm, &pn);
  if (g >= pm * pn) return 0;
  gemm_range(a->k, pm, g / pn, GEMM_MR, &k0, &k1);
  gemm_range(crs, pn, g % pn, GEMM_NR, &j0, &j1);
  if (k0 >= k1 || j0 >= j1) return 0;
  static gemm_pack_fn colt_fn;
  gemm_pack_fn colt = __atomic_load_n(&colt_fn, __ATOMIC_RELAXED);
  if (!colt) colt = pick_colt(), __atomic_store_n(&colt_fn, colt, __ATOMIC_RELAXED);
  /* One GEMM over the whole batch: dW = dy (K x N*PQ) . col(x)^T. */
  conv_pack_t cp = {a, a->x};
  gemm_part_t gp = {.c = a->dw, .pack_a = pack_dy, .pack_b = colt, .pack_ctx = &cp, .ldc = crs, .m0 = k0,
                    .n0 = j0, .mc = k1 - k0, .nc = j1 - j0, .k = a->n * pq, .alpha = 1.0f, .beta = 0.0f};
  gemm_part(&gp, ctx->group_segment);
  if (a->dbias && j0 == 0) bias_gradient(a, k0, k1);
  return 0;
}

/* ---- direct paths: a work-group per output plane (forward), input plane
 * (backward data) or filter slice (backward filter) ------------------------- */

/* Tap (r, s) between one input plane and one output plane: each output
 * position (p, q) it reaches inside the input, with the input position
 * it reads. FORWARD: to[p, q] += w in[ih, iw]; DATA: to[ih, iw] += w
 * out[p, q] (to is dx, out dy); FILTER: *acc += out[p, q] in[ih, iw]. */
enum { FORWARD, DATA, FILTER };
AQ_INLINE void tap(const aq_conv2d_args_t *a, int pass, int64_t r, int64_t s, float wv, const float *in,
                   const float *out, float *to, double *acc) {
  for (int64_t p = 0; p < a->p; ++p) {
    int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h;
    if (ih < 0 || ih >= a->h) continue;
    for (int64_t q = 0; q < a->q; ++q) {
      int64_t iw = q * a->stride_w - a->pad_w + s * a->dil_w;
      if (iw < 0 || iw >= a->wd) continue;
      const int64_t i = ih * a->wd + iw, o = p * a->q + q;
      if (pass == FORWARD) to[o] += wv * in[i];
      else if (pass == DATA) to[i] += wv * out[o];
      else *acc += (double)out[o] * in[i];
    }
  }
}

static int direct_fwd(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n * a->k, &lo, &hi)) return 0;
  for (int64_t nk = lo; nk < hi; ++nk) {
    int64_t n = nk / a->k, k = nk % a->k;
    float *y = a->y + nk * a->p * a->q;
    for (int64_t i = 0; i < a->p * a->q; ++i) y[i] = a->bias ? a->bias[k] : 0.0f;
    for (int64_t c = 0; c < a->c; ++c) {
      const float *x = a->x + (n * a->c + c) * a->h * a->wd, *w = a->w + (k * a->c + c) * a->r * a->s;
      for (int64_t r = 0; r < a->r; ++r)
        for (int64_t s = 0; s < a->s; ++s) tap(a, FORWARD, r, s, w[r * a->s + s], x, NULL, y, NULL);
    }
  }
  return 0;
}

static int direct_bwd_data(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n * a->c, &lo, &hi)) return 0;
  for (int64_t nc = lo; nc < hi; ++nc) {
    int64_t n = nc / a->c, c = nc % a->c;
    float *dx = a->dx + nc * a->h * a->wd;
    memset(dx, 0, (size_t)(a->h * a->wd) * sizeof(float));
    for (int64_t k = 0; k < a->k; ++k) {
      const float *dy = a->dy + (n * a->k + k) * a->p * a->q, *w = a->w + (k * a->c + c) * a->r * a->s;
      for (int64_t r = 0; r < a->r; ++r)
        for (int64_t s = 0; s < a->s; ++s) tap(a, DATA, r, s, w[r * a->s + s], NULL, dy, dx, NULL);
    }
  }
  return 0;
}

static int direct_bwd_filter(const aq_conv2d_args_t *a, const aq_dispatch_ctx_t *ctx) {
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->k * a->c, &lo, &hi)) return 0;
  for (int64_t kc = lo; kc < hi; ++kc) {
    int64_t k = kc / a->c, c = kc % a->c;
    float *dw = a->dw + kc * a->r * a->s;
    for (int64_t r = 0; r < a->r; ++r)
      for (int64_t s = 0; s < a->s; ++s) {
        double acc = 0;
        for (int64_t n = 0; n < a->n; ++n)
          tap(a, FILTER, r, s, 0.0f, a->x + (n * a->c + c) * a->h * a->wd, a->dy + (n * a->k + k) * a->p * a->q,
              NULL, &acc);
        dw[r * a->s + s] = (float)acc;
      }
    if (c == 0 && a->dbias) {
      double b = 0;
      for (int64_t n = 0; n < a->n; ++n)
        for (int64_t i = 0; i < a->p * a->q; ++i) b += a->dy[(n * a->k + k) * a->p * a->q + i];
      a->dbias[k] = (float)b;
    }
  }
  return 0;
}

/* ---- entry points ---------------------------------------------------------------- */

static int conv2d(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (use_gemm(a) && group_index(ctx) >= part_count(ctx)) return 0; /* no part: before any check */
  if (!a->x || !a->w || !a->y || !valid(a)) return 1;
  return use_gemm(a) ? gemm_fwd(a, ctx) : direct_fwd(a, ctx);
}

/* The data gradient's GEMM path needs r x s rows of at least 256 pixels in
 * the column buffer; larger filters take the direct loops. */
static int bwd_data_gemm(const aq_conv2d_args_t *a) {
  return use_gemm(a) && a->r > 0 && a->s > 0 && a->r * a->s <= COL_FLOATS / 256;
}

static int conv2d_bwd_data(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (bwd_data_gemm(a) && group_index(ctx) >= part_count(ctx)) return 0; /* no part: before any check */
  if (!a->w || !a->dy || !a->dx || !valid(a)) return 1;
  if (bwd_data_gemm(a)) return gemm_bwd_data(a, ctx);
  return direct_bwd_data(a, ctx);
}

static int conv2d_bwd_filter(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_conv2d_args_t *a = kernarg;
  if (use_gemm(a) && group_index(ctx) >= part_count(ctx)) return 0; /* no part: before any check */
  if (!a->x || !a->dy || !a->dw || !valid(a)) return 1;
  return use_gemm(a) ? gemm_bwd_filter(a, ctx) : direct_bwd_filter(a, ctx);
}

const aq_kernel_desc_t aq_cpu_conv2d_desc = {AQ_KERNEL_CONV2D, conv2d, sizeof(aq_conv2d_args_t), 8,
                                             (uint32_t)GEMM_SCRATCH_BYTES, 0};
const aq_kernel_desc_t aq_cpu_conv2d_bwd_data_desc = {AQ_KERNEL_CONV2D_BWD_DATA, conv2d_bwd_data,
                                                      sizeof(aq_conv2d_args_t), 8, CONV_SCRATCH, 0};
const aq_kernel_desc_t aq_cpu_conv2d_bwd_filter_desc = {AQ_KERNEL_CONV2D_BWD_FILTER, conv2d_bwd_filter,
                                                        sizeof(aq_conv2d_args_t), 8, (uint32_t)GEMM_SCRATCH_BYTES, 0};
