/* The settings table (runtime/settings.h): every bad value of every type is
 * refused at aq_init by the setting's name and leaves the runtime able to
 * start; sources are reported; README.md's Environment table lists exactly
 * the table's settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* aq_init refuses NAME=VALUE, naming the setting and quoting the value,
 * then starts once the variable is gone. */
static void refused(const char *name, const char *value) {
  setenv(name, value, 1);
  cr_assert_eq(aq_init(NULL), AQ_ERROR_INVALID_ARGUMENT, "%s='%s' was taken", name, value);
  char want[128];
  snprintf(want, sizeof(want), "%s='%s'", name, value);
  cr_assert(strstr(aq_last_error(), want), "%s", aq_last_error());
  unsetenv(name);
  AQ_ASSERT_OK(aq_init(NULL));
  AQ_ASSERT_OK(aq_shut_down());
}

Test(settings, bad_numbers_are_refused_not_wrapped) {
  refused("AQ_MAX_SIGNALS", " -1");
  refused("AQ_MAX_SIGNALS", "-1");
  refused("AQ_MAX_SIGNALS", "4294967312"); /* 2^32 + 16 */
  refused("AQ_MAX_SIGNALS", "18446744073709551632"); /* 2^64 + 16 */
  refused("AQ_MAX_SIGNALS", "8"); /* below the range */
  refused("AQ_SPIN_US", "12abc");
  refused("AQ_CPU_WATCHERS", "0"); /* a CPU agent needs a worker that watches */
  refused("AQ_CPU_LANES", "0");     /* and a lane */
  refused("AQ_CPU_LANES", "257");   /* past an exec's 256 */
  refused("AQ_CPU_WORKERS", "0x10");
  refused("AQ_SHUTDOWN_TIMEOUT_MS", "0");
  refused("AQ_COMM_TIMEOUT_MS", "soon");
  refused("AQ_TRACE_MAX_MB", "0");
}

Test(settings, bad_bools_enums_sizes_and_lists_are_refused) {
  refused("AQ_MEMORY_REUSE", "2");
  refused("AQ_GEMM_SKIP_ZEROS", "yes");
  refused("AQ_SCHED", "fastest");
  refused("AQ_CPU_ISA", "sse");
  refused("AQ_CONV_ALGO", "fft");
  refused("AQ_MEMORY", "everywhere");
  refused("AQ_FUSION", "yes");
  refused("AQ_MATMUL_PRECISION", "fast");
  refused("AQ_CUDA_GRAPHS", "2");
  refused("AQ_MEMORY_LIMIT", "2Q");
  refused("AQ_AGENTS", "bogus");
  refused("AQ_AGENTS", "cpu,,cuda");
  refused("AQ_CPU_AGENTS", "0");
  refused("AQ_CPU_AGENTS", "sockets");
}

Test(settings, a_bad_option_is_refused_by_its_setting_name) {
  aq_init_options_t o = {.cpu_agents = "lots"};
  cr_assert_eq(aq_init(&o), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "AQ_CPU_AGENTS='lots'"), "%s", aq_last_error());
  o = (aq_init_options_t){.max_signals = 8};
  cr_assert_eq(aq_init(&o), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "AQ_MAX_SIGNALS='8'"), "%s", aq_last_error());
}

static const aq_setting_t *find(const aq_setting_t *all, size_t n, const char *name) {
  for (size_t i = 0; i < n; ++i)
    if (!strcmp(all[i].name, name)) return &all[i];
  cr_assert_fail("no setting %s", name);
  return NULL;
}

Test(settings, each_value_says_where_it_came_from) {
  setenv("AQ_CPU_ISA", "avx2", 1);
  setenv("AQ_SPIN_US", "", 1); /* empty: the default */
  aq_init_options_t o = {.max_signals = 1024};
  AQ_ASSERT_OK(aq_init(&o));
  unsetenv("AQ_CPU_ISA"), unsetenv("AQ_SPIN_US");
  aq_setting_t all[64];
  size_t n = 0;
  AQ_ASSERT_OK(aq_settings(all, 64, &n));
  cr_assert_gt(n, 20);
  const aq_setting_t *isa = find(all, n, "AQ_CPU_ISA"), *sig = find(all, n, "AQ_MAX_SIGNALS"),
                     *spin = find(all, n, "AQ_SPIN_US");
  cr_assert_str_eq(isa->value, "avx2");
  cr_assert_str_eq(isa->source, "environment");
  cr_assert_str_eq(sig->value, "1024");
  cr_assert_str_eq(sig->source, "options");
  cr_assert_str_eq(spin->value, "200");
  cr_assert_str_eq(spin->source, "default");
  for (size_t i = 0; i < n; ++i) cr_assert(all[i].help && *all[i].help, "%s has no help", all[i].name);
  AQ_ASSERT_OK(aq_shut_down());
}

/* README.md beside tests/: this file's path, from the build's working directory. */
static FILE *open_readme(void) {
  char path[512];
  const char *me = __FILE__, *tail = strstr(me, "tests/runtime/settings.c");
  snprintf(path, sizeof(path), "%.*sREADME.md", (int)(tail ? tail - me : 0), me);
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s", path);
  return f;
}

Test(settings, readme_lists_exactly_the_table) {
  AQ_ASSERT_OK(aq_init(NULL));
  aq_setting_t all[64];
  size_t n = 0;
  AQ_ASSERT_OK(aq_settings(all, 64, &n));
  int seen[64] = {0};
  FILE *f = open_readme();
  char line[4096];
  int in_table = 0, rows = 0;
  while (fgets(line, sizeof(line), f)) {
    if (!strncmp(line, "## ", 3)) in_table = !strncmp(line, "## Environment", 14);
    if (!in_table || strncmp(line, "| `", 3)) continue;
    /* the first cell: `NAME` or `A`, `B` */
    char *end = strchr(line + 1, '|');
    cr_assert(end, "%s", line);
    *end = '\0';
    for (char *p = strchr(line, '`'); p; p = strchr(p + 1, '`')) {
      char *q = strchr(p + 1, '`');
      cr_assert(q, "%s", line);
      *q = '\0';
      if (!strncmp(p + 1, "AQ_", 3)) {
        size_t i = 0;
        while (i < n && strcmp(all[i].name, p + 1)) ++i;
        cr_assert_lt(i, n, "README.md lists %s, which is no setting", p + 1);
        cr_assert_not(seen[i]++, "README.md lists %s twice", p + 1);
        ++rows;
      }
      p = q;
    }
  }
  fclose(f);
  for (size_t i = 0; i < n; ++i) cr_assert(seen[i], "README.md's Environment table lacks %s", all[i].name);
  cr_assert_eq((size_t)rows, n);
  AQ_ASSERT_OK(aq_shut_down());
}
