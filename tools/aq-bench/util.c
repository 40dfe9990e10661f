/* Timing, medians, options and JSON output for every suite. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

void bench_fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 9) / 8388608.0f - 0.5f;
  }
}

aq_status_t bench_device_region(aq_agent_t gpu, aq_region_t *out) {
  aq_region_t regs[8];
  size_t n = 0;
  *out = (aq_region_t){0};
  aq_status_t s = aq_agent_regions(gpu, regs, 8, &n);
  for (size_t i = 0; s == AQ_OK && i < n && i < 8 && !out->handle; ++i) {
    aq_region_info_t ri;
    s = aq_region_get_info(regs[i], &ri);
    if (s == AQ_OK && ri.flags & AQ_REGION_DEVICE) *out = regs[i];
  }
  return s;
}

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(const double *values, size_t n) {
  if (n == 0) return 0.0;
  double *c = malloc(n * sizeof(*c));
  if (!c) return values[0];
  memcpy(c, values, n * sizeof(*c));
  qsort(c, n, sizeof(*c), cmp_double);
  double m = (n & 1) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  free(c);
  return m;
}

static void put(bench_json_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void put(bench_json_t *j, const char *fmt, ...) {
  if (j->len >= sizeof(j->buf)) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->buf + j->len, sizeof(j->buf) - j->len, fmt, ap);
  va_end(ap);
  if (n > 0) j->len += (size_t)n;
  if (j->len > sizeof(j->buf)) j->len = sizeof(j->buf);
}

void bench_json_begin(bench_json_t *j, const char *bench, const char *impl) {
  j->len = 0;
  put(j, "{\"bench\":\"%s\",\"impl\":\"%s\"", bench, impl);
}
void bench_json_str(bench_json_t *j, const char *key, const char *value) {
  put(j, ",\"%s\":\"%s\"", key, value);
}
void bench_json_int(bench_json_t *j, const char *key, long long value) {
  put(j, ",\"%s\":%lld", key, value);
}
void bench_json_num(bench_json_t *j, const char *key, double value) {
  put(j, ",\"%s\":%.6g", key, value);
}
void bench_json_end(bench_json_t *j) {
  put(j, "}");
  fwrite(j->buf, 1, j->len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

/* The suite's parsed command line: one suite runs per process. */
static cli_t options;

void bench_options(const char *suite, const cli_option_t *table, size_t count, int argc, char **argv) {
  static char program[64];
  snprintf(program, sizeof(program), "aq-bench %s", suite);
  options = (cli_t){.program = program, .options = table, .count = count,
                    .about = "Prints one JSON object per line on stdout (keys in shared/DESIGN.md)."};
  cli_parse(&options, argc, argv);
}

const char *bench_arg(const char *key) { return cli_text(&options, key, NULL); }

long bench_arg_int(const char *key, long fallback) { return cli_int(&options, key, fallback); }

int bench_parse_conv_shape(const char *entry, aq_conv2d_args_t *out) {
  long v[9];
  char end;
  memset(out, 0, sizeof(*out));
  if (sscanf(entry, "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
             &v[8], &end) != 9)
    return BENCH_SHAPE_BAD;
  for (int i = 0; i < 9; ++i)
    if (v[i] < (i < 8 ? 1 : 0) || v[i] > (1L << 24)) return BENCH_SHAPE_BAD; /* pad may be 0 */
  out->n = v[0], out->c = v[1], out->h = v[2], out->wd = v[3], out->k = v[4], out->r = v[5], out->s = v[6];
  out->stride_h = out->stride_w = (int32_t)v[7], out->pad_h = out->pad_w = (int32_t)v[8], out->dil_h = out->dil_w = 1;
  out->p = aq_conv_out(out->h, out->r, out->stride_h, out->pad_h, 1);
  out->q = aq_conv_out(out->wd, out->s, out->stride_w, out->pad_w, 1);
  return out->p > 0 && out->q > 0 ? BENCH_SHAPE_OK : BENCH_SHAPE_EMPTY;
}

void bench_conv_shape_error(const char *entry, int why) {
  if (why == BENCH_SHAPE_EMPTY) fprintf(stderr, "aq-bench conv: shape '%s' has no output\n", entry);
  else
    fprintf(stderr, "aq-bench conv: bad shape '%s' (N,C,H,W,K,R,S,STRIDE,PAD: sizes and stride >= 1, pad >= 0)\n",
            entry);
}

int bench_check_conv_shapes(const char *list) {
  char *all = strdup(list), *at = NULL;
  int rc = 0;
  for (char *tok = strtok_r(all, ";", &at); tok && !rc; tok = strtok_r(NULL, ";", &at)) {
    aq_conv2d_args_t a;
    int why = bench_parse_conv_shape(tok, &a);
    if (why != BENCH_SHAPE_OK) bench_conv_shape_error(tok, why), rc = 2;
  }
  free(all);
  return rc;
}

int bench_parse_product(const char *entry, bench_product_t *out) {
  long long m, n, k;
  int used = 0;
  memset(out, 0, sizeof(*out));
  if (sscanf(entry, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3) {
    char *end;
    m = n = k = strtoll(entry, &end, 10);
    used = (int)(end - entry);
  }
  for (const char *t = entry + used; *t; t += 3) {
    if (!strncmp(t, ":ta", 3)) out->ta = 1;
    else if (!strncmp(t, ":tb", 3)) out->tb = 1;
    else return 0;
  }
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  out->m = m, out->n = n, out->k = k;
  return 1;
}

const char *bench_products(const char *fallback) {
  const char *list = bench_arg("shapes");
  if (list && !strcmp(list, "mlp")) list = BENCH_MLP_STEP_PRODUCTS;
  if (!list) list = bench_arg("sizes");
  if (!list) list = fallback;
  char *all = strdup(list), *at = NULL;
  bench_product_t p;
  for (char *tok = strtok_r(all, ",", &at); tok; tok = strtok_r(NULL, ",", &at))
    if (!bench_parse_product(tok, &p)) {
      fprintf(stderr, "aq-bench gemm: '%s' is not a size N or a shape MxNxK[:ta][:tb]\n", tok);
      free(all);
      return NULL;
    }
  free(all);
  return list;
}
