/* Signals: every operation, waits with conditions and timeouts, cross-thread
 * wake-up, and bad handles. */
#include <pthread.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(signal, .init = setup, .fini = teardown);

Test(signal, operations) {
  aq_signal_t s;
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_create(5, &s));
  AQ_ASSERT_OK(aq_signal_load(s, &v));
  cr_assert_eq(v, 5);
  AQ_ASSERT_OK(aq_signal_add(s, 10));
  AQ_ASSERT_OK(aq_signal_subtract(s, 3));
  AQ_ASSERT_OK(aq_signal_load(s, &v));
  cr_assert_eq(v, 12);
  AQ_ASSERT_OK(aq_signal_exchange(s, -7, &v));
  cr_assert_eq(v, 12);
  AQ_ASSERT_OK(aq_signal_cas(s, 1, 2, &v));
  cr_assert_eq(v, -7, "a failed CAS reports what it saw");
  AQ_ASSERT_OK(aq_signal_load(s, &v));
  cr_assert_eq(v, -7, "a failed CAS stores nothing");
  AQ_ASSERT_OK(aq_signal_cas(s, -7, 99, &v));
  AQ_ASSERT_OK(aq_signal_load(s, &v));
  cr_assert_eq(v, 99);
  AQ_ASSERT_OK(aq_signal_store(s, INT64_MIN));
  AQ_ASSERT_OK(aq_signal_load(s, &v));
  cr_assert_eq(v, INT64_MIN, "the full 64-bit range is kept");
  AQ_ASSERT_OK(aq_signal_destroy(s));
}

Test(signal, wait_conditions_already_met) {
  aq_signal_t s;
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_create(3, &s));
  AQ_ASSERT_OK(aq_signal_wait(s, AQ_SIGNAL_EQ, 3, 0, &v));
  AQ_ASSERT_OK(aq_signal_wait(s, AQ_SIGNAL_NE, 4, 0, &v));
  AQ_ASSERT_OK(aq_signal_wait(s, AQ_SIGNAL_LT, 4, 0, &v));
  AQ_ASSERT_OK(aq_signal_wait(s, AQ_SIGNAL_GTE, 3, 0, &v));
  cr_assert_eq(v, 3);
  aq_signal_destroy(s);
}

Test(signal, wait_times_out_with_a_message) {
  aq_signal_t s;
  aq_signal_value_t v = 0;
  AQ_ASSERT_OK(aq_signal_create(1, &s));
  uint64_t t0 = (uint64_t)clock();
  (void)t0;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  cr_assert_eq(aq_signal_wait(s, AQ_SIGNAL_EQ, 0, 30000000ull, &v), AQ_ERROR_TIMEOUT);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  cr_assert_geq(ms, 29.0, "returned after %.1f ms, before its 30 ms timeout", ms);
  cr_assert_eq(v, 1);
  cr_assert(strstr(aq_last_error(), "did not meet"), "message: %s", aq_last_error());
  /* Still usable. */
  AQ_ASSERT_OK(aq_signal_store(s, 0));
  AQ_ASSERT_OK(aq_signal_wait(s, AQ_SIGNAL_EQ, 0, 0, NULL));
  aq_signal_destroy(s);
}

typedef struct {
  aq_signal_t s;
  useconds_t delay_us;
  aq_signal_value_t value;
} storer_t;

static void *store_later(void *arg) {
  storer_t *st = arg;
  usleep(st->delay_us);
  aq_signal_store(st->s, st->value);
  return NULL;
}

Test(signal, wakes_a_sleeping_waiter) {
  /* 50 ms is far past the spin phase: the waiter is asleep on the futex. */
  storer_t st = {.delay_us = 50000, .value = 42};
  AQ_ASSERT_OK(aq_signal_create(0, &st.s));
  pthread_t t;
  pthread_create(&t, NULL, store_later, &st);
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_wait(st.s, AQ_SIGNAL_GTE, 40, 5 * SEC, &v));
  cr_assert_eq(v, 42);
  pthread_join(t, NULL);
  aq_signal_destroy(st.s);
}


/* A signal only the host writes wakes its waiter itself, GPU or not: the
 * waiter sleeps until then. It once woke every 10 us on any machine with a
 * GPU (in case a device wrote it), some 5000 times here, and on 16 cores
 * those wake-ups took the cores of a graph's workers. */
