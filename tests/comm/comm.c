/* Communicators and collectives: bad input and one-rank behaviour in this
 * process; several ranks through mpirun, which starts comm-ranks
 * (tests/comm/ranks) as each rank, whose output is checked here; GPU agents joined by
 * NCCL where there are some. Without mpirun (or libmpi) the rank tests say
 * "skipped", which counts as skipped, never as passing. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "runtime/comm.h"
#include "scheduler/graph_internal.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(comm, .init = setup, .fini = teardown);

static void need_mpi(void) {
  const char *why;
  AQ_ASSERT_OK(aq_comm_backend_status("mpi", &why));
  if (*why) cr_skip_test("skipped: no MPI (%s)", why);
}

Test(comm, backend_status) {
  const char *why = NULL;
  AQ_ASSERT_OK(aq_comm_backend_status("mpi", &why));
  cr_assert(why != NULL);
  AQ_ASSERT_OK(aq_comm_backend_status("nccl", &why));
  cr_assert(why != NULL);
  AQ_ASSERT_FAILS(aq_comm_backend_status("gloo", &why), AQ_ERROR_NOT_FOUND, "gloo");
  AQ_ASSERT_FAILS(aq_comm_backend_status(NULL, &why), AQ_ERROR_INVALID_ARGUMENT, "backend");
}

Test(comm, bad_arguments) {
  aq_comm_t *c;
  AQ_ASSERT_FAILS(aq_comm_create_mpi(NULL, NULL, NULL), AQ_ERROR_INVALID_ARGUMENT, "out_comm");
  (void)c; /* a bad AQ_COMM_TIMEOUT_MS is refused by aq_init: tests/runtime/settings.c */
  AQ_ASSERT_FAILS(aq_comm_run(NULL, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE}), AQ_ERROR_INVALID_ARGUMENT,
                  "comm");
  AQ_ASSERT_FAILS(aq_comm_destroy(NULL), AQ_ERROR_INVALID_ARGUMENT, "comm");
  aq_graph_t *g;
  aq_tensor_t x;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &x));
  AQ_ASSERT_FAILS(aq_op_allreduce(g, NULL, x, AQ_REDUCE_SUM), AQ_ERROR_INVALID_ARGUMENT, "MPI communicator");
  AQ_ASSERT_FAILS(aq_graph_data_parallel(g, NULL, NULL), AQ_ERROR_INVALID_ARGUMENT, "comm");
  AQ_ASSERT_FAILS(aq_op_allgather(g, NULL, x, &x), AQ_ERROR_INVALID_ARGUMENT, "comm");
  AQ_ASSERT_FAILS(aq_comm_get_info(NULL, NULL), AQ_ERROR_INVALID_ARGUMENT, "info");
  aq_graph_destroy(g);
}

Test(comm, no_gpu_communicator_without_gpus) {
  aq_comm_t *c = NULL;
  aq_status_t s = aq_comm_create_gpus(NULL, &c);
  if (s == AQ_OK) {
    aq_comm_destroy(c);
    cr_skip_test("skipped: this machine has GPUs (comm/gpus tests them)");
  }
  cr_assert_eq(s, AQ_ERROR_UNAVAILABLE, "%s: %s", aq_status_string(s), aq_last_error());
  cr_assert(c == NULL);
}

