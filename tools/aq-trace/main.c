/* aq-trace: what a trace says.
 *   aq-trace summary [--top N] FILE       busy % per agent, idle gaps, top kernels, copies, waiting,
 *                                         runtime spans, counters, the critical path against wall time
 *   aq-trace svg -o OUT [--width PX] [--from MS] [--to MS] [--run N] FILE
 *                                         a timeline, one lane per queue, coloured by kind of
 *                                         work, of the whole trace or a window of it
 *   aq-trace diff A B                     kernel by kernel: count, total and mean in A and B, change
 * A truncated, foreign or hostile file gets a clear error and exit status 1;
 * a wrong command line is refused by name with exit status 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "ranks.h"
#include "tools/common/cli.h"

/* Loads and analyses a file; 0, or 1 with the error printed. */
static int open_trace(const char *path, tfile_t *t, tanalysis_t *a) {
  char err[512];
  if (tfile_load(path, t, err, sizeof(err))) return fprintf(stderr, "aq-trace: %s\n", err), 1;
  if (a && tanalyze(t, a, err, sizeof(err))) {
    tfile_free(t);
    return fprintf(stderr, "aq-trace: %s: %s\n", path, err), 1;
  }
  return 0;
}

/* One file, or several ranks' files on one timeline (ranks.h), analysed;
 * label names them. 0, or 1 with the error printed. */
static int open_ranks(char *const *paths, size_t n, tfile_t *t, tanalysis_t *a, char *label, size_t room) {
  snprintf(label, room, "%s", paths[0]);
  if (n == 1) return open_trace(paths[0], t, a);
  tfile_t *f = calloc(n, sizeof(*f));
  double *shift = calloc(n, sizeof(double));
  char err[512];
  if (!f || !shift) snprintf(err, sizeof(err), "no memory for %zu traces", n);
  int rc = !f || !shift;
  for (size_t r = 0; r < n && !rc; ++r) rc = tfile_load(paths[r], &f[r], err, sizeof(err)) != 0;
  if (!rc) rc = tfile_merge_ranks(f, (const char *const *)paths, n, t, shift, err, sizeof(err)) != 0;
  if (rc) fprintf(stderr, "aq-trace: %s\n", err);
  for (size_t r = 0; r < n && !rc; ++r) {
    size_t at = strlen(label);
    if (r) snprintf(label + at, room - at, " + %s", paths[r]);
    fprintf(stderr, "aq-trace: rank %zu is %s, shifted %+.1f us onto rank 0's clock\n", r, paths[r], shift[r]);
  }
  for (size_t r = 0; f && r < n; ++r) tfile_free(&f[r]);
  free(f), free(shift);
  if (!rc && tanalyze(t, a, err, sizeof(err))) {
    tfile_free(t);
    fprintf(stderr, "aq-trace: %s: %s\n", label, err);
    rc = 1;
  }
  return rc;
}

static int summary(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"top", 0, CLI_INT, "N", "kernels listed (default 15)", 1, 100000},
  };
  cli_t c = {.program = "aq-trace summary", .operands = "FILE...", .options = options, .count = 1,
             .about = "Busy % per agent and queue, idle gaps, top kernels, copies, waiting, spans, counters\n"
                      "and the critical path of a Chrome trace-event JSON file (AQ_TRACE=FILE writes one).\n"
                      "Several files: one per rank of a data-parallel run (AQ_TRACE=run-%r.json), rank 0's\n"
                      "first, on one timeline aligned on the end of each rank's first collective.",
             .min_operands = 1, .max_operands = argc};
  cli_parse(&c, argc, argv);
  char label[1024];
  tfile_t t;
  tanalysis_t a;
  if (open_ranks(c.operand, (size_t)c.noperands, &t, &a, label, sizeof(label))) return 1;
  tsummary(stdout, label, &a, (int)cli_int(&c, "top", 15));
  tanalysis_free(&a);
  tfile_free(&t);
  return fflush(stdout) ? 1 : 0;
}

