/* aq-bench tasks: what a task costs the scheduler, Aquila beside StarPU 1.3
 * and OpenMP tasks (libgomp) on the same shapes, in one process.
 *   shapes: independent, chain, fanout (1 -> n-2 -> 1), wavefront (2-D
 *   stencil, sqrt(n) x sqrt(n)), random (each task after up to 3 of the 32
 *   before it); empty tasks. Aquila's first run (instantiation: placement,
 *   memory plan, lowering; then the run) and re-runs are reported apart,
 *   each a median over --reps; on the first-run line, the instantiation
 *   alone is instantiate_us_per_task and the program's own graph
 *   construction build_us_per_task. The placement is AQ_SCHED's
 *   (heft, the default, unless AQ_SCHED names another).
 *   metg: Task Bench's minimum effective task granularity: the smallest
 *   busy-wait duration at which a 1-D stencil (width = cores) still runs at
 *   50% efficiency.
 *   mixed: small and large matmuls over CPU and GPU agents (--shape mixed):
 *   the default placement against each kind of agent alone.
 * Options: --n N (tasks, default 10000), --reps R (5), --shape S, --no-metg;
 * mixed: --dot PREFIX writes each placement's DOT to PREFIX-heft.dot, -cpu, -gpu
 * (and adds heft's own estimate of a run, est_graph_us, to its line). */
#include <math.h>
#include <omp.h>
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aquila/aquila.h"
#include "bench.h"

#define AQ_RETURN_IF_ERROR_BENCH(expr) \
  do {                                 \
    aq_status_t s_ = (expr);           \
    if (s_ != AQ_OK) return s_;        \
  } while (0)

enum { SHAPES = 5 };
static const char *shape_names[SHAPES] = {"independent", "chain", "fanout", "wavefront", "random"};

/* The dependencies of task i (indices of earlier tasks), the same for all
 * three systems. */
static uint32_t deps_of(int shape, uint32_t i, uint32_t n, uint32_t *out) {
  uint32_t w = (uint32_t)sqrt((double)n), k = 0;
  switch (shape) {
    case 1: if (i) out[k++] = i - 1; break;
    case 2: if (i && i < n - 1) out[k++] = 0; break; /* the fan-in is handled apart */
    case 3:
      if (i % w) out[k++] = i - 1;
      if (i >= w) out[k++] = i - w;
      break;
    case 4: {
      uint32_t seed = i * 2654435761u;
      for (int j = 0; j < 3 && i; ++j) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t back = 1 + (seed >> 16) % (i < 32 ? i : 32), d = i - back, dup = 0;
        for (uint32_t q = 0; q < k; ++q) dup |= out[q] == d;
        if (!dup) out[k++] = d;
      }
      break;
    }
  }
  return k;
}

static double now_s(void) { return (double)bench_now_ns() / 1e9; }

static void busy_us(double us) {
  double end = now_s() + us * 1e-6;
  while (now_s() < end) {
  }
}

/* ---- Aquila ---- */
typedef struct { uint64_t ns; } busy_args_t;

static aq_status_t aquila_graph(int shape, uint32_t n, double task_us, aq_graph_t **out) {
  aq_graph_t *g;
  AQ_RETURN_IF_ERROR_BENCH(aq_graph_create(NULL, &g));
  aq_tensor_t *t = malloc(n * sizeof(*t));
  aq_task_t *tk = malloc(n * sizeof(*tk));
  busy_args_t args = {(uint64_t)(task_us * 1e3)};
  aq_status_t s = AQ_OK;
  for (uint32_t i = 0; s == AQ_OK && i < n; ++i) {
    s = aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &t[i]);
    uint32_t d[4], nd = deps_of(shape, i, n, d);
    aq_kernel_task_t k = {.name = "task", .kernel = task_us > 0 ? "aq_busy_wait" : "aq_noop",
                          .kernarg = &args, .kernarg_size = task_us > 0 ? sizeof(args) : 0,
                          .shape = {{1, 1, 1}, {1, 1, 1}}, .read_count = nd, .write_count = 1, .agent = -1,
                          .cost_key = task_us > 0 ? args.ns : 0};
    for (uint32_t j = 0; j < nd; ++j) k.reads[j] = t[d[j]], k.read_offsets[j] = UINT32_MAX;
    k.writes[0] = t[i];
    k.write_offsets[0] = UINT32_MAX;
    if (s == AQ_OK) s = aq_graph_add_kernel(g, &k, &tk[i]);
  }
  if (s == AQ_OK && shape == 2 && n > 2) s = aq_graph_add_edge(g, tk[n - 1], AQ_EDGE_AFTER_ALL, tk + 1, n - 2);
  free(t), free(tk);
  if (s != AQ_OK) {
    aq_graph_destroy(g);
    return s;
  }
  *out = g;
  return AQ_OK;
}