/* One process is a communicator of one rank (MPI's singleton start). */
Test(comm, one_rank) {
  need_mpi();
  aq_comm_t *c;
  AQ_ASSERT_OK(aq_comm_create_mpi(NULL, &(aq_comm_options_t){.timeout_ms = 5000}, &c));
  aq_comm_info_t info;
  AQ_ASSERT_OK(aq_comm_get_info(c, &info));
  cr_assert(info.rank == 0 && info.size == 1 && info.mpi && info.timeout_ms == 5000);
  float v[3] = {1, 2, 3}, w[3];
  AQ_ASSERT_OK(aq_comm_run(
      c,
      &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = AQ_REDUCE_MEAN, .send = v, .recv = w, .count = 3}));
  cr_assert(w[0] == 1 && w[1] == 2 && w[2] == 3);
  AQ_ASSERT_OK(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLGATHER, .send = v, .recv = w, .count = 0}));
  AQ_ASSERT_FAILS(aq_comm_run(c, &(aq_collective_t){.kind = 9, .send = v, .recv = w, .count = 3}),
                  AQ_ERROR_INVALID_ARGUMENT, "kind 9");
  AQ_ASSERT_FAILS(
      aq_comm_run(c,
                  &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = 5, .send = v, .recv = w, .count = 3}),
      AQ_ERROR_INVALID_ARGUMENT, "reduction 5");
  AQ_ASSERT_FAILS(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_BROADCAST, .root = 1, .recv = w, .count = 3}),
                  AQ_ERROR_INVALID_ARGUMENT, "root 1");
  AQ_ASSERT_FAILS(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLGATHER, .send = v, .recv = v, .count = 3}),
                  AQ_ERROR_INVALID_ARGUMENT, "apart");
  AQ_ASSERT_FAILS(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .count = 3}),
                  AQ_ERROR_INVALID_ARGUMENT, "no buffer");
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(first_cpu_agent(), NULL, &q));
  AQ_ASSERT_FAILS(
      aq_comm_enqueue(c, q, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .send = v, .recv = v, .count = 3},
                      (aq_signal_t){0}),
      AQ_ERROR_UNAVAILABLE, "NCCL");
  aq_queue_destroy(q);
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

/* A program that started MPI itself below MPI_THREAD_SERIALIZED is told
 * why its communicator cannot be made (the workers call MPI). */
Test(comm, refuses_mpi_started_single_threaded) {
  need_mpi();
  void *mpi = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
  cr_assert(mpi, "%s", dlerror());
  int (*init_thread)(int *, char ***, int, int *) = (int (*)(int *, char ***, int, int *))dlsym(mpi, "MPI_Init_thread");
  int provided = -1;
  cr_assert(init_thread && init_thread(NULL, NULL, 1 /* MPI_THREAD_FUNNELED */, &provided) == 0);
  if (provided >= 2) cr_skip_test("skipped: this MPI gives thread level %d when asked for FUNNELED", provided);
  aq_comm_t *c = NULL;
  AQ_ASSERT_FAILS(aq_comm_create_mpi(NULL, NULL, &c), AQ_ERROR_UNAVAILABLE, "MPI_THREAD_SERIALIZED");
  cr_assert(c == NULL);
}

