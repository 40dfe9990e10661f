/* What aq-trace works out from a trace: lanes (one per process and thread,
 * i.e. agent and queue), their busy and idle time, the dependencies between
 * slices, and the critical path: the longest chain of dependent slices,
 * weighted by their durations.
 *
 * Dependencies come from Aquila's "aquila_edges" (task graph edges, joined
 * to packets by exec, run and task) where the file has them, else from the
 * file's flow events ("s"/"t"/"f", each end bound to its slice the way
 * Perfetto binds them). Cycles, which a hostile file may draw, are detected
 * and their slices left out of the longest-path walk. */
#ifndef AQ_TRACE_ANALYSIS_H_
#define AQ_TRACE_ANALYSIS_H_

#include <stdio.h>

#include "trace_file.h"

enum { TDEPS_MAX = 1 << 24 };

typedef struct tlane {
  long pid, tid;
  size_t first, count;    /* its slices: t->events[first .. first + count) */
  int spans_only;         /* the runtime's own spans, not an agent's work */
  double busy;            /* time covered by at least one slice, microseconds */
  double gap_max, gap_at; /* its longest idle gap within the trace's wall time, and where it began */
  size_t gaps;            /* idle gaps of 1 us or more */
} tlane_t;

typedef struct tanalysis {
  tfile_t *t;             /* its events sorted by lane, then time (parents before children) */
  tlane_t *lanes;
  size_t nlanes;
  double t0, t1;          /* the wall: first start to last end of the agents' work */
  /* Dependencies: the predecessors of slice i are preds[pred_off[i] .. pred_off[i + 1]). */
  size_t *pred_off, *preds;
  size_t npreds;
  const char *deps_from;  /* "task graph edges", "flow events" or NULL */
  /* Longest path ending at each slice (NAN: not a candidate, or on a cycle). */
  double *best;
  size_t *via;            /* its predecessor on that path, or SIZE_MAX */
  size_t cyclic;          /* slices on or behind a cycle */
} tanalysis_t;

int tevent_is_span(const tevent_t *e);    /* the runtime's own span ("runtime" category) */
int tevent_is_copy(const tevent_t *e);

/* 0, or -1 with a message (out of memory). */
int tanalyze(tfile_t *t, tanalysis_t *a, char *err, size_t err_size);
void tanalysis_free(tanalysis_t *a);

typedef struct tpath {
  size_t *ev;             /* slices from first to last */
  size_t n;
  double work;            /* the sum of their durations */
  double first_start, last_end;
  double wall;            /* its run's wall time (or the trace's) */
  long exec, run;         /* its run, or -1 */
} tpath_t;

/* The longest path of the trace; 0, or -1 if there is no slice. */
int tcritical_path(const tanalysis_t *a, tpath_t *p);
void tpath_free(tpath_t *p);

typedef struct tkstat {
  char name[TNAME];
  size_t count;
  double total, min, max, bytes;
} tkstat_t;

/* Time per name over the agents' slices, largest total first. */
tkstat_t *tkernel_stats(const tfile_t *t, size_t *n);

void tsummary(FILE *f, const char *label, const tanalysis_t *a, int top);
/* 0, or -1 if writing failed. */
int tsvg(FILE *f, const char *title, const tanalysis_t *a, double width);
/* What the picture shows: width in pixels; a window in milliseconds from
 * the trace's first slice (NAN: its start / end), or run >= 0: that run of
 * the exec that ran most often. */
typedef struct tsvg_options {
  double width;
  double from_ms, to_ms;
  long run;
} tsvg_options_t;
enum { TSVG_NO_SUCH_RUN = -2 };
/* tsvg with a window: 0, -1 if writing failed, TSVG_NO_SUCH_RUN. */
int tsvg_window(FILE *f, const char *title, const tanalysis_t *a, const tsvg_options_t *o);
void tdiff(FILE *f, const char *label_a, const tfile_t *a, const char *label_b, const tfile_t *b);

#endif
