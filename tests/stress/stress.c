/* Thread-heavy scenarios, as a plain program so ThreadSanitizer can run it
 * (Criterion's forking sandbox does not start under TSan). `make test` runs
 * it as it is; `make tsan` runs it instrumented. Each scenario checks its own
 * results; the last line says how many passed and failed. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aquila/aquila.h"

#define SEC 1000000000ull

static int failures;
static aq_agent_t agent;
static aq_kernel_info_t k_count, k_noop;

#define EXPECT(cond, ...)                       \
  do {                                          \
    if (!(cond)) {                              \
      fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);             \
      fprintf(stderr, "\n");                    \
      failures++;                               \
      return;                                   \
    }                                           \
  } while (0)
#define OK(expr) EXPECT((expr) == AQ_OK, "%s: %s", #expr, aq_last_error())

typedef struct { _Atomic uint32_t *hits; } count_args_t;

static hsa_kernel_dispatch_packet_t packet(const aq_kernel_info_t *k, void *args, uint32_t grid, uint16_t wg,
                                           aq_signal_t done) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = wg;
  p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = grid;
  p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = k->kernel_object;
  p.kernarg_address = args;
  p.completion_signal.handle = done.handle;
  return p;
}

typedef struct {
  aq_queue_t q;
  count_args_t *args;
  aq_signal_t done;
  uint32_t n;
  int split;
  int failed;
} producer_t;

static void *produce(void *arg) {
  producer_t *p = arg;
  for (uint32_t i = 0; i < p->n; ++i) {
    hsa_kernel_dispatch_packet_t pkt = packet(&k_count, &p->args[i], 1, 1, p->done);
    if (!p->split) {
      p->failed |= aq_queue_submit(p->q, &pkt, 30 * SEC, NULL) != AQ_OK;
      continue;
    }
    uint64_t idx;
    void *slot;
    if (aq_queue_reserve(p->q, 1, 30 * SEC, &idx) || aq_queue_slot(p->q, idx, &slot)) {
      p->failed = 1;
      return NULL;
    }
    memcpy((char *)slot + 4, (char *)&pkt + 4, 60);
    aq_queue_publish(p->q, idx, pkt.header, pkt.setup);
    aq_queue_ring(p->q, idx);
  }
  return NULL;
}

static void many_producers(uint32_t threads, uint32_t n, uint32_t qsize) {
  aq_queue_t q;
  aq_queue_options_t o = {.size = qsize};
  OK(aq_queue_create(agent, &o, &q));
  _Atomic uint32_t *hits = calloc((size_t)threads * n, sizeof(*hits));
  count_args_t *args = calloc((size_t)threads * n, sizeof(*args));
  aq_signal_t done;
  OK(aq_signal_create((aq_signal_value_t)threads * n, &done));
  producer_t pr[16];
  pthread_t t[16];
  for (uint32_t i = 0; i < threads; ++i) {
    for (uint32_t j = 0; j < n; ++j) args[i * n + j].hits = &hits[i * n + j];
    pr[i] = (producer_t){q, &args[i * n], done, n, (int)(i & 1), 0};
    pthread_create(&t[i], NULL, produce, &pr[i]);
  }
  for (uint32_t i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  for (uint32_t i = 0; i < threads; ++i) EXPECT(!pr[i].failed, "producer %u failed: %s", i, aq_last_error());
  OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 120 * SEC, NULL));
  for (uint32_t i = 0; i < threads * n; ++i) EXPECT(hits[i] == 1, "packet %u ran %u times", i, hits[i]);
  free(hits);
  free(args);
  aq_signal_destroy(done);
  OK(aq_queue_destroy(q));
}

/* Big grids: every worker of the agent helps; every work-item runs once. */
static void shared_dispatches(uint32_t rounds) {
  aq_queue_t q[2];
  for (int i = 0; i < 2; ++i) OK(aq_queue_create(agent, NULL, &q[i]));
  enum { GRID = 4096 };
  _Atomic uint32_t *hits = calloc(2 * GRID, sizeof(*hits));
  count_args_t args[2] = {{hits}, {hits + GRID}};
  aq_signal_t done;
  OK(aq_signal_create(2 * rounds, &done));
  for (uint32_t r = 0; r < rounds; ++r)
    for (int i = 0; i < 2; ++i) {
      hsa_kernel_dispatch_packet_t p = packet(&k_count, &args[i], GRID, 16, done);
      OK(aq_queue_submit(q[i], &p, 30 * SEC, NULL));
    }
  OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 120 * SEC, NULL));
  for (uint32_t i = 0; i < 2 * GRID; ++i) EXPECT(hits[i] == rounds, "item %u ran %u times, not %u", i, hits[i], rounds);
  free(hits);
  aq_signal_destroy(done);
  for (int i = 0; i < 2; ++i) OK(aq_queue_destroy(q[i]));
}