/* Seconds for: the graph's construction (build), instantiate + first run
 * (first) and of that the instantiation (inst), and re-runs; first, inst
 * and build are medians over reps graphs. */
static aq_status_t aquila_times(int shape, uint32_t n, double task_us, int reps, double *build, double *first,
                                double *inst, double *rerun) {
  double *v = calloc((size_t)reps, sizeof(double)), *f = calloc((size_t)reps, sizeof(double));
  double *b = calloc((size_t)reps, sizeof(double)), *in = calloc((size_t)reps, sizeof(double));
  aq_status_t s = v && f && b && in ? AQ_OK : AQ_ERROR_OUT_OF_MEMORY;
  for (int k = 0; s == AQ_OK && k < reps; ++k) {
    double t0 = now_s();
    aq_graph_t *g;
    aq_exec_t *e = NULL;
    s = aquila_graph(shape, n, task_us, &g);
    if (s != AQ_OK) break;
    double t1 = now_s();
    s = aq_graph_instantiate(g, NULL, &e);
    in[k] = now_s() - t1;
    if (s == AQ_OK) s = aq_exec_run(e);
    if (s == AQ_OK) s = aq_exec_wait(e, AQ_TIMEOUT_INFINITE);
    b[k] = t1 - t0;
    f[k] = now_s() - t1;
    /* re-runs on the last graph only */
    for (int r = 0; s == AQ_OK && k == reps - 1 && r < reps; ++r) {
      double a = now_s();
      s = aq_exec_run(e);
      if (s == AQ_OK) s = aq_exec_wait(e, AQ_TIMEOUT_INFINITE);
      v[r] = now_s() - a;
    }
    if (e) aq_exec_destroy(e);
    aq_graph_destroy(g);
  }
  if (s == AQ_OK) {
    *build = bench_median(b, (size_t)reps);
    *first = bench_median(f, (size_t)reps);
    *inst = bench_median(in, (size_t)reps);
    *rerun = bench_median(v, (size_t)reps);
  }
  free(v), free(f), free(b), free(in);
  return s;
}

/* ---- StarPU ---- */
static void starpu_body(void *buffers[], void *cl_arg) {
  (void)buffers;
  double us = 0;
  if (cl_arg) memcpy(&us, cl_arg, sizeof(us));
  if (us > 0) busy_us(us);
}

static struct starpu_codelet cl_r[5];

static double starpu_time(int shape, uint32_t n, double task_us) {
  starpu_data_handle_t *h = malloc(n * sizeof(*h));
  float *vals = calloc(n, sizeof(float));
  for (uint32_t i = 0; i < n; ++i) starpu_variable_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)&vals[i], sizeof(float));
  double t0 = now_s();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t d[4], nd = deps_of(shape, i, n, d);
    struct starpu_task *t = starpu_task_create();
    t->cl = &cl_r[nd];
    t->cl_arg = task_us > 0 ? &task_us : NULL;
    t->cl_arg_size = task_us > 0 ? sizeof(task_us) : 0;
    for (uint32_t j = 0; j < nd; ++j) t->handles[j] = h[d[j]];
    t->handles[nd] = h[i];
    if (shape == 2 && i == n - 1 && n > 2) starpu_task_wait_for_all(); /* the fan-in */
    if (starpu_task_submit(t) != 0) fprintf(stderr, "aq-bench tasks: starpu_task_submit failed\n");
  }
  starpu_task_wait_for_all();
  double dt = now_s() - t0;
  for (uint32_t i = 0; i < n; ++i) starpu_data_unregister(h[i]);
  free(h), free(vals);
  return dt;
}

