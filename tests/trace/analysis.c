/* aq-trace's analyses on hand-built traces whose answers are known: the
 * critical path of a small graph, busy time, the summary's text, a
 * well-formed SVG, and a diff. */
#include "helpers.h"
#include "tools/aq-trace/analysis.h"

/* A -> {B, C} -> D on three queues, plus E, long but independent. The
 * longest chain is A, C, D: 10 + 30 + 5 = 45 us; the wall is 50 us. Flows
 * as Perfetto draws them: start inside the predecessor, finish bound to the
 * enclosing slice. */
static const char known[] =
    "{\"traceEvents\":["
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"cpu0\"}},"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":1,\"args\":{\"name\":\"queue 0\"}},"
    "{\"ph\":\"X\",\"name\":\"A\",\"ts\":0,\"dur\":10,\"pid\":0,\"tid\":1},"
    "{\"ph\":\"X\",\"name\":\"B\",\"ts\":12,\"dur\":10,\"pid\":0,\"tid\":2},"
    "{\"ph\":\"X\",\"name\":\"C\",\"ts\":12,\"dur\":30,\"pid\":0,\"tid\":3},"
    "{\"ph\":\"X\",\"name\":\"D\",\"ts\":45,\"dur\":5,\"pid\":0,\"tid\":1},"
    "{\"ph\":\"X\",\"name\":\"E\",\"ts\":0,\"dur\":35,\"pid\":1,\"tid\":1},"
    "{\"ph\":\"s\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":1,\"ts\":9.999,\"pid\":0,\"tid\":1},"
    "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":1,\"ts\":12,\"pid\":0,\"tid\":2},"
    "{\"ph\":\"s\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":2,\"ts\":9.999,\"pid\":0,\"tid\":1},"
    "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":2,\"ts\":12,\"pid\":0,\"tid\":3},"
    "{\"ph\":\"s\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":3,\"ts\":21.999,\"pid\":0,\"tid\":2},"
    "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":3,\"ts\":45,\"pid\":0,\"tid\":1},"
    "{\"ph\":\"s\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":4,\"ts\":41.999,\"pid\":0,\"tid\":3},"
    "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":4,\"ts\":45,\"pid\":0,\"tid\":1}"
    "]}";

