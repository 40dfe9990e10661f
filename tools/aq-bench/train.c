/* aq-bench train: the Fashion-MNIST training step of the training library
 * (scheduler/train, the one examples/train_fashion runs), timed. One JSON line per epoch plus a summary line with the median step
 * time over all epochs' steps after the first (warm-up) epoch's first steps.
 * The peer, PyTorch eager, runs from shared/reference/torch_fashion_mlp.py in
 * the same device call (aq-bench does not embed Python).
 * Options: --model mlp|cnn, --placement auto|cpu|gpu, --epochs N (default 1), --batch N (256), --threads (informational:
 * workers come from AQ_CPU_WORKERS), --data DIR, --steps N (cap per epoch), --dot FILE (the placed step),
 * --explain 1 (why each task of the step runs where it does, on stderr).
 * The placement policy is the library's default: AQ_SCHED's, else heft. --ranks N: data-parallel scaling
 * under mpirun -np N (train_ranks.c). */
#include <stdlib.h>
#include <string.h>

#include "scheduler/train/trainer.h"
#include "bench.h"
#include "train_ranks.h"

static const cli_option_t train_options[] = {
    {"model", 0, CLI_CHOICE, "mlp|cnn", "the MLP (default) or the LeNet-5-like CNN", 0, 0},
    {"placement", 0, CLI_CHOICE, "auto|cpu|gpu", "every kernel on CPU agents, on GPU agents, or either (auto)", 0, 0},
    {"epochs", 0, CLI_INT, "N", "epochs (default 1)", 1, 1e6},
    {"batch", 0, CLI_INT, "N", "batch size (default 256)", 1, 1 << 20},
    {"steps", 0, CLI_INT, "N", "at most N steps an epoch (default: the whole epoch)", 1, 1e9},
    {"data", 0, CLI_TEXT, "DIR", "Fashion-MNIST files (default " AQ_FASHION_DEFAULT_DIR ")", 0, 0},
    {"dot", 0, CLI_TEXT, "FILE", "the placed step as a DOT graph", 0, 0},
    {"explain", 0, CLI_INT, "0|1", "1: why each task of the step runs where it does, on stderr", 0, 1},
    {"threads", 0, CLI_INT, "N", "ignored: workers come from AQ_CPU_WORKERS", 1, 1 << 20},
    {"hidden", 0, CLI_INT, "N", "MLP hidden width (default 1024)", 1, 1 << 20},
    {"ranks", 0, CLI_INT, "N", "data-parallel scaling under mpirun -np N (train_ranks.c)", 1, 1 << 16},
    {"bucket-kb", 0, CLI_INT, "KB", "--ranks: gradient bytes an all-reduce bucket gathers (default 25 MB)", 1, 1 << 22},
};

