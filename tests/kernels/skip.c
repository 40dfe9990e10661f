/* The GEMM's zero skipping (kernels/cpu/gemm.c): A's zeros are left out,
 * row by row where A is sparse (sparse rows), else as depth steps where a
 * 12-row panel, or a 6-row half of one, is all zero (panels, on AVX2 and
 * Zen 4); sparse rows on the AVX2 and AVX-512 engines.
 * What it promises: C is the dense kernel's, bit for bit (each sum runs in
 * order over the same nonzero terms), except that an Inf or NaN of B
 * meeting only zeros of A no longer reaches C. Both are checked here,
 * against an in-order FMA reference, on both layouts of A. */
#include <cpuid.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

TestSuite(skip, .init = setup, .fini = teardown);

/* Whether this process's GEMM skips zeros (sparse rows): the AVX2 and
 * AVX-512 engines do, unless AQ_CPU_ISA caps the kernels to generic or
 * AQ_GEMM_SKIP_ZEROS=0. */
static int skipping(void) {
  const char *isa = getenv("AQ_CPU_ISA"), *off = getenv("AQ_GEMM_SKIP_ZEROS");
  if ((isa && !strcmp(isa, "generic")) || (off && !strcmp(off, "0"))) return 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
}

/* Whether the AVX-512 engine runs. */
static int avx512(void) {
  const char *isa = getenv("AQ_CPU_ISA");
  __builtin_cpu_init();
  return !(isa && strcmp(isa, "avx512")) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2");
}

/* Whether it plans panels too: the AVX2 engine does, and the AVX-512 one
 * on Zen 4 only (AMD family 0x19). */
static int planning_panels(void) {
  unsigned a, b, c, d;
  if (!skipping()) return 0;
  if (!avx512()) return 1;
  if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
  return ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (a >> 20) & 0xff : 0) == 0x19;
}

/* Whether the vector kernels run (their sums are in-order FMAs). */
static int vector_kernels(void) {
  const char *isa = getenv("AQ_CPU_ISA");
  __builtin_cpu_init();
  return !(isa && !strcmp(isa, "generic")) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

enum { KC = 512 }; /* GEMM_KC: the depth of a slice; C takes each slice's sum in turn */

/* A grid of `groups` work-groups: the product cut into at most that many
 * parts whatever the worker count, so parts stay wide enough (128 columns)
 * for sparse rows on a 16-core machine too. 0: aq_matmul_grid's. */
static aq_dispatch_shape_t grid_of(aq_matmul_args_t *args, uint32_t groups) {
  aq_dispatch_shape_t s = aq_matmul_grid(args);
  if (groups) s.grid[0] = groups, s.workgroup[0] = 1;
  return s;
}

/* What the vector kernels compute for C = 1.5 op(A) op(B) + bias (beta 0):
 * per depth slice an in-order FMA chain from zero, scaled, added to C after
 * the first. (A partial micro-tile's scalar write-back rounds the same way
 * when beta is 0 on the first slice and 1 after.) */
static float reference(const float *a, const float *b, const float *bias, int64_t i, int64_t j, int64_t k, int ta,
                       int64_t lda, int64_t ldb) {
  float c = 0.0f;
  for (int64_t s = 0; s < k || s == 0; s += KC) {
    float acc = 0.0f;
    for (int64_t l = s; l < k && l < s + KC; ++l) acc = fmaf(ta ? a[l * lda + i] : a[i * lda + l], b[l * ldb + j], acc);
    float v = 1.5f * acc;
    if (s > 0) v = fmaf(1.0f, c, v);
    c = v + (s + KC >= k && bias ? bias[j] : 0.0f);
  }
  return c;
}

/* A (m x k, or k x m when ta) with zero steps in patterns the planner
 * meets: rows zero throughout, panels zero at a step, one half zero at a
 * step, whole panels zero, and scattered zeros: about half of it zero (the
 * sparse path on Zen 4, the panels elsewhere); with `more`, four fifths
 * (the sparse path on every AVX-512 machine). */
static float *sparse_a(int64_t m, int64_t k, int ta, int64_t lda, unsigned seed, int more) {
  float *a = rnd((size_t)((ta ? k : m) * lda), seed);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l) {
      int64_t panel = i / 12, half = (i % 12) / 6;
      unsigned h = (unsigned)(l * 2654435761u + (uint64_t)panel * 40503u) >> 7;
      int zero = i % 17 == 3 ||                        /* a row zero throughout */
                 panel == 2 ||                         /* a panel zero throughout */
                 h % 5 == 0 ||                         /* the panel zero at this step */
                 (h % 5 == 1 && half == (int)(h & 1)) || /* one half zero at this step */
                 (h % 5 == 2 && half == (int)(h >> 3 & 1)) || ((h ^ (unsigned)i) % 11 == 0) ||
                 (more && (i * 7 + l * 13) % 5 < 3);
      if (zero) *(ta ? &a[l * lda + i] : &a[i * lda + l]) = (i + l) % 2 ? 0.0f : -0.0f;
    }
  return a;
}

