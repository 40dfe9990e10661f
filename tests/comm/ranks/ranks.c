/* comm-ranks PROGRAM: what each rank runs under mpirun (tests/comm/comm.c
 * launches it; a plain program, so that it runs where Criterion is not
 * installed, as on the GPU machines). Each prints "rank R: PROGRAM ok" on
 * success, or "rank R: PROGRAM FAILED: why", and exits non-zero then:
 *   collectives  every kind, on host memory (sizes 0, 1, odd) and as graph
 *                ops (sizes 1 and odd), checked value by value;
 *   contract     data parallelism: N ranks with global batch B (B/N each)
 *                train the same MLP as one process with batch B (rank 0
 *                trains that one too and compares);
 *   killed       rank 1 dies after one collective; rank 0's next run must
 *                fail within the timeout, naming rank 1 and the collective;
 *   gpu_collectives  every kind through NCCL on each rank's GPU queue;
 *   gpu_killed   as killed, through NCCL: the watchdog aborts it;
 *   gpu_graph    the graph ops of collectives, through NCCL: stream calls
 *                on each rank's GPU lane;
 *   gpu_contract contract on GPU agents (exact matmuls), the buckets'
 *                all-reduces through NCCL;
 *   gpus         (without mpirun) the same over this process's GPU agents,
 *                one rank each; "skipped" without GPUs or NCCL;
 *   gpus_contract  (without mpirun) contract over this process's GPU
 *                agents, one replica of the step each; "skipped" with
 *                fewer than two. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aquila/aquila.h"

static int me = -1;
static const char *running = "";

#define CHECK(expr)                                                                                            \
  do {                                                                                                         \
    aq_status_t s_ = (expr);                                                                                   \
    if (s_ != AQ_OK) {                                                                                         \
      printf("rank %d: %s FAILED: %s -> %s: %s\n", me, running, #expr, aq_status_string(s_), aq_last_error()); \
      fflush(stdout);                                                                                          \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)
#define EXPECT(cond, ...)                          \
  do {                                             \
    if (!(cond)) {                                 \
      printf("rank %d: %s FAILED: ", me, running); \
      printf(__VA_ARGS__);                         \
      printf("\n");                                \
      fflush(stdout);                              \
      return 1;                                    \
    }                                              \
  } while (0)

enum { SIZES = 4 };
static const size_t sizes[SIZES] = {0, 1, 7, 1001};

/* ---- collectives on host memory ------------------------------------------ */
static int host_kind(aq_comm_t *c, int r, int n, size_t m, float *send, float *recv) {
  for (size_t i = 0; i < m; ++i) send[i] = (float)(r + 1) + (float)i;
  CHECK(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .send = send, .recv = recv, .count = m}));
  for (size_t i = 0; i < m; ++i)
    EXPECT(recv[i] == (float)(n * (n + 1) / 2) + (float)(n * i), "allreduce of %zu: [%zu] = %g", m, i, recv[i]);
  CHECK(aq_comm_run(
      c, &(aq_collective_t){
             .kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = AQ_REDUCE_MEAN, .send = send, .recv = send, .count = m}));
  for (size_t i = 0; i < m; ++i)
    EXPECT(send[i] == ((float)(n * (n + 1) / 2) + (float)(n * i)) / (float)n, "mean of %zu: [%zu] = %g", m, i, send[i]);
  for (size_t i = 0; i < m; ++i) recv[i] = r == n - 1 ? 100.0f + (float)i : -1.0f;
  CHECK(aq_comm_run(
      c, &(aq_collective_t){.kind = AQ_COLLECTIVE_BROADCAST, .root = (uint32_t)n - 1, .recv = recv, .count = m}));
  for (size_t i = 0; i < m; ++i) EXPECT(recv[i] == 100.0f + (float)i, "broadcast of %zu: [%zu] = %g", m, i, recv[i]);
  for (size_t i = 0; i < m; ++i) send[i] = (float)(r * 1000) + (float)i;
  CHECK(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLGATHER, .send = send, .recv = recv, .count = m}));
  for (size_t q = 0; q < (size_t)n; ++q)
    for (size_t i = 0; i < m; ++i)
      EXPECT(recv[q * m + i] == (float)(q * 1000 + i), "allgather of %zu: [%zu] = %g", m, q * m + i, recv[q * m + i]);
  for (size_t j = 0; j < m * n; ++j) send[j] = (float)r + (float)j;
  CHECK(
      aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_REDUCE_SCATTER, .send = send, .recv = recv, .count = m}));
  for (size_t i = 0; i < m; ++i)
    EXPECT(recv[i] == (float)(n * (r * m + i)) + (float)(n * (n - 1) / 2), "reduce_scatter of %zu: [%zu] = %g", m, i,
           recv[i]);
  return 0;
}