int aq_bench_train(int argc, char **argv) {
  BENCH_OPTIONS("train", train_options, argc, argv);
  int epochs = (int)bench_arg_int("epochs", 1);
  const char *data = bench_arg("data");
  long cap = bench_arg_int("steps", 0);
  aq_trainer_options_t o = {.model = "mlp", .optimizer = "sgd", .batch = (uint32_t)bench_arg_int("batch", 256),
                         .hidden = (uint32_t)bench_arg_int("hidden", 1024), .lr = 0.1f, .momentum = 0.9f, .seed = 1, .policy = AQ_SCHED_DEFAULT};
  const char *model = bench_arg("model");
  if (model && strcmp(model, "mlp") && strcmp(model, "cnn")) {
    fprintf(stderr, "aq-bench train: --model must be mlp or cnn, not '%s'\n", model);
    return 2;
  }
  if (model && !strcmp(model, "cnn")) o.model = "cnn", o.lr = 0.05f; /* as train_fashion's defaults */
  o.bucket_bytes = (size_t)bench_arg_int("bucket-kb", 0) << 10;
  const char *placement = bench_arg("placement");
  if (!placement) placement = "auto";
  o.kernel_agent_kinds = !strcmp(placement, "cpu") ? 1u << AQ_AGENT_KIND_CPU
                         : !strcmp(placement, "gpu") ? 1u << AQ_AGENT_KIND_GPU
                                                     : 0;
  aq_fashion_set_t train, test;
  char err[512];
  if (aq_fashion_load(data ? data : AQ_FASHION_DEFAULT_DIR, "train", &train, err, sizeof(err)) ||
      aq_fashion_load(data ? data : AQ_FASHION_DEFAULT_DIR, "t10k", &test, err, sizeof(err))) {
    fprintf(stderr, "aq-bench train: %s\n", err);
    return 1;
  }
  if (aq_init(NULL) != AQ_OK) {
    fprintf(stderr, "aq-bench train: %s\n", aq_last_error());
    return 1;
  }
  if (bench_arg("ranks")) {
    int rc = aq_bench_train_ranks(&o, placement, &train, &test);
    aq_fashion_free(&train), aq_fashion_free(&test);
    aq_shut_down();
    return rc;
  }
  aq_agent_t agent;
  size_t n;
  aq_agents(&agent, 1, &n);
  aq_agent_info_t info;
  aq_agent_get_info(agent, &info);
  aq_trainer_t *t;
  aq_status_t s = aq_trainer_create(&o, &train, &test, &t);
  if (s != AQ_OK) {
    fprintf(stderr, "aq-bench train: %s\n", aq_trainer_error(s));
    return 1;
  }
  const char *dot = bench_arg("dot"); /* the placed step, to see where each task went */
  if (dot && aq_exec_write_dot(aq_trainer_exec(t), dot) != AQ_OK) fprintf(stderr, "aq-bench train: %s\n", aq_last_error());
  if (bench_arg_int("explain", 0) && aq_exec_explain(aq_trainer_exec(t), stderr) != AQ_OK) /* stdout is JSON's */
    fprintf(stderr, "aq-bench train: %s\n", aq_last_error());
  uint32_t steps = aq_trainer_steps_per_epoch(t);
  if (cap > 0 && (uint32_t)cap < steps) steps = (uint32_t)cap;
  double *us = calloc((size_t)steps * (size_t)epochs, sizeof(double));
  size_t nus = 0;
  for (int ep = 0; ep < epochs && s == AQ_OK; ++ep) {
    aq_trainer_begin_epoch(t, (uint32_t)ep);
    float loss = 0;
    double *ep_us = calloc(steps, sizeof(double));
    for (uint32_t i = 0; i < steps && s == AQ_OK; ++i) {
      uint64_t t0 = bench_now_ns();
      s = aq_trainer_step(t, &loss);
      ep_us[i] = (double)(bench_now_ns() - t0) / 1e3;
      if (ep > 0 || i >= 5) us[nus++] = ep_us[i]; /* the first steps warm up */
    }
    double acc = 0;
    if (s == AQ_OK) s = aq_trainer_evaluate(t, &acc);
    if (s != AQ_OK) break;
    bench_json_t j;
    bench_json_begin(&j, "train", "aquila");
    bench_json_str(&j, "model", o.model);
    bench_json_str(&j, "placement", placement);
    bench_json_int(&j, "batch", o.batch);
    bench_json_int(&j, "threads", info.compute_units);
    bench_json_int(&j, "epoch", ep + 1);
    bench_json_num(&j, "us_per_step", bench_median(ep_us, steps));
    bench_json_num(&j, "loss", loss);
    bench_json_num(&j, "test_acc", acc);
    bench_json_int(&j, "reps", steps);
    bench_json_end(&j);
    free(ep_us);
  }
  if (s != AQ_OK) fprintf(stderr, "aq-bench train: %s\n", aq_trainer_error(s));
  free(us);
  aq_trainer_destroy(t);
  aq_fashion_free(&train), aq_fashion_free(&test);
  aq_shut_down();
  return s == AQ_OK ? 0 : 1;
}
