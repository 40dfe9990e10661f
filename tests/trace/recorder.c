/* The recorder on its own: events recorded from several threads through the
 * internal API (runtime/trace.h, whose record functions libaquila exports
 * for exactly this) come out once each, with their times, dependencies,
 * flows and counters, in a file that parses. No runtime is started: the
 * recorder needs none. */
#include <pthread.h>
#include <signal.h>

#include "helpers.h"
#include "aquila/aquila.h"
#include "runtime/trace.h"
#include "tools/aq-trace/analysis.h"
#include "tools/aq-trace/json.h"

enum { THREADS = 4, RUNS = 50, FILLER = 6000 /* per thread: more than one chunk */ };

/* The diamond graph 0 -> {1, 2} -> 3; task 2 (a copy) is the long one. */
static const uint32_t diamond[4][2] = {{1, 0}, {2, 0}, {3, 1}, {3, 2}};
/* Each task's offset and duration within a run, in ns. */
static const uint64_t task_at[4] = {0, 12000, 12000, 42000}, task_dur[4] = {10000, 8000, 28000, 8000};
enum { EXEC = 7, RUN_NS = 100000 };

typedef struct job {
  int thread;
  uint64_t base;
} job_t;

/* Thread k runs task k of every run on queue k, then filler packets. */
static void *record(void *arg) {
  const job_t *j = arg;
  uint32_t k = (uint32_t)j->thread;
  for (uint32_t r = 1; r <= RUNS; ++r) {
    uint64_t run0 = j->base + r * RUN_NS, start = run0 + task_at[k];
    aq_trace_event_t ev = {.name = k == 2 ? "copy_d2h" : "kernel_k", .category = k == 2 ? "copy" : "kernel",
                           .dispatch_ns = run0, .ready_ns = task_at[k] ? start - 500 : start, .start_ns = start,
                           .end_ns = start + task_dur[k], .packet = r, .tag = aq_trace_tag(r, EXEC, k),
                           .agent = k % 2, .queue = k, .depth = 1 + r % 3, .bytes = k == 2 ? 4096 : 0};
    aq_trace_record(&ev);
  }
  for (uint32_t i = 0; i < FILLER; ++i) {
    uint64_t t = j->base + (RUNS + 2) * (uint64_t)RUN_NS + i * 1000ull;
    aq_trace_event_t ev = {.name = "filler", .category = "kernel", .dispatch_ns = t, .ready_ns = t, .start_ns = t,
                           .end_ns = t + 500, .packet = RUNS + 1 + i, .agent = k % 2, .queue = 10 + k};
    aq_trace_record(&ev);
    if (i % 1000 == 0) aq_trace_counter_at("memory test.region", k % 2, (double)(i / 1000) * 1024.0, t);
  }
  return NULL;
}

static void record_all(uint64_t base) {
  pthread_t th[THREADS];
  job_t jobs[THREADS];
  for (int k = 0; k < THREADS; ++k) {
    jobs[k] = (job_t){k, base};
    cr_assert_eq(pthread_create(&th[k], NULL, record, &jobs[k]), 0);
  }
  for (int k = 0; k < THREADS; ++k) pthread_join(th[k], NULL);
}

