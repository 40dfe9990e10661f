/* aq-bench SUITE [options]: Aquila's benchmark suites, JSON lines on stdout. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define WEAK __attribute__((weak))
WEAK int aq_bench_queue(int, char **);
WEAK int aq_bench_gemm(int, char **);
WEAK int aq_bench_conv(int, char **);
WEAK int aq_bench_tasks(int, char **);
WEAK int aq_bench_dispatch(int, char **);
WEAK int aq_bench_train(int, char **);

static const struct {
  const char *name;
  const char *what;
} suites[] = {
    {"queue", "AQL queue: dispatch packets/s, barrier-AND latency, signal wake-up"},
    {"gemm", "matmul GFLOP/s against OpenBLAS / cuBLAS"},
    {"conv", "conv2d GFLOP/s against im2col+OpenBLAS / cuDNN"},
    {"tasks", "task-graph overhead against StarPU and OpenMP"},
    {"dispatch", "GPU dispatch latency against raw CUDA"},
    {"train", "Fashion-MNIST training step time and accuracy"},
};
enum { NSUITES = sizeof(suites) / sizeof(suites[0]) };

typedef int (*suite_fn)(int, char **);

static suite_fn lookup(const char *name) {
  if (!strcmp(name, "queue")) return aq_bench_queue;
  if (!strcmp(name, "gemm")) return aq_bench_gemm;
  if (!strcmp(name, "conv")) return aq_bench_conv;
  if (!strcmp(name, "tasks")) return aq_bench_tasks;
  if (!strcmp(name, "dispatch")) return aq_bench_dispatch;
  if (!strcmp(name, "train")) return aq_bench_train;
  return NULL;
}

int main(int argc, char **argv) {
  char about[1024] = "suites (aq-bench SUITE --help lists a suite's options):";
  for (size_t i = 0, len = strlen(about); i < NSUITES && len < sizeof(about); ++i)
    len += (size_t)snprintf(about + len, sizeof(about) - len, "\n  %-9s %s%s", suites[i].name, suites[i].what,
                            lookup(suites[i].name) ? "" : " (not built)");
  cli_t c = {.program = "aq-bench", .operands = "SUITE [options]", .about = about, .min_operands = 1,
             .max_operands = argc, .subcommand = 1};
  cli_parse(&c, argc, argv);
  const char *suite = c.operand[0];
  int known = 0;
  for (size_t i = 0; i < NSUITES; ++i) known |= !strcmp(suite, suites[i].name);
  if (!known) cli_refuse(&c, "unknown suite '%s'", suite);
  suite_fn fn = lookup(suite);
  if (!fn) {
    fprintf(stderr, "aq-bench: suite '%s' is not built into this aq-bench\n", suite);
    return 2;
  }
  return fn(c.noperands, c.operand);
}