/* Graph ops on one rank, and what aq_graph_data_parallel refuses. */
Test(comm, graph_ops_one_rank) {
  need_mpi();
  aq_comm_t *c;
  AQ_ASSERT_OK(aq_comm_create_mpi(NULL, NULL, &c));
  aq_graph_t *g;
  aq_tensor_t x, labels, w, logits, loss, gw, gathered;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){3, 5}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){3}, &labels));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){5, 2}, &w));
  AQ_ASSERT_FAILS(aq_op_allreduce(g, c, labels, AQ_REDUCE_SUM), AQ_ERROR_INVALID_ARGUMENT, "not f32");
  AQ_ASSERT_FAILS(aq_op_broadcast(g, c, x, 3), AQ_ERROR_INVALID_ARGUMENT, "root 3");
  AQ_ASSERT_FAILS(aq_op_allreduce(g, c, (aq_tensor_t){999}, AQ_REDUCE_SUM), AQ_ERROR_INVALID_HANDLE, "999");
  AQ_ASSERT_OK(aq_op_matmul(g, x, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_FAILS(aq_graph_data_parallel(g, c, NULL), AQ_ERROR_INVALID_GRAPH, "aq_graph_backward");
  AQ_ASSERT_OK(aq_graph_group_begin(g, 1));
  AQ_ASSERT_FAILS(aq_graph_data_parallel(g, c, NULL), AQ_ERROR_INVALID_GRAPH, "group");
  AQ_ASSERT_OK(aq_graph_group_end(g, NULL, NULL));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, labels, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  AQ_ASSERT_FAILS(aq_graph_data_parallel(g, c, &(aq_data_parallel_options_t){.root = 2}), AQ_ERROR_INVALID_ARGUMENT,
                  "root 2");
  AQ_ASSERT_OK(aq_graph_data_parallel(g, c, NULL));
  AQ_ASSERT_OK(aq_graph_gradient(g, w, &gw));
  AQ_ASSERT_OK(aq_op_sgd(g, w, gw, &(aq_sgd_options_t){.lr = 0.5f}));
  AQ_ASSERT_FAILS(aq_graph_data_parallel(g, c, NULL), AQ_ERROR_INVALID_GRAPH, "before the optimizer ops");
  AQ_ASSERT_OK(aq_op_allgather(g, c, x, &gathered));
  aq_tensor_info_t info;
  AQ_ASSERT_OK(aq_tensor_get_info(g, gathered, &info));
  cr_assert(info.rank == 2 && info.dims[0] == 3 && info.dims[1] == 5);
  /* One rank: the step is plain SGD on the mean gradient. */
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.flags = AQ_EXEC_NO_MEMORY_REUSE}, &e));
  float xv[15], wv[10], after[10], back[15];
  int32_t lv[3] = {0, 1, 1};
  for (int i = 0; i < 15; ++i) xv[i] = (float)i / 15.0f;
  for (int i = 0; i < 10; ++i) wv[i] = 0.1f * (float)(i % 3);
  AQ_ASSERT_OK(aq_exec_write(e, x, xv, sizeof(xv)));
  AQ_ASSERT_OK(aq_exec_write(e, labels, lv, sizeof(lv)));
  AQ_ASSERT_OK(aq_exec_write(e, w, wv, sizeof(wv)));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, w, after, sizeof(after)));
  AQ_ASSERT_OK(aq_exec_read(e, gathered, back, sizeof(back)));
  cr_assert(!memcmp(back, xv, sizeof(xv)), "a one-rank allgather copies");
  int moved = 0;
  for (int i = 0; i < 10; ++i) moved += after[i] != wv[i];
  cr_assert(moved > 0, "the SGD after the bucket's all-reduce did not run");
  aq_exec_destroy(e);
  aq_graph_destroy(g);
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

/* ---- several ranks: mpirun starts this binary as each rank ---------------- */
/* build/tests/comm-ranks, beside this program. */
static void ranks_program(char *path, size_t size) {
  ssize_t n = readlink("/proc/self/exe", path, size - 16);
  cr_assert(n > 0);
  path[n] = '\0';
  strcpy(strrchr(path, '/') + 1, "comm-ranks");
}

static int run(const char *cmd, char *out, size_t size) {
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  size_t len = fread(out, 1, size - 1, p);
  out[len] = '\0';
  int rc = pclose(p);
  cr_log_info("%s", out);
  return rc;
}

static void ranks(const char *program, const char *extra, char *out, size_t size) {
  need_mpi();
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    cr_skip_test("skipped: no mpirun (apt-get install openmpi-bin)");
  char exe[512], cmd[1200];
  ranks_program(exe, sizeof(exe));
  /* One worker a rank: two ranks share this machine's cores. */
  snprintf(cmd, sizeof(cmd),
           "AQ_CPU_WORKERS=1 timeout 120 mpirun -np 2 --allow-run-as-root --oversubscribe %s %s %s 2>&1", extra, exe,
           program);
  int rc = run(cmd, out, size);
  cr_assert(strstr(out, "rank 0: ") && rc == 0, "mpirun exited with %d:\n%s", rc, out);
}

static int cuda_gpus(void) {
  aq_agent_t all[64];
  size_t n = 0, gpus = 0;
  AQ_ASSERT_OK(aq_agents(all, 64, &n));
  for (size_t i = 0; i < n && i < 64; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(all[i], &info));
    gpus += info.kind == AQ_AGENT_KIND_GPU && !strcmp(info.driver, "cuda");
  }
  return (int)gpus;
}

/* comm-ranks PROGRAM in this process alone (no mpirun): it skips where the
 * process lacks the GPUs, else must say "rank 0: PROGRAM ok". */
