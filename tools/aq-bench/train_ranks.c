/* aq-bench train --ranks N: data-parallel scaling of the training step,
 * run under mpirun -np N (each process a rank, --batch rows each, as DDP's
 * batch per GPU), or, not under mpirun, over N GPU agents of this process
 * (a replica of the step each). Rank 0 first trains alone (the 1-rank figure) while the
 * others wait, then every rank trains the data-parallel step; rank 0 prints
 * one JSON line for each: ranks, us_per_step (median over --steps timed
 * steps after 5 warm-up ones), samples_per_s, scaling (samples/s over the
 * 1-rank figure) and, on the N-rank line, allreduce_us (the median time of
 * one mean all-reduce of all the gradients: through NCCL on the GPUs where
 * each rank has one, with MPI's on host memory as allreduce_mpi_us; else
 * MPI's). The data-parallel step all-reduces through NCCL where every
 * rank has a GPU, else through MPI on the host. Options as
 * aq-bench train's, plus --hidden N (1024). */
#include <stdlib.h>
#include <string.h>

#include "train_ranks.h"

#include "bench.h"

enum { WARMUP = 5 };

typedef struct scale_run {
  double us_per_step, samples_per_s;
} scale_run_t;

static int time_steps(aq_trainer_options_t *o, const aq_fashion_set_t *train, const aq_fashion_set_t *test, long steps,
                      scale_run_t *out) {
  aq_trainer_t *t;
  aq_status_t s = aq_trainer_create(o, train, test, &t);
  if (s != AQ_OK) {
    fprintf(stderr, "aq-bench train: %s\n", aq_trainer_error(s));
    return 1;
  }
  /* --explain 1: the data-parallel step's placement (the 1-rank one's is
   * aq-bench train's), on stderr: stdout is JSON's */
  if (o->comm && bench_arg_int("explain", 0) && aq_exec_explain(aq_trainer_exec(t), stderr) != AQ_OK)
    fprintf(stderr, "aq-bench train: --explain: %s\n", aq_last_error());
  double *us = calloc((size_t)steps, sizeof(double));
  aq_trainer_begin_epoch(t, 0);
  for (long i = 0; i < WARMUP + steps && s == AQ_OK; ++i) {
    uint64_t t0 = bench_now_ns();
    s = aq_trainer_step(t, NULL);
    if (i >= WARMUP) us[i - WARMUP] = (double)(bench_now_ns() - t0) / 1e3;
  }
  if (s != AQ_OK) fprintf(stderr, "aq-bench train: %s\n", aq_trainer_error(s));
  out->us_per_step = bench_median(us, (size_t)steps);
  out->samples_per_s = (double)o->batch / (out->us_per_step * 1e-6);
  free(us);
  aq_trainer_destroy(t);
  return s != AQ_OK;
}

/* The gradients' floats: the model's parameters (trainer.h keeps them
 * private, so counted from the MLP's shape; the CNN's are few). */
static size_t gradient_floats(const aq_trainer_options_t *o) {
  size_t h = o->hidden;
  return !strcmp(o->model, "mlp") ? 784 * h + h + h * h + h + h * 10 + 10 : 62006;
}

static double allreduce_us(aq_comm_t *c, size_t n) {
  float *g = calloc(n, sizeof(float));
  double us[20];
  for (int i = 0; i < 20; ++i) {
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK("train", aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = AQ_REDUCE_MEAN,
                                                           .send = g, .recv = g, .count = n}));
    us[i] = (double)(bench_now_ns() - t0) / 1e3;
  }
  free(g);
  return bench_median(us, 20);
}

/* A GPU agent's device memory for n floats, or NULL. */
static float *device_floats(aq_agent_t agent, size_t n) {
  aq_region_t dev;
  float *g = NULL;
  if (bench_device_region(agent, &dev) == AQ_OK && dev.handle)
    BENCH_CHECK("train", aq_memory_allocate(dev, n * sizeof(float), (void **)&g));
  return g;
}

enum { LOCALS_MAX = 16 };

/* The same through NCCL on each local rank's GPU queue, where the
 * communicator has NCCL: the all-reduce a GPU data-parallel step would
 * make. -1 if not. A communicator of this process's GPUs has its local
 * ranks on the CUDA agents from its first one on. */