/* A mostly nonzero (too dense for sparse rows) whose zeros come in whole
 * steps, as a layer's dead units leave them: one step in ten zero in
 * every row, and in one half of a panel at one step in seven. */
static float *dead_steps_a(int64_t m, int64_t k, int ta, int64_t lda, unsigned seed) {
  float *a = rnd((size_t)((ta ? k : m) * lda), seed);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      if (l % 10 == 3 || (l % 7 == 4 && (i % 12) / 6 == (l / 7) % 2)) *(ta ? &a[l * lda + i] : &a[i * lda + l]) = 0.0f;
  return a;
}

/* C of a finished product (alpha 1.5, beta 0) against reference(): bit
 * for bit where the vector kernels run, else within rounding. */
static void assert_in_order(const aq_matmul_args_t *p) {
  int exact = vector_kernels();
  for (int64_t i = 0; i < p->m; ++i)
    for (int64_t j = 0; j < p->n; ++j) {
      float got = p->c[i * p->ldc + j], want = reference(p->a, p->b, p->bias, i, j, p->k, p->trans_a, p->lda, p->ldb);
      if (exact)
        cr_assert(!memcmp(&got, &want, sizeof(float)),
                  "%lldx%lldx%lld ta=%d lda=%lld: C[%lld,%lld] = %a, in-order FMA gives %a", (long long)p->m,
                  (long long)p->n, (long long)p->k, p->trans_a, (long long)p->lda, (long long)i, (long long)j, got,
                  want);
      else
        cr_assert(fabsf(got - want) <= 1e-5f * (float)(p->k + 1) * (1.0f + fabsf(want)), "C[%lld,%lld] = %g, want %g",
                  (long long)i, (long long)j, got, want);
    }
}

/* more: 0 the patterns above, 1 four fifths zero, 2 dead steps. */
static void check_bitwise_more(int64_t m, int64_t n, int64_t k, int ta, int bias, int more) {
  int64_t lda = (ta ? m : k) + 5, ldb = n + 32, ldc = n + 7;
  float *a = more == 2 ? dead_steps_a(m, k, ta, lda, 21) : sparse_a(m, k, ta, lda, 21, more);
  float *b = rnd((size_t)(k * ldb), 22), *bv = rnd((size_t)n, 23);
  float *c = rnd((size_t)(m * ldc), 24);
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .bias = bias ? bv : NULL, .m = m, .n = n, .k = k, .lda = lda,
                           .ldb = ldb, .ldc = ldc, .batch = 1, .alpha = 1.5f, .beta = 0.0f, .trans_a = ta};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, grid_of(&args, more == 1 ? 2 : 0)));
  assert_in_order(&args);
  free(a), free(b), free(bv), free(c);
}
static void check_bitwise(int64_t m, int64_t n, int64_t k, int ta, int bias) { check_bitwise_more(m, n, k, ta, bias, 0); }

