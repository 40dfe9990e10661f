/* GEMM: pack A into MR-row panels and B into NR-column panels for each
 * KC-deep block, then run the micro-kernel over every MR x NR micro-tile.
 * Packing zero-pads partial panels, so the micro-kernel never branches on
 * edges; only the write-back of a partial micro-tile goes through a buffer. */
#include "kernels/cpu/gemm.h"

#include <string.h>

#include "kernels/cpu/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

size_t gemm_scratch_bytes(int64_t nc_max) {
  int64_t np = (nc_max + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
  return (size_t)(GEMM_MC + np) * GEMM_KC * sizeof(float) + 128;
}

/* A panel: MR rows of op(A), kc deep, stored k-major: p[k * MR + r]. The
 * loops walk the source in its memory order (rows of A, or rows of A^T), so
 * reads are contiguous and only the writes stride, inside an L1-sized panel. */
static void pack_a(const gemm_tile_t *t, int64_t k0, int64_t kc, float *dst) {
  for (int64_t i0 = 0; i0 < t->mc; i0 += GEMM_MR) {
    int64_t rows = t->mc - i0 < GEMM_MR ? t->mc - i0 : GEMM_MR;
    if (rows < GEMM_MR) memset(dst, 0, (size_t)kc * GEMM_MR * sizeof(float));
    if (!t->trans_a) {
      for (int64_t r = 0; r < rows; ++r) {
        const float *src = t->a + (t->m0 + i0 + r) * t->lda + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * GEMM_MR + r] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float *src = t->a + (k0 + k) * t->lda + t->m0 + i0;
        for (int64_t r = 0; r < rows; ++r) dst[k * GEMM_MR + r] = src[r];
      }
    }
    dst += kc * GEMM_MR;
  }
}

/* A B panel: NR columns of op(B), kc deep: p[k * NR + c]. */
static void pack_b(const gemm_tile_t *t, int64_t k0, int64_t kc, float *dst) {
  for (int64_t j0 = 0; j0 < t->nc; j0 += GEMM_NR) {
    int64_t cols = t->nc - j0 < GEMM_NR ? t->nc - j0 : GEMM_NR, j = t->n0 + j0;
    if (cols < GEMM_NR) memset(dst, 0, (size_t)kc * GEMM_NR * sizeof(float));
    if (!t->trans_b) {
      for (int64_t k = 0; k < kc; ++k)
        memcpy(dst + k * GEMM_NR, t->b + (k0 + k) * t->ldb + j, (size_t)cols * sizeof(float));
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        const float *src = t->b + (j + c) * t->ldb + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * GEMM_NR + c] = src[k];
      }
    }
    dst += kc * GEMM_NR;
  }
}

/* C[MR][NR] (leading dimension ldc) = alpha * A_panel B_panel + beta * C,
 * with beta == 0 meaning C is not read. */
typedef void (*micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha,
                         float beta);

static void micro_c(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha,
                    float beta) {
  float acc[GEMM_MR][GEMM_NR] = {{0}};
  for (int64_t k = 0; k < kc; ++k)
    for (int r = 0; r < GEMM_MR; ++r)
      for (int j = 0; j < GEMM_NR; ++j) acc[r][j] += a[k * GEMM_MR + r] * b[k * GEMM_NR + j];
  for (int r = 0; r < GEMM_MR; ++r)
    for (int j = 0; j < GEMM_NR; ++j)
      c[r * ldc + j] = alpha * acc[r][j] + (beta != 0.0f ? beta * c[r * ldc + j] : 0.0f);
}

#if defined(__x86_64__)
AQ_TARGET_AVX512 static void micro_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                          float alpha, float beta) {
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c10 = _mm512_setzero_ps(),
         c11 = _mm512_setzero_ps(), c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(),
         c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps(), c40 = _mm512_setzero_ps(),
         c41 = _mm512_setzero_ps(), c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    __m512 a0 = _mm512_set1_ps(a[0]), a1 = _mm512_set1_ps(a[1]);
    c00 = _mm512_fmadd_ps(a0, b0, c00);
    c01 = _mm512_fmadd_ps(a0, b1, c01);
    c10 = _mm512_fmadd_ps(a1, b0, c10);
    c11 = _mm512_fmadd_ps(a1, b1, c11);
    __m512 a2 = _mm512_set1_ps(a[2]), a3 = _mm512_set1_ps(a[3]);
    c20 = _mm512_fmadd_ps(a2, b0, c20);
    c21 = _mm512_fmadd_ps(a2, b1, c21);
    c30 = _mm512_fmadd_ps(a3, b0, c30);
    c31 = _mm512_fmadd_ps(a3, b1, c31);
    __m512 a4 = _mm512_set1_ps(a[4]), a5 = _mm512_set1_ps(a[5]);
    c40 = _mm512_fmadd_ps(a4, b0, c40);
    c41 = _mm512_fmadd_ps(a4, b1, c41);
    c50 = _mm512_fmadd_ps(a5, b0, c50);
    c51 = _mm512_fmadd_ps(a5, b1, c51);
    __builtin_prefetch(b + 8 * GEMM_NR);
    a += GEMM_MR;
    b += GEMM_NR;
  }
  __m512 acc[GEMM_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < GEMM_MR; ++r)
    for (int h = 0; h < 2; ++h) {
      float *p = c + r * ldc + 16 * h;
      __m512 v = _mm512_mul_ps(va, acc[r][h]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(p), v);
      _mm512_storeu_ps(p, v);
    }
}

