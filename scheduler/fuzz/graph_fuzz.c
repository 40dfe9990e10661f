/* libFuzzer over the graph builder (make fuzz-graph): the input is a
 * program of public graph-API calls (tensors of odd shapes, dtypes and
 * roles; op builders; raw kernel tasks with random tensors, offsets and
 * grids; edges and groups; autodiff and optimizers; instantiation with
 * random options; runs, reads and writes). The runtime must never crash or
 * leak, every failure must come back as a status with a message, and a
 * small valid graph must still run correctly after each failure.
 *
 * A raw kernel task runs only if its kernel is the test code object's
 * "noop": an op-library kernel given random kernarg bytes may touch any
 * memory, which is the kernel's contract, not a runtime bug. Such graphs
 * are still built and instantiated. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aquila/aquila.h"
#include "runtime/status.h"

#define SEC 1000000000ull

enum { MAX_TENSORS = 48, MAX_TASKS = 96, MAX_CALLS = 64, KARG_ROOM = 4096 };
#define RUN_BYTES_MAX ((size_t)16 << 20)

typedef struct in {
  const uint8_t *p;
  size_t n;
} in_t;

static uint8_t u8(in_t *in) {
  if (!in->n) return 0;
  --in->n;
  return *in->p++;
}
static uint32_t u32(in_t *in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | u8(in);
  return v;
}

static aq_code_object_t ops_co, test_co;
static aq_exec_t *canary;
static aq_graph_t *canary_graph;
static aq_tensor_t canary_x, canary_y;
static FILE *devnull;
static int canary_due;
/* What the inputs reached (printed at exit with GRAPH_FUZZ_STATS=1). */
static int verbose; /* GRAPH_FUZZ_STATS=2: every failure's message too; 3: every call */
static unsigned long n_inputs, n_calls, n_failed, n_instantiated, n_runs, n_run_faults;
static double t_canary, t_instantiate, t_run;
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void print_stats(void) {
  fprintf(stderr, "graph_fuzz: %lu inputs, %lu calls (%lu failed), %lu execs, %lu runs (%lu failed); "
          "seconds in canaries %.1f, instantiate %.1f, runs %.1f\n", n_inputs,
          n_calls, n_failed, n_instantiated, n_runs, n_run_faults, t_canary, t_instantiate, t_run);
}

/* The input being run: a failure of ours saves it (libFuzzer saves its own
 * crashes, but the runtime's CPU-fault guard stands between it and ours). */
static const uint8_t *current;
static size_t current_size;

static void die(const char *what, aq_status_t s) {
  fprintf(stderr, "graph_fuzz: %s: %s: '%s'\n", what, aq_status_string(s), aq_last_error());
  const char *dir = getenv("GRAPH_FUZZ_ARTIFACTS");
  char path[4096];
  snprintf(path, sizeof(path), "%s/failure-%d", dir ? dir : ".", (int)getpid());
  FILE *f = fopen(path, "wb");
  if (f) fwrite(current, 1, current_size, f), fclose(f), fprintf(stderr, "graph_fuzz: input saved in %s\n", path);
  _exit(1);
}

/* The small valid graph: y = relu(x) must hold after any failure. */
static void canary_check(void) {
  enum { N = 32 };
  float x[N], y[N];
  double t0 = now_s();
  for (int i = 0; i < N; ++i) x[i] = (float)(i - N / 2) * 0.5f;
  aq_status_t s;
  if ((s = aq_exec_write(canary, canary_x, x, sizeof(x))) != AQ_OK) die("canary write", s);
  if ((s = aq_exec_run(canary)) != AQ_OK) die("canary run", s);
  if ((s = aq_exec_wait(canary, 10 * SEC)) != AQ_OK) die("canary wait", s);
  if ((s = aq_exec_read(canary, canary_y, y, sizeof(y))) != AQ_OK) die("canary read", s);
  for (int i = 0; i < N; ++i)
    if (y[i] != (x[i] > 0 ? x[i] : 0)) die("canary result", AQ_ERROR_INTERNAL);
  t_canary += now_s() - t0;
}

/* Every call goes through here: a failure must carry a status in range and
 * a message, never AQ_ERROR_INTERNAL, and leave the runtime working. */
