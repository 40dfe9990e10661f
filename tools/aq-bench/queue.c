/* aq-bench queue: the AQL queue's own costs on a CPU agent.
 *   dispatch     empty kernel-dispatch packets per second through one queue,
 *                from 1 producer and from N producers
 *   barrier_and  a packet on queue A, a barrier-AND on queue B waiting for it:
 *                submit-to-completion latency
 *   wakeup       signal store to waiter return, two threads ping-ponging; the
 *                peer is a pthread condition variable doing the same
 * Options: --packets N (dispatch, default 1000000), --reps R (default 5),
 *          --producers P (the N of dispatch, default: cores). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aquila/aquila.h"
#include "bench.h"

#define CHECK(expr) BENCH_CHECK("queue", expr)

static hsa_kernel_dispatch_packet_t noop_packet(uint64_t kernel_object, aq_signal_t done) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = kernel_object;
  p.completion_signal.handle = done.handle;
  return p;
}

typedef struct {
  aq_queue_t q;
  uint64_t kernel_object;
  aq_signal_t done;
  uint64_t n;
  _Atomic int *go;
} producer_t;

static void *produce(void *arg) {
  producer_t *p = arg;
  hsa_kernel_dispatch_packet_t pkt = noop_packet(p->kernel_object, p->done);
  while (!atomic_load(p->go)) {
  }
  for (uint64_t i = 0; i < p->n; ++i) CHECK(aq_queue_submit(p->q, &pkt, AQ_TIMEOUT_INFINITE, NULL));
  return NULL;
}

static void bench_dispatch(aq_agent_t agent, uint64_t kernel_object, int producers, uint64_t packets, int reps) {
  aq_queue_t q;
  aq_queue_options_t qo = {.size = 4096};
  CHECK(aq_queue_create(agent, &qo, &q));
  double *rate = calloc((size_t)reps + 1, sizeof(double)), *us = calloc((size_t)reps + 1, sizeof(double));
  for (int r = -1; r < reps; ++r) { /* r = -1 is the warm-up */
    uint64_t per = packets / (uint64_t)producers, total = per * (uint64_t)producers;
    aq_signal_t done;
    CHECK(aq_signal_create((aq_signal_value_t)total, &done));
    _Atomic int go = 0;
    pthread_t t[64];
    producer_t pr[64];
    for (int i = 0; i < producers; ++i) {
      pr[i] = (producer_t){q, kernel_object, done, per, &go};
      pthread_create(&t[i], NULL, produce, &pr[i]);
    }
    uint64_t t0 = bench_now_ns();
    atomic_store(&go, 1);
    for (int i = 0; i < producers; ++i) pthread_join(t[i], NULL);
    CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
    double secs = (double)(bench_now_ns() - t0) / 1e9;
    if (r >= 0) {
      rate[r] = (double)total / secs;
      us[r] = secs * 1e6 / (double)total;
    }
    aq_signal_destroy(done);
  }
  bench_json_t j;
  bench_json_begin(&j, "queue", "aquila");
  bench_json_str(&j, "case", "dispatch");
  bench_json_int(&j, "producers", producers);
  bench_json_int(&j, "packets", (long long)packets);
  bench_json_num(&j, "packets_per_s", bench_median(rate, (size_t)reps));
  bench_json_num(&j, "median_us", bench_median(us, (size_t)reps));
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
  free(rate);
  free(us);
  aq_queue_destroy(q);
}

