/* Handle lifetimes and races: typed handles, handles from before a
 * re-init, a queue destroyed under its producers, a code object unloaded
 * under its kernel, and calls racing aq_shut_down. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "common.h"

TEST_KERNELS_SUITE(lifetimes);

Test(lifetimes, a_handle_of_one_type_is_refused_as_another) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_signal_t s;
  AQ_ASSERT_OK(aq_signal_create(1, &s));
  aq_signal_value_t v;
  cr_assert_eq(aq_signal_load((aq_signal_t){q.handle}, &v), AQ_ERROR_INVALID_HANDLE);
  aq_queue_info_t info;
  cr_assert_eq(aq_queue_get_info((aq_queue_t){s.handle}, &info), AQ_ERROR_INVALID_HANDLE);
  cr_assert_eq(aq_queue_get_info((aq_queue_t){co.handle}, &info), AQ_ERROR_INVALID_HANDLE);
  cr_assert_eq(aq_code_object_unload((aq_code_object_t){q.handle}), AQ_ERROR_INVALID_HANDLE);
  cr_assert_eq(aq_agent_get_info((aq_agent_t){q.handle}, &(aq_agent_info_t){0}), AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_signal_destroy(s));
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

Test(lifetimes, handles_from_before_a_re_init_stay_dead) {
  aq_signal_t s;
  AQ_ASSERT_OK(aq_signal_create(5, &s));
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_code_object_t old_co = co;
  AQ_ASSERT_OK(aq_shut_down());
  AQ_ASSERT_OK(aq_init(NULL));
  agent = first_cpu_agent();
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  /* The new runtime hands out its first handles again. */
  aq_signal_t s2;
  AQ_ASSERT_OK(aq_signal_create(7, &s2));
  aq_queue_t q2;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q2));
  aq_signal_value_t v;
  cr_assert_eq(aq_signal_load(s, &v), AQ_ERROR_INVALID_HANDLE, "the old signal came back to life");
  cr_assert_eq(aq_queue_get_info(q, &(aq_queue_info_t){0}), AQ_ERROR_INVALID_HANDLE);
  if (old_co.handle != co.handle) /* else nothing to tell apart */
    cr_assert_eq(aq_code_object_get_info(old_co, &(aq_code_object_info_t){0}), AQ_ERROR_INVALID_HANDLE);
  AQ_ASSERT_OK(aq_signal_load(s2, &v));
  cr_assert_eq(v, 7);
  aq_signal_destroy(s2);
  aq_queue_destroy(q2);
}

Test(lifetimes, unloading_a_code_object_under_its_kernel_is_refused) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_code_object_t mine;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &mine));
  aq_kernel_info_t k = test_kernel(mine, agent, "busy");
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  _Atomic int started = 0;
  busy_flag_args_t args = {&started, 200000000ull};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, 1, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  while (!atomic_load(&started)) sched_yield();
  aq_status_t s = aq_code_object_unload(mine);
  cr_assert_eq(s, AQ_ERROR_BUSY, "%s", aq_last_error());
  cr_assert(strstr(aq_last_error(), "'busy' is running"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL));
  AQ_ASSERT_OK(aq_code_object_unload(mine));
  aq_signal_destroy(done);
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

typedef struct {
  aq_queue_t q;
  aq_kernel_info_t k;
  _Atomic int stop;
  _Atomic int bad;
} submitter_t;

/* One packet at a time, waited for, so that the destroyer often finds the
 * queue idle while producers are still at it. */
static void *submit_loop(void *arg) {
  submitter_t *t = arg;
  aq_signal_t done;
  if (aq_signal_create(1, &done) != AQ_OK) return NULL;
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&t->k, NULL, 1, 1, done);
  while (!atomic_load(&t->stop)) {
    aq_signal_store(done, 1);
    aq_status_t s = aq_queue_submit(t->q, &p, SEC, NULL);
    if (s == AQ_ERROR_INVALID_HANDLE) break; /* destroyed: what a late producer gets */
    if (s != AQ_OK || aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL) != AQ_OK)
      atomic_store(&t->bad, s ? s : AQ_ERROR_TIMEOUT);
  }
  aq_signal_destroy(done);
  return NULL;
}

Test(lifetimes, a_queue_destroyed_under_its_producers_is_not_used_after_free) {
  for (int round = 0; round < 20; ++round) {
    submitter_t t = {.k = test_kernel(co, agent, "noop")};
    AQ_ASSERT_OK(aq_queue_create(agent, NULL, &t.q));
    pthread_t th[2];
    for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, submit_loop, &t);
    nanosleep(&(struct timespec){0, 2000000}, NULL);
    aq_status_t s;
    while ((s = aq_queue_destroy(t.q)) == AQ_ERROR_BUSY) sched_yield();
    AQ_ASSERT_OK(s);
    atomic_store(&t.stop, 1);
    for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&t.bad), 0, "a submit failed with %s", aq_status_string(atomic_load(&t.bad)));
  }
}

static void *load_loop(void *arg) {
  aq_signal_t s = *(aq_signal_t *)arg;
  aq_signal_value_t v;
  for (;;) {
    aq_status_t st = aq_signal_load(s, &v);
    if (st == AQ_ERROR_NOT_INITIALIZED || st == AQ_ERROR_INVALID_HANDLE) return NULL;
  }
}

Test(lifetimes, calls_racing_shut_down_fail_cleanly) {
  aq_signal_t s;
  AQ_ASSERT_OK(aq_signal_create(1, &s));
  pthread_t th;
  pthread_create(&th, NULL, load_loop, &s);
  nanosleep(&(struct timespec){0, 1000000}, NULL);
  AQ_ASSERT_OK(aq_shut_down());
  pthread_join(th, NULL);
  AQ_ASSERT_OK(aq_init(NULL)); /* for the suite's teardown */
}

/* A kernel that never ends: aq_shut_down gives up within its timeout and
 * names it, instead of spinning for ever under the init lock. (The kernel
 * spins on until the test's process exits.) */
Test(shutdown, with_an_endless_kernel_returns_busy_naming_it) {
  aq_init_options_t o = {.shutdown_timeout_ms = 300};
  AQ_ASSERT_OK(aq_init(&o));
  aq_agent_t a = first_cpu_agent();
  aq_code_object_t c;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &c));
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(a, NULL, &q));
  aq_kernel_info_t k = test_kernel(c, a, "busy");
  static _Atomic int started;
  static busy_flag_args_t args = {&started, UINT64_MAX};
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, &args, 1, 1, (aq_signal_t){0});
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  while (!atomic_load(&started)) sched_yield();
  cr_assert_eq(aq_shut_down(), AQ_ERROR_BUSY, "%s", aq_last_error());
  const char *m = aq_last_error();
  cr_assert(strstr(m, "kernel 'busy'") && strstr(m, "agent cpu") && strstr(m, "after 300 ms"), "%s", m);
  /* The runtime is still up and usable. */
  aq_signal_t s;
  AQ_ASSERT_OK(aq_signal_create(0, &s));
  AQ_ASSERT_OK(aq_signal_destroy(s));
}