static aq_status_t check(const char *call, aq_status_t s) {
  ++n_calls;
  if (verbose > 2) fprintf(stderr, "graph_fuzz: %s: %s\n", call, aq_status_string(s));
  if (s == AQ_OK) return s;
  ++n_failed;
  if (verbose > 1) fprintf(stderr, "graph_fuzz: %s: %s: %s\n", call, aq_status_string(s), aq_last_error());
  if ((int)s < 0 || s >= AQ_STATUS_COUNT_) die(call, s);
  if (s == AQ_ERROR_INTERNAL) die(call, s);
  if (!aq_last_error()[0]) die(call, s);
  aq_error_clear();
  canary_due = 1;
  return s;
}

/* The canary runs before the next call that instantiates or runs, and at
 * the end of the input: after every failure, once per stretch of them (a
 * run costs a worker's wake-up, a millisecond). */
static void canary_if_due(void) {
  if (canary_due) canary_due = 0, canary_check();
}
#define CALL(expr) (aq_error_clear(), check(#expr, (expr)))

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  aq_status_t s;
  if ((s = aq_init(NULL)) != AQ_OK) die("aq_init", s);
  if ((s = aq_code_object_load("kernels-cpu.so", &ops_co)) != AQ_OK) die("load kernels-cpu.so", s);
  if ((s = aq_code_object_load("test-kernels.so", &test_co)) != AQ_OK) die("load test-kernels.so", s);
  devnull = fopen("/dev/null", "w");
  const char *stats = getenv("GRAPH_FUZZ_STATS");
  if (stats) atexit(print_stats), verbose = atoi(stats);
  if ((s = aq_graph_create(NULL, &canary_graph)) != AQ_OK) die("canary graph", s);
  s = aq_tensor_create(canary_graph, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){32}, &canary_x);
  if (s == AQ_OK) s = aq_op_relu(canary_graph, canary_x, &canary_y);
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER, .flags = AQ_EXEC_NO_MEMORY_REUSE};
  if (s == AQ_OK) s = aq_graph_instantiate(canary_graph, &o, &canary);
  if (s != AQ_OK) die("canary", s);
  canary_check();
  return 0;
}

/* ---- the fuzzed program's state ---- */
typedef struct st {
  in_t in;
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t t[MAX_TENSORS];
  uint32_t nt;
  aq_task_t k[MAX_TASKS];
  uint32_t nk;
  int unrunnable; /* a raw task whose kernel may touch any memory */
  aq_comm_t *comm; /* outlives the graph's execs */
  int in_group;
} st_t;

static const char *const kernel_names[] = {
    AQ_KERNEL_MATMUL, AQ_KERNEL_MATMUL_FUSED, AQ_KERNEL_RELU, AQ_KERNEL_RELU_BWD, AQ_KERNEL_SOFTMAX,
    AQ_KERNEL_CONV2D, AQ_KERNEL_MAX_POOL, AQ_KERNEL_BATCH_NORM, AQ_KERNEL_ADD, AQ_KERNEL_REDUCE_SUM,
    AQ_KERNEL_SOFTMAX_XENT, AQ_KERNEL_SUM_ROWS_SGD, AQ_KERNEL_COPY, AQ_KERNEL_SGD, AQ_KERNEL_ADAM,
    AQ_KERNEL_MEAN, "noop", "noop", "noop", "count", "", "no_such_kernel", NULL,
};
enum { NKERNEL_NAMES = sizeof(kernel_names) / sizeof(kernel_names[0]) };

static float pick_float(in_t *in) {
  static const float v[] = {0.0f, 1.0f, -1.0f, 0.5f, 1e-3f, NAN, INFINITY, -INFINITY, 1e30f, 2.0f, 0.9f, 1.5f, 0.1f};
  return v[u8(in) % (sizeof(v) / sizeof(v[0]))];
}

