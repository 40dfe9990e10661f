/* aq-trace: what a trace says.
 *   aq-trace summary FILE [--top N]     busy % per agent, idle gaps, top kernels, copies, waiting,
 *                                       runtime spans, counters, the critical path against wall time
 *   aq-trace svg FILE -o OUT [--width PX]   a timeline, one lane per queue, for a browser
 *   aq-trace diff A B                   kernel by kernel: count, total and mean in A and B, change
 * A truncated, foreign or hostile file gets a clear error and exit status 1;
 * a wrong command line gets the usage and exit status 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static int usage(FILE *f) {
  fprintf(f, "usage: aq-trace summary FILE [--top N]\n"
             "       aq-trace svg FILE -o OUT.svg [--width PIXELS]\n"
             "       aq-trace diff A B\n"
             "FILE is Chrome trace-event JSON (AQ_TRACE=FILE writes one).\n");
  return f == stdout ? 0 : 2;
}

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

static int number_arg(const char *s, long lo, long hi, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int summary(int argc, char **argv) {
  const char *path = NULL;
  long top = 15;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--top") && i + 1 < argc) {
      if (number_arg(argv[++i], 1, 100000, &top)) return fprintf(stderr, "aq-trace: --top wants 1..100000\n"), 2;
    } else if (!path && argv[i][0] != '-') {
      path = argv[i];
    } else {
      return usage(stderr);
    }
  }
  if (!path) return usage(stderr);
  tfile_t t;
  tanalysis_t a;
  if (open_trace(path, &t, &a)) return 1;
  tsummary(stdout, path, &a, (int)top);
  tanalysis_free(&a);
  tfile_free(&t);
  return fflush(stdout) ? 1 : 0;
}

static int svg(int argc, char **argv) {
  const char *path = NULL, *out = NULL;
  long width = 1400;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--width") && i + 1 < argc) {
      if (number_arg(argv[++i], 400, 20000, &width)) return fprintf(stderr, "aq-trace: --width wants 400..20000\n"), 2;
    } else if (!path && argv[i][0] != '-') path = argv[i];
    else return usage(stderr);
  }
  if (!path || !out) return usage(stderr);
  tfile_t t;
  tanalysis_t a;
  if (open_trace(path, &t, &a)) return 1;
  FILE *f = fopen(out, "w");
  int rc = 0;
  if (!f) {
    perror(out);
    rc = 1;
  } else {
    int bad = tsvg(f, path, &a, (double)width);
    if (fclose(f) || bad) fprintf(stderr, "aq-trace: writing %s failed\n", out), rc = 1;
    else printf("%s: %zu lanes, %zu slices\n", out, a.nlanes, t.count);
  }
  tanalysis_free(&a);
  tfile_free(&t);
  return rc;
}

static int diff(int argc, char **argv) {
  if (argc != 4) return usage(stderr);
  tfile_t a, b;
  if (open_trace(argv[2], &a, NULL)) return 1;
  if (open_trace(argv[3], &b, NULL)) {
    tfile_free(&a);
    return 1;
  }
  tdiff(stdout, argv[2], &a, argv[3], &b);
  tfile_free(&a), tfile_free(&b);
  return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")))
    return usage(stdout);
  if (argc >= 3 && !strcmp(argv[1], "summary")) return summary(argc, argv);
  if (argc >= 3 && !strcmp(argv[1], "svg")) return svg(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "diff")) return diff(argc, argv);
  return usage(stderr);
}
