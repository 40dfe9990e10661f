/* Catching memory faults of CPU kernels (see cpu_guard.h). */
#include "runtime/drivers/cpu_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int caught[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
enum { NCAUGHT = sizeof(caught) / sizeof(caught[0]) };
static struct sigaction previous[NCAUGHT];
static pthread_once_t installed = PTHREAD_ONCE_INIT;

/* Per worker thread: set only while its kernel runs. */
static __thread sigjmp_buf *armed;
static __thread const cpu_guard_site_t *site_now;
static __thread volatile sig_atomic_t fault_signo;
static __thread volatile uintptr_t fault_addr;
static __thread void *alt_stack;

static void pass_on(int signo, siginfo_t *info, void *uc) {
  for (int i = 0; i < NCAUGHT; ++i) {
    if (caught[i] != signo) continue;
    struct sigaction *p = &previous[i];
    if ((p->sa_flags & SA_SIGINFO) && p->sa_sigaction) {
      p->sa_sigaction(signo, info, uc);
      return;
    }
    if (p->sa_handler == SIG_IGN) return;
    if (p->sa_handler != SIG_DFL) {
      p->sa_handler(signo);
      return;
    }
    /* Default action: put it back and let the signal happen again (a fault
     * re-executes the instruction; a raised signal is raised again). */
    signal(signo, SIG_DFL);
    if (info->si_code <= 0) raise(signo);
    return;
  }
}

static void report_abort(const cpu_guard_site_t *s) {
  char msg[512];
  int n = snprintf(msg, sizeof(msg),
                   "aquila: kernel '%s' aborted on agent %s, queue %u, packet %llu: the process cannot "
                   "continue\n",
                   s->kernel, s->agent, s->queue, (unsigned long long)s->packet);
  if (n > 0) (void)!write(2, msg, (size_t)(n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1));
}

static void on_signal(int signo, siginfo_t *info, void *uc) {
  if (armed && signo != SIGABRT) {
    sigjmp_buf *jb = armed;
    armed = NULL;
    fault_signo = signo;
    fault_addr = (uintptr_t)info->si_addr;
    siglongjmp(*jb, 1);
  }
  if (armed && site_now) report_abort(site_now);
  pass_on(signo, info, uc);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  /* NODEFER: the jump out leaves the signal unblocked without saving and
   * restoring the mask on every work-group (a system call each). */
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NCAUGHT; ++i) sigaction(caught[i], &sa, &previous[i]);
}

int aq_cpu_guard_thread_init(void) {
  size_t size = 64 * 1024;
  alt_stack = malloc(size);
  if (!alt_stack) return 0;
  stack_t st = {.ss_sp = alt_stack, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&st, NULL)) {
    free(alt_stack);
    alt_stack = NULL;
    return 0;
  }
  pthread_once(&installed, install);
  return 1;
}

void aq_cpu_guard_thread_deinit(void) {
  if (!alt_stack) return;
  stack_t st = {.ss_flags = SS_DISABLE};
  sigaltstack(&st, NULL);
  free(alt_stack);
  alt_stack = NULL;
}

int aq_cpu_guard_call(aq_cpu_kernel_fn_t fn, const void *kernarg, const aq_dispatch_ctx_t *ctx,
                   const cpu_guard_site_t *site, int *signo, uintptr_t *addr) {
  if (!alt_stack) return fn(kernarg, ctx);
  sigjmp_buf jb;
  if (sigsetjmp(jb, 0)) {
    site_now = NULL;
    *signo = fault_signo;
    *addr = fault_addr;
    return CPU_GUARD_FAULTED;
  }
  site_now = site;
  armed = &jb;
  int rc = fn(kernarg, ctx);
  armed = NULL;
  site_now = NULL;
  return rc;
}
