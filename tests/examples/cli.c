/* train_fashion's own options: a value it does not know is refused, naming
 * the option and what it takes, with exit status 2 and before any data is
 * read or anything is written. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs build/examples/train_fashion (beside this test's folder) with args;
 * its exit status, and its output in out. */
static int run(const char *args, char *out, size_t size) {
  char exe[PATH_MAX] = "", cmd[PATH_MAX + 256];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(n > 0);
  exe[n] = '\0';
  snprintf(cmd, sizeof(cmd), "%s/../examples/train_fashion %s --out /nonexistent-aq-dir 2>&1", dirname(exe), args);
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  size_t got = fread(out, 1, size - 1, p);
  out[got] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(train_fashion_cli, unknown_augment_and_schedule_values_are_refused_by_name) {
  char out[4096];
  cr_assert_eq(run("--augment mirror", out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "--augment must be flip or none"), "%s", out);
  cr_assert_eq(run("--schedule linear", out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "--schedule must be cosine or constant"), "%s", out);
  cr_assert(access("/nonexistent-aq-dir", F_OK) != 0, "nothing was written");
}