static int64_t pick_dim(in_t *in) {
  static const int64_t huge[] = {65535,        65536,         (1ll << 31) - 1, 1ll << 31, 1ll << 32,
                                 (1ll << 32) + 64, 1ll << 40, INT64_MAX,       INT64_MIN, 3000000};
  uint8_t b = u8(in);
  switch (b >> 5) {
    case 5: return (b & 1) ? 0 : -(int64_t)(b & 7) - 1;
    case 6: return huge[(b & 31) % (sizeof(huge) / sizeof(huge[0]))];
    case 7: return (int64_t)u32(in);
    default: return 1 + (b & 7);
  }
}

static aq_tensor_t pick_tensor(st_t *s) {
  uint8_t b = u8(&s->in);
  if (b < 10 || !s->nt) {
    static const uint32_t bogus[] = {0, 1, 2, 63, 1000, UINT32_MAX};
    return (aq_tensor_t){bogus[b % 6]};
  }
  return s->t[b % s->nt];
}

static aq_task_t pick_task(st_t *s) {
  uint8_t b = u8(&s->in);
  if (b < 10 || !s->nk) return (aq_task_t){b < 5 ? b : UINT32_MAX - b};
  return s->k[b % s->nk];
}

static void keep_tensor(st_t *s, aq_tensor_t t) {
  if (!t.id) die("an OK call gave tensor 0", AQ_ERROR_INTERNAL);
  if (s->nt < MAX_TENSORS) s->t[s->nt++] = t;
}

static void do_tensor_create(st_t *s) {
  static const aq_dtype_t dtypes[] = {AQ_DTYPE_F32, AQ_DTYPE_F32, AQ_DTYPE_I32, 0, 3, (aq_dtype_t)-1};
  uint8_t b = u8(&s->in);
  aq_dtype_t dtype = dtypes[b % 6];
  aq_tensor_role_t role = (aq_tensor_role_t)(u8(&s->in) % 8);
  uint32_t rank = u8(&s->in) % 7;
  int64_t dims[8];
  for (uint32_t i = 0; i < 8; ++i) dims[i] = i < rank ? pick_dim(&s->in) : 1;
  char name[300];
  const char *nm = name;
  switch ((b >> 3) % 6) {
    case 0: nm = NULL; break;
    case 1: nm = ""; break;
    case 2: memset(name, 'n', sizeof(name) - 1), name[sizeof(name) - 1] = 0; break;
    default: snprintf(name, sizeof(name), "t%u", s->nt);
  }
  aq_tensor_t t = {0};
  if (CALL(aq_tensor_create(s->g, nm, dtype, role, rank, (b & 0x80) ? NULL : dims, &t)) == AQ_OK) keep_tensor(s, t);
}

static void do_tensor_init(st_t *s) {
  aq_initializer_t o = {.kind = (aq_init_kind_t)(u8(&s->in) % 9), .value = pick_float(&s->in),
                        .low = pick_float(&s->in), .high = pick_float(&s->in), .mean = pick_float(&s->in),
                        .stddev = pick_float(&s->in), .gain = pick_float(&s->in), .seed = u8(&s->in)};
  aq_tensor_t t = pick_tensor(s);
  CALL(aq_tensor_init(s->g, t, u8(&s->in) == 255 ? NULL : &o));
}

static void do_unary(st_t *s) {
  aq_tensor_t x = pick_tensor(s), out = {0};
  aq_status_t r;
  switch (u8(&s->in) % 6) {
    case 0: r = CALL(aq_op_relu(s->g, x, &out)); break;
    case 1: r = CALL(aq_op_sigmoid(s->g, x, &out)); break;
    case 2: r = CALL(aq_op_tanh(s->g, x, &out)); break;
    case 3: r = CALL(aq_op_gelu(s->g, x, &out)); break;
    case 4: {
      float p = pick_float(&s->in);
      r = CALL(aq_op_dropout(s->g, x, p, u8(&s->in), &out));
      break;
    }
    default: {
      uint32_t rank = u8(&s->in) % 6;
      int64_t dims[8];
      for (uint32_t i = 0; i < 8; ++i) dims[i] = pick_dim(&s->in);
      r = CALL(aq_op_reshape(s->g, x, rank, dims, &out));
    }
  }
  if (r == AQ_OK) keep_tensor(s, out);
}