/* ---- the same as graph ops ------------------------------------------------ */
typedef struct coll_graph {
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t sum, mean, bcast, gather_in, gathered, scatter_in, scattered;
} coll_graph_t;

static int build_coll(coll_graph_t *t, aq_comm_t *c, int n, int64_t m) {
  CHECK(aq_graph_create(NULL, &t->g));
  int64_t dm[1] = {m}, dnm[1] = {n * m};
  CHECK(aq_tensor_create(t->g, "sum", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, dm, &t->sum));
  CHECK(aq_tensor_create(t->g, "mean", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, dm, &t->mean));
  CHECK(aq_tensor_create(t->g, "bcast", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, dm, &t->bcast));
  CHECK(aq_tensor_create(t->g, "gather_in", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, dm, &t->gather_in));
  CHECK(aq_tensor_create(t->g, "scatter_in", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, dnm, &t->scatter_in));
  CHECK(aq_op_allreduce(t->g, c, t->sum, AQ_REDUCE_SUM));
  CHECK(aq_op_allreduce(t->g, c, t->mean, AQ_REDUCE_MEAN));
  CHECK(aq_op_broadcast(t->g, c, t->bcast, (uint32_t)n - 1));
  CHECK(aq_op_allgather(t->g, c, t->gather_in, &t->gathered));
  CHECK(aq_op_reduce_scatter(t->g, c, t->scatter_in, AQ_REDUCE_SUM, &t->scattered));
  if (n > 1 && m % n) {
    aq_tensor_t odd;
    EXPECT(aq_op_reduce_scatter(t->g, c, t->sum, AQ_REDUCE_SUM, &odd) == AQ_ERROR_INVALID_ARGUMENT &&
               strstr(aq_last_error(), "cannot share evenly"),
           "a reduce_scatter of %lld rows over %d ranks was not refused: %s", (long long)m, n, aq_last_error());
  }
  CHECK(aq_graph_instantiate(t->g, &(aq_exec_options_t){.flags = AQ_EXEC_NO_MEMORY_REUSE}, &t->e));
  return 0;
}

static int graph_run(coll_graph_t *t, int r, int n, size_t m, int round, float *a, float *b) {
  float base = (float)(round * 10);
  for (size_t i = 0; i < m; ++i) a[i] = base + (float)(r + 1) + (float)i;
  CHECK(aq_exec_write(t->e, t->sum, a, m * 4));
  CHECK(aq_exec_write(t->e, t->mean, a, m * 4));
  for (size_t i = 0; i < m; ++i) a[i] = r == n - 1 ? base + 100.0f + (float)i : -1.0f;
  CHECK(aq_exec_write(t->e, t->bcast, a, m * 4));
  for (size_t i = 0; i < m; ++i) a[i] = (float)(r * 1000) + (float)i;
  CHECK(aq_exec_write(t->e, t->gather_in, a, m * 4));
  for (size_t j = 0; j < m * n; ++j) a[j] = (float)r + (float)j;
  CHECK(aq_exec_write(t->e, t->scatter_in, a, m * n * 4));
  CHECK(aq_exec_run(t->e));
  CHECK(aq_exec_wait(t->e, 60ull * 1000000000ull));
  float total = (float)n * base + (float)(n * (n + 1) / 2);
  CHECK(aq_exec_read(t->e, t->sum, b, m * 4));
  for (size_t i = 0; i < m; ++i)
    EXPECT(b[i] == total + (float)(n * i), "graph allreduce of %zu: [%zu] = %g", m, i, b[i]);
  CHECK(aq_exec_read(t->e, t->mean, b, m * 4));
  for (size_t i = 0; i < m; ++i)
    EXPECT(b[i] == (total + (float)(n * i)) / (float)n, "graph mean of %zu: [%zu] = %g", m, i, b[i]);
  CHECK(aq_exec_read(t->e, t->bcast, b, m * 4));
  for (size_t i = 0; i < m; ++i)
    EXPECT(b[i] == base + 100.0f + (float)i, "graph broadcast of %zu: [%zu] = %g", m, i, b[i]);
  CHECK(aq_exec_read(t->e, t->gathered, b, m * n * 4));
  for (size_t j = 0; j < m * n; ++j)
    EXPECT(b[j] == (float)((j / m) * 1000 + j % m), "graph allgather of %zu: [%zu] = %g", m, j, b[j]);
  CHECK(aq_exec_read(t->e, t->scattered, b, m * 4));
  for (size_t i = 0; i < m; ++i)
    EXPECT(b[i] == (float)(n * (r * m + i)) + (float)(n * (n - 1) / 2), "graph reduce_scatter of %zu: [%zu] = %g", m, i,
           b[i]);
  return 0;
}