/* ---- OpenMP ---- */
static double omp_time(int shape, uint32_t n, double task_us) {
  char *dep = calloc(n, 1);
  double t0 = now_s();
#pragma omp parallel
#pragma omp single
  {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t d[4], nd = deps_of(shape, i, n, d);
      char *me = &dep[i];
      (void)me;
      if (shape == 2 && i == n - 1 && n > 2) {
#pragma omp taskwait
      }
      switch (nd) {
        case 0:
#pragma omp task depend(out : me[0]) firstprivate(task_us)
          if (task_us > 0) busy_us(task_us);
          break;
        case 1: {
          char *a = &dep[d[0]];
#pragma omp task depend(in : a[0]) depend(out : me[0]) firstprivate(task_us)
          if (task_us > 0) busy_us(task_us);
          (void)a;
          break;
        }
        case 2: {
          char *a = &dep[d[0]], *b = &dep[d[1]];
#pragma omp task depend(in : a[0], b[0]) depend(out : me[0]) firstprivate(task_us)
          if (task_us > 0) busy_us(task_us);
          (void)a, (void)b;
          break;
        }
        default: {
          char *a = &dep[d[0]], *b = &dep[d[1]], *c = &dep[d[2]];
#pragma omp task depend(in : a[0], b[0], c[0]) depend(out : me[0]) firstprivate(task_us)
          if (task_us > 0) busy_us(task_us);
          (void)a, (void)b, (void)c;
          break;
        }
      }
    }
#pragma omp taskwait
  }
  double dt = now_s() - t0;
  free(dep);
  return dt;
}

static void line(const char *impl, const char *shape, const char *run, uint32_t n, int workers, double us,
                 int reps) {
  bench_json_t j;
  bench_json_begin(&j, "tasks", impl);
  bench_json_str(&j, "shape", shape);
  bench_json_str(&j, "run", run);
  bench_json_int(&j, "n", n);
  bench_json_int(&j, "workers", workers);
  bench_json_num(&j, "us_per_task", us);
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
}

/* ---- METG: 1-D stencil, width = cores, each task after its 3 neighbours */
static int stencil_deps(uint32_t i, uint32_t w, uint32_t *out) {
  if (i < w) return 0;
  uint32_t t = i / w, x = i % w, k = 0;
  for (int dx = -1; dx <= 1; ++dx) {
    int64_t nx = (int64_t)x + dx;
    if (nx >= 0 && nx < w) out[k++] = (t - 1) * w + (uint32_t)nx;
  }
  return (int)k;
}

static double aquila_stencil(uint32_t w, uint32_t steps, double us) {
  uint32_t n = w * steps;
  aq_graph_t *g;
  if (aq_graph_create(NULL, &g) != AQ_OK) return -1;
  aq_tensor_t *t = malloc(n * sizeof(*t));
  busy_args_t args = {(uint64_t)(us * 1e3)};
  for (uint32_t i = 0; i < n; ++i) {
    aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &t[i]);
    uint32_t d[3];
    int nd = stencil_deps(i, w, d);
    aq_kernel_task_t k = {.name = "stencil", .kernel = "aq_busy_wait", .kernarg = &args, .kernarg_size = sizeof(args),
                          .shape = {{1, 1, 1}, {1, 1, 1}}, .read_count = (uint32_t)nd, .write_count = 1, .agent = -1,
                          .cost_key = args.ns}; /* its spin time: one model per task length */
    for (int j = 0; j < nd; ++j) k.reads[j] = t[d[j]], k.read_offsets[j] = UINT32_MAX;
    k.writes[0] = t[i], k.write_offsets[0] = UINT32_MAX;
    aq_graph_add_kernel(g, &k, NULL);
  }
  free(t);
  aq_exec_t *e;
  double best = -1;
  if (aq_graph_instantiate(g, NULL, &e) == AQ_OK) {
    for (int r = 0; r < 3; ++r) {
      double a = now_s();
      aq_exec_run(e);
      aq_exec_wait(e, AQ_TIMEOUT_INFINITE);
      double dt = now_s() - a;
      if (best < 0 || dt < best) best = dt;
    }
    aq_exec_destroy(e);
  }
  aq_graph_destroy(g);
  return best;
}

static double starpu_stencil(uint32_t w, uint32_t steps, double us) {
  uint32_t n = w * steps;
  starpu_data_handle_t *h = malloc(n * sizeof(*h));
  float *vals = calloc(n, sizeof(float));
  for (uint32_t i = 0; i < n; ++i) starpu_variable_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)&vals[i], sizeof(float));
  double t0 = now_s();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t d[3];
    int nd = stencil_deps(i, w, d);
    struct starpu_task *t = starpu_task_create();
    t->cl = &cl_r[nd];
    t->cl_arg = &us;
    t->cl_arg_size = sizeof(us);
    for (int j = 0; j < nd; ++j) t->handles[j] = h[d[j]];
    t->handles[nd] = h[i];
    if (starpu_task_submit(t) != 0) fprintf(stderr, "aq-bench tasks: starpu_task_submit failed\n");
  }
  starpu_task_wait_for_all();
  double dt = now_s() - t0;
  for (uint32_t i = 0; i < n; ++i) starpu_data_unregister(h[i]);
  free(h), free(vals);
  return dt;
}