static void alone(const char *program) {
  char exe[512], cmd[600], out[16384], said[64];
  ranks_program(exe, sizeof(exe));
  snprintf(cmd, sizeof(cmd), "timeout 120 %s %s 2>&1", exe, program);
  int rc = run(cmd, out, sizeof(out));
  snprintf(said, sizeof(said), "%s skipped", program);
  if (strstr(out, said)) cr_skip_test("%s", out);
  snprintf(said, sizeof(said), "rank 0: %s ok", program);
  cr_assert(rc == 0 && strstr(out, said), "%s", out);
}

/* Every GPU agent of one process a rank: each kind through NCCL on the
 * GPUs' queues (one GPU is a communicator of one). */
Test(comm, gpus, .timeout = 150) {
  if (!cuda_gpus()) cr_skip_test("skipped: no GPU");
  alone("gpus");
}

/* Traced, a collective on a GPU lane is a slice of its GPU time (category
 * "stream"; a graph's is named for its task), not the host's moment of
 * queueing it. */
Test(comm, a_traced_gpu_collective_is_a_slice_of_gpu_time, .timeout = 150) {
  if (!cuda_gpus()) cr_skip_test("skipped: no GPU");
  char trace[] = "/tmp/aq-comm-trace-XXXXXX", path[64];
  cr_assert(mkdtemp(trace));
  snprintf(path, sizeof(path), "%s/t.json", trace);
  setenv("AQ_TRACE", path, 1);
  alone("gpus");
  unsetenv("AQ_TRACE");
  FILE *f = fopen(path, "r");
  cr_assert(f, "no trace at %s", path);
  char line[4096];
  int slices = 0, timed = 0;
  while (fgets(line, sizeof(line), f)) {
    if (!strstr(line, "\"cat\":\"stream\"")) continue;
    slices++;
    const char *dur = strstr(line, "\"dur\":");
    /* (the program enqueues its collectives itself: no task names them) */
    cr_assert(strstr(line, "\"name\":\"stream call\""), "a stream slice not named as one: %s", line);
    timed += dur && atof(dur + 6) > 0;
  }
  fclose(f);
  remove(path);
  rmdir(trace);
  cr_assert(slices >= 5, "%d stream slices in the trace (a collective of each kind, at least)", slices);
  cr_assert(timed > 0, "no stream slice has a GPU time");
}

/* Several GPUs of one process, a replica of the training step each: the
 * correctness contract without MPI. */
Test(comm, gpus_data_parallel_matches_one_gpu, .timeout = 150) {
  int n = cuda_gpus();
  if (!n) cr_skip_test("skipped: no GPU");
  if (n < 2) cr_skip_test("skipped: fewer than 2 GPUs");
  alone("gpus_contract");
}