static void do_matmul(st_t *s) {
  aq_tensor_t a = pick_tensor(s), b = pick_tensor(s), bias = (u8(&s->in) & 1) ? pick_tensor(s) : (aq_tensor_t){0};
  uint8_t f = u8(&s->in), out_null = (f & 0x80) != 0;
  aq_tensor_t out = {0};
  if (CALL(aq_op_matmul(s->g, a, b, bias, f & 1, (f >> 1) & 1, (aq_activation_t)((f >> 2) % 3),
                        out_null ? NULL : &out)) == AQ_OK && !out_null)
    keep_tensor(s, out);
}

static void do_nn(st_t *s) {
  aq_tensor_t out = {0};
  aq_status_t r = AQ_ERROR_INVALID_ARGUMENT;
  switch (u8(&s->in) % 5) {
    case 0: {
      aq_conv2d_options_t o = {(int8_t)u8(&s->in) % 4, (int8_t)u8(&s->in) % 4, (int8_t)u8(&s->in) % 4,
                               (int8_t)u8(&s->in) % 4, (int8_t)u8(&s->in) % 3, (int8_t)u8(&s->in) % 3};
      aq_tensor_t x = pick_tensor(s), w = pick_tensor(s), bias = (u8(&s->in) & 1) ? pick_tensor(s) : (aq_tensor_t){0};
      r = CALL(aq_op_conv2d(s->g, x, w, bias, (u8(&s->in) & 7) ? &o : NULL, &out));
      break;
    }
    case 1: {
      aq_pool_options_t o = {(int8_t)u8(&s->in) % 5, (int8_t)u8(&s->in) % 5, (int8_t)u8(&s->in) % 4,
                             (int8_t)u8(&s->in) % 4, (int8_t)u8(&s->in) % 3, (int8_t)u8(&s->in) % 3};
      aq_tensor_t x = pick_tensor(s);
      r = CALL(aq_op_max_pool2d(s->g, x, (u8(&s->in) & 7) ? &o : NULL, &out));
      break;
    }
    case 2: {
      aq_batch_norm_options_t o = {u8(&s->in) & 1, pick_float(&s->in), pick_float(&s->in)};
      aq_tensor_t x = pick_tensor(s), gm = pick_tensor(s), bt = pick_tensor(s), rm = pick_tensor(s),
                  rv = pick_tensor(s);
      r = CALL(aq_op_batch_norm(s->g, x, gm, bt, rm, rv, (u8(&s->in) & 7) ? &o : NULL, &out));
      break;
    }
    case 3: {
      aq_tensor_t logits = pick_tensor(s), labels = pick_tensor(s);
      r = CALL(aq_op_softmax_xent(s->g, logits, labels, &out));
      break;
    }
    default: {
      aq_tensor_t src = pick_tensor(s), dst = pick_tensor(s);
      CALL(aq_op_copy(s->g, src, dst));
      return;
    }
  }
  if (r == AQ_OK) keep_tensor(s, out);
}

static void do_train(st_t *s) {
  switch (u8(&s->in) % 4) {
    case 0: CALL(aq_graph_backward(s->g, pick_tensor(s))); break;
    case 1: {
      aq_tensor_t gr = {0};
      if (CALL(aq_graph_gradient(s->g, pick_tensor(s), &gr)) == AQ_OK) keep_tensor(s, gr);
      break;
    }
    case 2: {
      aq_sgd_options_t o = {pick_float(&s->in), pick_float(&s->in), pick_float(&s->in)};
      aq_tensor_t p = pick_tensor(s), gr = pick_tensor(s);
      CALL(aq_op_sgd(s->g, p, gr, (u8(&s->in) & 7) ? &o : NULL));
      break;
    }
    default: {
      aq_adam_options_t o = {pick_float(&s->in), pick_float(&s->in), pick_float(&s->in),
                             pick_float(&s->in), pick_float(&s->in), u8(&s->in) & 1};
      aq_tensor_t p = pick_tensor(s), gr = pick_tensor(s);
      CALL(aq_op_adam(s->g, p, gr, (u8(&s->in) & 7) ? &o : NULL));
    }
  }
}

