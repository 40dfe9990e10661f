/* AQL queues on CPU agents: every packet type, ordering, barriers across
 * queues, wrap-around, many producers, full queues, faults and bad input. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common.h"

TEST_KERNELS_SUITE(queue);

static aq_queue_t make_queue(uint32_t size) {
  aq_queue_t q;
  aq_queue_options_t o = {.size = size};
  AQ_ASSERT_OK(aq_queue_create(agent, &o, &q));
  return q;
}

static void check_grid(uint32_t dims, const uint32_t grid[3], const uint16_t wg[3]) {
  aq_queue_t q = make_queue(64);
  aq_kernel_info_t k = test_kernel(co, agent, "count");
  size_t n = (size_t)grid[0] * grid[1] * grid[2];
  _Atomic uint32_t *hits = calloc(n, sizeof(*hits));
  count_args_t args = {hits};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, grid[0], wg[0], done);
  p.setup = (uint16_t)(dims << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
  p.grid_size_y = grid[1];
  p.grid_size_z = grid[2];
  p.workgroup_size_y = wg[1];
  p.workgroup_size_z = wg[2];
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  for (size_t i = 0; i < n; ++i) cr_assert_eq(hits[i], 1, "work-item %zu ran %u times", i, hits[i]);
  free(hits);
  aq_signal_destroy(done);
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

Test(queue, kernel_dispatch_runs_every_work_item_once) {
  check_grid(1, (uint32_t[3]){1, 1, 1}, (uint16_t[3]){1, 1, 1});
  check_grid(1, (uint32_t[3]){1000, 1, 1}, (uint16_t[3]){64, 1, 1});   /* partial last group */
  check_grid(2, (uint32_t[3]){33, 17, 1}, (uint16_t[3]){8, 4, 1});
  check_grid(3, (uint32_t[3]){7, 5, 9}, (uint16_t[3]){2, 3, 4});
}

Test(queue, group_segment_is_private_scratch) {
  aq_queue_t q = make_queue(16);
  aq_kernel_info_t k = test_kernel(co, agent, "scratch");
  cr_assert_eq(k.group_segment_size, 4096);
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, 256, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

typedef struct {
  int called;
  uint64_t a1, a2, a3;
} host_record_t;

static aq_status_t host_fn(void *ret, uint64_t a1, uint64_t a2, uint64_t a3) {
  host_record_t *r = ret;
  r->called++;
  r->a1 = a1;
  r->a2 = a2;
  r->a3 = a3;
  return AQ_OK;
}

static aq_status_t host_fail(void *ret, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)ret, (void)a1, (void)a2, (void)a3;
  return AQ_ERROR_IO;
}

static hsa_agent_dispatch_packet_t host_packet(aq_host_call_fn_t fn, void *ret, aq_signal_t done) {
  hsa_agent_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.type = AQ_AGENT_DISPATCH_HOST_CALL;
  p.return_address = ret;
  p.arg[0] = (uint64_t)(uintptr_t)fn;
  p.arg[1] = 11;
  p.arg[2] = 22;
  p.arg[3] = 33;
  p.completion_signal.handle = done.handle;
  return p;
}