/* Two processes, a GPU each: MPI bootstraps NCCL. */
Test(comm, mpi_gpu_collectives, .timeout = 150) {
  if (cuda_gpus() < 2) cr_skip_test("skipped: fewer than 2 GPUs");
  char out[16384];
  ranks("gpu_collectives", "", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: gpu_collectives ok") && strstr(out, "rank 1: gpu_collectives ok"), "%s", out);
}

Test(comm, mpi_collectives, .timeout = 150) {
  char out[16384];
  ranks("collectives", "", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: collectives ok") && strstr(out, "rank 1: collectives ok"), "%s", out);
}

Test(comm, mpi_data_parallel_matches_one_process, .timeout = 150) {
  char out[16384];
  ranks("contract", "", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: contract ok") && strstr(out, "rank 1: contract ok"), "%s", out);
}

/* Collectives as graph ops through NCCL: stream calls on each rank's GPU
 * lane, values checked as the MPI ones are. */
Test(comm, mpi_gpu_graph_ops, .timeout = 150) {
  int n = cuda_gpus();
  if (!n) cr_skip_test("skipped: no GPU");
  if (n < 2) cr_skip_test("skipped: fewer than 2 GPUs");
  char out[16384];
  ranks("gpu_graph", "", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: gpu_graph ok") && strstr(out, "rank 1: gpu_graph ok"), "%s", out);
}

/* The correctness contract on GPUs, the gradients' buckets through NCCL. */
Test(comm, mpi_gpu_data_parallel_matches_one_process, .timeout = 150) {
  int n = cuda_gpus();
  if (!n) cr_skip_test("skipped: no GPU");
  if (n < 2) cr_skip_test("skipped: fewer than 2 GPUs");
  char out[16384];
  ranks("gpu_contract", "", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: gpu_contract ok") && strstr(out, "rank 1: gpu_contract ok"), "%s", out);
}

Test(comm, mpi_gpu_killed_rank_fails_survivor_in_time, .timeout = 150) {
  if (cuda_gpus() < 2) cr_skip_test("skipped: fewer than 2 GPUs");
  char out[16384];
  setenv("AQ_COMM_TIMEOUT_MS", "5000", 1);
  ranks("gpu_killed", "--enable-recovery", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: gpu_killed ok"), "%s", out);
}

/* --enable-recovery: mpirun leaves the survivor running when a rank dies,
 * as a job on several machines outlives one machine's loss. */
Test(comm, mpi_killed_rank_fails_survivor_in_time, .timeout = 150) {
  char out[16384];
  setenv("AQ_COMM_TIMEOUT_MS", "2000", 1);
  ranks("killed", "--enable-recovery", out, sizeof(out));
  cr_assert(strstr(out, "rank 0: killed ok"), "%s", out);
}

/* ---- the data-parallel graph's shape --------------------------------------- */
enum { DOT_TASKS = 512 };

typedef struct dot {
  char names[DOT_TASKS][48];
  uint8_t edge[DOT_TASKS][DOT_TASKS]; /* [to][from] */
  uint32_t n;
} dot_t;

static void read_dot(const char *path, dot_t *d) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "no DOT file %s", path);
  char line[1024];
  unsigned a, b;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, " t%u -> t%u", &a, &b) == 2 && a < DOT_TASKS && b < DOT_TASKS) {
      d->edge[b][a] = 1;
    } else if (sscanf(line, " t%u [label=\"", &a) == 1 && a < DOT_TASKS) {
      const char *name = strchr(line, '"') + 1;
      size_t len = strcspn(name, "\\");
      snprintf(d->names[a], sizeof(d->names[a]), "%.*s", (int)len, name);
      if (a + 1 > d->n) d->n = a + 1;
    }
  }
  fclose(f);
}

/* The bucket completions ("allreduce grads K") that task t follows,
 * directly or not, as a bit mask. */
static unsigned buckets_before(const dot_t *d, uint32_t t) {
  static uint8_t seen[DOT_TASKS];
  uint32_t stack[DOT_TASKS], top = 0;
  unsigned mask = 0, k;
  memset(seen, 0, sizeof(seen));
  stack[top++] = t;
  while (top) {
    uint32_t x = stack[--top];
    for (uint32_t y = 0; y < d->n; ++y) {
      if (!d->edge[x][y] || seen[y]) continue;
      seen[y] = 1;
      stack[top++] = y;
      if (sscanf(d->names[y], "allreduce grads %u", &k) == 1 && k < 32) mask |= 1u << k;
    }
  }
  return mask;
}

/* Each optimizer op waits for its own bucket's all-reduce and for no
 * other's: one gradient a bucket here, three buckets. */
Test(comm, optimizer_waits_for_its_bucket_only) {
  need_mpi();
  aq_comm_t *c;
  AQ_ASSERT_OK(aq_comm_create_mpi(NULL, NULL, &c));
  aq_graph_t *g;
  aq_tensor_t x, labels, p[3], h, logits, loss;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){8, 6}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){8}, &labels));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){6, 5}, &p[0]));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){5}, &p[1]));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){5, 3}, &p[2]));
  AQ_ASSERT_OK(aq_op_matmul(g, x, p[0], p[1], 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, p[2], (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, labels, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  AQ_ASSERT_OK(aq_graph_data_parallel(g, c, &(aq_data_parallel_options_t){.bucket_bytes = 1}));
  for (int i = 0; i < 3; ++i) {
    aq_tensor_t grad;
    AQ_ASSERT_OK(aq_graph_gradient(g, p[i], &grad));
    AQ_ASSERT_OK(aq_op_sgd(g, p[i], grad, &(aq_sgd_options_t){.lr = 0.1f, .momentum = 0.9f}));
  }
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  char path[] = "/tmp/aq-comm-dot-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  AQ_ASSERT_OK(aq_exec_write_dot(e, path));
  static dot_t d;
  memset(&d, 0, sizeof(d));
  read_dot(path, &d);
  unlink(path);
  unsigned all = 0;
  int optimizers = 0;
  for (uint32_t t = 0; t < d.n; ++t) {
    if (strncmp(d.names[t], "sgd(", 4)) continue;
    unsigned m = buckets_before(&d, t);
    cr_assert(m && !(m & (m - 1)), "%s follows the all-reduces of buckets 0x%x, not its own alone", d.names[t], m);
    cr_assert(!(all & m), "two optimizer ops wait for one bucket of one gradient each");
    all |= m, ++optimizers;
  }
  cr_assert_eq(optimizers, 3);
  cr_assert_eq(all, 7u, "three buckets, one each (0x%x)", all);
  aq_exec_destroy(e);
  aq_graph_destroy(g);
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

/* ---- the NCCL form of graph ops, without a GPU ------------------------------ */

/* A communicator whose one local rank is "joined by NCCL" on agent `agent`
 * (no NCCL is loaded: only its graph ops are made, never run). */
static aq_comm_t *fake_nccl_comm(uint32_t agent) {
  aq_comm_t *c = calloc(1, sizeof(*c));
  cr_assert(c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->keep_lock, NULL);
  c->size = 2, c->local_ranks = 1, c->ngpus = 1, c->gpu_agent[0] = agent;
  return c;
}

static uint32_t cpu_agent_index(void) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(first_cpu_agent(), &info));
  return info.index;
}

/* With NCCL, each collective is one stream call pinned to the rank's GPU
 * (no start and completion pair), chained in the order they were added;
 * placed anywhere else, the exec refuses it by name. */
Test(comm, nccl_graph_ops_are_stream_calls_on_their_gpu) {
  aq_comm_t *c = fake_nccl_comm(cpu_agent_index());
  aq_graph_t *g;
  aq_tensor_t x, y, gathered;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &y));
  AQ_ASSERT_OK(aq_op_allreduce(g, c, x, AQ_REDUCE_MEAN));
  AQ_ASSERT_OK(aq_op_allgather(g, c, y, &gathered));
  cr_assert_eq(g->ntasks, 2, "%u tasks for two NCCL collectives", g->ntasks);
  for (uint32_t t = 0; t < 2; ++t) {
    cr_assert_eq(g->tasks[t].kind, TASK_STREAM, "task '%s' is no stream call", g->tasks[t].name);
    cr_assert_eq(g->tasks[t].agent, (int32_t)c->gpu_agent[0]);
  }
  cr_assert_str_eq(g->tasks[0].kernel, "nccl allreduce");
  cr_assert_str_eq(g->tasks[1].kernel, "nccl allgather");
  cr_assert(g->tasks[1].nafter_all == 1 && g->tasks[1].after_all[0] == 0, "the allgather does not follow the allreduce");
  aq_exec_t *e = NULL;
  AQ_ASSERT_FAILS(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH, "nccl allreduce");
  AQ_ASSERT_FAILS(aq_graph_instantiate(g, &(aq_exec_options_t){.policy = AQ_SCHED_EAGER}, &e), AQ_ERROR_INVALID_GRAPH,
                  "allreduce x");
  aq_graph_destroy(g);
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

