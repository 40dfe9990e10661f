/* Shared pieces of aq-bench's suites: timing, medians, JSON lines.
 *
 * Every suite prints one JSON object per line on stdout and nothing else
 * (progress goes to stderr). Keys are fixed by DESIGN.md ("bench", "impl",
 * parameters, figures named with their unit, "reps"). */
#ifndef AQ_BENCH_H_
#define AQ_BENCH_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "aquila/aquila.h"
#include "tools/common/cli.h"

/* Monotonic time in nanoseconds. */
uint64_t bench_now_ns(void);
/* Median of n values (sorts a copy). */
double bench_median(const double *values, size_t n);

/* A JSON line under construction: bench_json_begin, then fields, then end. */
typedef struct bench_json {
  char buf[2048];
  size_t len;
} bench_json_t;
void bench_json_begin(bench_json_t *j, const char *bench, const char *impl);
void bench_json_str(bench_json_t *j, const char *key, const char *value);
void bench_json_int(bench_json_t *j, const char *key, long long value);
void bench_json_num(bench_json_t *j, const char *key, double value);
void bench_json_end(bench_json_t *j); /* prints the line and flushes stdout */

/* Stops the suite (exit status 1) when an Aquila call fails, naming the
 * suite, the call and the error; for files that include aquila/aquila.h. */
#define BENCH_CHECK(suite, expr)                                                                           \
  do {                                                                                                   \
    aq_status_t s_ = (expr);                                                                             \
    if (s_ != AQ_OK) {                                                                                   \
      fprintf(stderr, "aq-bench %s: %s: %s: %s\n", suite, #expr, aq_status_string(s_), aq_last_error()); \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

/* n pseudo-random floats in [-0.5, 0.5) from seed: the same data every run. */
void bench_fill(float *x, size_t n, unsigned seed);

/* A GPU agent's device-memory region ({0} where it has none: allocating
 * from it then fails, saying so). */
aq_status_t bench_device_region(aq_agent_t gpu, aq_region_t *out);

/* Parses the suite's command line against its table of options (getopt_long
 * through tools/common/cli.h): --help lists them and exits 0; an unknown
 * option or a bad value is refused by name with exit status 2, before
 * anything runs. Then bench_arg reads an option's value (NULL if absent). */
void bench_options(const char *suite, const cli_option_t *table, size_t count, int argc, char **argv);
#define BENCH_OPTIONS(suite, table, argc, argv) \
  bench_options(suite, table, sizeof(table) / sizeof(table[0]), argc, argv)
const char *bench_arg(const char *key);
long bench_arg_int(const char *key, long fallback);
/* Options every suite that repeats its measurement takes. */
#define BENCH_REPS(fallback) {"reps", 0, CLI_INT, "R", "repetitions; the median is reported (default " #fallback ")", 1, 1e6}

/* A product for the gemm suites: C (m x n) = op(A) op(B) over k, A stored
 * k x m when ta, B stored n x k when tb. */
typedef struct bench_product {
  int64_t m, n, k;
  int ta, tb;
} bench_product_t;
/* The five large products of the MLP training step on a batch of 256
 * (aq-bench train): --shapes mlp. */
#define BENCH_MLP_STEP_PRODUCTS "256x1024x784,256x1024x1024,256x1024x1024:tb,1024x1024x256:ta,784x1024x256:ta"
/* One entry of --sizes (N: N x N x N) or --shapes (MxNxK[:ta][:tb]); 0 if
 * it is neither. */
int bench_parse_product(const char *entry, bench_product_t *out);
/* One entry of aq-bench conv's --shapes (N,C,H,W,K,R,S,STRIDE,PAD) into
 * out's sizes (dilation 1): BENCH_SHAPE_OK, BENCH_SHAPE_BAD (not nine
 * numbers, or sizes and stride below 1, pad below 0, past 2^24) or
 * BENCH_SHAPE_EMPTY (an output of no position); bench_conv_shape_error
 * says which, naming the entry. */
enum { BENCH_SHAPE_OK, BENCH_SHAPE_BAD, BENCH_SHAPE_EMPTY };
int bench_parse_conv_shape(const char *entry, aq_conv2d_args_t *out);
void bench_conv_shape_error(const char *entry, int why);
/* Every ';'-separated entry of list parsed, so that a bad one is refused
 * by name before anything is set up: 0, or 2 after saying which. */
int bench_check_conv_shapes(const char *list);
/* The gemm suites' list of products: --shapes (mlp or entries), else
 * --sizes, else fallback; each entry checked, so a bad one is refused by
 * name before anything starts (NULL, after saying so on stderr). */
const char *bench_products(const char *fallback);

/* Each suite: int aq_bench_<suite>(int argc, char **argv), 0 on success.
 * Defined weak in main.c, so a suite not linked says so instead of failing
 * the build. */
int aq_bench_queue(int argc, char **argv);
int aq_bench_gemm(int argc, char **argv);
int aq_bench_conv(int argc, char **argv);
int aq_bench_tasks(int argc, char **argv);
int aq_bench_dispatch(int argc, char **argv);
int aq_bench_train(int argc, char **argv);

#endif /* AQ_BENCH_H_ */