static uint32_t pick_offset(st_t *s, uint32_t kargsize) {
  uint8_t b = u8(&s->in);
  switch (b % 5) {
    case 0: return UINT32_MAX;
    case 1: return UINT32_MAX - 7 - (b >> 3);
    case 2: return u32(&s->in);
    default: return kargsize ? (uint32_t)(b * 8) % kargsize : 0;
  }
}

static void do_add_kernel(st_t *s) {
  static uint8_t karg[KARG_ROOM];
  aq_kernel_task_t k;
  memset(&k, 0, sizeof(k));
  uint8_t b = u8(&s->in);
  const char *kernel = kernel_names[u8(&s->in) % NKERNEL_NAMES];
  int is_noop = kernel && !strcmp(kernel, "noop");
  k.name = (b & 1) ? NULL : "raw";
  k.code_object = is_noop || kernel == kernel_names[19] ? test_co : ops_co;
  if ((b & 6) == 6) k.code_object.handle = 0xdeadbeef;
  k.kernel = kernel;
  static const uint32_t sizes[] = {0, 8, 16, 64, sizeof(aq_matmul_args_t), 4, 1, KARG_ROOM};
  k.kernarg_size = sizes[(b >> 3) & 7];
  memset(karg, 0, sizeof(karg));
  for (uint32_t i = 0; i < k.kernarg_size && i < 128; ++i) karg[i] = (b & 0x40) ? u8(&s->in) : 0;
  k.kernarg = (k.kernarg_size && (b & 0x80) && !(u8(&s->in) & 15)) ? NULL : karg;
  static const uint32_t grid[] = {1, 0, 7, 64, 1024, 65536, UINT32_MAX, UINT32_MAX - 1};
  static const uint16_t wg[] = {1, 0, 7, 64, 256, 1024, 65535, 2};
  for (int d = 0; d < 3; ++d) {
    uint8_t g = u8(&s->in);
    k.shape.grid[d] = d && !(g & 0x80) ? 1 : grid[g & 7];
    k.shape.workgroup[d] = d && !(g & 0x40) ? 1 : wg[(g >> 3) & 7];
  }
  k.read_count = u8(&s->in) % 19;
  k.write_count = u8(&s->in) % 19;
  for (int i = 0; i < AQ_TASK_MAX_TENSORS; ++i) {
    k.reads[i] = pick_tensor(s), k.read_offsets[i] = pick_offset(s, k.kernarg_size);
    if (i < 3 || i < (int)k.write_count)
      k.writes[i] = pick_tensor(s), k.write_offsets[i] = pick_offset(s, k.kernarg_size);
    if (i >= 3 && i >= (int)k.read_count && i >= (int)k.write_count) break;
  }
  static const int32_t agents[] = {-1, -1, 0, 1, 99, -7};
  k.agent = agents[u8(&s->in) % 6];
  aq_task_t t = {0};
  if (verbose > 2)
    fprintf(stderr, "graph_fuzz: kernel %s size %u grid %u %u %u wg %u %u %u reads %u writes %u agent %d\n",
            kernel ? kernel : "(null)", k.kernarg_size, k.shape.grid[0], k.shape.grid[1], k.shape.grid[2],
            k.shape.workgroup[0], k.shape.workgroup[1], k.shape.workgroup[2], k.read_count, k.write_count, k.agent);
  if (CALL(aq_graph_add_kernel(s->g, (b & 0xf0) == 0xf0 ? NULL : &k, &t)) == AQ_OK) {
    /* Billions of noop work-items are a long run, not a hang. */
    double items = 1; /* a 0 is lowered as 1 */
    for (int d = 0; d < 3; ++d) items *= k.shape.grid[d] ? k.shape.grid[d] : 1;
    if (!is_noop || items > 65536) s->unrunnable = 1;
    if (s->nk < MAX_TASKS) s->k[s->nk++] = t;
  }
}

static aq_status_t host_nothing(void *ret, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)ret, (void)a1, (void)a2, (void)a3;
  return AQ_OK;
}