/* host: the host-memory calls too (graph ops alone: gpu_graph). */
static int collectives_of(aq_comm_t *c, int r, int n, int host) {
  float *a = malloc(sizeof(float) * 1001 * (size_t)n), *b = malloc(sizeof(float) * 1001 * (size_t)n);
  EXPECT(a && b, "no memory");
  int rc = 0;
  for (int i = 0; i < SIZES && !rc && host; ++i) rc = host_kind(c, r, n, sizes[i], a, b);
  for (int i = 1; i < SIZES && !rc; ++i) {
    coll_graph_t t = {0};
    rc = build_coll(&t, c, n, (int64_t)sizes[i]);
    for (int round = 0; round < 2 && !rc; ++round) rc = graph_run(&t, r, n, sizes[i], round, a, b);
    if (t.e) aq_exec_destroy(t.e);
    if (t.g) aq_graph_destroy(t.g);
  }
  free(a), free(b);
  return rc;
}

static int collectives(aq_comm_t *c, int r, int n) { return collectives_of(c, r, n, 1); }

/* ---- the correctness contract --------------------------------------------- */
enum { IN = 24, HID = 40, OUT = 5, GLOBAL_BATCH = 32, STEPS = 50, PARAMS = 4 };

/* The contract's execs' options (gpu_contract: GPU agents, exact matmuls). */
static aq_exec_options_t net_options;

typedef struct net {
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t x, y, p[PARAMS];
} net_t;

static int build_net(net_t *t, int batch, aq_comm_t *comm) {
  static const char *names[PARAMS] = {"w1", "b1", "w2", "b2"};
  static const int64_t dims[PARAMS][2] = {{IN, HID}, {HID, 0}, {HID, OUT}, {OUT, 0}};
  CHECK(aq_graph_create(NULL, &t->g));
  CHECK(aq_tensor_create(t->g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){batch, IN}, &t->x));
  CHECK(aq_tensor_create(t->g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){batch}, &t->y));
  for (int i = 0; i < PARAMS; ++i)
    CHECK(aq_tensor_create(t->g, names[i], AQ_DTYPE_F32, AQ_ROLE_PARAMETER, dims[i][1] ? 2 : 1, dims[i], &t->p[i]));
  aq_tensor_t h, logits, loss;
  CHECK(aq_op_matmul(t->g, t->x, t->p[0], t->p[1], 0, 0, AQ_ACTIVATION_RELU, &h));
  CHECK(aq_op_matmul(t->g, h, t->p[2], t->p[3], 0, 0, AQ_ACTIVATION_NONE, &logits));
  CHECK(aq_op_softmax_xent(t->g, logits, t->y, &loss));
  CHECK(aq_graph_backward(t->g, loss));
  /* Small buckets: several all-reduces a step, as a bigger model has. */
  if (comm) CHECK(aq_graph_data_parallel(t->g, comm, &(aq_data_parallel_options_t){.bucket_bytes = 4096}));
  for (int i = 0; i < PARAMS; ++i) {
    aq_tensor_t grad;
    CHECK(aq_graph_gradient(t->g, t->p[i], &grad));
    CHECK(aq_op_sgd(t->g, t->p[i], grad, &(aq_sgd_options_t){.lr = 0.05f, .momentum = 0.9f}));
  }
  CHECK(aq_graph_instantiate(t->g, &net_options, &t->e));
  return 0;
}

static size_t param_count(int i) { return i == 0 ? IN * HID : i == 1 ? HID : i == 2 ? HID * OUT : OUT; }