/* aq_graph_data_parallel's buckets take the NCCL form too: stream calls
 * alone, the parameters' broadcast first. */
Test(comm, nccl_data_parallel_buckets_are_stream_calls) {
  aq_comm_t *c = fake_nccl_comm(cpu_agent_index());
  aq_graph_t *g;
  aq_tensor_t x, labels, w, logits, loss;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){3, 5}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){3}, &labels));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){5, 2}, &w));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, labels, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  uint32_t before = g->ntasks;
  AQ_ASSERT_OK(aq_graph_data_parallel(g, c, NULL));
  cr_assert_eq(g->ntasks, before + 2, "%u tasks added for one broadcast and one bucket", g->ntasks - before);
  cr_assert(g->tasks[0].kind == TASK_STREAM && !strncmp(g->tasks[0].name, "broadcast params", 16), "first: '%s'",
            g->tasks[0].name);
  const task_t *last = &g->tasks[g->ntasks - 1];
  cr_assert(last->kind == TASK_STREAM && !strncmp(last->name, "allreduce grads", 15), "last: '%s'", last->name);
  aq_graph_destroy(g);
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

/* Whether task t reads tensor x. */
static int task_reads(const task_t *t, aq_tensor_t x) {
  for (uint32_t r = 0; r < t->nreads; ++r)
    if (t->reads[r] == x.id) return 1;
  return 0;
}