static void do_host(st_t *s) {
  aq_host_task_t h;
  memset(&h, 0, sizeof(h));
  uint8_t b = u8(&s->in);
  h.name = "host";
  h.fn = (b & 7) ? host_nothing : NULL;
  h.read_count = u8(&s->in) % 18;
  h.write_count = u8(&s->in) % 18;
  for (int i = 0; i < AQ_TASK_MAX_TENSORS && (i < (int)h.read_count || i < (int)h.write_count); ++i)
    h.reads[i] = pick_tensor(s), h.writes[i] = pick_tensor(s);
  h.agent = (b & 0x18) == 0x18 ? 5 : -1;
  aq_task_t t = {0};
  if (CALL(aq_graph_add_host(s->g, &h, &t)) == AQ_OK && s->nk < MAX_TASKS) s->k[s->nk++] = t;
}

static void do_edge(st_t *s) {
  aq_task_t after[6];
  uint8_t b = u8(&s->in);
  uint32_t n = b % 7;
  for (uint32_t i = 0; i < n && i < 6; ++i) after[i] = pick_task(s);
  aq_task_t t = pick_task(s);
  if (verbose > 2) fprintf(stderr, "graph_fuzz: edge kind %d: task %u after %u tasks (first %u)\n", (b >> 3) % 3, t.id, n, n ? after[0].id : 0);
  CALL(aq_graph_add_edge(s->g, t, (aq_edge_kind_t)((b >> 3) % 3), (b & 0x80) ? NULL : after, n));
}

static void do_group(st_t *s) {
  uint8_t b = u8(&s->in);
  if (b & 1) {
    if (CALL(aq_graph_group_begin(s->g, (b >> 1) & 1)) == AQ_OK) s->in_group = 1;
  } else {
    aq_task_t first;
    uint32_t count;
    if (CALL(aq_graph_group_end(s->g, (b & 2) ? &first : NULL, (b & 4) ? &count : NULL)) == AQ_OK) s->in_group = 0;
  }
}

/* Bytes every tensor of the graph takes: small enough to instantiate? */
static int graph_small(st_t *s) {
  size_t total = 0;
  for (uint32_t id = 1; id < 4 * MAX_TENSORS; ++id) {
    aq_tensor_info_t info;
    if (aq_tensor_get_info(s->g, (aq_tensor_t){id}, &info) != AQ_OK) break;
    total += info.bytes;
    if (info.bytes > RUN_BYTES_MAX || total > RUN_BYTES_MAX) return 0;
  }
  aq_error_clear();
  return 1;
}

static void fill_inputs(st_t *s, aq_exec_t *e);
static void wait_run(aq_exec_t *e);

static void do_instantiate(st_t *s) {
  canary_if_due();
  uint8_t b = u8(&s->in);
  if (!graph_small(s)) return;
  if (s->e && (b & 0x20)) { /* a second exec of the graph beside the first, run once */
    aq_exec_t *other = NULL;
    aq_exec_options_t eager = {.policy = AQ_SCHED_EAGER};
    if (CALL(aq_graph_instantiate(s->g, &eager, &other)) != AQ_OK) return;
    fill_inputs(s, other);
    if (!s->unrunnable && CALL(aq_exec_run(other)) == AQ_OK) wait_run(other);
    if (CALL(aq_exec_destroy(other)) != AQ_OK) die("second exec destroy", AQ_ERROR_INTERNAL);
    return;
  }
  if (s->e) {
    CALL(aq_graph_destroy(s->g)); /* busy: an exec lives */
    CALL(aq_exec_destroy(s->e));
    s->e = NULL;
  }
  static const uint32_t qsizes[] = {0, 0, 1, 2, 3, 64, 1000, 1u << 14}; /* 2^20 takes a second an exec */
  aq_exec_options_t o = {.policy = (aq_sched_policy_t)(b % 7), .queue_size = qsizes[(b >> 3) & 7]};
  uint8_t kinds = u8(&s->in);
  o.kernel_agent_kinds = (kinds & 1) ? 0 : 1u << (kinds >> 1) % 4;
  o.flags = u8(&s->in) & 0x3f;
  if (verbose > 2)
    fprintf(stderr, "graph_fuzz: instantiate policy %d queue %u kinds %#x flags %#x\n", o.policy, o.queue_size,
            o.kernel_agent_kinds, o.flags);
  double t0 = now_s();
  if (CALL(aq_graph_instantiate(s->g, (b & 0xc0) == 0xc0 ? NULL : &o, &s->e)) == AQ_OK) ++n_instantiated;
  t_instantiate += now_s() - t0;
}