Test(queue, agent_dispatch_calls_the_host_function) {
  aq_queue_t q = make_queue(16);
  host_record_t r = {0};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_agent_dispatch_packet_t p = host_packet(host_fn, &r, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(r.called, 1);
  cr_assert(r.a1 == 11 && r.a2 == 22 && r.a3 == 33);
  /* A failing host call fails its signal with the function's status. */
  AQ_ASSERT_OK(aq_signal_store(done, 1));
  p = host_packet(host_fail, &r, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "host call"), "%s", aq_last_error());
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(queue, packets_of_a_queue_run_in_order_and_barrier_bit_waits) {
  aq_queue_t q = make_queue(64);
  aq_kernel_info_t k = test_kernel(co, agent, "log_tag");
  enum { N = 40 };
  _Atomic uint32_t cursor = 0;
  uint32_t log[N];
  log_args_t args[N];
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(N, &done));
  for (uint32_t i = 0; i < N; ++i) {
    /* Early packets sleep longest: out-of-order completion would show. */
    args[i] = (log_args_t){&cursor, log, i, (N - i) * 50};
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args[i], 1, 1, done);
    if (i % 3 == 0) p.header |= 1 << HSA_PACKET_HEADER_BARRIER;
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  }
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  cr_assert_eq(cursor, N);
  for (uint32_t i = 0; i < N; ++i) cr_assert_eq(log[i], i, "position %u ran packet %u", i, log[i]);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(queue, barrier_and_waits_for_signals_completed_from_another_queue) {
  aq_queue_t qa = make_queue(16), qb = make_queue(16);
  aq_kernel_info_t spin = test_kernel(co, agent, "spin"), logk = test_kernel(co, agent, "log_tag");
  _Atomic uint32_t cursor = 0;
  uint32_t log[4];
  aq_signal_t a1, a2, b_done, bar_done;
  AQ_ASSERT_OK(aq_signal_create(1, &a1));
  AQ_ASSERT_OK(aq_signal_create(1, &a2));
  AQ_ASSERT_OK(aq_signal_create(1, &b_done));
  AQ_ASSERT_OK(aq_signal_create(1, &bar_done));
  /* Queue B: barrier-AND over A's two signals, then a packet logging 2. */
  aq_signal_t deps[2] = {a1, a2};
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, deps, 2, bar_done);
  AQ_ASSERT_OK(aq_queue_submit(qb, &bar, SEC, NULL));
  log_args_t lb = {&cursor, log, 2, 0};
  hsa_kernel_dispatch_packet_t pb = dispatch_packet(&logk, &lb, 1, 1, b_done);
  AQ_ASSERT_OK(aq_queue_submit(qb, &pb, SEC, NULL));
  /* Queue A: spin 20 ms, log 0, spin, log 1 — completing a1 then a2. */
  spin_args_t sp = {20000000ull};
  log_args_t l0 = {&cursor, log, 0, 0}, l1 = {&cursor, log, 1, 0};
  aq_signal_t none = {0};
  hsa_kernel_dispatch_packet_t p;
  p = dispatch_packet(&spin, &sp, 1, 1, none);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  p = dispatch_packet(&logk, &l0, 1, 1, a1);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  p = dispatch_packet(&spin, &sp, 1, 1, none);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  p = dispatch_packet(&logk, &l1, 1, 1, a2);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(b_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(bar_done, AQ_SIGNAL_EQ, 0, 0, NULL));
  cr_assert_eq(cursor, 3);
  cr_assert(log[0] == 0 && log[1] == 1 && log[2] == 2, "order %u %u %u", log[0], log[1], log[2]);
  aq_signal_destroy(a1), aq_signal_destroy(a2), aq_signal_destroy(b_done), aq_signal_destroy(bar_done);
  aq_queue_destroy(qa), aq_queue_destroy(qb);
}

Test(queue, barrier_or_waits_for_any_signal) {
  aq_queue_t qa = make_queue(16), qb = make_queue(16);
  aq_signal_t never, soon, bar_done;
  AQ_ASSERT_OK(aq_signal_create(1, &never));
  AQ_ASSERT_OK(aq_signal_create(1, &soon));
  AQ_ASSERT_OK(aq_signal_create(1, &bar_done));
  aq_signal_t deps[2] = {never, soon};
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_OR, deps, 2, bar_done);
  AQ_ASSERT_OK(aq_queue_submit(qb, &bar, SEC, NULL));
  cr_assert_eq(aq_signal_wait(bar_done, AQ_SIGNAL_EQ, 0, 20000000ull, NULL), AQ_ERROR_TIMEOUT,
               "barrier-OR must wait while no dependency is met");
  /* Another queue completes one dependency. */
  aq_kernel_info_t noop = test_kernel(co, agent, "noop");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&noop, NULL, 1, 1, soon);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(bar_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_value_t v;
  aq_signal_load(never, &v);
  cr_assert_eq(v, 1);
  aq_signal_destroy(never), aq_signal_destroy(soon), aq_signal_destroy(bar_done);
  aq_queue_destroy(qa), aq_queue_destroy(qb);
}

Test(queue, wraps_around_many_times) {
  aq_queue_t q = make_queue(4);
  aq_kernel_info_t k = test_kernel(co, agent, "count");
  enum { N = 20000 };
  _Atomic uint32_t *hits = calloc(N, sizeof(*hits));
  count_args_t *args = calloc(N, sizeof(*args));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(N, &done));
  for (uint32_t i = 0; i < N; ++i) {
    args[i].hits = &hits[i];
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args[i], 1, 1, done);
    AQ_ASSERT_OK(aq_queue_submit(q, &p, 10 * SEC, NULL));
  }
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL));
  for (uint32_t i = 0; i < N; ++i) cr_assert_eq(hits[i], 1, "packet %u ran %u times", i, hits[i]);
  aq_queue_info_t info;
  AQ_ASSERT_OK(aq_queue_get_info(q, &info));
  cr_assert_eq(info.read_index, N);
  cr_assert_eq(info.write_index, N);
  cr_assert_eq(info.packets_completed, N);
  free(hits);
  free(args);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