static double omp_stencil(uint32_t w, uint32_t steps, double us) {
  uint32_t n = w * steps;
  char *dep = calloc(n, 1);
  double t0 = now_s();
#pragma omp parallel
#pragma omp single
  {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t d[3] = {i, i, i};
      int nd = stencil_deps(i, w, d);
      (void)nd;
      char *me = &dep[i], *a = &dep[d[0]], *b = &dep[d[nd > 1 ? 1 : 0]], *c = &dep[d[nd > 2 ? 2 : 0]];
      if (!nd) a = b = c = me;
#pragma omp task depend(in : a[0], b[0], c[0]) depend(inout : me[0]) firstprivate(us)
      busy_us(us);
      (void)a, (void)b, (void)c, (void)me;
    }
#pragma omp taskwait
  }
  double dt = now_s() - t0;
  free(dep);
  return dt;
}

static void metg(int cores, int only_impl) {
  static const double durations[] = {0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
  const char *impls[3] = {"aquila", "starpu", "openmp"};
  for (int impl = 0; impl < 3; ++impl) {
    if (only_impl >= 0 && impl != only_impl) continue;
    double found = -1;
    for (size_t k = 0; k < sizeof(durations) / sizeof(durations[0]) && found < 0; ++k) {
      double us = durations[k];
      uint32_t w = (uint32_t)cores, steps = (uint32_t)(50000.0 / us / w);
      if (steps < 20) steps = 20;
      if (steps > 2000) steps = 2000;
      if (impl == 1) starpu_resume();
      double wall = impl == 0 ? aquila_stencil(w, steps, us) : impl == 1 ? starpu_stencil(w, steps, us)
                                                                          : omp_stencil(w, steps, us);
      if (impl == 1) starpu_pause();
      usleep(50000);
      double eff = wall > 0 ? (double)w * steps * us * 1e-6 / (wall * cores) : 0;
      fprintf(stderr, "metg: %s %g us: efficiency %.2f\n", impls[impl], us, eff);
      if (eff >= 0.5) found = us;
    }
    bench_json_t j;
    bench_json_begin(&j, "tasks", impls[impl]);
    bench_json_str(&j, "shape", "stencil_1d");
    bench_json_str(&j, "run", "metg");
    bench_json_int(&j, "workers", cores);
    bench_json_num(&j, "metg_us", found);
    bench_json_int(&j, "reps", 3);
    bench_json_end(&j);
  }
}

/* A mixed graph: independent chains of small matmuls beside a few large
 * ones, placed by Aquila's default (earliest finish over a cost model, HEFT's
 * rule) and pinned to each kind of agent alone. */
static void mixed(int reps, const char *dot) {
  const char *names[3] = {"heft", "cpu", "gpu"};
  uint32_t kinds[3] = {0, 1u << AQ_AGENT_KIND_CPU, 1u << AQ_AGENT_KIND_GPU};
  for (int pl = 0; pl < 3; ++pl) {
    aq_graph_t *g;
    if (aq_graph_create(NULL, &g) != AQ_OK) return;
    enum { SMALL = 64, LARGE = 1024, CHAINS = 8, DEPTH = 8, BIG = 4 };
    uint32_t tasks = 0;
    aq_tensor_t w;
    aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_CONSTANT, 2, (int64_t[]){SMALL, SMALL}, &w);
    for (int c = 0; c < CHAINS; ++c) {
      aq_tensor_t x;
      char name[16]; /* names are unique within a graph */
      snprintf(name, sizeof(name), "x%d", c);
      aq_tensor_create(g, name, AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){SMALL, SMALL}, &x);
      for (int d = 0; d < DEPTH; ++d, ++tasks) aq_op_matmul(g, x, w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &x);
    }
    aq_tensor_t big;
    aq_tensor_create(g, "big", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){LARGE, LARGE}, &big);
    for (int b = 0; b < BIG; ++b, ++tasks) {
      aq_tensor_t out;
      aq_op_matmul(g, big, big, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &out);
    }
    aq_exec_t *e;
    /* "heft": HEFT over the performance models (calibrated in the first
     * runs, kept under AQ_PERF_DIR); the others: one kind of agent alone. */
    aq_exec_options_t o = {.policy = pl == 0 ? AQ_SCHED_HEFT : AQ_SCHED_DEFAULT, .kernel_agent_kinds = kinds[pl]};
    if (aq_graph_instantiate(g, &o, &e) != AQ_OK) {
      fprintf(stderr, "tasks mixed %s: %s\n", names[pl], aq_last_error());
      aq_graph_destroy(g);
      continue;
    }
    /* Inputs and constants get data (zeros) before the first run. */
    void *zeros = calloc(1, (size_t)LARGE * LARGE * sizeof(float));
    for (uint32_t id = 1; zeros; ++id) {
      aq_tensor_info_t ti;
      if (aq_tensor_get_info(g, (aq_tensor_t){id}, &ti) != AQ_OK) break;
      if (ti.role == AQ_ROLE_INPUT || ti.role == AQ_ROLE_CONSTANT) aq_exec_write(e, (aq_tensor_t){id}, zeros, ti.bytes);
    }
    free(zeros);
    double est_us = -1; /* heft's own estimate of a run, from its DOT's label */
    if (dot) { /* where each placement put each task (heft's: with its estimates) */
      char path[512];
      snprintf(path, sizeof(path), "%s-%s.dot", dot, names[pl]);
      if (aq_exec_write_dot(e, path) != AQ_OK) fprintf(stderr, "tasks mixed: %s\n", aq_last_error());
      FILE *f = pl == 0 ? fopen(path, "r") : NULL;
      char text[512];
      while (f && fgets(text, sizeof(text), f))
        if (strstr(text, "makespan estimate ")) est_us = atof(strstr(text, "makespan estimate ") + 18);
      if (f) fclose(f);
    }
    double *v = calloc((size_t)reps, sizeof(double));
    /* warm-up (and, under heft, calibration) runs */
    for (int r = 0; r < 4; ++r)
      if (aq_exec_run(e) != AQ_OK || aq_exec_wait(e, AQ_TIMEOUT_INFINITE) != AQ_OK)
        fprintf(stderr, "tasks mixed %s: %s\n", names[pl], aq_last_error());
    for (int r = 0; r < reps; ++r) {
      double a = now_s();
      aq_exec_run(e);
      aq_exec_wait(e, AQ_TIMEOUT_INFINITE);
      v[r] = now_s() - a;
    }
    bench_json_t j;
    bench_json_begin(&j, "tasks", "aquila");
    bench_json_str(&j, "shape", "mixed_matmul");
    bench_json_str(&j, "run", "rerun");
    bench_json_str(&j, "placement", names[pl]);
    bench_json_int(&j, "n", tasks);
    bench_json_num(&j, "us_per_task", bench_median(v, (size_t)reps) * 1e6 / tasks);
    bench_json_num(&j, "graph_us", bench_median(v, (size_t)reps) * 1e6);
    if (est_us >= 0) bench_json_num(&j, "est_graph_us", est_us);
    bench_json_int(&j, "reps", reps);
    bench_json_end(&j);
    free(v);
    aq_exec_destroy(e);
    aq_graph_destroy(g);
  }
}