/* Gives every tensor the user must fill a value; sometimes leaves one out. */
static void fill_inputs(st_t *s, aq_exec_t *e) {
  uint8_t b = u8(&s->in);
  for (uint32_t id = 1; id < 4 * MAX_TENSORS; ++id) {
    aq_tensor_info_t info;
    if (aq_tensor_get_info(s->g, (aq_tensor_t){id}, &info) != AQ_OK) break;
    if (info.role != AQ_ROLE_INPUT && info.role != AQ_ROLE_PARAMETER && info.role != AQ_ROLE_CONSTANT) continue;
    if ((b & 0x80) && id % 7 == (b & 7)) continue;
    void *v = calloc(1, info.bytes ? info.bytes : 1);
    if (!v) continue;
    if (info.dtype == AQ_DTYPE_F32)
      for (size_t i = 0; i < info.bytes / 4; ++i) ((float *)v)[i] = (float)((i * 7 + id) % 5) * 0.25f - 0.5f;
    else if (b & 0x40)
      for (size_t i = 0; i < info.bytes / 4; ++i) ((int32_t *)v)[i] = (int32_t)(i * 2654435761u);
    CALL(aq_exec_write(e, (aq_tensor_t){id}, v, info.bytes));
    free(v);
  }
  aq_error_clear();
}

static void wait_run(aq_exec_t *e) {
  aq_error_clear();
  aq_status_t r = aq_exec_wait(e, 30 * SEC);
  if (r == AQ_ERROR_TIMEOUT) die("a run of a small graph took 30 s", r);
  ++n_runs;
  if (check("aq_exec_wait", r) != AQ_OK) ++n_run_faults;
}

static void do_run(st_t *s) {
  canary_if_due();
  if (!s->e) return;
  uint8_t b = u8(&s->in);
  if (b & 1) fill_inputs(s, s->e);
  if (s->unrunnable) return;
  double t0 = now_s();
  if (CALL(aq_exec_run(s->e)) != AQ_OK) return;
  if (b & 2) CALL(aq_exec_run(s->e)); /* busy */
  if ((b & 12) == 12 && CALL(aq_exec_destroy(s->e)) == AQ_OK) { /* busy, unless the run was that quick */
    s->e = NULL;
    return;
  }
  wait_run(s->e);
  t_run += now_s() - t0;
}

static void do_io(st_t *s) {
  canary_if_due();
  if (!s->e) return;
  uint8_t b = u8(&s->in);
  aq_tensor_t t = pick_tensor(s);
  aq_tensor_info_t info;
  size_t size = aq_tensor_get_info(s->g, t, &info) == AQ_OK ? info.bytes : 4;
  aq_error_clear();
  if (size > RUN_BYTES_MAX) return;
  static const int64_t delta[] = {0, 0, -4, 4, -1};
  size_t n = (size_t)((int64_t)size + delta[b % 5]);
  if (n > size + 4) n = 0;
  void *buf = calloc(1, size + 4);
  if (!buf) return;
  switch ((b >> 3) % 6) {
    case 0: CALL(aq_exec_write(s->e, t, buf, n)); break;
    case 1: CALL(aq_exec_read(s->e, t, buf, n)); break;
    case 2: CALL(aq_exec_read(s->e, t, NULL, n)); break;
    case 3: {
      void *d = NULL;
      CALL(aq_exec_tensor_data(s->e, t, &d));
      break;
    }
    case 4: CALL(aq_exec_set_learning_rate(s->e, pick_float(&s->in))); break;
    default: {
      aq_exec_info_t info2;
      CALL(aq_exec_get_info(s->e, &info2));
      CALL(aq_exec_explain(s->e, devnull));
    }
  }
  free(buf);
}

/* Collectives and data parallelism (a communicator of this process's GPUs:
 * none here, so refused), binding, checkpoints (and a checkpoint file made
 * of the input's bytes). */
