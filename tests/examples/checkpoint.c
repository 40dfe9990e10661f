/* train_fashion --checkpoint DIR / --resume on CPU agents: a run killed
 * with SIGKILL in the middle of its training and resumed ends bit for bit
 * where a run never stopped ends; a checkpoint that does not continue the
 * run asked for is refused by name. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/train/fashion_data.h"

static char root[64];

static void make_root(void) {
  snprintf(root, sizeof(root), "/tmp/aq-resume-XXXXXX");
  cr_assert(mkdtemp(root));
}

static void remove_root(void) {
  char cmd[96];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(train_fashion_resume, .init = make_root, .fini = remove_root);

/* Starts train_fashion (beside this test's folder) on a small MLP with its
 * checkpoints in root/name, placed by eager over CPU agents only; its
 * stdout comes back through *out_fd, its stderr goes to root/name.err. */
static pid_t start(const char *name, const char *more, int *out_fd) {
  char exe[PATH_MAX] = "", prog[PATH_MAX + 32], dir[128], err[160], cmd[1024];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(n > 0);
  exe[n] = '\0';
  snprintf(prog, sizeof(prog), "%s/../examples/train_fashion", dirname(exe));
  snprintf(dir, sizeof(dir), "%s/%s", root, name);
  snprintf(err, sizeof(err), "%s/%s.err", root, name);
  const char *data = getenv("AQ_FASHION_DATA") ? getenv("AQ_FASHION_DATA") : AQ_FASHION_DEFAULT_DIR;
  snprintf(cmd, sizeof(cmd),
           "exec %s --hidden 64 --epochs 4 --steps 20 --placement cpu --data %s --checkpoint %s --out %s %s 2>%s",
           prog, data, dir, dir, more, err);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]), close(fds[1]);
    setenv("AQ_SCHED", "eager", 1); /* no calibration: the same placement in every process */
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

/* Reads fd into out until EOF, or (until non-NULL) until a line holding it. */
static void read_until(int fd, char *out, size_t size, const char *until) {
  size_t got = strlen(out);
  while (got + 1 < size && !(until && strstr(out, until) && strchr(strstr(out, until), '\n'))) {
    ssize_t n = read(fd, out + got, size - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
    out[got] = '\0';
  }
}

/* Runs to the end; its exit status, its stdout in out. */
static int run(const char *name, const char *more, char *out, size_t size) {
  int fd, status;
  out[0] = '\0';
  pid_t pid = start(name, more, &fd);
  read_until(fd, out, size, NULL);
  close(fd);
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *stderr_of(const char *name) {
  static char buf[4096];
  char path[160];
  snprintf(path, sizeof(path), "%s/%s.err", root, name);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* "loss ..., test accuracy ...%" of epoch ep's line. */
static void epoch_result(const char *out, int ep, char *res, size_t size) {
  char key[32];
  snprintf(key, sizeof(key), "epoch %d: ", ep);
  const char *p = strstr(out, key);
  cr_assert(p, "epoch %d was reported: %s", ep, out);
  p += strlen(key);
  const char *end = strstr(p, "%,");
  cr_assert(end);
  snprintf(res, size, "%.*s", (int)(end - p), p);
}

static uint8_t *checkpoint_of(const char *name, size_t *size) {
  char path[160];
  snprintf(path, sizeof(path), "%s/%s/last.ckpt", root, name);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s exists", path);
  *size = (size_t)st.st_size;
  uint8_t *buf = malloc(*size);
  FILE *f = fopen(path, "rb");
  cr_assert(f && buf && fread(buf, 1, *size, f) == *size);
  fclose(f);
  return buf;
}

Test(train_fashion_resume, killed_and_resumed_ends_bit_for_bit_where_an_unbroken_run_ends, .timeout = 120) {
  static char whole[16384], broken[16384], resumed[16384];
  cr_assert_eq(run("whole", "", whole, sizeof(whole)), 0, "%s", stderr_of("whole"));

  int fd, status;
  broken[0] = '\0';
  pid_t pid = start("broken", "", &fd);
  read_until(fd, broken, sizeof(broken), "epoch 1:");
  cr_assert(strstr(broken, "epoch 1:"), "the first epoch ended: %s", stderr_of("broken"));
  kill(pid, SIGKILL);
  close(fd);
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed in its second epoch (status %#x)", status);

  cr_assert_eq(run("broken", "--resume", resumed, sizeof(resumed)), 0, "%s", stderr_of("broken"));
  cr_assert(strstr(stderr_of("broken"), "resuming from"), "%s", stderr_of("broken"));
  cr_assert(!strstr(resumed, "epoch 1:"), "epoch 1 is not trained again: %s", resumed);
  for (int ep = 2; ep <= 4; ++ep) {
    char a[128], b[128];
    epoch_result(whole, ep, a, sizeof(a));
    epoch_result(resumed, ep, b, sizeof(b));
    cr_assert_str_eq(a, b, "epoch %d", ep);
  }
  /* The checkpoints after the last epoch: the same tensors and run count,
   * byte for byte, and the same data order; only the timings differ. */
  size_t na, nb;
  uint8_t *ca = checkpoint_of("whole", &na), *cb = checkpoint_of("broken", &nb);
  cr_assert_eq(na, nb);
  uint64_t user;
  memcpy(&user, ca + 24, 8);
  size_t tensors_end = na - 4 - user, order_end = tensors_end + 32 + 60000 * 4;
  cr_assert(!memcmp(ca + 16, cb + 16, 8), "the same run count");
  cr_assert(!memcmp(ca + 40, cb + 40, tensors_end - 40), "the same parameters and optimizer state, bit for bit");
  cr_assert(!memcmp(ca + tensors_end, cb + tensors_end, order_end - tensors_end), "the same data order");
  free(ca), free(cb);
}

Test(train_fashion_resume, a_checkpoint_of_another_run_is_refused_by_name, .timeout = 120) {
  static char out[16384];
  cr_assert_eq(run("none", "--resume", out, sizeof(out)), 1);
  cr_assert(strstr(stderr_of("none"), "--resume: checkpoint"), "%s", stderr_of("none"));
  cr_assert(strstr(stderr_of("none"), "last.ckpt does not exist"), "%s", stderr_of("none"));
  cr_assert_eq(run("first", "--epochs 1", out, sizeof(out)), 0, "%s", stderr_of("first"));
  /* Later options win: the same run but for one of them. */
  char from[128], to[128];
  snprintf(from, sizeof(from), "%s/first", root);
  snprintf(to, sizeof(to), "%s/wider", root);
  cr_assert_eq(rename(from, to), 0);
  cr_assert_eq(run("wider", "--resume --hidden 32", out, sizeof(out)), 1);
  cr_assert(strstr(stderr_of("wider"), "holds tensor 'w1' as f32 [784, 64]; the exec's graph has f32 [784, 32]"), "%s",
            stderr_of("wider"));
  cr_assert_eq(run("wider", "--resume --seed 2", out, sizeof(out)), 1);
  cr_assert(strstr(stderr_of("wider"), "it was made with --seed 1, not 2"), "%s", stderr_of("wider"));
  cr_assert_eq(run("wider", "--resume --epochs 4", out, sizeof(out)), 0, "the same run goes on: %s",
               stderr_of("wider"));
  cr_assert(strstr(out, "epoch 4:") && !strstr(out, "epoch 1:"), "%s", out);
}