Test(recorder, one_event_per_record_from_many_threads) {
  char path[128];
  temp_path(path, sizeof(path), "recorder.json");
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  uint64_t base = now_ns();
  aq_trace_edges(EXEC, diamond, 4);
  aq_trace_span("instantiate", base, base + 5000, 0);
  record_all(base);
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());

  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "the written trace does not parse: %s", err);
  cr_assert_str_eq(t.producer, "aquila");
  cr_assert_eq(t.dropped, 0);
  /* Exactly one slice per record: runs, filler, and the one span. */
  size_t graph = 0, filler = 0, spans = 0;
  static uint8_t seen[THREADS][RUNS + 1];
  for (size_t i = 0; i < t.count; ++i) {
    const tevent_t *e = &t.events[i];
    if (!strcmp(e->cat, "runtime")) {
      spans++;
      cr_assert_str_eq(e->name, "instantiate");
      cr_assert_float_eq(e->dur, 5.0, 1e-6);
      continue;
    }
    cr_assert_geq(e->ts, 0.0, "a slice before the trace began");
    cr_assert_geq(e->dur, 0.0);
    cr_assert(e->dispatch == e->dispatch && e->ready == e->ready, "dispatch and ready times are written");
    cr_assert_leq(e->dispatch, e->ready + 1e-3, "%s: ready before it was written to the queue", e->name);
    cr_assert_leq(e->ready, e->ts + 1e-3, "%s: started before it was ready", e->name);
    if (!strcmp(e->name, "filler")) {
      filler++;
      cr_assert_eq(e->task, -1);
      continue;
    }
    graph++;
    cr_assert_eq(e->exec, EXEC);
    cr_assert(e->task >= 0 && e->task < THREADS && e->run >= 1 && e->run <= RUNS, "task %ld run %ld", e->task, e->run);
    cr_assert_eq(e->tid, e->task + 1, "queue k is thread k + 1");
    cr_assert_eq(e->pid, e->task % 2);
    cr_assert_not(seen[e->task][e->run], "task %ld of run %ld written twice", e->task, e->run);
    seen[e->task][e->run] = 1;
    cr_assert_float_eq(e->dur, (double)task_dur[e->task] / 1e3, 1e-6);
    cr_assert_float_eq(e->bytes, e->task == 2 ? 4096.0 : 0.0, 1e-9);
  }
  cr_assert_eq(spans, 1);
  cr_assert_eq(graph, (size_t)THREADS * RUNS, "%zu graph packets for %d", graph, THREADS * RUNS);
  cr_assert_eq(filler, (size_t)THREADS * FILLER);
  /* Dependencies: the edges as metadata, and one flow pair per edge per run,
   * each start on its predecessor's lane, each finish on its dependent's. */
  cr_assert_eq(t.nedges, 4);
  size_t starts = 0, finishes = 0;
  for (size_t i = 0; i < t.nflows; ++i) {
    starts += t.flows[i].ph == 's';
    finishes += t.flows[i].ph == 'f';
    cr_assert(t.flows[i].ph == 's' || t.flows[i].enclosing, "finishes bind to the enclosing slice");
  }
  cr_assert_eq(starts, 4 * RUNS);
  cr_assert_eq(finishes, 4 * RUNS);
  /* Names: a process per agent, a thread per queue. */
  cr_assert_str_eq(tfile_process_name(&t, 0), "agent 0");
  cr_assert_str_eq(tfile_thread_name(&t, 1, 4), "queue 3");
  cr_assert_str_eq(tfile_process_name(&t, 1000), "aquila runtime");
  /* Counters: the memory samples, and queue depth from each packet's word,
   * a sample only where the value changed. */
  size_t memory = 0, depth = 0;
  for (size_t i = 0; i < t.ncounters; ++i) {
    memory += !strcmp(t.counters[i].name, "memory test.region");
    depth += !strcmp(t.counters[i].name, "queue 0 depth");
  }
  cr_assert_eq(memory, 2 * 6, "two agents, six distinct values each: %zu", memory);
  cr_assert_eq(depth, RUNS, "depth 1,2,3,1,2,3...: every sample differs from the last (%zu)", depth);

  /* The critical path of every run is 0 -> 2 -> 3, the copy in the middle. */
  tanalysis_t a;
  cr_assert_eq(tanalyze(&t, &a, err, sizeof(err)), 0, "%s", err);
  cr_assert_str_eq(a.deps_from, "task graph edges");
  cr_assert_eq(a.npreds, 4 * RUNS);
  tpath_t p;
  cr_assert_eq(tcritical_path(&a, &p), 0);
  cr_assert_eq(p.n, 3);
  long want[3] = {0, 2, 3};
  for (size_t i = 0; i < 3; ++i) cr_assert_eq(t.events[p.ev[i]].task, want[i], "path step %zu", i);
  cr_assert_float_eq(p.work, 46.0, 1e-6);
  cr_assert_float_eq(p.wall, 50.0, 1e-6, "the run: 0 to 50 us");
  tpath_free(&p);
  tanalysis_free(&a);
  tfile_free(&t);

  /* The raw JSON: each packet lists the tasks it waited for. */
  size_t len;
  char *text = read_text(path, &len);
  cr_assert(text);
  jval_t *root = json_parse(text, len, err, sizeof(err));
  cr_assert(root, "%s", err);
  int checked = 0;
  for (const jval_t *e = json_get(root, "traceEvents")->child; e; e = e->next) {
    const jval_t *args = json_get(e, "args"), *task = json_get(args, "task");
    if (!task || task->num != 3) continue;
    const jval_t *deps = json_get(args, "deps");
    cr_assert(deps && deps->type == J_ARR && deps->child && deps->child->next && !deps->child->next->next);
    cr_assert(deps->child->num == 1 && deps->child->next->num == 2, "task 3 waited for 1 and 2");
    checked++;
  }
  cr_assert_eq(checked, RUNS);
  json_free(root);
  free(text);
  unlink(path);
}