/* Local rank `local`'s copy of x in t's exec (ranks.h): x itself for 0. */
static aq_tensor_t local_tensor(net_t *t, aq_tensor_t x, int local) {
  aq_tensor_t y = x;
  if (local && aq_exec_local_tensor(t->e, x, (uint32_t)local, &y) != AQ_OK) y.id = 0;
  return y;
}

/* Local rank 0's parameters are every local rank's (aq_exec_write); another
 * local rank's may be set apart. */
static int init_params(net_t *t, unsigned seed, int local) {
  for (int i = 0; i < PARAMS; ++i) {
    size_t n = param_count(i);
    float v[IN * HID];
    for (size_t j = 0; j < n; ++j) v[j] = 0.2f * sinf((float)(seed * 7919u + i * 131u + j) * 0.61f);
    CHECK(aq_exec_write(t->e, local_tensor(t, t->p[i], local), v, n * 4));
  }
  return 0;
}

/* Rows [first, first + rows) of the global batch of a step, and the next
 * `rows` for each further local rank of the exec (`locals` in all). */
static int train(net_t *t, int first, int rows, int locals) {
  float x[GLOBAL_BATCH * IN];
  int32_t y[GLOBAL_BATCH];
  for (int s = 0; s < STEPS; ++s) {
    for (int l = 0; l < locals; ++l) {
      for (int j = 0; j < rows; ++j) {
        int row = first + l * rows + j;
        y[j] = (row * 3 + s) % OUT;
        for (int k = 0; k < IN; ++k)
          x[j * IN + k] = sinf((float)(s * 7 + row * 13 + k) * 0.37f) + 0.3f * (float)(k % (y[j] + 1));
      }
      CHECK(aq_exec_write(t->e, local_tensor(t, t->x, l), x, (size_t)rows * IN * 4));
      CHECK(aq_exec_write(t->e, local_tensor(t, t->y, l), y, (size_t)rows * 4));
    }
    CHECK(aq_exec_run(t->e));
    CHECK(aq_exec_wait(t->e, 60ull * 1000000000ull));
  }
  return 0;
}

static void destroy_net(net_t *t) {
  if (t->e) aq_exec_destroy(t->e);
  if (t->g) aq_graph_destroy(t->g);
}

/* Local rank `local`'s parameters against ref's, within 1e-5 relative. */
static int compare_local(net_t *dp, net_t *ref, int local, int r, float *a, float *b, int i) {
  size_t n = param_count(i);
  CHECK(aq_exec_read(dp->e, local_tensor(dp, dp->p[i], local), a, n * 4));
  if (!ref) return 0;
  CHECK(aq_exec_read(ref->e, ref->p[i], b, n * 4));
  double diff = 0, top = 0;
  for (size_t j = 0; j < n; ++j) diff = fmax(diff, fabs((double)a[j] - b[j])), top = fmax(top, fabs((double)b[j]));
  printf("rank %d: parameter %d: largest difference %.3g of largest value %.3g (relative %.3g)\n", r + local, i, diff,
         top, diff / top);
  EXPECT(diff <= 1e-5 * top, "parameter %d differs from one process's by %.3g relative (more than 1e-5)", i,
         diff / top);
  return 0;
}

static int compare(net_t *dp, net_t *ref, aq_comm_t *c, int r) {
  float a[IN * HID], b[IN * HID];
  for (int i = 0; i < PARAMS; ++i) {
    size_t n = param_count(i);
    if (compare_local(dp, ref, 0, r, a, b, i)) return 1;
    memcpy(b, a, n * 4);
    CHECK(aq_comm_run(c, &(aq_collective_t){.kind = AQ_COLLECTIVE_BROADCAST, .recv = b, .count = n}));
    EXPECT(!memcmp(a, b, n * 4), "parameter %d differs between rank 0 and rank %d", i, r);
  }
  return 0;
}

/* One process with the global batch. */
static int reference(net_t *ref) {
  int rc = build_net(ref, GLOBAL_BATCH, NULL);
  if (!rc) rc = init_params(ref, 1u, 0);
  if (!rc) rc = train(ref, 0, GLOBAL_BATCH, 1);
  return rc;
}