/* AVX2 has 16 registers: the 32 columns go in two 16-wide halves. */
AQ_TARGET_AVX2 static void micro_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      float alpha, float beta) {
  float *c_out = c;
  for (int half = 0; half < 2; ++half) {
    const float *pa = a, *pb = b + 16 * half;
    __m256 c[GEMM_MR][2];
    for (int r = 0; r < GEMM_MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
      __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
      for (int r = 0; r < GEMM_MR; ++r) {
        __m256 ar = _mm256_broadcast_ss(pa + r);
        c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);
        c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);
      }
      pa += GEMM_MR;
      pb += GEMM_NR;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int r = 0; r < GEMM_MR; ++r)
      for (int h = 0; h < 2; ++h) {
        float *p = c_out + r * ldc + 16 * half + 8 * h;
        __m256 v = _mm256_mul_ps(va, c[r][h]);
        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), v);
        _mm256_storeu_ps(p, v);
      }
  }
}
#endif

static micro_fn pick_micro(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return micro_avx512;
    case AQ_CPU_ISA_AVX2: return micro_avx2;
    default: break;
  }
#endif
  return micro_c;
}

/* The micro-tiles of one packed A block against the packed B panel. */
static void block(const gemm_tile_t *t, micro_fn micro, const float *pa, const float *pb, int64_t kc, float beta) {
  float acc[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
  for (int64_t j0 = 0; j0 < t->nc; j0 += GEMM_NR) {
    int64_t cols = t->nc - j0 < GEMM_NR ? t->nc - j0 : GEMM_NR;
    for (int64_t i0 = 0; i0 < t->mc; i0 += GEMM_MR) {
      int64_t rows = t->mc - i0 < GEMM_MR ? t->mc - i0 : GEMM_MR;
      float *c = t->c + (t->m0 + i0) * t->ldc + t->n0 + j0;
      if (rows == GEMM_MR && cols == GEMM_NR && kc > 0) {
        micro(kc, pa + i0 * kc, pb + j0 * kc, c, t->ldc, t->alpha, beta);
        continue;
      }
      /* A partial micro-tile: compute into a full-size buffer, copy out. */
      if (kc > 0) micro(kc, pa + i0 * kc, pb + j0 * kc, acc, GEMM_NR, 1.0f, 0.0f);
      else memset(acc, 0, sizeof(acc));
      for (int64_t r = 0; r < rows; ++r) {
        float *cr = c + r * t->ldc;
        const float *x = acc + r * GEMM_NR;
        for (int64_t j = 0; j < cols; ++j) cr[j] = t->alpha * x[j] + (beta != 0.0f ? beta * cr[j] : 0.0f);
      }
    }
  }
}

/* BLIS's loop order inside a tile: for each KC-deep slice, B is packed once
 * and every GEMM_MC-row block of A streams against it. */
void gemm_tile(const gemm_tile_t *t, void *scratch) {
  static micro_fn micro;
  if (!micro) micro = pick_micro();
  float *pa = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  float *pb = pa + (int64_t)GEMM_MC * GEMM_KC;
  for (int64_t k0 = 0; k0 < t->k || k0 == 0; k0 += GEMM_KC) {
    int64_t kc = t->k - k0 < GEMM_KC ? t->k - k0 : GEMM_KC;
    float beta = k0 == 0 ? t->beta : 1.0f;
    if (kc > 0) pack_b(t, k0, kc, pb);
    for (int64_t i0 = 0; i0 < t->mc; i0 += GEMM_MC) {
      gemm_tile_t sub = *t;
      sub.m0 = t->m0 + i0;
      sub.mc = t->mc - i0 < GEMM_MC ? t->mc - i0 : GEMM_MC;
      if (kc > 0) pack_a(&sub, k0, kc, pa);
      block(&sub, micro, pa, pb, kc, beta);
    }
    if (kc <= 0) break;
  }
}