Test(recorder, flush_writes_a_readable_file_while_recording_goes_on) {
  char path[128];
  temp_path(path, sizeof(path), "flush.json");
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_flush(), AQ_ERROR_INVALID_ARGUMENT, "no trace yet");
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  uint64_t base = now_ns();
  pthread_t th[THREADS];
  job_t jobs[THREADS];
  for (int k = 0; k < THREADS; ++k) {
    jobs[k] = (job_t){k, base};
    cr_assert_eq(pthread_create(&th[k], NULL, record, &jobs[k]), 0);
  }
  /* Flushes race the threads: each file is whole, with some prefix of
   * every thread's events. */
  size_t last = 0;
  for (int i = 0; i < 5; ++i) {
    cr_assert_eq(aq_trace_flush(), AQ_OK, "%s", aq_last_error());
    tfile_t t;
    char err[512];
    cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "flush %d: %s", i, err);
    cr_assert_geq(t.count, last, "a later flush has no fewer events");
    last = t.count;
    tfile_free(&t);
  }
  for (int k = 0; k < THREADS; ++k) pthread_join(th[k], NULL);
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(t.count, (size_t)THREADS * (RUNS + FILLER));
  tfile_free(&t);
  unlink(path);
}

Test(recorder, a_full_budget_drops_and_says_so) {
  char path[128];
  temp_path(path, sizeof(path), "budget.json");
  setenv("AQ_TRACE_MAX_MB", "1", 1); /* one chunk of a few thousand events */
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  unsetenv("AQ_TRACE_MAX_MB");
  uint64_t t0 = now_ns();
  enum { N = 20000 };
  for (uint32_t i = 0; i < N; ++i) {
    aq_trace_event_t ev = {.name = "k", .category = "kernel", .start_ns = t0 + i, .end_ns = t0 + i + 1, .queue = 0};
    aq_trace_record(&ev);
  }
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_gt(t.count, 0);
  cr_assert_lt(t.count, N);
  cr_assert_float_eq(t.dropped, (double)(N - t.count), 0.5, "dropped %.0f, kept %zu of %d", t.dropped, t.count, N);
  tfile_free(&t);
  unlink(path);
}

Test(recorder, nothing_is_recorded_while_stopped) {
  char path[128];
  temp_path(path, sizeof(path), "stopped.json");
  aq_trace_event_t ev = {.name = "before", .category = "kernel", .start_ns = 1, .end_ns = 2};
  aq_trace_record(&ev); /* not tracing: ignored */
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_BUSY);
  uint64_t t0 = now_ns();
  ev = (aq_trace_event_t){.name = "during", .category = "kernel", .start_ns = t0, .end_ns = t0 + 10};
  aq_trace_record(&ev);
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());
  ev.name = "after";
  aq_trace_record(&ev);
  cr_assert_eq(aq_trace_stop(), AQ_ERROR_INVALID_ARGUMENT);
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(t.count, 1);
  cr_assert_str_eq(t.events[0].name, "during");
  tfile_free(&t);
  unlink(path);
}

Test(recorder, unwritable_paths_fail_at_start) {
  aq_trace_options_t o = {.path = "/nonexistent-dir/trace.json"};
  cr_assert_eq(aq_trace_start(&o), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "/nonexistent-dir/trace.json"), "%s", aq_last_error());
  cr_assert_eq(aq_trace_stop(), AQ_ERROR_INVALID_ARGUMENT, "a failed start leaves nothing recording");
}