static int contract(aq_comm_t *c, int r, int n) {
  EXPECT(GLOBAL_BATCH % n == 0, "%d ranks do not share a batch of %d", n, GLOBAL_BATCH);
  int local = GLOBAL_BATCH / n;
  net_t dp = {0}, ref = {0};
  /* Every rank starts elsewhere: the first run's broadcast must fix it. */
  int rc = build_net(&dp, local, c);
  if (!rc) rc = init_params(&dp, 1u + (unsigned)r, 0);
  if (!rc) rc = train(&dp, r * local, local, 1);
  if (!rc && r == 0) rc = reference(&ref);
  if (!rc) rc = compare(&dp, r == 0 ? &ref : NULL, c, r);
  destroy_net(&dp), destroy_net(&ref);
  return rc;
}

/* ---- GPU agents joined by NCCL -------------------------------------------- */
enum { GPU_COUNT = 1001, LOCAL_MAX = 16 };

typedef struct gpu_rank {
  int rank;
  aq_queue_t queue;
  aq_signal_t done;
  float *send, *recv; /* device memory: GPU_COUNT * ranks floats each */
} gpu_rank_t;

static int gpu_setup(gpu_rank_t *g, aq_agent_t agent, int rank, int n) {
  g->rank = rank;
  CHECK(aq_queue_create(agent, NULL, &g->queue));
  CHECK(aq_signal_create(0, &g->done));
  aq_region_t regions[8];
  size_t nr = 0;
  CHECK(aq_agent_regions(agent, regions, 8, &nr));
  for (size_t i = 0; i < nr && i < 8; ++i) {
    aq_region_info_t info;
    CHECK(aq_region_get_info(regions[i], &info));
    if (!(info.flags & AQ_REGION_DEVICE) || (info.flags & AQ_REGION_MANAGED)) continue;
    CHECK(aq_memory_allocate(regions[i], GPU_COUNT * (size_t)n * 4, (void **)&g->send));
    CHECK(aq_memory_allocate(regions[i], GPU_COUNT * (size_t)n * 4, (void **)&g->recv));
    return 0;
  }
  EXPECT(0, "the GPU agent has no device memory region");
}

/* One collective on every local rank's queue, then wait for all: from
 * send to recv, or in place (in send; broadcast: in recv). */
static int gpu_step(aq_comm_t *c, gpu_rank_t *g, int local, aq_collective_t x, int in_place) {
  for (int k = 0; k < local; ++k) {
    aq_signal_store(g[k].done, 1);
    x.send = x.kind == AQ_COLLECTIVE_BROADCAST ? g[k].recv : g[k].send;
    x.recv = in_place ? (float *)x.send : g[k].recv;
    CHECK(aq_comm_enqueue(c, g[k].queue, &x, g[k].done));
  }
  for (int k = 0; k < local; ++k) CHECK(aq_signal_wait(g[k].done, AQ_SIGNAL_EQ, 0, 60ull * 1000000000ull, NULL));
  return 0;
}

static int gpu_put(float *dst, const float *host, size_t n) {
  CHECK(aq_memory_copy(dst, host, n * 4));
  return 0;
}