static void bitwise_products(void) {
  /* 256 x 1024 x 784 is the MLP's first layer; the others cross the depth
   * slice (k > 512), leave partial panels (m % 12), and split into parts. */
  check_bitwise(256, 1024, 784, 0, 1);
  check_bitwise(784, 256, 256, 1, 0);
  check_bitwise(101, 96, 600, 0, 0);
  check_bitwise(101, 96, 600, 1, 1);
  check_bitwise(12, 32, 7, 0, 1);
  /* Every block boundary: two A blocks, two depth slices, two column chunks
   * of packed B, partial tiles. */
  check_bitwise(389, 1057, 515, 0, 1);
  check_bitwise(389, 1057, 515, 1, 0);
  /* Four fifths zero. */
  check_bitwise_more(389, 1057, 515, 0, 0, 1);
  check_bitwise_more(256, 300, 784, 1, 1, 1);
  check_bitwise_more(100, 304, 300, 0, 1, 1); /* a last group of 48 columns: one 16-column panel past 32 */
  /* Zeros in whole steps, A too dense for sparse rows: panels planned on
   * wide parts, across blocks and slices. */
  check_bitwise_more(389, 1057, 515, 0, 1, 2);
  check_bitwise_more(389, 300, 515, 1, 0, 2);
}

/* Each check runs on the machine's widest engine, then again with the
 * kernels capped to AVX2: the runtime started again under AQ_CPU_ISA=avx2,
 * since the kernels take their settings from the runtime, which read them
 * at aq_init (the ISA is picked once per process, and each test runs in a
 * process of its own). */
Test(skip, sparse_products_match_the_dense_sums_bit_for_bit) { bitwise_products(); }
Test(skip, sparse_products_match_the_dense_sums_bit_for_bit_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2");
  bitwise_products();
}

/* Dense A takes no plan. On AVX2 it streams B past A's panels (gemm.c:
 * the streaming order): a row-major A read in place, or packed where its
 * rows lie a multiple of 4 KB apart, or transposed. Every way sums in the
 * same order, so C is the in-order FMA chain's bit for bit: rows not a
 * multiple of 12, columns not of 16, two depth slices, parts. */
static void check_dense_bits(int64_t m, int64_t n, int64_t k, int ta, int64_t lda, int bias) {
  int64_t ldb = n + 3, ldc = n + 1;
  float *a = rnd((size_t)((ta ? k : m) * lda), 51), *b = rnd((size_t)(k * ldb), 52), *bv = rnd((size_t)n, 53);
  float *c = rnd((size_t)(m * ldc), 54);
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .bias = bias ? bv : NULL, .m = m, .n = n, .k = k, .lda = lda,
                           .ldb = ldb, .ldc = ldc, .batch = 1, .alpha = 1.5f, .beta = 0.0f, .trans_a = ta};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, grid_of(&args, 0)));
  assert_in_order(&args);
  free(a), free(b), free(bv), free(c);
}

static void dense_bits(void) {
  check_dense_bits(203, 301, 700, 0, 701, 1);  /* in place */
  check_dense_bits(203, 301, 700, 0, 1024, 0); /* rows 4 KB apart: packed */
  check_dense_bits(203, 301, 700, 1, 209, 1);  /* transposed: packed */
  check_dense_bits(30, 200, 0, 0, 8, 1);       /* no depth: bias alone */
}
Test(skip, dense_products_sum_in_order_bit_for_bit_however_a_is_read) { dense_bits(); }
Test(skip, dense_products_sum_in_order_bit_for_bit_however_a_is_read_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2");
  dense_bits();
}

/* beta, relu and a row bias on sparse A, against a double-precision sum
 * (these write-backs round differently from the FMA chain above). */
static void check_epilogue(int64_t m, int64_t n, int64_t k, int ta, int more) {
  int64_t lda = (ta ? m : k) + 1, ldb = n + 3, ldc = n + 2;
  float *a = sparse_a(m, k, ta, lda, 41, more), *b = rnd((size_t)(k * ldb), 42), *bv = rnd((size_t)n, 43);
  float *c = rnd((size_t)(m * ldc), 44), *c0 = malloc((size_t)(m * ldc) * sizeof(float));
  memcpy(c0, c, (size_t)(m * ldc) * sizeof(float));
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .bias = bv, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                           .ldc = ldc, .batch = 1, .alpha = 0.75f, .beta = 0.5f, .trans_a = ta,
                           .activation = AQ_ACTIVATION_RELU};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, grid_of(&args, more ? 1 : 0)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) sum += (double)(ta ? a[l * lda + i] : a[i * lda + l]) * b[l * ldb + j];
      double v = 0.75 * sum + 0.5 * c0[i * ldc + j] + bv[j];
      float want = (float)(v > 0 ? v : 0), got = c[i * ldc + j];
      cr_assert(fabsf(got - want) <= 2e-5f * (float)(k + 1) * (1.0f + fabsf(want)), "%lldx%lldx%lld ta=%d: C[%lld,%lld] = %g, want %g",
                (long long)m, (long long)n, (long long)k, ta, (long long)i, (long long)j, got, want);
    }
  free(a), free(b), free(bv), free(c), free(c0);
}