/* A chain across two queues: each step on one queue waits (barrier-AND) for
 * the previous step on the other. */
static void ping_pong_barriers(uint32_t steps) {
  aq_queue_t q[2];
  for (int i = 0; i < 2; ++i) OK(aq_queue_create(agent, NULL, &q[i]));
  aq_signal_t *s = calloc(steps, sizeof(*s));
  for (uint32_t i = 0; i < steps; ++i) OK(aq_signal_create(1, &s[i]));
  for (uint32_t i = 0; i < steps; ++i) {
    aq_queue_t qq = q[i & 1];
    if (i) {
      hsa_barrier_and_packet_t b;
      memset(&b, 0, sizeof(b));
      b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
      b.dep_signal[0].handle = s[i - 1].handle;
      OK(aq_queue_submit(qq, &b, 30 * SEC, NULL));
    }
    hsa_kernel_dispatch_packet_t p = packet(&k_noop, NULL, 1, 1, s[i]);
    OK(aq_queue_submit(qq, &p, 30 * SEC, NULL));
  }
  OK(aq_signal_wait(s[steps - 1], AQ_SIGNAL_EQ, 0, 120 * SEC, NULL));
  for (uint32_t i = 0; i < steps; ++i) {
    aq_signal_value_t v;
    OK(aq_signal_load(s[i], &v));
    EXPECT(v == 0, "step %u not complete", i);
    aq_signal_destroy(s[i]);
  }
  free(s);
  for (int i = 0; i < 2; ++i) {
    OK(aq_queue_wait_idle(q[i], 30 * SEC));
    OK(aq_queue_destroy(q[i]));
  }
}

/* Queues come and go while others run. */
static void *churn(void *arg) {
  uint32_t n = *(uint32_t *)arg;
  for (uint32_t i = 0; i < n; ++i) {
    aq_queue_t q;
    aq_queue_options_t o = {.size = 8};
    if (aq_queue_create(agent, &o, &q) != AQ_OK) return (void *)1;
    aq_signal_t d;
    aq_signal_create(3, &d);
    for (int j = 0; j < 3; ++j) {
      hsa_kernel_dispatch_packet_t p = packet(&k_noop, NULL, 4, 1, d);
      aq_queue_submit(q, &p, 30 * SEC, NULL);
    }
    if (aq_signal_wait(d, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL) != AQ_OK) return (void *)1;
    aq_queue_wait_idle(q, 30 * SEC);
    if (aq_queue_destroy(q) != AQ_OK) return (void *)1;
    aq_signal_destroy(d);
  }
  return NULL;
}

static void queue_churn(uint32_t n) {
  pthread_t t[3];
  for (int i = 0; i < 3; ++i) pthread_create(&t[i], NULL, churn, &n);
  for (int i = 0; i < 3; ++i) {
    void *rc;
    pthread_join(t[i], &rc);
    EXPECT(rc == NULL, "churn thread %d failed: %s", i, aq_last_error());
  }
}

/* Signal ping-pong: wake-ups are never lost. */
typedef struct { aq_signal_t a, b; uint32_t n; } pp_t;
static void *echo(void *arg) {
  pp_t *pp = arg;
  for (uint32_t i = 1; i <= pp->n; ++i) {
    if (aq_signal_wait(pp->a, AQ_SIGNAL_GTE, i, 30 * SEC, NULL) != AQ_OK) return (void *)1;
    aq_signal_store(pp->b, i);
  }
  return NULL;
}
static void signal_ping_pong(uint32_t n) {
  pp_t pp = {.n = n};
  OK(aq_signal_create(0, &pp.a));
  OK(aq_signal_create(0, &pp.b));
  pthread_t t;
  pthread_create(&t, NULL, echo, &pp);
  for (uint32_t i = 1; i <= n; ++i) {
    aq_signal_store(pp.a, i);
    OK(aq_signal_wait(pp.b, AQ_SIGNAL_GTE, i, 30 * SEC, NULL));
  }
  void *rc;
  pthread_join(t, &rc);
  EXPECT(rc == NULL, "echo thread failed");
  aq_signal_destroy(pp.a);
  aq_signal_destroy(pp.b);
}

/* A queue destroyed while two threads submit to it: each submit succeeds
 * or finds the handle dead; nothing touches the freed queue. */