static double nccl_allreduce_us(aq_comm_t *c, size_t n) {
  aq_comm_info_t info;
  aq_comm_get_info(c, &info);
  if (!info.nccl || info.local_ranks > LOCALS_MAX) return -1;
  aq_agent_t agents[64];
  size_t na = 0;
  aq_agents(agents, 64, &na);
  float *g[LOCALS_MAX] = {0};
  aq_queue_t q[LOCALS_MAX];
  aq_signal_t done[LOCALS_MAX];
  uint32_t k = 0;
  for (size_t a = (size_t)info.gpu_agent; a < na && a < 64 && k < info.local_ranks; ++a) {
    aq_agent_info_t ai;
    aq_agent_get_info(agents[a], &ai);
    if (ai.kind != AQ_AGENT_KIND_GPU || strcmp(ai.driver, "cuda")) continue;
    if (!(g[k] = device_floats(agents[a], n))) return -1;
    BENCH_CHECK("train", aq_queue_create(agents[a], NULL, &q[k]));
    BENCH_CHECK("train", aq_signal_create(0, &done[k]));
    ++k;
  }
  if (k < info.local_ranks) return -1;
  double us[20];
  for (int i = 0; i < 20; ++i) {
    uint64_t t0 = bench_now_ns();
    for (uint32_t l = 0; l < k; ++l) {
      aq_signal_store(done[l], 1);
      BENCH_CHECK("train", aq_comm_enqueue(c, q[l], &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE,
                                                                      .reduce = AQ_REDUCE_MEAN, .send = g[l],
                                                                      .recv = g[l], .count = n},
                                           done[l]));
    }
    for (uint32_t l = 0; l < k; ++l)
      BENCH_CHECK("train", aq_signal_wait(done[l], AQ_SIGNAL_EQ, 0, 60ull * 1000000000ull, NULL));
    us[i] = (double)(bench_now_ns() - t0) / 1e3;
  }
  for (uint32_t l = 0; l < k; ++l) aq_signal_destroy(done[l]), aq_queue_destroy(q[l]), aq_memory_free(g[l]);
  return bench_median(us, 20);
}

static void line(const aq_trainer_options_t *o, const char *placement, uint32_t ranks, const scale_run_t *r, double base,
                 double ar_us, double nccl_us, long reps) {
  bench_json_t j;
  bench_json_begin(&j, "train", "aquila");
  bench_json_str(&j, "model", o->model);
  bench_json_str(&j, "placement", placement);
  bench_json_int(&j, "batch", o->batch / (ranks ? ranks : 1));
  bench_json_int(&j, "hidden", o->hidden);
  bench_json_int(&j, "ranks", ranks);
  bench_json_num(&j, "us_per_step", r->us_per_step);
  bench_json_num(&j, "samples_per_s", r->samples_per_s);
  bench_json_num(&j, "scaling", r->samples_per_s / base);
  /* allreduce_us: NCCL's where the GPUs have it, else MPI's on the host */
  if (nccl_us >= 0) bench_json_num(&j, "allreduce_us", nccl_us);
  if (ar_us >= 0) bench_json_num(&j, nccl_us >= 0 ? "allreduce_mpi_us" : "allreduce_us", ar_us);
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
}

int aq_bench_train_ranks(aq_trainer_options_t *o, const char *placement,
                         const aq_fashion_set_t *train, const aq_fashion_set_t *test) {
  long want = bench_arg_int("ranks", 1), steps = bench_arg_int("steps", 50);
  o->hidden = (uint32_t)bench_arg_int("hidden", 1024);
  if (steps < 1) steps = 50;
  /* Not under mpirun, the ranks are this process's GPUs, a replica of
   * the step each. */
  int in_process = want > 1 && !getenv("OMPI_COMM_WORLD_SIZE");
  aq_comm_t *c;
  BENCH_CHECK("train", in_process ? aq_comm_create_gpus(NULL, &c) : aq_comm_create_mpi(NULL, NULL, &c));
  aq_comm_info_t info;
  aq_comm_get_info(c, &info);
  if ((long)info.size != want) {
    fprintf(stderr,
            "aq-bench train: --ranks %ld, but this %s has %u ranks (run it as mpirun -np %ld aq-bench ..., or in "
            "one process with that many GPU agents)\n",
            want, in_process ? "process's GPU communicator" : "job", info.size, want);
    aq_comm_destroy(c);
    return 2;
  }
  scale_run_t one = {0}, all = {0};
  int rc = 0;
  if (info.rank == 0) rc = time_steps(o, train, test, steps, &one);
  float base = (float)one.samples_per_s;
  if (!in_process)
    BENCH_CHECK("train",
                aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_BROADCAST, .recv = &base, .count = 1}));
  if (info.rank == 0 && !rc) line(o, placement, 1, &one, base, -1, -1, steps);
  aq_trainer_options_t dp = *o;
  dp.comm = c, dp.rank = info.rank, dp.ranks = info.size, dp.batch = o->batch * info.size;
  if (!rc) rc = time_steps(&dp, train, test, steps, &all);
  double ar = rc || in_process ? -1 : allreduce_us(c, gradient_floats(o));
  double nccl = rc ? -1 : nccl_allreduce_us(c, gradient_floats(o));
  if (info.rank == 0 && !rc) line(&dp, placement, info.size, &all, base, ar, nccl, steps);
  aq_comm_destroy(c);
  return rc;
}
