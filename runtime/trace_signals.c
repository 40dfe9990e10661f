/* SIGTERM and SIGINT end a traced process with its trace written.
 *
 * Writing a trace takes locks and memory, which a signal handler may not,
 * so the handler asks a thread of its own to flush (through a pipe, which
 * is async-signal-safe) and waits for it, five seconds at most (the signal
 * may have caught a thread inside the recorder's lock). Then the signal
 * goes where it went before: to the previous handler, or its default
 * action, which ends the process as it would have ended untraced. A signal
 * the process ignores stays ignored. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "aquila/trace.h"
#include "runtime/trace.h"

static const int handled[] = {SIGTERM, SIGINT};
static struct sigaction previous[2];
static int request[2] = {-1, -1}, done[2] = {-1, -1};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *flusher(void *arg) {
  (void)arg;
  char c;
  for (;;) {
    ssize_t n = read(request[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL;
    aq_trace_flush();
    (void)!write(done[1], &c, 1);
  }
}

static void on_signal(int signo) {
  int saved = errno;
  char c = 0;
  if (write(request[1], &c, 1) == 1) {
    struct pollfd p = {.fd = done[0], .events = POLLIN};
    if (poll(&p, 1, 5000) > 0) (void)!read(done[0], &c, 1);
  }
  struct sigaction *prev = &previous[signo == SIGINT];
  if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_DFL) {
    sigaction(signo, prev, NULL);
    raise(signo); /* delivered, with its default action, once this returns */
  } else if (prev->sa_flags & SA_SIGINFO) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    info.si_signo = signo;
    prev->sa_sigaction(signo, &info, NULL);
  } else if (prev->sa_handler != SIG_IGN) {
    prev->sa_handler(signo);
  }
  errno = saved;
}

static void install(void) {
  if (pipe2(request, O_CLOEXEC) || pipe2(done, O_CLOEXEC)) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int failed = pthread_create(&t, &attr, flusher, NULL);
  pthread_attr_destroy(&attr);
  if (failed) return;
  for (int i = 0; i < 2; ++i) {
    struct sigaction cur;
    if (sigaction(handled[i], NULL, &cur) || (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(handled[i], &sa, &previous[i]);
  }
}

void aq_trace_signals_install(void) { pthread_once(&once, install); }