typedef struct { aq_queue_t q; _Atomic int stop, bad; } submitters_t;
/* One packet at a time, waited for: the queue is often idle, so the
 * destroyer's check passes while producers are still at it. */
static void *submit_until_gone(void *arg) {
  submitters_t *t = arg;
  aq_signal_t done;
  if (aq_signal_create(1, &done) != AQ_OK) return NULL;
  hsa_kernel_dispatch_packet_t p = packet(&k_noop, NULL, 1, 1, done);
  while (!atomic_load(&t->stop)) {
    aq_signal_store(done, 1);
    aq_status_t s = aq_queue_submit(t->q, &p, 30 * SEC, NULL);
    if (s == AQ_ERROR_INVALID_HANDLE) break;
    if (s != AQ_OK || aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL) != AQ_OK) atomic_store(&t->bad, s ? s : AQ_ERROR_TIMEOUT);
  }
  aq_signal_destroy(done);
  return NULL;
}
static void destroy_under_submitters(uint32_t rounds) {
  for (uint32_t r = 0; r < rounds; ++r) {
    submitters_t t = {0};
    OK(aq_queue_create(agent, NULL, &t.q));
    pthread_t th[2];
    for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, submit_until_gone, &t);
    aq_status_t s;
    while ((s = aq_queue_destroy(t.q)) == AQ_ERROR_BUSY) sched_yield();
    atomic_store(&t.stop, 1);
    for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
    EXPECT(s == AQ_OK, "destroy: %s", aq_last_error());
    EXPECT(atomic_load(&t.bad) == 0, "a submit failed with %s", aq_status_string(atomic_load(&t.bad)));
  }
}

/* A code object unloaded while a thread dispatches its kernel, round after
 * round: the unload is refused while a dispatch runs the kernel (a worker's
 * hazard), then succeeds; each dispatch runs or, once the kernel is gone,
 * fails as a packet whose kernel is not loaded. The object is one nothing
 * else loads, so its unload unmaps the code: a kernel still running then
 * would fault. */
typedef struct {
  aq_queue_t q;
  aq_kernel_info_t k;
  _Atomic int stop, bad, ran;
  char why[512]; /* the first bad failure's message (set once, before bad) */
} unload_race_t;
typedef struct { uint64_t ns; } spin_args_t;
static void *dispatch_until_stopped(void *arg) {
  unload_race_t *t = arg;
  aq_signal_t done;
  if (aq_signal_create(1, &done) != AQ_OK) return NULL;
  spin_args_t spin = {500000};
  hsa_kernel_dispatch_packet_t p = packet(&t->k, &spin, 1, 1, done);
  while (!atomic_load(&t->stop)) {
    aq_signal_store(done, 1);
    aq_status_t s = aq_queue_submit(t->q, &p, 30 * SEC, NULL);
    if (s == AQ_OK) s = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL);
    if (s == AQ_OK) atomic_fetch_add(&t->ran, 1);
    else if (s != AQ_ERROR_INVALID_PACKET && !atomic_load(&t->bad)) {
      snprintf(t->why, sizeof(t->why), "%s", aq_last_error());
      atomic_store(&t->bad, s);
    }
  }
  aq_signal_destroy(done);
  return NULL;
}
static void unload_under_dispatches(uint32_t rounds) {
  for (uint32_t r = 0; r < rounds; ++r) {
    unload_race_t t = {0};
    aq_code_object_t mine;
    OK(aq_code_object_load("test-kernels-no-ops.so", &mine));
    OK(aq_code_object_find_kernel(mine, "spin", agent, &t.k));
    OK(aq_queue_create(agent, NULL, &t.q));
    pthread_t th;
    pthread_create(&th, NULL, dispatch_until_stopped, &t);
    /* into the middle of a dispatch: they follow one another, 500 us each */
    while (atomic_load(&t.ran) < 2 && !atomic_load(&t.bad)) sched_yield();
    nanosleep(&(struct timespec){0, 200000}, NULL);
    aq_status_t s;
    while ((s = aq_code_object_unload(mine)) == AQ_ERROR_BUSY) sched_yield();
    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    OK(aq_queue_destroy(t.q));
    EXPECT(s == AQ_OK, "unload: %s", aq_last_error());
    EXPECT(atomic_load(&t.bad) == 0, "a dispatch failed with %s: %s", aq_status_string(atomic_load(&t.bad)), t.why);
  }
}

/* Three threads start one exec at once, round after round: exactly one
 * run starts each time and its wait returns. */