typedef struct {
  aq_queue_t q;
  aq_kernel_info_t k;
  count_args_t *args;
  aq_signal_t done;
  int split; /* use reserve / slot / publish / ring rather than submit */
  uint32_t n;
} producer_t;

static void *produce(void *arg) {
  producer_t *pr = arg;
  for (uint32_t i = 0; i < pr->n; ++i) {
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&pr->k, &pr->args[i], 1, 1, pr->done);
    if (!pr->split) {
      if (aq_queue_submit(pr->q, &p, 30 * SEC, NULL) != AQ_OK) return (void *)1;
      continue;
    }
    uint64_t idx;
    void *slot;
    if (aq_queue_reserve(pr->q, 1, 30 * SEC, &idx) || aq_queue_slot(pr->q, idx, &slot)) return (void *)1;
    memcpy((char *)slot + 4, (char *)&p + 4, 60);
    aq_queue_publish(pr->q, idx, p.header, p.setup);
    aq_queue_ring(pr->q, idx);
  }
  return NULL;
}

Test(queue, many_producers_lose_nothing_and_repeat_nothing) {
  enum { THREADS = 4, N = 20000 };
  aq_queue_t q = make_queue(64);
  aq_kernel_info_t k = test_kernel(co, agent, "count");
  _Atomic uint32_t *hits = calloc(THREADS * N, sizeof(*hits));
  count_args_t *args = calloc(THREADS * N, sizeof(*args));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(THREADS * N, &done));
  producer_t pr[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    for (uint32_t j = 0; j < N; ++j) args[i * N + j].hits = &hits[i * N + j];
    pr[i] = (producer_t){q, k, &args[i * N], done, i & 1, N};
    pthread_create(&t[i], NULL, produce, &pr[i]);
  }
  for (int i = 0; i < THREADS; ++i) {
    void *rc;
    pthread_join(t[i], &rc);
    cr_assert_null(rc, "producer %d failed: %s", i, aq_last_error());
  }
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 60 * SEC, NULL));
  for (uint32_t i = 0; i < THREADS * N; ++i) cr_assert_eq(hits[i], 1, "packet %u ran %u times", i, hits[i]);
  free(hits);
  free(args);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(queue, a_full_queue_times_out_reserving_nothing) {
  aq_queue_t q = make_queue(2);
  aq_signal_t gate, done;
  AQ_ASSERT_OK(aq_signal_create(1, &gate));
  AQ_ASSERT_OK(aq_signal_create(2, &done));
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &gate, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &bar, SEC, NULL));
  aq_kernel_info_t noop = test_kernel(co, agent, "noop");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&noop, NULL, 1, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  cr_assert_eq(aq_queue_submit(q, &p, 20000000ull, NULL), AQ_ERROR_TIMEOUT);
  cr_assert(strstr(aq_last_error(), "stayed full"), "%s", aq_last_error());
  aq_queue_info_t info;
  AQ_ASSERT_OK(aq_queue_get_info(q, &info));
  cr_assert_eq(info.write_index, 2, "the timed-out submit reserved nothing");
  /* Open the gate: both packets run, and the queue takes more. */
  AQ_ASSERT_OK(aq_signal_store(gate, 0));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  AQ_ASSERT_OK(aq_signal_store(done, 1));
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(gate), aq_signal_destroy(done);
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