/* Aquila's two lines for a shape: its first run (instantiate: placement,
 * memory plan, lowering, then the run; the graph's construction by the
 * program is reported apart) and its re-runs. */
static aq_status_t aquila_lines(int shape, uint32_t n, int reps, int cores) {
  double build = 0, first = 0, inst = 0, rerun = 0;
  AQ_RETURN_IF_ERROR_BENCH(aquila_times(shape, n, 0, reps, &build, &first, &inst, &rerun));
  bench_json_t fj;
  bench_json_begin(&fj, "tasks", "aquila");
  bench_json_str(&fj, "shape", shape_names[shape]);
  bench_json_str(&fj, "run", "first");
  bench_json_int(&fj, "n", n);
  bench_json_int(&fj, "workers", cores);
  bench_json_num(&fj, "us_per_task", first * 1e6 / n);
  bench_json_num(&fj, "instantiate_us_per_task", inst * 1e6 / n); /* of us_per_task: the rest is the run */
  bench_json_num(&fj, "build_us_per_task", build * 1e6 / n);
  bench_json_num(&fj, "with_build_us_per_task", (first + build) * 1e6 / n);
  bench_json_int(&fj, "reps", reps);
  bench_json_end(&fj);
  line("aquila", shape_names[shape], "rerun", n, cores, rerun * 1e6 / n, reps);
  return AQ_OK;
}