static void bench_barrier(aq_agent_t agent, uint64_t kernel_object, int reps) {
  aq_queue_t qa, qb;
  CHECK(aq_queue_create(agent, NULL, &qa));
  CHECK(aq_queue_create(agent, NULL, &qb));
  aq_signal_t sa, sb;
  CHECK(aq_signal_create(1, &sa));
  CHECK(aq_signal_create(1, &sb));
  enum { ITERS = 2000 };
  double *lat = calloc(ITERS, sizeof(double)), *med = calloc((size_t)reps, sizeof(double));
  for (int r = -1; r < reps; ++r) {
    for (int i = 0; i < ITERS; ++i) {
      aq_signal_store(sa, 1);
      aq_signal_store(sb, 1);
      hsa_barrier_and_packet_t b;
      memset(&b, 0, sizeof(b));
      b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
      b.dep_signal[0].handle = sa.handle;
      b.completion_signal.handle = sb.handle;
      hsa_kernel_dispatch_packet_t p = noop_packet(kernel_object, sa);
      uint64_t t0 = bench_now_ns();
      CHECK(aq_queue_submit(qb, &b, AQ_TIMEOUT_INFINITE, NULL));
      CHECK(aq_queue_submit(qa, &p, AQ_TIMEOUT_INFINITE, NULL));
      CHECK(aq_signal_wait(sb, AQ_SIGNAL_EQ, 0, AQ_TIMEOUT_INFINITE, NULL));
      lat[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    if (r >= 0) med[r] = bench_median(lat, ITERS);
  }
  bench_json_t j;
  bench_json_begin(&j, "queue", "aquila");
  bench_json_str(&j, "case", "barrier_and");
  bench_json_int(&j, "producers", 1);
  bench_json_num(&j, "median_us", bench_median(med, (size_t)reps));
  bench_json_num(&j, "packets_per_s", 2e6 / bench_median(med, (size_t)reps));
  bench_json_int(&j, "reps", reps);
  bench_json_end(&j);
  free(lat);
  free(med);
  aq_signal_destroy(sa), aq_signal_destroy(sb);
  aq_queue_destroy(qa), aq_queue_destroy(qb);
}

/* ---- wake-up: ping-pong between two threads ---- */
enum { PINGS = 20000 };

typedef struct {
  aq_signal_t ping, pong;
  pthread_mutex_t m;
  pthread_cond_t c;
  int turn; /* condvar peer: 0 = main's, 1 = echo's */
  int use_condvar;
} pingpong_t;

static void *echo(void *arg) {
  pingpong_t *pp = arg;
  for (int i = 1; i <= PINGS; ++i) {
    if (pp->use_condvar) {
      pthread_mutex_lock(&pp->m);
      while (pp->turn != 1) pthread_cond_wait(&pp->c, &pp->m);
      pp->turn = 0;
      pthread_cond_broadcast(&pp->c);
      pthread_mutex_unlock(&pp->m);
    } else {
      CHECK(aq_signal_wait(pp->ping, AQ_SIGNAL_GTE, i, AQ_TIMEOUT_INFINITE, NULL));
      CHECK(aq_signal_store(pp->pong, i));
    }
  }
  return NULL;
}

static double pingpong_us(int use_condvar) {
  pingpong_t pp = {.use_condvar = use_condvar};
  pthread_mutex_init(&pp.m, NULL);
  pthread_cond_init(&pp.c, NULL);
  CHECK(aq_signal_create(0, &pp.ping));
  CHECK(aq_signal_create(0, &pp.pong));
  pthread_t t;
  pthread_create(&t, NULL, echo, &pp);
  uint64_t t0 = bench_now_ns();
  for (int i = 1; i <= PINGS; ++i) {
    if (use_condvar) {
      pthread_mutex_lock(&pp.m);
      pp.turn = 1;
      pthread_cond_broadcast(&pp.c);
      while (pp.turn != 0) pthread_cond_wait(&pp.c, &pp.m);
      pthread_mutex_unlock(&pp.m);
    } else {
      CHECK(aq_signal_store(pp.ping, i));
      CHECK(aq_signal_wait(pp.pong, AQ_SIGNAL_GTE, i, AQ_TIMEOUT_INFINITE, NULL));
    }
  }
  double us = (double)(bench_now_ns() - t0) / 1e3 / (2.0 * PINGS); /* one way */
  pthread_join(t, NULL);
  aq_signal_destroy(pp.ping), aq_signal_destroy(pp.pong);
  return us;
}

static void bench_wakeup(int reps, int spin_us) {
  for (int peer = 0; peer < 2; ++peer) {
    double *v = calloc((size_t)reps, sizeof(double));
    pingpong_us(peer);
    for (int r = 0; r < reps; ++r) v[r] = pingpong_us(peer);
    bench_json_t j;
    bench_json_begin(&j, "queue", peer ? "pthread_cond" : "aquila");
    bench_json_str(&j, "case", "wakeup");
    bench_json_int(&j, "producers", 1);
    bench_json_int(&j, "spin_us", peer ? 0 : spin_us);
    bench_json_num(&j, "median_us", bench_median(v, (size_t)reps));
    bench_json_num(&j, "packets_per_s", 1e6 / bench_median(v, (size_t)reps));
    bench_json_int(&j, "reps", reps);
    bench_json_end(&j);
    free(v);
  }
}

static const cli_option_t queue_options[] = {
    BENCH_REPS(5),
    {"packets", 0, CLI_INT, "N", "packets per dispatch measurement (default 1000000)", 1, 1e12},
    {"producers", 0, CLI_INT, "N", "threads writing one queue at once (default: the cores, at least 2)", 1, 64},
    {"case", 0, CLI_CHOICE, "dispatch|barrier_and|wakeup", "only this case (default: all three)", 0, 0},
};

int aq_bench_queue(int argc, char **argv) {
  BENCH_OPTIONS("queue", queue_options, argc, argv);
  int reps = (int)bench_arg_int("reps", 5);
  uint64_t packets = (uint64_t)bench_arg_int("packets", 1000000);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int producers = (int)bench_arg_int("producers", cores > 1 ? cores : 2);
  const char *only = bench_arg("case");
  if (reps < 1 || producers < 1 || producers > 64 || packets < 1) {
    fprintf(stderr, "aq-bench queue: --reps, --packets >= 1 and --producers in [1, 64]\n");
    return 2;
  }
  CHECK(aq_init(NULL));
  aq_agent_t agent;
  size_t n;
  CHECK(aq_agents(&agent, 1, &n));
  aq_code_object_t co;
  CHECK(aq_code_object_load("kernels-cpu.so", &co));
  aq_kernel_info_t k;
  CHECK(aq_code_object_find_kernel(co, "aq_noop", agent, &k));
  if (!only || !strcmp(only, "dispatch")) {
    fprintf(stderr, "queue: dispatch, 1 producer\n");
    bench_dispatch(agent, k.kernel_object, 1, packets, reps);
    fprintf(stderr, "queue: dispatch, %d producers\n", producers);
    bench_dispatch(agent, k.kernel_object, producers, packets, reps);
  }
  if (!only || !strcmp(only, "barrier_and")) {
    fprintf(stderr, "queue: barrier_and\n");
    bench_barrier(agent, k.kernel_object, reps);
  }
  CHECK(aq_shut_down());
  if (!only || !strcmp(only, "wakeup")) {
    fprintf(stderr, "queue: wakeup\n");
    CHECK(aq_init(NULL));
    bench_wakeup(reps, 20);
    CHECK(aq_shut_down());
  }
  return 0;
}