Test(queue, a_kernel_fault_fails_its_dependents_and_spares_the_rest) {
  aq_queue_t qa = make_queue(16), qb = make_queue(16), qc = make_queue(16);
  aq_kernel_info_t fk = test_kernel(co, agent, "fault"), noop = test_kernel(co, agent, "noop");
  aq_signal_t f_done, bar_done, other;
  AQ_ASSERT_OK(aq_signal_create(1, &f_done));
  AQ_ASSERT_OK(aq_signal_create(1, &bar_done));
  AQ_ASSERT_OK(aq_signal_create(1, &other));
  fault_args_t fa = {7};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&fk, &fa, 1, 1, f_done);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &f_done, 1, bar_done);
  AQ_ASSERT_OK(aq_queue_submit(qb, &bar, SEC, NULL));
  cr_assert_eq(aq_signal_wait(f_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_KERNEL_FAULT);
  cr_assert(strstr(aq_last_error(), "'fault'") && strstr(aq_last_error(), "returned 7"), "%s", aq_last_error());
  cr_assert_eq(aq_signal_wait(bar_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_KERNEL_FAULT,
               "the dependent barrier inherits the fault");
  p = dispatch_packet(&noop, NULL, 1, 1, other);
  AQ_ASSERT_OK(aq_queue_submit(qc, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(other, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  /* The faulting queue still works, and reports its last failure. */
  aq_queue_info_t info;
  AQ_ASSERT_OK(aq_queue_get_info(qa, &info));
  cr_assert_eq(info.error, AQ_ERROR_KERNEL_FAULT);
  aq_status_t err;
  AQ_ASSERT_OK(aq_signal_get_error(f_done, 1, &err));
  cr_assert_eq(err, AQ_ERROR_KERNEL_FAULT);
  AQ_ASSERT_OK(aq_signal_store(f_done, 1));
  p = dispatch_packet(&noop, NULL, 1, 1, f_done);
  AQ_ASSERT_OK(aq_queue_submit(qa, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(f_done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(f_done), aq_signal_destroy(bar_done), aq_signal_destroy(other);
  aq_queue_destroy(qa), aq_queue_destroy(qb), aq_queue_destroy(qc);
}

Test(queue, malformed_packets_are_refused_or_failed) {
  aq_queue_t q = make_queue(16);
  aq_signal_t done, stale;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  AQ_ASSERT_OK(aq_signal_create(1, &stale));
  AQ_ASSERT_OK(aq_signal_destroy(stale));
  aq_kernel_info_t noop = test_kernel(co, agent, "noop");
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&noop, NULL, 1, 1, done);
  /* Refused at submit: unknown type, stale completion signal, stale dependency. */
  hsa_kernel_dispatch_packet_t bad = p;
  bad.header = aq_packet_header((hsa_packet_type_t)9, 0, 0, 0);
  cr_assert_eq(aq_queue_submit(q, &bad, SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "type 9"), "%s", aq_last_error());
  bad = p;
  bad.completion_signal.handle = stale.handle;
  cr_assert_eq(aq_queue_submit(q, &bad, SEC, NULL), AQ_ERROR_INVALID_PACKET);
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &stale, 1, done);
  cr_assert_eq(aq_queue_submit(q, &bar, SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "dep_signal[0]"), "%s", aq_last_error());
  /* Caught by the packet processor: a kernel object that is not a kernel. */
  bad = p;
  bad.kernel_object = 0x1234;
  AQ_ASSERT_OK(aq_queue_submit(q, &bad, SEC, NULL));
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "kernel_object"), "%s", aq_last_error());
  aq_signal_get_error(done, 1, &(aq_status_t){0});
  /* Zero grid size. */
  aq_signal_store(done, 1);
  bad = p;
  bad.grid_size_x = 0;
  AQ_ASSERT_OK(aq_queue_submit(q, &bad, SEC, NULL));
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "grid size x is 0"), "%s", aq_last_error());
  aq_signal_get_error(done, 1, &(aq_status_t){0});
  /* The queue is still fine. */
  aq_signal_store(done, 1);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(queue, bad_arguments_and_handles) {
  aq_queue_t q;
  aq_queue_options_t o = {.size = 3};
  cr_assert_eq(aq_queue_create(agent, &o, &q), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "power of two"), "%s", aq_last_error());
  cr_assert_eq(aq_queue_create((aq_agent_t){12345}, NULL, &q), AQ_ERROR_INVALID_HANDLE);
  q = make_queue(8);
  uint64_t idx;
  cr_assert_eq(aq_queue_reserve(q, 9, 0, &idx), AQ_ERROR_INVALID_ARGUMENT);
  void *slot;
  cr_assert_eq(aq_queue_slot(q, 5, &slot), AQ_ERROR_INVALID_ARGUMENT, "index 5 was never reserved");
  cr_assert_eq(aq_queue_submit(q, NULL, 0, NULL), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_queue_destroy(q));
  cr_assert_eq(aq_queue_destroy(q), AQ_ERROR_INVALID_HANDLE, "double destroy");
  cr_assert_eq(aq_queue_reserve(q, 1, 0, &idx), AQ_ERROR_INVALID_HANDLE);
}

/* AQ_QUEUE_HIGH_PRIORITY is a hint a CPU agent cannot take: its queue runs
 * as any other. A flag nobody defined is refused by its bit, and the
 * runtime goes on. */
Test(queue, a_high_priority_queue_runs_and_unknown_flags_are_refused) {
  aq_queue_t q;
  aq_queue_options_t o = {.size = 64, .flags = AQ_QUEUE_HIGH_PRIORITY};
  AQ_ASSERT_OK(aq_queue_create(agent, &o, &q));
  aq_kernel_info_t k = test_kernel(co, agent, "count");
  _Atomic uint32_t hits[100] = {0};
  count_args_t args = {hits};
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, 100, 10, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  for (int i = 0; i < 100; ++i) cr_assert_eq(hits[i], 1, "work-item %d ran %u times", i, hits[i]);
  AQ_ASSERT_OK(aq_queue_destroy(q));
  o.flags = AQ_QUEUE_HIGH_PRIORITY | 0x20;
  cr_assert_eq(aq_queue_create(agent, &o, &q), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "unknown flags 0x20"), "%s", aq_last_error());
  q = make_queue(8);
  AQ_ASSERT_OK(aq_queue_destroy(q));
  aq_signal_destroy(done);
}

