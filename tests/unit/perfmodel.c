/* Performance models: spikes set aside, files of other versions or not
 * Aquila's refused without a crash, saves from two processes at once
 * merged. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aquila/aquila.h"
#include "runtime/settings.h"
#include "scheduler/perfmodel.h"
#include "../runtime/common.h"

static char dir[64], path[128];

static void setup(void) {
  perf_dir_make(dir, "perfmodel", path, "models.tsv");
  cr_assert_eq(aq_settings_load(NULL), AQ_OK); /* what aq_init does */
  aq_perf_reset();
}

static void teardown(void) {
  perf_dir_remove(dir);
  aq_perf_reset();
}
TestSuite(perfmodel, .init = setup, .fini = teardown);

static perf_key_t key(const char *kernel) {
  perf_key_t k;
  memset(&k, 0, sizeof(k));
  snprintf(k.kernel, sizeof(k.kernel), "%s", kernel);
  snprintf(k.arch, sizeof(k.arch), "cpu/test/2/Test_CPU");
  k.shape_class = 0x1010;
  return k;
}

static double estimate(const char *kernel, uint32_t *samples) {
  perf_key_t k = key(kernel);
  return aq_perf_estimate(&k, 0, -1, samples);
}

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
}

static char *read_all(void) {
  static char buf[8192];
  FILE *f = fopen(path, "r");
  cr_assert(f, "no %s", path);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

Test(perfmodel, a_spike_is_set_aside_and_a_lasting_change_replaces_the_model) {
  perf_key_t k = key("spiky");
  for (int i = 0; i < 5; ++i) cr_expect(aq_perf_record(&k, 0, 1000 + i));
  cr_expect(!aq_perf_record(&k, 0, 500000), "a 500x spike is not a sample");
  uint32_t n;
  double est = estimate("spiky", &n);
  cr_expect(est > 900 && est < 1100 && n == 5, "the model still says %.0f ns over %u samples", est, n);
  /* The agent got slower for good: after a run of alike samples, they are the model. */
  for (int i = 0; i < PERF_OUTLIER_RUN; ++i) aq_perf_record(&k, 0, 20000);
  est = estimate("spiky", &n);
  cr_expect(est > 19000 && est < 21000, "the model follows the change: %.0f ns", est);
}

Test(perfmodel, the_identity_of_an_agent_names_its_models) {
  aq_agent_info_t a = {.compute_units = 132};
  snprintf(a.driver, sizeof(a.driver), "cuda");
  snprintf(a.isa, sizeof(a.isa), "sm_90");
  snprintf(a.device, sizeof(a.device), "NVIDIA H100 80GB HBM3");
  char arch[PERF_ARCH_MAX];
  aq_perf_arch(&a, arch, sizeof(arch));
  cr_expect_str_eq(arch, "cuda/sm_90/132/NVIDIA_H100_80GB_HBM3");
}

Test(perfmodel, models_survive_a_save_and_reload) {
  perf_key_t k = key("saved");
  for (int i = 0; i < 3; ++i) aq_perf_record(&k, 0, 2000);
  cr_assert_eq(aq_perf_save(), AQ_OK, "%s", aq_last_error());
  cr_expect(strstr(read_all(), "# aquila performance models v3 aquila="), "%s", read_all());
  aq_perf_reset();
  uint32_t n;
  double est = estimate("saved", &n);
  cr_expect(n == 3 && est == 2000, "%u samples, %.0f ns", n, est);
}

Test(perfmodel, a_foreign_file_is_ignored_and_never_overwritten) {
  write_file("name,age\nalice,3\n");
  uint32_t n;
  estimate("anything", &n);
  cr_expect_eq(n, 0);
  perf_key_t k = key("mine");
  aq_perf_record(&k, 0, 100);
  cr_expect_eq(aq_perf_save(), AQ_ERROR_IO);
  cr_expect(strstr(aq_last_error(), "not an Aquila performance-model file"), "%s", aq_last_error());
  cr_expect_str_eq(read_all(), "name,age\nalice,3\n");
}

Test(perfmodel, another_versions_file_is_ignored_and_rewritten) {
  write_file("# aquila performance models v1: kernel class arch samples mean_ns m2 mean_bytes\n"
             "old 1010 cpu/test/2/Test_CPU 9 5 0 0\n");
  uint32_t n;
  estimate("old", &n);
  cr_expect_eq(n, 0, "the old version's models are not used");
  perf_key_t k = key("new");
  aq_perf_record(&k, 0, 100);
  cr_assert_eq(aq_perf_save(), AQ_OK, "%s", aq_last_error());
  cr_expect(!strstr(read_all(), "old "), "%s", read_all());
  cr_expect(strstr(read_all(), "new "), "%s", read_all());
}

Test(perfmodel, a_corrupt_file_is_read_without_a_crash) {
  char junk[4096];
  srand(7);
  for (size_t i = 0; i < sizeof(junk) - 1; ++i) junk[i] = (char)(1 + rand() % 255);
  junk[sizeof(junk) - 1] = 0;
  char text[5000];
  snprintf(text, sizeof(text), "# aquila performance models v3 aquila=%s\n%s\nk 1010 a nan inf -1 0\n%s\n",
           AQ_VERSION_STRING, junk, "good 1010 cpu/test/2/Test_CPU 4 300 0 0");
  write_file(text);
  uint32_t n;
  double est = estimate("good", &n);
  cr_expect(n == 4 && est == 300, "the good line is read: %u, %.0f", n, est);
  estimate("k", &n);
  cr_expect_eq(n, 0, "NaN and Inf are refused");
}

Test(perfmodel, two_processes_saving_at_once_lose_nothing) {
  pid_t pids[2];
  for (int p = 0; p < 2; ++p) {
    pids[p] = fork();
    cr_assert(pids[p] >= 0);
    if (pids[p] == 0) {
      aq_perf_reset();
      for (int round = 0; round < 20; ++round) {
        char name[32];
        snprintf(name, sizeof(name), "p%d_%d", p, round);
        perf_key_t k = key(name);
        aq_perf_record(&k, 0, 100 + round);
        if (aq_perf_save() != AQ_OK) _exit(1);
      }
      _exit(0);
    }
  }
  for (int p = 0; p < 2; ++p) {
    int st;
    cr_assert_eq(waitpid(pids[p], &st, 0), pids[p]);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  const char *all = read_all();
  for (int p = 0; p < 2; ++p)
    for (int round = 0; round < 20; ++round) {
      char name[32];
      snprintf(name, sizeof(name), "p%d_%d ", p, round);
      cr_expect(strstr(all, name), "%s lost", name);
    }
}