typedef struct { aq_exec_t *e; pthread_barrier_t *go; _Atomic int ok, bad; } racer_t;
static void *race_run(void *arg) {
  racer_t *r = arg;
  pthread_barrier_wait(r->go);
  aq_status_t s = aq_exec_run(r->e);
  if (s == AQ_OK) atomic_fetch_add(&r->ok, 1);
  else if (s != AQ_ERROR_BUSY) atomic_store(&r->bad, s);
  return NULL;
}
static void exec_runs_from_threads(uint32_t rounds) {
  aq_graph_t *g;
  OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y;
  OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){256}, &x));
  aq_tensor_t in = x;
  for (int i = 0; i < 32; ++i) {
    OK(aq_op_relu(g, x, &y));
    x = y;
  }
  aq_exec_t *e;
  OK(aq_graph_instantiate(g, NULL, &e));
  float zeros[256] = {0};
  OK(aq_exec_write(e, in, zeros, sizeof(zeros)));
  for (uint32_t r = 0; r < rounds; ++r) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    racer_t rc = {e, &go, 0, 0};
    pthread_t th[3];
    for (int i = 0; i < 3; ++i) pthread_create(&th[i], NULL, race_run, &rc);
    for (int i = 0; i < 3; ++i) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    EXPECT(atomic_load(&rc.bad) == 0, "a run failed with %s", aq_status_string(atomic_load(&rc.bad)));
    EXPECT(atomic_load(&rc.ok) >= 1, "no run started");
    OK(aq_exec_wait(e, 30 * SEC));
  }
  OK(aq_exec_destroy(e));
  OK(aq_graph_destroy(g));
}

/* Three threads instantiate graphs of their own with heft, round after
 * round: placement keeps no state between instantiations (its sort of the
 * ranks once read them through statics, which two instantiations at once
 * overwrote), so each exec is placed as its graph is alone. Compared by
 * the explains (agent, lane and estimates of every task). */
typedef struct {
  aq_graph_t *g;
  char *want;
  pthread_barrier_t *go;
  uint32_t rounds;
  _Atomic int bad, differ;
} placer_t;

/* A graph of n empty kernels, each reading one to three earlier results
 * picked by seed (a DAG unlike the other threads'). */
static aq_graph_t *random_dag(uint32_t seed, uint32_t n) {
  aq_graph_t *g;
  if (aq_graph_create(NULL, &g) != AQ_OK) return NULL;
  aq_tensor_t *t = calloc(n + 1, sizeof(*t));
  aq_status_t s = t ? aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){1}, &t[0])
                    : AQ_ERROR_OUT_OF_MEMORY;
  for (uint32_t i = 1; s == AQ_OK && i <= n; ++i) {
    s = aq_tensor_create(g, NULL, AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){1}, &t[i]);
    aq_kernel_task_t k = {.name = "task", .kernel = "aq_noop", .shape = {{1, 1, 1}, {1, 1, 1}}, .agent = -1,
                          .write_count = 1, .writes = {t[i]}, .write_offsets = {UINT32_MAX}};
    for (uint32_t j = 0; j < 3; ++j) {
      seed = seed * 1664525u + 1013904223u;
      aq_tensor_t r = t[(seed >> 8) % i];
      int seen = 0;
      for (uint32_t q = 0; q < k.read_count; ++q) seen |= k.reads[q].id == r.id;
      if (!seen && (j == 0 || seed >> 31)) k.reads[k.read_count] = r, k.read_offsets[k.read_count++] = UINT32_MAX;
    }
    if (s == AQ_OK) s = aq_graph_add_kernel(g, &k, NULL);
  }
  free(t);
  if (s != AQ_OK) aq_graph_destroy(g), g = NULL;
  return g;
}

static char *explained(aq_graph_t *g) {
  aq_exec_t *e;
  if (aq_graph_instantiate(g, NULL, &e) != AQ_OK) return NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  aq_status_t s = f ? aq_exec_explain(e, f) : AQ_ERROR_OUT_OF_MEMORY;
  if (f) fclose(f);
  aq_exec_destroy(e);
  if (s != AQ_OK) free(text), text = NULL;
  return text;
}

static void *place_rounds(void *arg) {
  placer_t *p = arg;
  pthread_barrier_wait(p->go);
  for (uint32_t r = 0; r < p->rounds; ++r) {
    char *got = explained(p->g);
    if (!got) atomic_store(&p->bad, 1);
    else if (strcmp(got, p->want)) atomic_store(&p->differ, 1);
    free(got);
  }
  return NULL;
}