static void load(const char *text, tfile_t *t, tanalysis_t *a) {
  char err[512];
  cr_assert_eq(tfile_parse(text, strlen(text), t, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(tanalyze(t, a, err, sizeof(err)), 0, "%s", err);
}

static void assert_path(const tanalysis_t *a, const char *want) {
  tpath_t p;
  cr_assert_eq(tcritical_path(a, &p), 0);
  char got[64] = "";
  for (size_t i = 0; i < p.n && strlen(got) < 60; ++i) strcat(got, a->t->events[p.ev[i]].name);
  cr_assert_str_eq(got, want, "critical path %s, expected %s", got, want);
  tpath_free(&p);
}

Test(analysis, critical_path_of_a_known_graph_from_flows) {
  tfile_t t;
  tanalysis_t a;
  load(known, &t, &a);
  cr_assert_str_eq(a.deps_from, "flow events");
  cr_assert_eq(a.npreds, 4);
  assert_path(&a, "ACD");
  tpath_t p;
  cr_assert_eq(tcritical_path(&a, &p), 0);
  cr_assert_float_eq(p.work, 45.0, 1e-9);
  cr_assert_float_eq(p.wall, 50.0, 1e-9);
  cr_assert_float_eq(p.last_end - p.first_start, 50.0, 1e-9);
  tpath_free(&p);
  /* Busy time: queue 0 of cpu0 ran A and D, 15 of the 50 us. */
  int found = 0;
  for (size_t i = 0; i < a.nlanes; ++i)
    if (a.lanes[i].pid == 0 && a.lanes[i].tid == 1) {
      found = 1;
      cr_assert_float_eq(a.lanes[i].busy, 15.0, 1e-9);
      cr_assert_float_eq(a.lanes[i].gap_max, 35.0, 1e-9, "idle from 10 to 45");
    }
  cr_assert(found);
  tanalysis_free(&a);
  tfile_free(&t);
}

/* The same graph as Aquila writes it: task edges, and the packets tagged
 * with exec, task and run; two runs, in the second B is the long one. */
Test(analysis, critical_path_of_a_known_graph_from_task_edges) {
  static const char text[] =
      "{\"traceEvents\":["
      "{\"ph\":\"M\",\"name\":\"aquila_edges\",\"pid\":1000,\"args\":{\"exec\":2,\"edges\":[[1,0],[2,0],[3,1],[3,2]]}},"
      "{\"ph\":\"X\",\"name\":\"A\",\"ts\":0,\"dur\":10,\"pid\":0,\"tid\":1,\"args\":{\"exec\":2,\"task\":0,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"B\",\"ts\":12,\"dur\":10,\"pid\":0,\"tid\":2,\"args\":{\"exec\":2,\"task\":1,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"C\",\"ts\":12,\"dur\":30,\"pid\":0,\"tid\":3,\"args\":{\"exec\":2,\"task\":2,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"D\",\"ts\":45,\"dur\":5,\"pid\":0,\"tid\":1,\"args\":{\"exec\":2,\"task\":3,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"barrier-AND\",\"cat\":\"barrier\",\"ts\":42,\"dur\":90,\"pid\":0,\"tid\":1,"
      "\"args\":{\"exec\":2,\"task\":3,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"A\",\"ts\":100,\"dur\":10,\"pid\":0,\"tid\":1,\"args\":{\"exec\":2,\"task\":0,\"run\":2}},"
      "{\"ph\":\"X\",\"name\":\"B\",\"ts\":112,\"dur\":40,\"pid\":0,\"tid\":2,\"args\":{\"exec\":2,\"task\":1,\"run\":2}},"
      "{\"ph\":\"X\",\"name\":\"C\",\"ts\":112,\"dur\":30,\"pid\":0,\"tid\":3,\"args\":{\"exec\":2,\"task\":2,\"run\":2}},"
      "{\"ph\":\"X\",\"name\":\"D\",\"ts\":155,\"dur\":5,\"pid\":0,\"tid\":1,\"args\":{\"exec\":2,\"task\":3,\"run\":2}},"
      "{\"ph\":\"X\",\"name\":\"graph run\",\"cat\":\"runtime\",\"ts\":0,\"dur\":500,\"pid\":1000,\"tid\":0}"
      "]}";
  tfile_t t;
  tanalysis_t a;
  load(text, &t, &a);
  cr_assert_str_eq(a.deps_from, "task graph edges");
  cr_assert_eq(a.npreds, 8, "four edges in each of two runs, none across runs");
  assert_path(&a, "ABD"); /* run 2: 10 + 40 + 5 */
  tpath_t p;
  cr_assert_eq(tcritical_path(&a, &p), 0);
  cr_assert_eq(p.run, 2);
  cr_assert_float_eq(p.work, 55.0, 1e-9);
  cr_assert_float_eq(p.wall, 60.0, 1e-9, "run 2 went from 100 to 160 us");
  tpath_free(&p);
  tanalysis_free(&a);
  tfile_free(&t);
}

Test(analysis, a_dependency_cycle_is_reported_not_followed) {
  static const char text[] =
      "{\"traceEvents\":["
      "{\"ph\":\"M\",\"name\":\"aquila_edges\",\"pid\":0,\"args\":{\"exec\":0,\"edges\":[[0,1],[1,0],[2,1]]}},"
      "{\"ph\":\"X\",\"name\":\"a\",\"ts\":0,\"dur\":1,\"pid\":0,\"tid\":0,\"args\":{\"exec\":0,\"task\":0,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"b\",\"ts\":2,\"dur\":1,\"pid\":0,\"tid\":0,\"args\":{\"exec\":0,\"task\":1,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"c\",\"ts\":4,\"dur\":1,\"pid\":0,\"tid\":0,\"args\":{\"exec\":0,\"task\":2,\"run\":1}},"
      "{\"ph\":\"X\",\"name\":\"free\",\"ts\":6,\"dur\":3,\"pid\":0,\"tid\":0,\"args\":{\"exec\":0,\"task\":3,\"run\":1}}"
      "]}";
  tfile_t t;
  tanalysis_t a;
  load(text, &t, &a);
  cr_assert_eq(a.cyclic, 3, "a and b form a cycle; c waits behind it");
  assert_path(&a, "free");
  tanalysis_free(&a);
  tfile_free(&t);
}

/* The summary as a person reads it, through the command. */
Test(analysis, summary_prints_busy_time_kernels_and_the_critical_path) {
  char in[128], out[128], err[128];
  temp_path(in, sizeof(in), "known.json");
  temp_path(out, sizeof(out), "summary.txt");
  temp_path(err, sizeof(err), "summary.err");
  cr_assert_eq(write_text(in, known), 0);
  char args[256];
  snprintf(args, sizeof(args), "summary '%s'", in);
  cr_assert_eq(run_tool(args, out, err), 0);
  char *text = read_text(out, NULL);
  cr_assert(text);
  cr_assert(strstr(text, "5 slices"), "%s", text);
  cr_assert(strstr(text, "cpu0 "), "agents are named: %s", text);
  cr_assert(strstr(text, "cpu0 / queue 0"), "lanes are named: %s", text);
  cr_assert(strstr(text, "30.0% busy, 2 packets"), "queue 0 ran 15 of 50 us: %s", text);
  const char *crit = strstr(text, "Critical path (dependencies from flow events, 4 edges)");
  cr_assert(crit, "%s", text);
  const char *a = strstr(crit, " A "), *c = strstr(crit, " C "), *d = strstr(crit, " D ");
  cr_assert(a && c && d && a < c && c < d && !strstr(crit, " B "), "the path is A, C, D: %s", crit);
  cr_assert(strstr(crit, "45.0 us of work on the path"), "%s", crit);
  cr_assert(strstr(crit, "50.0 us of wall time: the path is 90% of it"), "%s", crit);
  /* Top kernels: E (35 us) first. */
  const char *top = strstr(text, "Top kernels");
  cr_assert(top && strstr(top, "\n  E "), "%s", text);
  cr_assert_lt(strstr(top, "\n  E "), strstr(top, "\n  C "));
  free(text);
  unlink(in), unlink(out), unlink(err);
}

/* A window (--from/--to, --run) draws only the lanes busy in it: one step
 * of a 16-worker machine touched 2 of its 16 lanes, the rest were rows of
 * nothing. 44-50 us of the known trace holds D alone. */
Test(analysis, svg_of_a_window_draws_the_lanes_busy_in_it) {
  char in[128], svg[128], out[128], err[128];
  temp_path(in, sizeof(in), "win-in.json");
  temp_path(svg, sizeof(svg), "win.svg");
  temp_path(out, sizeof(out), "win.txt");
  temp_path(err, sizeof(err), "win.err");
  cr_assert_eq(write_text(in, known), 0);
  char args[512];
  snprintf(args, sizeof(args), "svg '%s' -o '%s' --from 0.044 --to 0.050", in, svg);
  cr_assert_eq(run_tool(args, out, err), 0, "%s", read_text(err, NULL));
  char *s = read_text(svg, NULL);
  cr_assert(s);
  cr_assert_null(xml_problem(s));
  size_t lanes = 0;
  for (const char *p = s; (p = strstr(p, "<text x='6'")); ++p) lanes++;
  cr_assert_eq(lanes, 1, "only D's lane is busy in the window:\n%s", s);
  cr_assert(strstr(s, "cpu0 / queue 0") && strstr(s, "the 1 busy in it drawn"), "%s", s);
  free(s);
  unlink(in), unlink(svg), unlink(out), unlink(err);
}

Test(analysis, svg_is_well_formed_with_a_lane_per_queue) {
  char in[128], svg[128], out[128], err[128];
  temp_path(in, sizeof(in), "svg-in.json");
  temp_path(svg, sizeof(svg), "out.svg");
  temp_path(out, sizeof(out), "svg.txt");
  temp_path(err, sizeof(err), "svg.err");
  /* Hostile names too: markup, quotes, control characters, bad UTF-8. */
  char text[sizeof(known) + 256];
  snprintf(text, sizeof(text), "%.*s,{\"ph\":\"X\",\"name\":\"<b>&'\\\"\\u0001\xff\xc3\",\"ts\":1,\"dur\":2,"
           "\"pid\":2,\"tid\":7}]}", (int)(strlen(known) - 2), known);
  cr_assert_eq(write_text(in, text), 0);
  char args[512];
  snprintf(args, sizeof(args), "svg '%s' -o '%s'", in, svg);
  cr_assert_eq(run_tool(args, out, err), 0, "%s", read_text(err, NULL));
  char *s = read_text(svg, NULL);
  cr_assert(s);
  const char *why = xml_problem(s);
  cr_assert_null(why, "the SVG is not well-formed: %s", why);
  size_t lanes = 0;
  for (const char *p = s; (p = strstr(p, "<text x='6'")); ++p) lanes++;
  cr_assert_eq(lanes, 5, "five lanes: cpu0 queues 1-3, pid 1, pid 2");
  cr_assert(strstr(s, "cpu0 / queue 0"));
  cr_assert(strstr(s, "stroke='black'"), "the critical path is outlined");
  cr_assert(strstr(s, "&lt;b&gt;&amp;&#39;&quot;?"), "markup in names is escaped");
  free(s);
  unlink(in), unlink(svg), unlink(out), unlink(err);
}

Test(analysis, diff_compares_kernel_by_kernel) {
  static const char a_text[] =
      "[{\"ph\":\"X\",\"name\":\"x\",\"ts\":0,\"dur\":10},{\"ph\":\"X\",\"name\":\"x\",\"ts\":10,\"dur\":10},"
      "{\"ph\":\"X\",\"name\":\"y\",\"ts\":20,\"dur\":5}]";
  static const char b_text[] =
      "[{\"ph\":\"X\",\"name\":\"x\",\"ts\":0,\"dur\":15},{\"ph\":\"X\",\"name\":\"x\",\"ts\":15,\"dur\":15},"
      "{\"ph\":\"X\",\"name\":\"z\",\"ts\":30,\"dur\":1}]";
  char a[128], b[128], out[128], err[128];
  temp_path(a, sizeof(a), "a.json");
  temp_path(b, sizeof(b), "b.json");
  temp_path(out, sizeof(out), "diff.txt");
  temp_path(err, sizeof(err), "diff.err");
  cr_assert_eq(write_text(a, a_text), 0);
  cr_assert_eq(write_text(b, b_text), 0);
  char args[512];
  snprintf(args, sizeof(args), "diff '%s' '%s'", a, b);
  cr_assert_eq(run_tool(args, out, err), 0);
  char *text = read_text(out, NULL);
  cr_assert(text);
  const char *x = strstr(text, "\n  x "), *y = strstr(text, "\n  y "), *z = strstr(text, "\n  z ");
  cr_assert(x && y && z, "%s", text);
  cr_assert(x < y && y < z, "largest change first: %s", text);
  int ca, cb;
  double ta, tb, ma, mb;
  char dt[16], dm[16];
  cr_assert_eq(sscanf(x, "\n  x %d %d %lf %lf %lf %lf %15s %15s", &ca, &cb, &ta, &tb, &ma, &mb, dt, dm), 8, "%s", x);
  cr_assert(ca == 2 && cb == 2 && ta == 20 && tb == 30 && ma == 10 && mb == 15, "%s", x);
  cr_assert_str_eq(dt, "+50.0%");
  cr_assert_str_eq(dm, "+50.0%");
  cr_assert(strstr(y, "gone") < z && strstr(y, "gone"), "y is gone: %s", y);
  cr_assert(strstr(z, "new"), "z is new: %s", z);
  cr_assert(strstr(text, "wall time"), "%s", text);
  free(text);
  unlink(a), unlink(b), unlink(out), unlink(err);
}