static int gpu_check(aq_comm_t *c, gpu_rank_t *g, int local, int n) {
  const size_t m = GPU_COUNT;
  float *h = malloc(m * (size_t)n * 4);
  EXPECT(h, "no memory");
  int rc = 0;
  for (int k = 0; k < local && !rc; ++k) {
    for (size_t j = 0; j < m * n; ++j) h[j] = (float)(g[k].rank + 1) + (float)j;
    rc = gpu_put(g[k].send, h, m * n);
  }
  if (!rc) rc = gpu_step(c, g, local, (aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .count = m}, 0);
  for (int k = 0; k < local && !rc; ++k) {
    CHECK(aq_memory_copy(h, g[k].recv, m * 4));
    for (size_t j = 0; j < m; ++j)
      EXPECT(h[j] == (float)(n * (n + 1) / 2) + (float)(n * j), "NCCL allreduce: [%zu] = %g", j, h[j]);
  }
  if (!rc)
    rc = gpu_step(c, g, local, (aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .reduce = AQ_REDUCE_MEAN, .count = m},
                  1);
  for (int k = 0; k < local && !rc; ++k) {
    CHECK(aq_memory_copy(h, g[k].send, m * 4));
    for (size_t j = 0; j < m; ++j)
      EXPECT(h[j] == ((float)(n * (n + 1) / 2) + (float)(n * j)) / (float)n, "NCCL mean: [%zu] = %g", j, h[j]);
  }
  for (int k = 0; k < local && !rc; ++k) {
    for (size_t j = 0; j < m; ++j) h[j] = g[k].rank == n - 1 ? 100.0f + (float)j : -1.0f;
    rc = gpu_put(g[k].recv, h, m);
  }
  if (!rc)
    rc = gpu_step(c, g, local, (aq_collective_t){.kind = AQ_COLLECTIVE_BROADCAST, .root = (uint32_t)n - 1, .count = m},
                  1);
  for (int k = 0; k < local && !rc; ++k) {
    CHECK(aq_memory_copy(h, g[k].recv, m * 4));
    for (size_t j = 0; j < m; ++j) EXPECT(h[j] == 100.0f + (float)j, "NCCL broadcast: [%zu] = %g", j, h[j]);
  }
  for (int k = 0; k < local && !rc; ++k) {
    for (size_t j = 0; j < m * n; ++j) h[j] = (float)(g[k].rank * 1000) + (float)j;
    rc = gpu_put(g[k].send, h, m * n);
  }
  if (!rc) rc = gpu_step(c, g, local, (aq_collective_t){.kind = AQ_COLLECTIVE_ALLGATHER, .count = m}, 0);
  for (int k = 0; k < local && !rc; ++k) {
    CHECK(aq_memory_copy(h, g[k].recv, m * n * 4));
    for (size_t j = 0; j < m * n; ++j)
      EXPECT(h[j] == (float)((j / m) * 1000 + j % m), "NCCL allgather: [%zu] = %g", j, h[j]);
  }
  if (!rc) rc = gpu_step(c, g, local, (aq_collective_t){.kind = AQ_COLLECTIVE_REDUCE_SCATTER, .count = m}, 0);
  for (int k = 0; k < local && !rc; ++k) {
    CHECK(aq_memory_copy(h, g[k].recv, m * 4));
    int r = g[k].rank;
    for (size_t j = 0; j < m; ++j)
      EXPECT(h[j] == (float)(1000 * n * (n - 1) / 2) + (float)(n * (r * m + j)), "NCCL reduce_scatter: [%zu] = %g", j,
             h[j]);
  }
  free(h);
  return rc;
}

/* ---- a rank that dies --------------------------------------------------------- */
static int killed(aq_comm_t *c, int r) {
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t x;
  float v[999] = {0};
  CHECK(aq_graph_create(NULL, &g));
  CHECK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){999}, &x));
  CHECK(aq_op_allreduce(g, c, x, AQ_REDUCE_SUM));
  CHECK(aq_graph_instantiate(g, NULL, &e));
  CHECK(aq_exec_write(e, x, v, sizeof(v)));
  CHECK(aq_exec_run(e));
  CHECK(aq_exec_wait(e, 60ull * 1000000000ull));
  if (r == 1) raise(SIGKILL);
  aq_comm_info_t info;
  CHECK(aq_comm_get_info(c, &info));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(aq_exec_run(e));
  aq_status_t s = aq_exec_wait(e, 120ull * 1000000000ull);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  const char *why = aq_last_error();
  printf("rank %d: the run after rank 1 died: %s after %.1f s: %s\n", r, aq_status_string(s), took, why);
  EXPECT(s != AQ_OK, "the run succeeded without rank 1");
  EXPECT(strstr(why, "rank 1") && strstr(why, "allreduce") && strstr(why, "rank 0 of 2"),
         "the error names neither the dead rank nor the collective");
  EXPECT(took < (double)info.timeout_ms / 1000.0 + 10.0, "the error came %.1f s after a %.1f s timeout", took,
         (double)info.timeout_ms / 1000.0);
  aq_exec_destroy(e);
  aq_graph_destroy(g);
  return 0;
}

