/* aq_adam_f32 (Adam and AdamW) and aq_increment_f32, its step counter. The
 * update loop is written with intrinsics for AVX-512 and AVX2 (the compiler
 * will not vectorise sqrtf without -fno-math-errno), a scalar loop
 * elsewhere, picked at run time (simd.h). */
#include <math.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct adam_consts {
  float lr, b1, b2, eps, wd, c1, c2;
  int decoupled;
} adam_consts_t;

static void adam_scalar(float *w, const float *grad, float *m, float *v, int64_t n, const adam_consts_t *k) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] + (k->decoupled ? 0.0f : k->wd * w[i]);
    float mi = k->b1 * m[i] + (1.0f - k->b1) * g;
    float vi = k->b2 * v[i] + (1.0f - k->b2) * g * g;
    m[i] = mi, v[i] = vi;
    float step = (mi / k->c1) / (sqrtf(vi / k->c2) + k->eps);
    w[i] -= k->lr * (step + (k->decoupled ? k->wd * w[i] : 0.0f));
  }
}

#if defined(__x86_64__)
AQ_TARGET_AVX512 static void adam_avx512(float *w, const float *grad, float *m, float *v, int64_t n,
                                         const adam_consts_t *k) {
  const __m512 b1 = _mm512_set1_ps(k->b1), nb1 = _mm512_set1_ps(1.0f - k->b1), b2 = _mm512_set1_ps(k->b2),
               nb2 = _mm512_set1_ps(1.0f - k->b2), ic1 = _mm512_set1_ps(1.0f / k->c1),
               ic2 = _mm512_set1_ps(1.0f / k->c2), eps = _mm512_set1_ps(k->eps), lr = _mm512_set1_ps(k->lr),
               l2 = _mm512_set1_ps(k->decoupled ? 0.0f : k->wd), dec = _mm512_set1_ps(k->decoupled ? k->wd : 0.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wi = _mm512_loadu_ps(w + i), g = _mm512_fmadd_ps(l2, wi, _mm512_loadu_ps(grad + i));
    __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(nb1, g));
    __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(nb2, _mm512_mul_ps(g, g)));
    _mm512_storeu_ps(m + i, mi), _mm512_storeu_ps(v + i, vi);
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, ic2)), eps);
    __m512 step = _mm512_div_ps(_mm512_mul_ps(mi, ic1), den);
    _mm512_storeu_ps(w + i, _mm512_sub_ps(wi, _mm512_mul_ps(lr, _mm512_fmadd_ps(dec, wi, step))));
  }
  adam_scalar(w + i, grad + i, m + i, v + i, n - i, k);
}

AQ_TARGET_AVX2 static void adam_avx2(float *w, const float *grad, float *m, float *v, int64_t n,
                                     const adam_consts_t *k) {
  const __m256 b1 = _mm256_set1_ps(k->b1), nb1 = _mm256_set1_ps(1.0f - k->b1), b2 = _mm256_set1_ps(k->b2),
               nb2 = _mm256_set1_ps(1.0f - k->b2), ic1 = _mm256_set1_ps(1.0f / k->c1),
               ic2 = _mm256_set1_ps(1.0f / k->c2), eps = _mm256_set1_ps(k->eps), lr = _mm256_set1_ps(k->lr),
               l2 = _mm256_set1_ps(k->decoupled ? 0.0f : k->wd), dec = _mm256_set1_ps(k->decoupled ? k->wd : 0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wi = _mm256_loadu_ps(w + i), g = _mm256_fmadd_ps(l2, wi, _mm256_loadu_ps(grad + i));
    __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(nb1, g));
    __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(nb2, _mm256_mul_ps(g, g)));
    _mm256_storeu_ps(m + i, mi), _mm256_storeu_ps(v + i, vi);
    __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, ic2)), eps);
    __m256 step = _mm256_div_ps(_mm256_mul_ps(mi, ic1), den);
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, _mm256_mul_ps(lr, _mm256_fmadd_ps(dec, wi, step))));
  }
  adam_scalar(w + i, grad + i, m + i, v + i, n - i, k);
}
#endif

typedef void (*adam_fn)(float *, const float *, float *, float *, int64_t, const adam_consts_t *);

static adam_fn pick(void) {
#if defined(__x86_64__)
  switch (aq_cpu_isa()) {
    case AQ_CPU_ISA_AVX512: return adam_avx512;
    case AQ_CPU_ISA_AVX2: return adam_avx2;
    default: break;
  }
#endif
  return adam_scalar;
}

static int adam(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_adam_args_t *a = kernarg;
  if (!a->w || !a->grad || !a->m || !a->v || !a->steps || a->n < 0) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->n, &lo, &hi)) return 0;
  static adam_fn fn_cache;
  adam_fn fn = __atomic_load_n(&fn_cache, __ATOMIC_RELAXED);
  if (!fn) fn = pick(), __atomic_store_n(&fn_cache, fn, __ATOMIC_RELAXED);
  float t = a->steps[0] + 1.0f;
  adam_consts_t k = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, 1.0f - powf(a->beta1, t),
                     1.0f - powf(a->beta2, t), a->decoupled};
  fn(a->w + lo, a->grad + lo, a->m + lo, a->v + lo, hi - lo, &k);
  return 0;
}

static int increment(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)ctx;
  const aq_increment_args_t *a = kernarg;
  if (!a->x) return 1;
  a->x[0] += 1.0f;
  return 0;
}

const aq_kernel_desc_t aq_cpu_adam_desc = {AQ_KERNEL_ADAM, adam, sizeof(aq_adam_args_t), 8, 0, 0};
const aq_kernel_desc_t aq_cpu_increment_desc = {AQ_KERNEL_INCREMENT, increment, sizeof(aq_increment_args_t), 8, 0, 0};