Test(signal, a_host_written_signal_is_waited_for_asleep) {
  storer_t st = {.delay_us = 50000, .value = 0};
  AQ_ASSERT_OK(aq_signal_create(1, &st.s));
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  pthread_t t;
  pthread_create(&t, NULL, store_later, &st);
  AQ_ASSERT_OK(aq_signal_wait(st.s, AQ_SIGNAL_EQ, 0, 5 * SEC, NULL));
  getrusage(RUSAGE_THREAD, &after);
  pthread_join(t, NULL);
  long switches = after.ru_nvcsw - before.ru_nvcsw;
  cr_assert_lt(switches, 200, "the waiter went to sleep %ld times in 50 ms", switches);
  aq_signal_destroy(st.s);
}
typedef struct {
  aq_signal_t s;
  int n;
} adder_t;

static void *add_many(void *arg) {
  adder_t *a = arg;
  for (int i = 0; i < a->n; ++i) aq_signal_subtract(a->s, 1);
  return NULL;
}

Test(signal, concurrent_decrements_are_all_counted) {
  enum { THREADS = 4, N = 50000 };
  adder_t a = {.n = N};
  AQ_ASSERT_OK(aq_signal_create(THREADS * N, &a.s));
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, add_many, &a);
  AQ_ASSERT_OK(aq_signal_wait(a.s, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  aq_signal_value_t v;
  AQ_ASSERT_OK(aq_signal_load(a.s, &v));
  cr_assert_eq(v, 0);
  aq_signal_destroy(a.s);
}

Test(signal, bad_handles_are_reported_not_followed) {
  aq_signal_t s, null = {0}, garbage = {0xdeadbeef12345ull};
  aq_signal_value_t v;
  cr_assert_eq(aq_signal_load(null, &v), AQ_ERROR_INVALID_HANDLE);
  cr_assert(strstr(aq_last_error(), "null"), "%s", aq_last_error());
  cr_assert_eq(aq_signal_store(garbage, 1), AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_signal_create(0, &s));
  AQ_ASSERT_OK(aq_signal_destroy(s));
  cr_assert_eq(aq_signal_load(s, &v), AQ_ERROR_INVALID_HANDLE, "a destroyed signal is stale");
  cr_assert(strstr(aq_last_error(), "stale"), "%s", aq_last_error());
  cr_assert_eq(aq_signal_destroy(s), AQ_ERROR_INVALID_HANDLE, "double destroy");
  cr_assert_eq(aq_signal_wait(s, AQ_SIGNAL_EQ, 0, 0, NULL), AQ_ERROR_INVALID_HANDLE);
  /* The slot is reused, and the old handle still does not reach it. */
  aq_signal_t s2;
  AQ_ASSERT_OK(aq_signal_create(7, &s2));
  cr_assert_neq(s2.handle, s.handle);
  cr_assert_eq(aq_signal_load(s, &v), AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_signal_load(s2, &v));
  cr_assert_eq(v, 7);
  aq_signal_destroy(s2);
}

Test(signal, bad_arguments) {
  aq_signal_t s;
  cr_assert_eq(aq_signal_create(0, NULL), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_signal_create(0, &s));
  cr_assert_eq(aq_signal_load(s, NULL), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_signal_wait(s, (aq_signal_condition_t)9, 0, 0, NULL), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "condition"), "%s", aq_last_error());
  aq_signal_destroy(s);
}

Test(signal_setup, pool_exhaustion_is_an_error_and_recoverable) {
  aq_init_options_t o = {.max_signals = 16};
  AQ_ASSERT_OK(aq_init(&o));
  aq_signal_t s[17];
  int made = 0;
  aq_status_t st = AQ_OK;
  while (made < 17 && (st = aq_signal_create(0, &s[made])) == AQ_OK) made++;
  cr_assert_eq(made, 16);
  cr_assert_eq(st, AQ_ERROR_OUT_OF_RESOURCES);
  cr_assert(strstr(aq_last_error(), "AQ_MAX_SIGNALS"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_signal_destroy(s[0]));
  AQ_ASSERT_OK(aq_signal_create(1, &s[0]));
  for (int i = 0; i < made; ++i) aq_signal_destroy(s[i]);
  aq_shut_down();
}

Test(signal_setup, calls_before_init_fail_cleanly) {
  aq_signal_t s;
  cr_assert_eq(aq_signal_create(0, &s), AQ_ERROR_NOT_INITIALIZED);
  cr_assert_eq(aq_shut_down(), AQ_ERROR_NOT_INITIALIZED);
}