/* Every GPU agent of this process a rank (ncclCommInitAll). */
static int gpus(void) {
  aq_comm_t *c;
  aq_status_t s = aq_comm_create_gpus(NULL, &c);
  if (s == AQ_ERROR_UNAVAILABLE) {
    printf("rank 0: gpus skipped: %s\n", aq_last_error());
    return 0;
  }
  CHECK(s);
  aq_comm_info_t info;
  CHECK(aq_comm_get_info(c, &info));
  aq_agent_t agents[64];
  size_t na = 0;
  CHECK(aq_agents(agents, 64, &na));
  gpu_rank_t g[LOCAL_MAX] = {0};
  int rc = 0, local = 0;
  for (size_t a = 0; a < na && a < 64 && !rc && local < LOCAL_MAX; ++a) {
    aq_agent_info_t ai;
    CHECK(aq_agent_get_info(agents[a], &ai));
    if (ai.kind == AQ_AGENT_KIND_GPU && !strcmp(ai.driver, "cuda"))
      rc = gpu_setup(&g[local], agents[a], local, (int)info.size), ++local;
  }
  if (!rc) rc = gpu_check(c, g, local, (int)info.size);
  if (!rc) printf("rank 0: gpus ok (%d GPU agents)\n", local);
  aq_comm_destroy(c);
  return rc;
}

/* One GPU a process (MPI bootstraps NCCL). */
static int gpu_collectives(aq_comm_t *c, int r, int n) {
  aq_comm_info_t info;
  CHECK(aq_comm_get_info(c, &info));
  const char *why = "";
  aq_comm_backend_status("nccl", &why);
  EXPECT(info.nccl, "the communicator has no NCCL (nccl: %s; every rank needs a GPU agent)", *why ? why : "loaded");
  aq_agent_t agents[64];
  size_t na = 0;
  CHECK(aq_agents(agents, 64, &na));
  gpu_rank_t g = {0};
  int rc = gpu_setup(&g, agents[info.gpu_agent], r, n);
  if (!rc) rc = gpu_check(c, &g, 1, n);
  return rc;
}

static int need_nccl(aq_comm_t *c) {
  aq_comm_info_t info;
  CHECK(aq_comm_get_info(c, &info));
  const char *why = "";
  aq_comm_backend_status("nccl", &why);
  EXPECT(info.nccl, "the communicator has no NCCL (nccl: %s; every rank needs a GPU agent)", *why ? why : "loaded");
  return 0;
}

/* Graph ops through NCCL: stream calls on the rank's GPU lane. */
static int gpu_graph(aq_comm_t *c, int r, int n) { return need_nccl(c) || collectives_of(c, r, n, 0); }

/* The contract on GPU agents: kernels there (exact, so that batch 32 and
 * two of 16 differ by rounding alone), buckets through NCCL. */
static int gpu_contract(aq_comm_t *c, int r, int n) {
  net_options = (aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU, .flags = AQ_EXEC_EXACT_MATMUL};
  return need_nccl(c) || contract(c, r, n);
}

/* The contract over this process's GPU agents, without MPI: one replica
 * of the step per GPU (aq_comm_create_gpus), each local rank's inputs its
 * own shard; every local rank but 0 starts elsewhere, and must end where
 * one GPU with the global batch does. */
static int gpus_contract(void) {
  aq_comm_t *c;
  aq_status_t s = aq_comm_create_gpus(NULL, &c);
  aq_comm_info_t info = {0};
  if (s == AQ_OK) CHECK(aq_comm_get_info(c, &info));
  if (s == AQ_ERROR_UNAVAILABLE || (s == AQ_OK && info.local_ranks < 2)) {
    printf("rank 0: gpus_contract skipped: %s\n", s == AQ_OK ? "one GPU agent" : aq_last_error());
    if (s == AQ_OK) aq_comm_destroy(c);
    return 0;
  }
  CHECK(s);
  int n = (int)info.local_ranks, local = GLOBAL_BATCH / n;
  net_options = (aq_exec_options_t){.kernel_agent_kinds = 1u << AQ_AGENT_KIND_GPU, .flags = AQ_EXEC_EXACT_MATMUL};
  net_t dp = {0}, ref = {0};
  int rc = build_net(&dp, local, c);
  if (!rc) rc = init_params(&dp, 1u, 0);
  for (int l = 1; l < n && !rc; ++l) rc = init_params(&dp, 1u + (unsigned)l, l);
  if (!rc) rc = train(&dp, 0, local, n);
  if (!rc) rc = reference(&ref);
  float a[IN * HID], b[IN * HID];
  for (int l = 0; l < n && !rc; ++l)
    for (int i = 0; i < PARAMS && !rc; ++i) rc = compare_local(&dp, &ref, l, 0, a, b, i);
  if (!rc) printf("rank 0: gpus_contract ok (%d GPU agents)\n", n);
  destroy_net(&dp), destroy_net(&ref);
  aq_comm_destroy(c);
  return rc;
}

