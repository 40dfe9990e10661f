/* Traces: a traced graph run records exactly one event per packet with
 * consistent times, the file parses, and aq-trace's reader turns every
 * hostile file of the corpus into a clean error or a clean parse. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "tools/aq-trace/trace_file.h"

Test(trace, one_event_per_packet_with_consistent_times) {
  AQ_ASSERT_OK(aq_init(NULL));
  char path[128];
  snprintf(path, sizeof(path), "/tmp/aq-trace-test-%d.json", getpid());
  aq_trace_options_t o = {.path = path};
  AQ_ASSERT_OK(aq_trace_start(&o));
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_BUSY);
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b, c;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){64, 32}, &a));
  AQ_ASSERT_OK(aq_op_relu(g, a, &b));
  AQ_ASSERT_OK(aq_op_relu(g, b, &c));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  enum { RUNS = 7 };
  for (int i = 0; i < RUNS; ++i) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  }
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_trace_stop());
  tfile_t t;
  char err[256];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  size_t packets = 0, runs = 0, inst = 0;
  for (size_t i = 0; i < t.count; ++i) {
    tevent_t *ev = &t.events[i];
    cr_assert_geq(ev->dur, 0.0);
    cr_assert_geq(ev->ts, 0.0);
    if (!strcmp(ev->cat, "runtime")) {
      runs += !strcmp(ev->name, "graph run");
      inst += !strcmp(ev->name, "instantiate");
    } else {
      packets++;
    }
  }
  cr_assert_eq(packets, (size_t)info.packets * RUNS, "%zu packet events for %u packets x %d runs", packets,
               info.packets, RUNS);
  cr_assert_eq(runs, RUNS);
  cr_assert_eq(inst, 1);
  cr_assert_str_eq(t.pid_names[0], "cpu0");
  /* The graph's one edge (relu 2 after relu 1), and every run's two tasks
   * tagged with their ids, in dependency order. */
  cr_assert_eq(t.nedges, 1);
  cr_assert(t.edges[0].task == 1 && t.edges[0].pred == 0, "edge %ld <- %ld", t.edges[0].task, t.edges[0].pred);
  for (long run = 1; run <= RUNS; ++run) {
    const tevent_t *first = NULL, *second = NULL;
    for (size_t i = 0; i < t.count; ++i) {
      const tevent_t *ev = &t.events[i];
      if (ev->run != run || strcmp(ev->cat, "kernel")) continue;
      if (ev->task == 0) first = ev;
      if (ev->task == 1) second = ev;
    }
    cr_assert(first && second, "run %ld has both tasks", run);
    cr_assert_geq(second->ts, first->ts + first->dur - 0.002, "run %ld: the dependent task started before its "
                  "predecessor ended", run);
  }
  tfile_free(&t);
  unlink(path);
  aq_shut_down();
}

Test(trace, stop_without_start_and_unwritable_paths) {
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_eq(aq_trace_stop(), AQ_ERROR_INVALID_ARGUMENT);
  aq_trace_options_t o = {.path = "/nonexistent-dir/trace.json"};
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "/nonexistent-dir/trace.json"), "%s", aq_last_error());
  aq_shut_down();
}

Test(trace, every_corpus_file_is_a_clean_error_or_a_clean_parse) {
  const char *dir = "tests/trace-corpus";
  DIR *d = opendir(dir);
  cr_assert(d, "run from the repository root");
  int files = 0, errors = 0;
  for (struct dirent *ent; (ent = readdir(d));) {
    if (ent->d_name[0] == '.') continue;
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name);
    tfile_t t;
    int rc = tfile_load(path, &t, err, sizeof(err));
    files++;
    if (rc) {
      errors++;
      cr_assert(strstr(err, ent->d_name), "an error names the file: %s", err);
    } else {
      tfile_free(&t);
    }
  }
  closedir(d);
  cr_assert_geq(files, 10);
  cr_assert_geq(errors, 8, "the hostile files are refused (%d of %d)", errors, files);
}