static void instantiate_from_threads(uint32_t rounds) {
  placer_t p[3];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 3);
  for (int i = 0; i < 3; ++i) {
    p[i] = (placer_t){random_dag(7u + 1000u * (uint32_t)i, 200), NULL, &go, rounds, 0, 0};
    EXPECT(p[i].g, "graph %d: %s", i, aq_last_error());
    p[i].want = explained(p[i].g); /* alone (and the models calibrated) */
    EXPECT(p[i].want, "placing graph %d alone: %s", i, aq_last_error());
  }
  pthread_t th[3];
  for (int i = 0; i < 3; ++i) pthread_create(&th[i], NULL, place_rounds, &p[i]);
  for (int i = 0; i < 3; ++i) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  for (int i = 0; i < 3; ++i) {
    EXPECT(!atomic_load(&p[i].bad), "instantiating graph %d failed", i);
    EXPECT(!atomic_load(&p[i].differ), "graph %d was placed differently beside the others", i);
    free(p[i].want);
    aq_graph_destroy(p[i].g);
  }
}

/* aq_shut_down while another thread keeps calling: its calls fail cleanly
 * (not initialized, or a dead handle) and the runtime starts again. */
typedef struct { aq_signal_t s; aq_queue_t q; _Atomic int bad; } caller_t;
static void *call_until_down(void *arg) {
  caller_t *c = arg;
  for (;;) {
    aq_signal_value_t v;
    aq_queue_info_t info;
    aq_status_t a = aq_signal_load(c->s, &v), b = aq_queue_get_info(c->q, &info);
    if ((a != AQ_OK && a != AQ_ERROR_NOT_INITIALIZED && a != AQ_ERROR_INVALID_HANDLE) ||
        (b != AQ_OK && b != AQ_ERROR_NOT_INITIALIZED && b != AQ_ERROR_INVALID_HANDLE)) {
      atomic_store(&c->bad, a != AQ_OK ? a : b);
      return NULL;
    }
    if (a != AQ_OK && b != AQ_OK) return NULL;
  }
}
static void shutdown_against_callers(uint32_t rounds) {
  for (uint32_t r = 0; r < rounds; ++r) {
    caller_t c = {0};
    OK(aq_signal_create(1, &c.s));
    OK(aq_queue_create(agent, NULL, &c.q));
    pthread_t th;
    pthread_create(&th, NULL, call_until_down, &c);
    OK(aq_shut_down());
    pthread_join(th, NULL);
    OK(aq_init(NULL));
    size_t n;
    OK(aq_agents(&agent, 1, &n));
    EXPECT(atomic_load(&c.bad) == 0, "a call racing aq_shut_down got %s", aq_status_string(atomic_load(&c.bad)));
  }
}

int main(int argc, char **argv) {
  /* --quick: fewer rounds (sanitized builds are 5-15x slower). */
  uint32_t scale = argc > 1 && !strcmp(argv[1], "--quick") ? 1 : 4;
  if (aq_init(NULL) != AQ_OK) {
    fprintf(stderr, "aq_init: %s\n", aq_last_error());
    return 1;
  }
  size_t n;
  aq_agents(&agent, 1, &n);
  aq_code_object_t co;
  if (aq_code_object_load("test-kernels.so", &co) != AQ_OK ||
      aq_code_object_find_kernel(co, "count", agent, &k_count) != AQ_OK ||
      aq_code_object_find_kernel(co, "noop", agent, &k_noop) != AQ_OK) {
    fprintf(stderr, "test kernels: %s\n", aq_last_error());
    return 1;
  }
  struct { const char *name; void (*run)(uint32_t); } cases[] = {
      {"shared_dispatches", shared_dispatches},
      {"ping_pong_barriers", ping_pong_barriers},
      {"queue_churn", queue_churn},
      {"signal_ping_pong", signal_ping_pong},
      {"destroy_under_submitters", destroy_under_submitters},
      {"unload_under_dispatches", unload_under_dispatches},
      {"exec_runs_from_threads", exec_runs_from_threads},
      {"instantiate_from_threads", instantiate_from_threads},
      {"shutdown_against_callers", shutdown_against_callers}, /* last: it restarts the runtime */
  };
  uint32_t sizes[] = {50 * scale, 500 * scale, 50 * scale, 5000 * scale, 20 * scale, 20 * scale, 50 * scale, 10 * scale,
                      10 * scale};
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) + 1; ++i) {
    int before = failures;
    const char *name = i == 0 ? "many_producers" : cases[i - 1].name;
    if (i == 0) many_producers(4, 5000 * scale, 16);
    else cases[i - 1].run(sizes[i - 1]);
    int ok = failures == before;
    printf("[%s] stress::%s\n", ok ? "PASS" : "FAIL", name);
    passed += ok;
    failed += !ok;
  }
  aq_shut_down();
  printf("stress: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