static int svg(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"output", 'o', CLI_TEXT, "OUT.svg", "where to write the picture (required)", 0, 0},
      {"width", 0, CLI_INT, "PIXELS", "the picture's width (default 1400)", 400, 20000},
      {"from", 0, CLI_REAL, "MS", "draw from this time, in ms from the trace's first slice", 0, 1e12},
      {"to", 0, CLI_REAL, "MS", "draw up to this time, in ms from the trace's first slice", 0, 1e12},
      {"run", 0, CLI_INT, "N", "draw run N (from 0) of the graph that ran most often", 0, 1e15},
  };
  cli_t c = {.program = "aq-trace svg", .operands = "FILE...", .options = options,
             .count = sizeof(options) / sizeof(options[0]),
             .about = "A timeline of a trace, one lane per queue, coloured by kind of work, as SVG.\n"
                      "Several files: one per rank (rank 0's first), aligned as aq-trace summary aligns them.",
             .min_operands = 1, .max_operands = argc};
  cli_parse(&c, argc, argv);
  const char *out = cli_text(&c, "output", NULL);
  char path[1024];
  if (!out) cli_refuse(&c, "-o OUT.svg is missing: where should the picture go?");
  tsvg_options_t o = {.width = (double)cli_int(&c, "width", 1400), .from_ms = cli_real(&c, "from", NAN),
                      .to_ms = cli_real(&c, "to", NAN), .run = cli_int(&c, "run", -1)};
  if (o.run >= 0 && (o.from_ms == o.from_ms || o.to_ms == o.to_ms))
    cli_refuse(&c, "--run picks its own window: give --run or --from/--to, not both");
  if (o.from_ms >= o.to_ms) cli_refuse(&c, "--from %g is not before --to %g", o.from_ms, o.to_ms);
  tfile_t t;
  tanalysis_t a;
  if (open_ranks(c.operand, (size_t)c.noperands, &t, &a, path, sizeof(path))) return 1;
  FILE *f = fopen(out, "w");
  int rc = 0;
  if (!f) {
    perror(out);
    rc = 1;
  } else {
    int bad = tsvg_window(f, path, &a, &o);
    if (fclose(f) || bad) {
      if (bad == TSVG_NO_SUCH_RUN) fprintf(stderr, "aq-trace svg: %s has no run %ld\n", path, o.run);
      else fprintf(stderr, "aq-trace: writing %s failed\n", out);
      remove(out);
      rc = 1;
    } else {
      printf("%s: %zu lanes, %zu slices\n", out, a.nlanes, t.count);
    }
  }
  tanalysis_free(&a);
  tfile_free(&t);
  return rc;
}

static int diff(int argc, char **argv) {
  cli_t c = {.program = "aq-trace diff", .operands = "A B",
             .about = "Kernel by kernel: count, total and mean time in traces A and B, and the change.",
             .min_operands = 2, .max_operands = 2};
  cli_parse(&c, argc, argv);
  tfile_t a, b;
  if (open_trace(c.operand[0], &a, NULL)) return 1;
  if (open_trace(c.operand[1], &b, NULL)) {
    tfile_free(&a);
    return 1;
  }
  tdiff(stdout, c.operand[0], &a, c.operand[1], &b);
  tfile_free(&a), tfile_free(&b);
  return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
  cli_t c = {.program = "aq-trace", .operands = "COMMAND [options] FILE...",
             .about = "commands (aq-trace COMMAND --help lists a command's options):\n"
                      "  summary FILE...  busy % per agent, top kernels, spans, the critical path\n"
                      "  svg FILE... -o OUT  a timeline picture\n"
                      "  diff A B         kernel by kernel changes between two traces\n"
                      "FILE is Chrome trace-event JSON (AQ_TRACE=FILE writes one); several FILEs are the\n"
                      "ranks of one data-parallel run (AQ_TRACE=run-%r.json), drawn on one timeline.",
             .min_operands = 1, .max_operands = argc, .subcommand = 1};
  cli_parse(&c, argc, argv);
  const char *cmd = c.operand[0];
  if (!strcmp(cmd, "summary")) return summary(c.noperands, c.operand);
  if (!strcmp(cmd, "svg")) return svg(c.noperands, c.operand);
  if (!strcmp(cmd, "diff")) return diff(c.noperands, c.operand);
  cli_refuse(&c, "unknown command '%s'", cmd);
}