/* Rank 1 dies after one NCCL collective: rank 0's next one must fail
 * within the timeout (the watchdog aborts NCCL), naming the collective. */
static int gpu_killed(aq_comm_t *c, int r, int n) {
  aq_comm_info_t info;
  CHECK(aq_comm_get_info(c, &info));
  EXPECT(info.nccl, "the communicator has no NCCL (every rank needs a GPU agent)");
  aq_agent_t agents[64];
  size_t na = 0;
  CHECK(aq_agents(agents, 64, &na));
  gpu_rank_t g = {0};
  if (gpu_setup(&g, agents[info.gpu_agent], r, n)) return 1;
  if (gpu_step(c, &g, 1, (aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .count = GPU_COUNT}, 0)) return 1;
  if (r == 1) raise(SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  aq_signal_store(g.done, 1);
  CHECK(aq_comm_enqueue(
      c, g.queue,
      &(aq_collective_t){.kind = AQ_COLLECTIVE_ALLREDUCE, .send = g.send, .recv = g.recv, .count = GPU_COUNT}, g.done));
  aq_status_t s = aq_signal_wait(g.done, AQ_SIGNAL_EQ, 0, (info.timeout_ms + 30000) * 1000000ull, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  const char *why = aq_last_error();
  printf("rank %d: the NCCL allreduce after rank 1 died: %s after %.1f s: %s\n", r, aq_status_string(s), took, why);
  /* The watchdog fails it with AQ_ERROR_TIMEOUT about timeout_ms in; a
   * hang would end the wait itself, 30 s later. */
  EXPECT(s != AQ_OK && took < info.timeout_ms / 1000.0 + 15, "the collective %s without rank 1",
         s == AQ_OK ? "succeeded" : "hung");
  EXPECT(strstr(why, "NCCL allreduce") && strstr(why, "rank 0 of 2"), "the error names neither rank nor collective");
  return 0;
}

static int rank_main(const char *name) {
  running = name;
  if (aq_init(NULL) != AQ_OK) {
    printf("rank ?: %s FAILED: aq_init: %s\n", name, aq_last_error());
    return 1;
  }
  if (!strcmp(name, "gpus") || !strcmp(name, "gpus_contract")) {
    int rc = !strcmp(name, "gpus") ? gpus() : gpus_contract();
    aq_shut_down();
    return rc;
  }
  aq_comm_t *c;
  /* NCCL only where it is tested: a communicator joins it wherever each
   * rank has a GPU, which costs its start-up. */
  aq_comm_options_t o = {.no_nccl = strncmp(name, "gpu_", 4) != 0};
  aq_status_t s = aq_comm_create_mpi(NULL, &o, &c);
  if (s != AQ_OK) {
    printf("rank ?: %s FAILED: aq_comm_create_mpi: %s\n", name, aq_last_error());
    return 1;
  }
  aq_comm_info_t info;
  aq_comm_get_info(c, &info);
  me = (int)info.rank;
  int rc = !strcmp(name, "collectives")       ? collectives(c, me, (int)info.size)
           : !strcmp(name, "contract")        ? contract(c, me, (int)info.size)
           : !strcmp(name, "killed")          ? killed(c, me)
           : !strcmp(name, "gpu_collectives") ? gpu_collectives(c, me, (int)info.size)
           : !strcmp(name, "gpu_killed")      ? gpu_killed(c, me, (int)info.size)
           : !strcmp(name, "gpu_graph")       ? gpu_graph(c, me, (int)info.size)
           : !strcmp(name, "gpu_contract")    ? gpu_contract(c, me, (int)info.size)
                                              : (printf("rank %d: no program '%s'\n", me, name), 2);
  if (!rc) printf("rank %d: %s ok\n", me, name);
  fflush(stdout);
  aq_comm_destroy(c);
  aq_shut_down();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(
        stderr,
        "usage: mpirun -np N comm-ranks "
        "collectives|contract|killed|gpu_collectives|gpu_killed|gpu_graph|gpu_contract, or comm-ranks "
        "gpus|gpus_contract\n");
    return 2;
  }
  return rank_main(argv[1]);
}