Test(queue, destroy_with_packets_in_flight_is_refused) {
  aq_queue_t q = make_queue(8);
  aq_signal_t gate, done;
  AQ_ASSERT_OK(aq_signal_create(1, &gate));
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_barrier_and_packet_t bar = barrier_packet(HSA_PACKET_TYPE_BARRIER_AND, &gate, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &bar, SEC, NULL));
  cr_assert_eq(aq_queue_destroy(q), AQ_ERROR_BUSY);
  cr_assert_eq(aq_queue_wait_idle(q, 10000000ull), AQ_ERROR_TIMEOUT);
  aq_signal_store(gate, 0);
  AQ_ASSERT_OK(aq_queue_wait_idle(q, 10 * SEC));
  AQ_ASSERT_OK(aq_queue_destroy(q));
  aq_signal_destroy(gate), aq_signal_destroy(done);
}

/* A queue destroyed after its packets ran leaves its ring to the next
 * queue of its size: that queue starts with every slot INVALID (a stale
 * packet would run again) and runs what it is given, in order. */
Test(queue, a_new_queue_on_a_used_ring_runs_only_its_own_packets) {
  enum { SIZE = 16, N = 11 };
  aq_kernel_info_t k = test_kernel(co, agent, "log_tag");
  void *first_ring = NULL;
  for (int round = 0; round < 3; ++round) {
    aq_queue_t q = make_queue(SIZE);
    aq_queue_info_t info;
    AQ_ASSERT_OK(aq_queue_get_info(q, &info));
    if (!round) first_ring = info.base_address;
    else cr_assert_eq(info.base_address, first_ring, "round %d: the last queue's ring was not reused", round);
    for (uint32_t i = 0; i < SIZE; ++i) {
      uint32_t header;
      memcpy(&header, (const uint8_t *)info.base_address + (size_t)i * 64, sizeof(header));
      cr_assert_eq((header >> HSA_PACKET_HEADER_TYPE) & 0xff, HSA_PACKET_TYPE_INVALID,
                   "round %d: slot %u of a new queue holds a packet of type %u", round, i,
                   (header >> HSA_PACKET_HEADER_TYPE) & 0xff);
    }
    _Atomic uint32_t cursor = 0;
    uint32_t log[N];
    log_args_t args[N];
    aq_signal_t done;
    AQ_ASSERT_OK(aq_signal_create(N, &done));
    for (uint32_t i = 0; i < N; ++i) { /* N and SIZE coprime: each round leaves other slots last */
      args[i] = (log_args_t){&cursor, log, i, 0};
      hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args[i], 1, 1, done);
      AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    }
    AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
    AQ_ASSERT_OK(aq_queue_wait_idle(q, 10 * SEC));
    cr_assert_eq(cursor, N, "round %d ran %u packets, not %d", round, (unsigned)cursor, N);
    for (uint32_t i = 0; i < N; ++i) cr_assert_eq(log[i], i);
    aq_signal_destroy(done);
    AQ_ASSERT_OK(aq_queue_destroy(q));
  }
}
