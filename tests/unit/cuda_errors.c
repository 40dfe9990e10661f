/* How the CUDA driver reports failures on paths that cannot fail their
 * caller (runtime/drivers/cuda_api.h): an error that loses a GPU's context
 * is said once, not again by each release of its teardown; other errors
 * every time. Runs without a GPU: the reporting is the driver's own. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>

#include "runtime/drivers/cuda_api.h"

TestSuite(cuda_errors);

Test(cuda_errors, a_lost_contexts_error_is_said_once, .init = cr_redirect_stderr) {
  cr_assert(aq_cuda_sticky(700) && aq_cuda_sticky(719) && !aq_cuda_sticky(1) && !aq_cuda_sticky(600));
  cr_assert(!aq_cuda_checked(700, "cuStreamSynchronize", "cuda0, queue 0"));
  cr_assert(!aq_cuda_checked(700, "cuStreamDestroy", "cuda0, queue 0"));
  cr_assert(!aq_cuda_checked(700, "cuMemFree", "cuda0.managed"));
  cr_assert(!aq_cuda_checked(1, "cuMemFree", "cuda1"));
  cr_assert(!aq_cuda_checked(1, "cuMemFreeHost", "cuda1"));
  cr_assert(aq_cuda_checked(0, "cuMemFree", "cuda1"));
  fflush(stderr);
  char all[4096] = "", line[512];
  int lines = 0;
  for (FILE *f = cr_get_redirected_stderr(); fgets(line, sizeof(line), f); ++lines)
    strncat(all, line, sizeof(all) - strlen(all) - 1);
  cr_assert_eq(lines, 3, "%s", all);
  cr_assert(strstr(all, "cuda0, queue 0: cuStreamSynchronize: CUDA error 700") && strstr(all, "context is lost"), "%s", all);
  cr_assert(!strstr(all, "cuStreamDestroy") && !strstr(all, "cuda0.managed"), "%s", all);
  cr_assert(strstr(all, "cuda1: cuMemFree:") && strstr(all, "cuda1: cuMemFreeHost:"), "%s", all);
}