static const cli_option_t tasks_options[] = {
    {"n", 0, CLI_INT, "N", "tasks per graph (default 10000)", 4, 1e9},
    BENCH_REPS(5),
    {"shape", 0, CLI_CHOICE, "independent|chain|fanout|wavefront|random|mixed", "only this shape (default: all but mixed)", 0, 0},
    {"impl", 0, CLI_CHOICE, "aquila|starpu|openmp", "only this system (default: the three, side by side)", 0, 0},
    {"no-metg", 0, CLI_FLAG, NULL, "leave out the minimum effective task granularity", 0, 0},
    {"dot", 0, CLI_TEXT, "PREFIX", "mixed: each placement's graph to PREFIX-heft.dot, -cpu.dot, -gpu.dot", 0, 0},
};

int aq_bench_tasks(int argc, char **argv) {
  BENCH_OPTIONS("tasks", tasks_options, argc, argv);
  uint32_t n = (uint32_t)bench_arg_int("n", 10000);
  int reps = (int)bench_arg_int("reps", 5);
  const char *only = bench_arg("shape");
  if (only && !strcmp(only, "mixed")) {
    if (aq_init(NULL) != AQ_OK) return fprintf(stderr, "aq-bench tasks: %s\n", aq_last_error()), 1;
    mixed(reps, bench_arg("dot"));
    aq_shut_down();
    return 0;
  }
  int no_metg = bench_arg("no-metg") != NULL;
  /* One system alone: to profile it, or to time it without the others'
   * threads about. */
  const char *impl = bench_arg("impl");
  int only_impl = !impl ? -1 : !strcmp(impl, "aquila") ? 0 : !strcmp(impl, "starpu") ? 1 : 2;
  if (n < 4 || reps < 1) {
    fprintf(stderr, "aq-bench tasks: --n >= 4, --reps >= 1\n");
    return 2;
  }
  if (aq_init(NULL) != AQ_OK) {
    fprintf(stderr, "aq-bench tasks: %s\n", aq_last_error());
    return 1;
  }
  aq_agent_t a;
  size_t na;
  aq_agents(&a, 1, &na);
  aq_agent_info_t info;
  aq_agent_get_info(a, &info);
  int cores = (int)info.compute_units;
  for (int k = 0; k < 5; ++k) {
    cl_r[k].cpu_funcs[0] = starpu_body;
    cl_r[k].nbuffers = k + 1;
    for (int b = 0; b < k; ++b) cl_r[k].modes[b] = STARPU_R;
    cl_r[k].modes[k] = STARPU_W;
  }
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = cores;
  conf.ncuda = 0;
  conf.nopencl = 0;
  if (starpu_init(&conf) != 0) {
    fprintf(stderr, "aq-bench tasks: starpu_init failed\n");
    return 1;
  }
  starpu_pause();
  omp_set_num_threads(cores);
  for (int shape = 0; shape < SHAPES; ++shape) {
    if (only && strcmp(only, shape_names[shape])) continue;
    fprintf(stderr, "tasks: %s, n=%u\n", shape_names[shape], n);
    if (only_impl <= 0 && aquila_lines(shape, n, reps, cores) != AQ_OK) {
      fprintf(stderr, "aq-bench tasks: %s\n", aq_last_error());
      return 1;
    }
    /* Each system runs alone: StarPU's workers are paused outside its turn,
     * and OpenMP's spinning threads get time to go to sleep. */
    double *v = calloc((size_t)reps, sizeof(double));
    if (only_impl < 0 || only_impl == 1) {
      starpu_resume();
      starpu_time(shape, n, 0);
      for (int r = 0; r < reps; ++r) v[r] = starpu_time(shape, n, 0);
      starpu_pause();
      line("starpu", shape_names[shape], "rerun", n, cores, bench_median(v, (size_t)reps) * 1e6 / n, reps);
    }
    if (only_impl < 0 || only_impl == 2) {
      omp_time(shape, n, 0);
      for (int r = 0; r < reps; ++r) v[r] = omp_time(shape, n, 0);
      line("openmp", shape_names[shape], "rerun", n, cores, bench_median(v, (size_t)reps) * 1e6 / n, reps);
    }
    usleep(50000);
    free(v);
  }
  if (!no_metg && !only) metg(cores, only_impl);
  starpu_resume();
  starpu_shutdown();
  aq_shut_down();
  return 0;
}