/* A model smaller than the bucket cap is not one bucket: a bucket also
 * ends where the backward pass goes on to an earlier layer, once it holds
 * 8 MiB, so the last layers' all-reduce runs while the first layer's
 * gradients are worked out. Smaller layers stay together, and a cap
 * smaller than a layer still splits it. */
Test(comm, buckets_end_at_a_layer_once_they_hold_8_mib) {
  aq_comm_t *c = fake_nccl_comm(cpu_agent_index());
  static const struct {
    int64_t hidden;
    size_t cap;
    uint32_t buckets;
  } cases[] = {
      {2048, 0, 2},        /* 23 MB: the last two layers (16 MiB), then the first */
      {1024, 0, 1},        /* 7.5 MB: no layer boundary past 8 MiB */
      {2048, 1u << 20, 4}, /* under 1 MiB: w2, w1 and b1 alone, and the rest */
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
    aq_graph_t *g;
    aq_tensor_t x, labels, w[3], b[3], h, loss;
    const int64_t width[4] = {784, cases[k].hidden, cases[k].hidden, 10};
    AQ_ASSERT_OK(aq_graph_create(NULL, &g));
    AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){8, 784}, &x));
    AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){8}, &labels));
    h = x;
    for (int l = 0; l < 3; ++l) {
      char wn[8], bn[8];
      snprintf(wn, sizeof(wn), "w%d", l + 1), snprintf(bn, sizeof(bn), "b%d", l + 1);
      AQ_ASSERT_OK(aq_tensor_create(g, wn, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){width[l], width[l + 1]}, &w[l]));
      AQ_ASSERT_OK(aq_tensor_create(g, bn, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){width[l + 1]}, &b[l]));
      AQ_ASSERT_OK(aq_op_matmul(g, h, w[l], b[l], 0, 0, l < 2 ? AQ_ACTIVATION_RELU : AQ_ACTIVATION_NONE, &h));
    }
    AQ_ASSERT_OK(aq_op_softmax_xent(g, h, labels, &loss));
    AQ_ASSERT_OK(aq_graph_backward(g, loss));
    aq_data_parallel_options_t o = {.bucket_bytes = cases[k].cap};
    AQ_ASSERT_OK(aq_graph_data_parallel(g, c, &o));
    const task_t *bucket[8];
    uint32_t n = 0;
    for (uint32_t t = 0; t < g->ntasks; ++t)
      if (!strncmp(g->tasks[t].name, "allreduce grads", 15) && n < 8) bucket[n++] = &g->tasks[t];
    cr_assert_eq(n, cases[k].buckets, "hidden %lld, cap %zu: %u buckets, not %u", (long long)cases[k].hidden,
                 cases[k].cap, n, cases[k].buckets);
    if (k == 0) {
      aq_tensor_t gw[3], gb[3];
      for (int l = 0; l < 3; ++l) {
        AQ_ASSERT_OK(aq_graph_gradient(g, w[l], &gw[l]));
        AQ_ASSERT_OK(aq_graph_gradient(g, b[l], &gb[l]));
      }
      for (int l = 1; l < 3; ++l)
        cr_expect(task_reads(bucket[0], gw[l]) && task_reads(bucket[0], gb[l]), "layer %d is not in the first bucket", l);
      cr_expect(task_reads(bucket[1], gw[0]) && task_reads(bucket[1], gb[0]) && bucket[1]->nreads == 2,
                "the second bucket is not the first layer's gradients alone");
    }
    aq_graph_destroy(g);
  }
  AQ_ASSERT_OK(aq_comm_destroy(c));
}