Test(recorder, aq_trace_names_the_default_file) {
  char dir[128], cwd[PATH_MAX];
  temp_path(dir, sizeof(dir), "cwd");
  cr_assert_eq(mkdir(dir, 0700), 0);
  cr_assert(getcwd(cwd, sizeof(cwd)));
  cr_assert_eq(chdir(dir), 0);
  setenv("AQ_TRACE", "from-env.json", 1);
  cr_assert_eq(aq_trace_start(NULL), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(aq_trace_stop(), AQ_OK);
  cr_assert_eq(access("from-env.json", R_OK), 0, "AQ_TRACE names the file");
  unsetenv("AQ_TRACE");
  aq_trace_options_t o = {0};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(aq_trace_stop(), AQ_OK);
  cr_assert_eq(access("aquila-trace.json", R_OK), 0, "the default name");
  unlink("from-env.json");
  unlink("aquila-trace.json");
  cr_assert_eq(chdir(cwd), 0);
  rmdir(dir);
}

/* A packet its processor did not stamp with a dispatch time gets its graph
 * run's: the scheduler writes a run's packets as the run span begins. */
Test(recorder, graph_packets_take_their_runs_dispatch_time) {
  char path[128];
  temp_path(path, sizeof(path), "dispatch.json");
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  uint64_t t0 = now_ns();
  for (uint32_t run = 1; run <= 2; ++run) {
    uint64_t begin = t0 + run * 100000;
    aq_trace_event_t ev = {.name = "k", .category = "kernel", .ready_ns = begin + 3000, .start_ns = begin + 3000,
                           .end_ns = begin + 5000, .tag = aq_trace_tag(run, 4, 0), .queue = 0};
    aq_trace_record(&ev);
    aq_trace_span("graph run", begin, begin + 9000, (uint64_t)run << 32 | 4u << 20);
  }
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  size_t checked = 0;
  for (size_t i = 0; i < t.count; ++i) {
    const tevent_t *e = &t.events[i];
    if (strcmp(e->name, "k")) continue;
    cr_assert(e->dispatch == e->dispatch, "run %ld: no dispatch time", e->run);
    cr_assert_float_eq(e->ts - e->dispatch, 3.0, 1e-6, "written 3 us before it started");
    checked++;
  }
  cr_assert_eq(checked, 2);
  tfile_free(&t);
  unlink(path);
}

static void record_some(int n) {
  uint64_t t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    aq_trace_event_t ev = {.name = "k", .category = "kernel", .start_ns = t0 + i * 1000ull,
                           .end_ns = t0 + i * 1000ull + 500, .packet = (uint64_t)i, .agent = 0, .queue = 0};
    ev.ready_ns = ev.dispatch_ns = ev.start_ns;
    aq_trace_record(&ev);
  }
}

/* SIGTERM ends a traced process as it would untraced, its trace written. */
Test(recorder, sigterm_writes_the_trace_before_the_process_ends) {
  char path[256];
  temp_path(path, sizeof(path), "sigterm.json");
  pid_t pid = fork();
  if (pid == 0) {
    aq_trace_options_t o = {.path = path};
    if (aq_trace_start(&o) != AQ_OK) _exit(3);
    record_some(100);
    kill(getpid(), SIGTERM);
    for (;;) pause();
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status 0x%x", status);
  tfile_t t;
  char err[512];
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(t.count, 100);
  tfile_free(&t);
  unlink(path);
}

/* A flush writes beside the file and renames: no torn file, no leftovers. */
Test(recorder, a_flush_replaces_the_file_whole) {
  char path[256], tmp[300];
  temp_path(path, sizeof(path), "atomic.json");
  aq_trace_options_t o = {.path = path};
  cr_assert_eq(aq_trace_start(&o), AQ_OK, "%s", aq_last_error());
  record_some(10);
  cr_assert_eq(aq_trace_flush(), AQ_OK, "%s", aq_last_error());
  struct stat before, after;
  cr_assert_eq(stat(path, &before), 0);
  record_some(10);
  cr_assert_eq(aq_trace_flush(), AQ_OK, "%s", aq_last_error());
  cr_assert_eq(stat(path, &after), 0);
  cr_assert_neq(before.st_ino, after.st_ino, "rewritten in place, not renamed over");
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  cr_assert_neq(access(tmp, F_OK), 0, "%s was left behind", tmp);
  cr_assert_eq(aq_trace_stop(), AQ_OK, "%s", aq_last_error());
  unlink(path);
}
