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

static void usage(FILE *f) {
  fprintf(f, "usage: aq-bench SUITE [options]\nsuites:\n");
  for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); ++i) {
    int built = lookup(suites[i].name) != NULL;
    fprintf(f, "  %-9s %s%s\n", suites[i].name, suites[i].what, built ? "" : " (not built)");
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  int known = 0;
  for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); ++i)
    known |= !strcmp(argv[1], suites[i].name);
  if (!known) {
    fprintf(stderr, "aq-bench: unknown suite '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  suite_fn fn = lookup(argv[1]);
  if (!fn) {
    fprintf(stderr, "aq-bench: suite '%s' is not built into this aq-bench\n", argv[1]);
    return 2;
  }
  return fn(argc - 1, argv + 1);
}
