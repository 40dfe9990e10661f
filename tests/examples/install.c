/* make install into a temporary PREFIX, and a program outside the tree
 * built from the installed copy with pkg-config alone, linked with
 * libaquila.so and with libaquila.a: each starts and finds the installed
 * code objects (tools/test-install.sh does the work). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(install, an_outside_program_builds_from_the_installed_copy_and_runs, .timeout = 600) {
  const char *san = getenv("AQ_BUILD_SAN"), *build = getenv("AQ_BUILD_DIR");
  if (san && *san) cr_skip_test("the install test runs in the plain build, not under a sanitizer");
  if (access("tools/test-install.sh", X_OK) != 0) cr_skip_test("not run from the repository root");
  char cmd[512], out[8192];
  snprintf(cmd, sizeof(cmd), "tools/test-install.sh %s 2>&1", build && *build ? build : "build");
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
  cr_assert(strstr(out, "prog-shared ran and found") && strstr(out, "prog-static ran and found"), "%s", out);
}
