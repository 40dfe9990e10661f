/* Hostile, truncated and foreign files: aq-trace's reader turns each file
 * of tests/trace-corpus into a clean error (bad-*: an error naming the
 * file) or a clean parse (ok-*: and then the analyses and the SVG run on
 * it); other names (inputs the fuzzer found) may do either. The command
 * itself exits 1 with a message, never a crash. */
#include <dirent.h>

#include "helpers.h"
#include "tools/aq-trace/analysis.h"

static const char *corpus = "tests/trace-corpus";

Test(corpus, every_file_is_a_clean_error_or_a_clean_parse) {
  DIR *d = opendir(corpus);
  cr_assert(d, "run from the repository root");
  int files = 0, bad = 0, ok = 0;
  FILE *sink = fopen("/dev/null", "w");
  cr_assert(sink);
  for (struct dirent *ent; (ent = readdir(d));) {
    if (ent->d_name[0] == '.') continue;
    char path[512], err[512] = "";
    snprintf(path, sizeof(path), "%s/%s", corpus, ent->d_name);
    tfile_t t;
    int rc = tfile_load(path, &t, err, sizeof(err));
    files++;
    if (!strncmp(ent->d_name, "bad-", 4)) {
      bad++;
      cr_assert_neq(rc, 0, "%s parsed, but should be refused", ent->d_name);
    }
    if (!strncmp(ent->d_name, "ok-", 3)) {
      ok++;
      cr_assert_eq(rc, 0, "%s was refused: %s", ent->d_name, err);
    }
    if (rc) {
      cr_assert(strstr(err, ent->d_name), "an error names the file: %s", err);
      cr_assert_gt(strlen(err), strlen(path) + 4, "and says what is wrong: %s", err);
      continue;
    }
    tanalysis_t a;
    cr_assert_eq(tanalyze(&t, &a, err, sizeof(err)), 0, "%s: %s", ent->d_name, err);
    tsummary(sink, path, &a, 10);
    char svg[128];
    temp_path(svg, sizeof(svg), "corpus.svg");
    FILE *f = fopen(svg, "w");
    cr_assert(f);
    cr_assert_eq(tsvg(f, path, &a, 800), 0);
    fclose(f);
    char *s = read_text(svg, NULL);
    const char *why = s ? xml_problem(s) : "unreadable";
    cr_assert_null(why, "%s: the SVG is not well-formed: %s", ent->d_name, why);
    free(s);
    unlink(svg);
    tdiff(sink, path, &t, path, &t);
    tanalysis_free(&a);
    tfile_free(&t);
  }
  closedir(d);
  fclose(sink);
  cr_assert_geq(bad, 30, "the corpus keeps its hostile files (%d)", bad);
  cr_assert_geq(ok, 15, "and its odd but valid ones (%d)", ok);
  cr_assert_geq(files, bad + ok);
}

/* A trace cut short (its writer killed) reads as the events before the
 * cut, and says where the cut is. */
Test(corpus, a_trace_cut_short_reads_as_the_events_before_the_cut) {
  char path[512], err[512];
  snprintf(path, sizeof(path), "%s/ok-truncated-after-an-event.json", corpus);
  tfile_t t;
  cr_assert_eq(tfile_load(path, &t, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(t.count, 1);
  cr_assert_str_eq(t.events[0].name, "k");
  cr_assert(strstr(t.truncated, "unexpected end of input at byte 69"), "%s", t.truncated);
  tfile_free(&t);
}

Test(corpus, errors_give_the_byte_offset) {
  char path[512], err[512];
  snprintf(path, sizeof(path), "%s/bad-truncated-number.json", corpus);
  tfile_t t;
  cr_assert_neq(tfile_load(path, &t, err, sizeof(err)), 0, "no event before the cut: nothing to read");
  cr_assert(strstr(err, "at byte 33"), "%s", err);
  snprintf(path, sizeof(path), "%s/bad-deep-arrays.json", corpus);
  cr_assert_neq(tfile_load(path, &t, err, sizeof(err)), 0);
  cr_assert(strstr(err, "nested too deeply"), "%s", err);
  cr_assert_neq(tfile_load("/nonexistent/trace.json", &t, err, sizeof(err)), 0);
  cr_assert(strstr(err, "/nonexistent/trace.json: No such file"), "%s", err);
  cr_assert_neq(tfile_load("/tmp", &t, err, sizeof(err)), 0);
  cr_assert(strstr(err, "not a regular file"), "%s", err);
}

Test(corpus, the_command_refuses_bad_files_with_status_1) {
  char out[128], err[128], args[600];
  temp_path(out, sizeof(out), "cmd.out");
  temp_path(err, sizeof(err), "cmd.err");
  const char *cmds[] = {"summary %s/bad-truncated-number.json", "svg %s/bad-nan.json -o /dev/null",
                        "diff %s/ok-bom.json %s/bad-utf16.json"};
  for (size_t i = 0; i < 3; ++i) {
    snprintf(args, sizeof(args), cmds[i], corpus, corpus);
    cr_assert_eq(run_tool(args, out, err), 1, "aq-trace %s", args);
    char *msg = read_text(err, NULL);
    cr_assert(msg && strstr(msg, "aq-trace: tests/trace-corpus/bad-"), "aq-trace %s said: %s", args, msg);
    free(msg);
  }
  cr_assert_eq(run_tool("frobnicate", out, err), 2, "an unknown command is refused by name");
  char *msg = read_text(err, NULL);
  cr_assert(msg && strstr(msg, "unknown command 'frobnicate'"), "%s", msg);
  free(msg);
  cr_assert_eq(run_tool("svg tests/trace-corpus/ok-bom.json", out, err), 2, "svg needs -o");
  unlink(out), unlink(err);
}