static void epilogues(void) {
  check_epilogue(389, 1057, 515, 0, 0);
  check_epilogue(200, 77, 300, 1, 0);
  check_epilogue(200, 300, 300, 1, 1);
}
Test(skip, sparse_products_take_beta_bias_and_relu) { epilogues(); }
Test(skip, sparse_products_take_beta_bias_and_relu_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2");
  epilogues();
}

/* B holds NaN in step 5 and Inf in step 9. In panel 0 (rows 0-11) A is zero
 * at both steps; in panel 1 only rows 12-17 (its first half) are, on most of
 * the steps, so the planner splits it into halves. Rows that meet a NaN or
 * an Inf through a nonzero of A are NaN or Inf as ever; rows that meet them
 * only through zeros are finite when the GEMM skips, NaN when it does not.
 * 64 columns take the panels; 128 with A three quarters zero, sparse rows. */
static void check_special(int ta, int64_t n, int sparse) {
  const int64_t m = 36, k = 40, lda = ta ? m : k, ldb = n, ldc = n;
  float *a = rnd((size_t)(m * k), 31), *b = rnd((size_t)(k * ldb), 32), *c = calloc((size_t)(m * ldc), sizeof(float));
#define A(i, l) (*(ta ? &a[(l) * lda + (i)] : &a[(i) * lda + (l)]))
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t i = 0; i < 12; ++i)
      if (l == 5 || l == 9 || l % 3 == 0) A(i, l) = 0.0f;
    for (int64_t i = 12; i < 18; ++i)
      if (l == 5 || l == 9 || l % 4 != 1) A(i, l) = 0.0f;
    for (int64_t i = 18; i < 24; ++i)
      if (l % 4 == 3) A(i, l) = 0.0f;
  }
  A(30, 9) = 0.0f; /* panel 2 keeps steps 5 and 9 through its other rows */
  for (int64_t i = 0; sparse && i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      if ((i + l) % 4 && !(i >= 18 && l == 5)) A(i, l) = 0.0f;
  for (int64_t j = 0; j < n; ++j) b[5 * ldb + j] = NAN, b[9 * ldb + j] = j % 2 ? INFINITY : -INFINITY;
  aq_matmul_args_t args = {.a = a, .b = b, .c = c, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .batch = 1, .alpha = 1.0f, .trans_a = ta};
  AQ_ASSERT_OK(run(AQ_KERNEL_MATMUL, &args, grid_of(&args, sparse ? 1 : 0)));
  int skips = sparse ? skipping() : planning_panels();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float v = c[i * ldc + j];
      if (i < 18)
        cr_assert(skips ? isfinite(v) : isnan(v), "ta=%d C[%lld,%lld] = %g: B's NaN and Inf meet only zeros of A (%s)",
                  ta, (long long)i, (long long)j, v, skips ? "skipped" : "dense");
      else
        cr_assert(isnan(v), "ta=%d C[%lld,%lld] = %g: B's NaN meets a nonzero of A", ta, (long long)i, (long long)j, v);
    }
#undef A
  free(a), free(b), free(c);
}

static void specials(void) {
  check_special(0, 64, 0);
  check_special(1, 64, 0);
  check_special(0, 128, 1);
  check_special(1, 128, 1);
}
Test(skip, nan_and_inf_of_b_reach_c_only_through_nonzeros_of_a) { specials(); }
Test(skip, nan_and_inf_of_b_reach_c_only_through_nonzeros_of_a_on_avx2) {
  kernels_restart_with("AQ_CPU_ISA", "avx2");
  specials();
}
