/* Several ranks' traces on one timeline (tools/aq-trace/ranks.c): each
 * rank's clock shifted so that the first collectives end together, its
 * processes named for the rank and kept apart from the others', a rank
 * without a collective refused by name; and through aq-trace itself. */
#include "helpers.h"
#include "tools/aq-trace/analysis.h"
#include "tools/aq-trace/ranks.h"

/* Rank r's trace: a kernel, an all-reduce the rank joins `late` us after
 * its kernel (ending at kernel + 30 us on its own clock, which starts at
 * t0), a kernel after it, and a dependency flow. */
static void rank_trace(char *out, size_t size, double t0, double late, int collective) {
  snprintf(out, size,
           "{\"traceEvents\":["
           "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"cuda0\"}},"
           "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":3,\"args\":{\"name\":\"queue 3\"}},"
           "{\"ph\":\"X\",\"name\":\"fwd\",\"ts\":%g,\"dur\":10,\"pid\":1,\"tid\":3},"
           "{\"ph\":\"X\",\"name\":\"nccl allreduce: 4 B x 2 ranks\",\"cat\":\"%s\",\"ts\":%g,\"dur\":%g,"
           "\"pid\":1,\"tid\":9},"
           "{\"ph\":\"X\",\"name\":\"sgd\",\"ts\":%g,\"dur\":5,\"pid\":1,\"tid\":3},"
           "{\"ph\":\"s\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":1,\"ts\":%g,\"pid\":1,\"tid\":3},"
           "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"dep\",\"cat\":\"dep\",\"id\":1,\"ts\":%g,\"pid\":1,\"tid\":3}"
           "]}",
           t0, collective ? "collective" : "gpu", t0 + 10 + late, 20 - late, t0 + 31, t0 + 9.9, t0 + 31);
}

static void parse(const char *text, tfile_t *t) {
  char err[512];
  cr_assert_eq(tfile_parse(text, strlen(text), t, err, sizeof(err)), 0, "%s", err);
}

Test(ranks, aligned_on_the_end_of_the_first_collective) {
  char a[2048], b[2048], err[512];
  rank_trace(a, sizeof(a), 1000, 0, 1);
  rank_trace(b, sizeof(b), 5000, 7, 1);
  tfile_t f[2], m;
  parse(a, &f[0]), parse(b, &f[1]);
  const char *paths[] = {"rank-0.json", "rank-1.json"};
  double shift[2];
  cr_assert_eq(tfile_merge_ranks(f, paths, 2, &m, shift, err, sizeof(err)), 0, "%s", err);
  cr_assert_float_eq(shift[0], 0, 1e-9);
  cr_assert_float_eq(shift[1], -4000, 1e-9, "rank 1 shifted %g us", shift[1]);
  cr_assert_eq(m.count, 6);
  double end[2] = {0}, fwd[2] = {0};
  long pid[2] = {-1, -1};
  for (size_t i = 0; i < m.count; ++i) {
    const tevent_t *e = &m.events[i];
    int r = i >= 3;
    if (!strcmp(e->cat, "collective")) end[r] = e->ts + e->dur, pid[r] = e->pid;
    if (!strcmp(e->name, "fwd")) fwd[r] = e->ts;
  }
  cr_assert_float_eq(end[0], end[1], 1e-9, "the collectives end at %g and %g", end[0], end[1]);
  cr_assert_float_eq(fwd[0], fwd[1], 1e-9, "each rank's own times keep their order and spacing");
  cr_assert_neq(pid[0], pid[1], "both ranks' processes are one");
  cr_assert_str_eq(tfile_process_name(&m, pid[1]), "rank 1: cuda0");
  cr_assert_str_eq(tfile_process_name(&m, pid[0]), "rank 0: cuda0");
  cr_assert_eq(m.nflows, 4);
  cr_assert(strcmp(m.flows[0].key, m.flows[2].key), "the ranks' flows share a key: '%s'", m.flows[0].key);
  tanalysis_t an;
  cr_assert_eq(tanalyze(&m, &an, err, sizeof(err)), 0, "%s", err);
  tanalysis_free(&an);
  tfile_free(&m);
}

Test(ranks, a_rank_without_a_collective_is_refused_by_name) {
  char a[2048], b[2048], err[512];
  rank_trace(a, sizeof(a), 0, 0, 1);
  rank_trace(b, sizeof(b), 0, 0, 0);
  tfile_t f[2], m;
  parse(a, &f[0]), parse(b, &f[1]);
  const char *paths[] = {"rank-0.json", "rank-1.json"};
  cr_assert_eq(tfile_merge_ranks(f, paths, 2, &m, NULL, err, sizeof(err)), -1);
  cr_assert(strstr(err, "rank-1.json has no collective"), "%s", err);
  tfile_free(&f[0]), tfile_free(&f[1]);
}

Test(ranks, summary_and_svg_take_several_ranks) {
  char a[2048], b[2048], pa[256], pb[256], svg[256], out[256], err[256], args[1200];
  rank_trace(a, sizeof(a), 1000, 0, 1);
  rank_trace(b, sizeof(b), 5000, 7, 1);
  temp_path(pa, sizeof(pa), "rank-0.json"), temp_path(pb, sizeof(pb), "rank-1.json");
  temp_path(svg, sizeof(svg), "ranks.svg"), temp_path(out, sizeof(out), "ranks.out");
  temp_path(err, sizeof(err), "ranks.err");
  cr_assert_eq(write_text(pa, a), 0);
  cr_assert_eq(write_text(pb, b), 0);
  snprintf(args, sizeof(args), "summary %s %s", pa, pb);
  cr_assert_eq(run_tool(args, out, err), 0);
  char *text = read_text(out, NULL), *why = read_text(err, NULL);
  cr_assert(text && strstr(text, "rank 1: cuda0") && strstr(text, "rank 0: cuda0"), "%s", text);
  cr_assert(why && strstr(why, "shifted -4000.0 us"), "%s", why);
  free(text), free(why);
  snprintf(args, sizeof(args), "svg %s %s -o %s", pa, pb, svg);
  cr_assert_eq(run_tool(args, out, err), 0);
  text = read_text(svg, NULL);
  cr_assert(text && !xml_problem(text) && strstr(text, "rank 1: cuda0"), "the SVG lacks rank 1's lanes");
  free(text);
  remove(pa), remove(pb), remove(svg), remove(out), remove(err);
}
