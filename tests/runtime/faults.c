/* Memory faults in CPU kernels: the packet fails with the kernel's name,
 * agent, queue and packet, and the agent keeps serving; an abort is
 * reported before the process dies. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

TEST_KERNELS_SUITE(faults);

static aq_status_t run(aq_queue_t q, const char *kernel, const void *args, uint32_t grid, uint16_t wg) {
  aq_kernel_info_t k = test_kernel(co, agent, kernel);
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, args, grid, wg, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  aq_status_t s = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL);
  aq_signal_destroy(done);
  return s;
}

Test(faults, a_bad_pointer_fails_its_packet_and_the_worker_goes_on) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_queue_info_t info;
  AQ_ASSERT_OK(aq_queue_get_info(q, &info));
  poke_args_t bad = {(volatile int *)16};
  for (int round = 0; round < 3; ++round) {
    cr_assert_eq(run(q, "poke", &bad, 64, 1), AQ_ERROR_KERNEL_FAULT, "%s", aq_last_error());
    const char *m = aq_last_error();
    cr_assert(strstr(m, "kernel 'poke' faulted") && strstr(m, "0x10") && strstr(m, "packet "), "%s", m);
    char where[64];
    snprintf(where, sizeof(where), "queue %u", info.id);
    cr_assert(strstr(m, where), "'%s' lacks '%s'", m, where);
    /* The agent still runs good kernels, on this queue and others. */
    int x = 0;
    poke_args_t good = {&x};
    AQ_ASSERT_OK(run(q, "poke", &good, 1, 1));
    cr_assert_eq(x, 42);
    _Atomic uint64_t items = 0;
    tally_args_t t = {&items};
    AQ_ASSERT_OK(run(q, "tally", &t, 10000, 64));
    cr_assert_eq(atomic_load(&items), 10000);
  }
  AQ_ASSERT_OK(aq_queue_destroy(q));
}

/* A kernel that aborts takes the process with it, but says where first. */
/* A signal's first fault sticks until its error is reset, while later
 * faults overwrite the ring of messages (256 of them): the signal still
 * fails with the status it failed with, its message said to be gone (a
 * stress test's waiter once read AQ_ERROR_KERNEL_FAULT for a dispatch that
 * had failed with AQ_ERROR_INVALID_PACKET, 256 faults before). */
Test(faults, a_failed_signal_keeps_its_status_after_its_message_is_gone) {
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(agent, NULL, &q));
  aq_kernel_info_t k = test_kernel(co, agent, "noop");
  aq_signal_t first, later;
  AQ_ASSERT_OK(aq_signal_create(1, &first));
  AQ_ASSERT_OK(aq_signal_create(1, &later));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, 1, 1, first);
  p.kernel_object = 0x1234; /* not a kernel: the worker fails the packet */
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  cr_assert_eq(aq_signal_wait(first, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
  cr_assert(strstr(aq_last_error(), "kernel_object"), "%s", aq_last_error());
  p.completion_signal.handle = later.handle;
  for (int i = 0; i < 300; ++i) { /* more faults than the ring keeps */
    AQ_ASSERT_OK(aq_signal_store(later, 1));
    AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
    cr_assert_eq(aq_signal_wait(later, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
    aq_status_t e;
    AQ_ASSERT_OK(aq_signal_get_error(later, 1, &e));
  }
  cr_assert_eq(aq_signal_wait(first, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET, "%s", aq_last_error());
  cr_assert(strstr(aq_last_error(), "no longer recorded") && strstr(aq_last_error(), "AQ_ERROR_INVALID_PACKET"), "%s",
            aq_last_error());
  aq_status_t e;
  AQ_ASSERT_OK(aq_signal_get_error(first, 1, &e));
  cr_assert_eq(e, AQ_ERROR_INVALID_PACKET);
  AQ_ASSERT_OK(aq_signal_get_error(first, 0, &e));
  cr_assert_eq(e, AQ_OK, "reset");
  aq_signal_destroy(first), aq_signal_destroy(later);
  aq_queue_destroy(q);
}

Test(faults_abort, an_abort_is_reported_before_the_process_dies) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    aq_code_object_t c;
    if (aq_init(NULL) != AQ_OK || aq_code_object_load("test-kernels.so", &c) != AQ_OK) _exit(3);
    aq_agent_t a = first_cpu_agent();
    aq_queue_t q;
    aq_kernel_info_t k;
    aq_signal_t done;
    if (aq_queue_create(a, NULL, &q) || aq_code_object_find_kernel(c, "abort", a, &k) || aq_signal_create(1, &done))
      fprintf(stderr, "%s\n", aq_last_error()), _exit(4);
    hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, 1, 1, done);
    aq_queue_submit(q, &p, SEC, NULL);
    aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30 * SEC, NULL);
    _exit(5);
  }
  close(fds[1]);
  char out[4096] = {0};
  size_t n = 0;
  ssize_t r;
  while (n < sizeof(out) - 1 && (r = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0) n += (size_t)r;
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status 0x%x, stderr: %s", status, out);
  cr_assert(strstr(out, "kernel 'abort' aborted on agent") && strstr(out, "queue") && strstr(out, "packet 0"),
            "stderr: %s", out);
}
