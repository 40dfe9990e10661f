/* Traces through the real runtime: a traced graph run records exactly one
 * event per packet, with consistent times (ready <= start <= end, dispatch
 * before ready where the processor says, every task after the tasks it
 * depends on), the file parses, its dependencies draw one flow per edge per
 * run, and aq-trace finds the graph's critical path in it. */
#include "helpers.h"
#include "../runtime/common.h"
#include "tools/aq-trace/analysis.h"

/* A diamond: b = relu(a) and c = tanh(a), then d = b c^T. */
static aq_exec_t *diamond(aq_graph_t **g) {
  AQ_ASSERT_OK(aq_graph_create(NULL, g));
  aq_tensor_t a, b, c, d;
  AQ_ASSERT_OK(aq_tensor_create(*g, "a", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){64, 32}, &a));
  AQ_ASSERT_OK(aq_op_relu(*g, a, &b));
  AQ_ASSERT_OK(aq_op_tanh(*g, a, &c));
  AQ_ASSERT_OK(aq_op_matmul(*g, b, c, (aq_tensor_t){0}, 0, 1, AQ_ACTIVATION_NONE, &d));
  aq_exec_t *e;
  /* Eager: heft's first runs are profiled, with stamp packets between the
   * tasks; this test counts the graph's own. */
  aq_exec_options_t o = {.policy = AQ_SCHED_EAGER};
  AQ_ASSERT_OK(aq_graph_instantiate(*g, &o, &e));
  static float data[64 * 32];
  for (int i = 0; i < 64 * 32; ++i) data[i] = (float)(i % 7) - 3.0f;
  AQ_ASSERT_OK(aq_exec_write(e, a, data, sizeof(data)));
  return e;
}

Test(trace, one_event_per_packet_with_consistent_times) {
  AQ_ASSERT_OK(aq_init(NULL));
  char path[128];
  temp_path(path, sizeof(path), "runtime.json");
  aq_trace_options_t o = {.path = path};
  AQ_ASSERT_OK(aq_trace_start(&o));
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_BUSY);
  aq_graph_t *g;
  aq_exec_t *e = diamond(&g);
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
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_str_eq(t.producer, "aquila");
  size_t packets = 0, runs = 0, inst = 0, tasks = 0, copies = 0;
  for (size_t i = 0; i < t.count; ++i) {
    tevent_t *ev = &t.events[i];
    cr_assert_geq(ev->dur, 0.0);
    cr_assert_geq(ev->ts, 0.0);
    if (!strcmp(ev->cat, "copy")) { /* aq_exec_write's, of a's 8 KB */
      copies++;
      cr_assert_eq(ev->bytes, 64.0 * 32 * 4);
      continue;
    }
    if (!strcmp(ev->cat, "runtime")) {
      runs += !strcmp(ev->name, "graph run");
      inst += !strcmp(ev->name, "instantiate");
      continue;
    }
    packets++;
    if (ev->ready == ev->ready) cr_assert_leq(ev->ready, ev->ts + 1e-3, "%s: started before it was ready", ev->name);
    if (ev->dispatch == ev->dispatch)
      cr_assert_leq(ev->dispatch, ev->ts + 1e-3, "%s: started before it was written", ev->name);
    if (ev->task >= 0 && strcmp(ev->cat, "barrier")) tasks++;
  }
  cr_assert_eq(copies, 1, "%zu copies traced", copies);
  cr_assert_eq(packets, (size_t)info.packets * RUNS, "%zu packet events for %u packets x %d runs", packets,
               info.packets, RUNS);
  cr_assert_eq(tasks, (size_t)info.tasks * RUNS, "every task of every run is tagged");
  cr_assert_eq(runs, RUNS);
  cr_assert_eq(inst, 1);
  cr_assert_str_eq(tfile_process_name(&t, 0), "cpu0");
  /* The graph's edges (the matmul after relu and tanh), and every run's
   * tasks in dependency order. */
  cr_assert_eq(t.nedges, 2);
  for (long run = 1; run <= RUNS; ++run) {
    const tevent_t *ev[3] = {0};
    for (size_t i = 0; i < t.count; ++i)
      if (t.events[i].run == run && t.events[i].task >= 0 && t.events[i].task < 3 && !strcmp(t.events[i].cat, "kernel"))
        ev[t.events[i].task] = &t.events[i];
    cr_assert(ev[0] && ev[1] && ev[2], "run %ld has all three tasks", run);
    /* GPU times are mapped onto the host clock to within a microsecond or
     * two: an edge between agents gets that much slack, not one within. */
    for (int k = 0; k < 2; ++k)
      cr_assert_geq(ev[2]->ts, ev[k]->ts + ev[k]->dur - (ev[2]->pid == ev[k]->pid ? 0.002 : 5.0),
                    "run %ld: the matmul started before task %d ended", run, k);
  }
  size_t starts = 0;
  for (size_t i = 0; i < t.nflows; ++i) starts += t.flows[i].ph == 's';
  cr_assert_eq(starts, 2 * RUNS, "a flow per edge per run");
  /* aq-trace's critical path: one of the two activations, then the matmul. */
  tanalysis_t a;
  cr_assert_eq(tanalyze(&t, &a, err, sizeof(err)), 0, "%s", err);
  tpath_t p;
  cr_assert_eq(tcritical_path(&a, &p), 0);
  /* (On a loaded machine the 8 KB copy, preempted, may outlast the tiny
   * kernels and be the path alone: a true answer, not the one to check.) */
  const tevent_t *last = &t.events[p.ev[p.n - 1]];
  if (strcmp(last->cat, "copy")) {
    cr_assert_eq(p.n, 2, "the critical path has %zu events, the last '%s' (%s)", (size_t)p.n, last->name, last->cat);
    cr_assert_eq(last->task, 2);
  }
  cr_assert_leq(p.work, p.wall + 1e-3, "the path's work fits in its run");
  tpath_free(&p);
  tanalysis_free(&a);
  tfile_free(&t);
  unlink(path);
  aq_shut_down();
}