static void do_extra(st_t *s) {
  static _Alignas(64) uint8_t bound[1 << 16];
  uint8_t b = u8(&s->in);
  char path[4096];
  const char *dir = getenv("GRAPH_FUZZ_ARTIFACTS");
  snprintf(path, sizeof(path), "%s/checkpoint-%d", dir ? dir : ".", (int)getpid());
  switch (b % 5) {
    case 0: {
      if (s->comm) return;
      if (CALL(aq_comm_create_gpus(NULL, &s->comm)) != AQ_OK) {
        s->comm = NULL;
        aq_tensor_t out = {0};
        CALL(aq_op_allreduce(s->g, NULL, pick_tensor(s), AQ_REDUCE_SUM));
        CALL(aq_op_allgather(s->g, NULL, pick_tensor(s), &out));
        CALL(aq_graph_data_parallel(s->g, NULL, NULL));
        return;
      }
      aq_data_parallel_options_t o;
      memset(&o, 0, sizeof(o));
      CALL(aq_graph_data_parallel(s->g, s->comm, (b & 8) ? &o : NULL));
      return;
    }
    case 1: {
      if (!s->e) return;
      aq_tensor_t t = pick_tensor(s);
      aq_tensor_info_t info;
      size_t size = aq_tensor_get_info(s->g, t, &info) == AQ_OK ? info.bytes : 16;
      aq_error_clear();
      if (size > sizeof(bound)) return;
      CALL(aq_exec_bind(s->e, t, bound + ((b & 8) ? 4 : 0), (b & 16) ? size + 4 : size));
      return;
    }
    case 2:
      if (!s->e) return;
      if (CALL(aq_exec_save_with(s->e, path, &b, 1)) == AQ_OK) CALL(aq_exec_load(s->e, path));
      return;
    default: {
      if (!s->e) return;
      /* The rest of the input as a checkpoint file, after a real header
       * half the time. */
      FILE *f = fopen(path, "wb");
      if (!f) return;
      if (b & 8) fwrite("AQCKPT\n\x1a\x01\0\0\0", 1, 12, f);
      fwrite(s->in.p, 1, s->in.n, f);
      fclose(f);
      s->in.n = 0;
      CALL(aq_exec_load(s->e, path));
      size_t user = 0;
      CALL(aq_checkpoint_user_data(path, NULL, 0, &user));
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_t s;
  memset(&s, 0, sizeof(s));
  s.in = (in_t){data, size};
  current = data, current_size = size;
  ++n_inputs;
  if (CALL(aq_graph_create(NULL, &s.g)) != AQ_OK) die("graph create", AQ_ERROR_INTERNAL);
  for (int call = 0; call < MAX_CALLS && s.in.n; ++call) {
    switch (u8(&s.in) % 15) {
      case 0:
      case 1: do_tensor_create(&s); break;
      case 2: do_tensor_init(&s); break;
      case 3: do_unary(&s); break;
      case 4: do_matmul(&s); break;
      case 5: do_nn(&s); break;
      case 6: do_train(&s); break;
      case 7: do_add_kernel(&s); break;
      case 8: do_host(&s); break;
      case 9: do_edge(&s); break;
      case 10: do_group(&s); break;
      case 11: do_instantiate(&s); break;
      case 12: do_run(&s); break;
      case 13: do_io(&s); break;
      default: do_extra(&s); break;
    }
  }
  if (s.e) {
    aq_error_clear();
    aq_status_t r = aq_exec_wait(s.e, 30 * SEC); /* a run may still be in flight */
    if (r == AQ_ERROR_TIMEOUT) die("final wait", r);
    if (CALL(aq_exec_destroy(s.e)) != AQ_OK) die("exec destroy", AQ_ERROR_INTERNAL);
    if (CALL(aq_exec_destroy(s.e)) == AQ_OK) die("exec destroyed twice", AQ_ERROR_INTERNAL);
  }
  if (CALL(aq_graph_destroy(s.g)) != AQ_OK) die("graph destroy", AQ_ERROR_INTERNAL);
  if (s.comm && CALL(aq_comm_destroy(s.comm)) != AQ_OK) die("comm destroy", AQ_ERROR_INTERNAL);
  canary_if_due();
  return 0;
}