Test(trace, aq_trace_env_records_from_init_to_shut_down) {
  char path[128];
  temp_path(path, sizeof(path), "env.json");
  setenv("AQ_TRACE", path, 1);
  AQ_ASSERT_OK(aq_init(NULL));
  unsetenv("AQ_TRACE");
  aq_graph_t *g;
  aq_exec_t *e = diamond(&g);
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_shut_down()); /* writes the trace */
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  size_t kernels = 0;
  for (size_t i = 0; i < t.count; ++i) kernels += !strcmp(t.events[i].cat, "kernel");
  cr_assert_geq(kernels, 3);
  tfile_free(&t);
  unlink(path);
}

Test(trace, stop_without_start_and_unwritable_paths) {
  AQ_ASSERT_OK(aq_init(NULL));
  cr_assert_eq(aq_trace_stop(), AQ_ERROR_INVALID_ARGUMENT);
  aq_trace_options_t o = {.path = "/nonexistent-dir/trace.json"};
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "/nonexistent-dir/trace.json"), "%s", aq_last_error());
  aq_shut_down();
}

/* The runtime up and recording to a temporary file named after what. */
static void start_traced(char *path, size_t size, const char *what) {
  temp_path(path, size, what);
  AQ_ASSERT_OK(aq_init(NULL));
  aq_trace_options_t o = {.path = path};
  AQ_ASSERT_OK(aq_trace_start(&o));
}

/* The recording stopped and read back into t. */
static void stop_and_load(const char *path, tfile_t *t) {
  AQ_ASSERT_OK(aq_trace_stop());
  char err[512];
  cr_assert_eq(tfile_load(path, t, err, sizeof(err)), 0, "%s", err);
}

/* aq_memory_copy in a trace: one "copy" span a copy, with its bytes (what
 * aq-trace's copies and GB/s come from); a refused copy records nothing. */
Test(trace, a_traced_copy_is_a_span_with_its_bytes) {
  char path[128];
  start_traced(path, sizeof(path), "copy.json");
  static char src[1 << 20], dst[1 << 20];
  memset(src, 7, sizeof(src));
  AQ_ASSERT_OK(aq_memory_copy(dst, src, sizeof(src)));
  cr_assert_eq(dst[12345], 7);
  cr_assert_eq(aq_memory_copy(NULL, src, 4), AQ_ERROR_INVALID_ARGUMENT);
  tfile_t t;
  stop_and_load(path, &t);
  size_t copies = 0;
  for (size_t i = 0; i < t.count; ++i)
    if (!strcmp(t.events[i].cat, "copy")) {
      ++copies;
      cr_assert_str_eq(t.events[i].name, "memcpy");
      cr_assert_eq(t.events[i].bytes, (double)sizeof(src));
      cr_assert_geq(t.events[i].dur, 0.0);
    }
  cr_assert_eq(copies, 1);
  tfile_free(&t);
  unlink(path);
  aq_shut_down();
}

static aq_status_t noted(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  ++*(int *)user;
  return AQ_OK;
}

/* A host task's packet is shown by the task's name, so a trace of a
 * training step tells its loaders apart from other host calls; one given
 * no name shows the graph's default, "host". */
Test(trace, a_host_task_is_shown_by_its_name) {
  char path[128];
  start_traced(path, sizeof(path), "named.json");
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  int calls = 0;
  aq_host_task_t named = {.name = "load_batch", .fn = noted, .user = &calls, .agent = -1};
  aq_host_task_t unnamed = {.fn = noted, .user = &calls, .agent = -1};
  AQ_ASSERT_OK(aq_graph_add_host(g, &named, NULL));
  AQ_ASSERT_OK(aq_graph_add_host(g, &unnamed, NULL));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, &(aq_exec_options_t){.policy = AQ_SCHED_EAGER}, &e));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  cr_assert_eq(calls, 2);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
  tfile_t t;
  stop_and_load(path, &t);
  size_t by_name = 0, by_default = 0, generic = 0;
  for (size_t i = 0; i < t.count; ++i) {
    if (strcmp(t.events[i].cat, "host") || t.events[i].task < 0) continue;
    by_name += !strcmp(t.events[i].name, "load_batch");
    by_default += !strcmp(t.events[i].name, "host");
    generic += !strcmp(t.events[i].name, "host call");
  }
  cr_assert_eq(by_name, 1, "the named task's packet");
  cr_assert_eq(by_default, 1, "the unnamed task's packet");
  cr_assert_eq(generic, 0, "a graph's host packet named only by its kind");
  tfile_free(&t);
  unlink(path);
  aq_shut_down();
}
