/* aq-trace summary: where the time went, in plain text. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static const char *lane_name(const tfile_t *t, const tlane_t *l, char *buf, size_t size) {
  const char *p = tfile_process_name(t, l->pid), *th = tfile_thread_name(t, l->pid, l->tid);
  char pbuf[24], tbuf[24];
  if (!p) snprintf(pbuf, sizeof(pbuf), "pid %ld", l->pid), p = pbuf;
  if (!th) snprintf(tbuf, sizeof(tbuf), "tid %ld", l->tid), th = tbuf;
  snprintf(buf, size, "%s / %s", p, th);
  return buf;
}

static void agents(FILE *f, const tanalysis_t *a) {
  const tfile_t *t = a->t;
  double wall = a->t1 - a->t0;
  fprintf(f, "\nAgents (busy = time covered by packets / (wall x lanes used))\n");
  for (size_t k = 0; k < a->nlanes;) {
    long pid = a->lanes[k].pid;
    size_t j = k, lanes = 0;
    double busy = 0, gap = 0, gap_at = 0;
    for (; j < a->nlanes && a->lanes[j].pid == pid; ++j) {
      if (a->lanes[j].spans_only) continue;
      lanes++;
      busy += a->lanes[j].busy;
      if (a->lanes[j].gap_max > gap) gap = a->lanes[j].gap_max, gap_at = a->lanes[j].gap_at;
    }
    if (lanes) {
      const char *name = tfile_process_name(t, pid);
      char buf[32];
      if (!name) snprintf(buf, sizeof(buf), "pid %ld", pid), name = buf;
      fprintf(f, "  %-20s %5.1f%% busy over %zu lane%s; longest idle gap %.1f us (at %.1f us)\n", name,
              wall > 0 ? 100.0 * busy / (wall * (double)lanes) : 0.0, lanes, lanes > 1 ? "s" : "", gap, gap_at - a->t0);
      size_t shown = 0;
      for (size_t i = k; i < j; ++i) {
        const tlane_t *l = &a->lanes[i];
        if (l->spans_only) continue;
        if (++shown > 16) {
          fprintf(f, "    ... %zu more lanes\n", lanes - 16);
          break;
        }
        char lb[2 * TNAME + 8];
        fprintf(f, "    %-34s %5.1f%% busy, %zu packets, %zu idle gaps, longest %.1f us\n",
                lane_name(t, l, lb, sizeof(lb)), wall > 0 ? 100.0 * l->busy / wall : 0.0, l->count, l->gaps,
                l->gap_max);
      }
    }
    k = j;
  }
}

static void kernels(FILE *f, const tfile_t *t, int top) {
  size_t n;
  tkstat_t *k = tkernel_stats(t, &n);
  if (!k) return;
  double all = 0;
  for (size_t i = 0; i < n; ++i) all += k[i].total;
  fprintf(f, "\nTop kernels and packets by time (%zu names)\n  %-32s %8s %12s %6s %10s %10s %10s\n", n, "name",
          "count", "total us", "%", "mean us", "min us", "max us");
  for (size_t i = 0; i < n && i < (size_t)top; ++i)
    fprintf(f, "  %-32s %8zu %12.1f %5.1f%% %10.2f %10.2f %10.2f\n", k[i].name, k[i].count, k[i].total,
            all > 0 ? 100.0 * k[i].total / all : 0.0, k[i].total / (double)k[i].count, k[i].min, k[i].max);
  if (n > (size_t)top) fprintf(f, "  ... %zu more\n", n - (size_t)top);
  free(k);
}

static void copies(FILE *f, const tfile_t *t) {
  size_t n = 0, with_bytes = 0;
  double time = 0, bytes = 0, time_with_bytes = 0;
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (tevent_is_span(e) || !tevent_is_copy(e)) continue;
    n++, time += e->dur, bytes += e->bytes;
    if (e->bytes > 0) with_bytes++, time_with_bytes += e->dur;
  }
  fprintf(f, "\nCopies\n");
  if (!n) {
    fprintf(f, "  none\n");
    return;
  }
  fprintf(f, "  %zu copies, %.1f us", n, time);
  if (with_bytes)
    fprintf(f, ", %.3f MB moved (%zu say how much), %.2f GB/s while copying", bytes / 1e6, with_bytes,
            time_with_bytes > 0 ? bytes / (time_with_bytes * 1e3) : 0.0);
  fputc('\n', f);
}

static void waiting(FILE *f, const tfile_t *t) {
  size_t nd = 0, nr = 0;
  double queued = 0, queued_max = 0, held = 0, taken = 0;
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (tevent_is_span(e)) continue;
    if (e->dispatch == e->dispatch) {
      double w = e->ts - e->dispatch;
      nd++, queued += w;
      if (w > queued_max) queued_max = w;
      if (e->ready == e->ready) held += e->ready - e->dispatch;
    }
    if (e->ready == e->ready) nr++, taken += e->ts - e->ready;
  }
  /* A processor that stamps ready when it starts says nothing about it. */
  if (taken < 1e-3 * (double)nr) nr = 0;
  if (!nd && !nr) return;
  fprintf(f, "\nWaiting\n");
  if (nd)
    fprintf(f, "  written to queue -> start: mean %.2f us, max %.2f us (%zu packets); of which waiting for "
               "dependencies: mean %.2f us\n", queued / (double)nd, queued_max, nd, held / (double)nd);
  if (nr) fprintf(f, "  ready -> start: mean %.2f us (%zu packets)\n", taken / (double)nr, nr);
}

static int counter_order(const void *a, const void *b) {
  const tcounter_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return (x->ts > y->ts) - (x->ts < y->ts);
}

static void counters(FILE *f, tfile_t *t) {
  if (!t->ncounters) return;
  tsort(t->counters, t->ncounters, sizeof(*t->counters), counter_order);
  fprintf(f, "\nCounters\n  %-36s %8s %14s %14s %14s\n", "track", "samples", "min", "max", "last");
  size_t tracks = 0;
  for (size_t i = 0; i < t->ncounters;) {
    size_t j = i;
    double lo = INFINITY, hi = -INFINITY;
    for (; j < t->ncounters && t->counters[j].pid == t->counters[i].pid &&
           !strcmp(t->counters[j].name, t->counters[i].name);
         ++j) {
      if (t->counters[j].value < lo) lo = t->counters[j].value;
      if (t->counters[j].value > hi) hi = t->counters[j].value;
    }
    if (++tracks <= 24) {
      const char *p = tfile_process_name(t, t->counters[i].pid);
      char track[2 * TNAME + 32];
      if (p) snprintf(track, sizeof(track), "%s: %s", p, t->counters[i].name);
      else snprintf(track, sizeof(track), "pid %ld: %s", t->counters[i].pid, t->counters[i].name);
      fprintf(f, "  %-36s %8zu %14.6g %14.6g %14.6g\n", track, j - i, lo, hi, t->counters[j - 1].value);
    }
    i = j;
  }
  if (tracks > 24) fprintf(f, "  ... %zu more tracks\n", tracks - 24);
}

static void spans(FILE *f, const tfile_t *t) {
  size_t n;
  tkstat_t *k = NULL;
  /* The same statistics, over the spans alone. */
  tfile_t only = *t;
  tevent_t *ev = malloc((t->count + 1) * sizeof(*ev));
  if (!ev) return;
  only.count = 0, only.events = ev;
  for (size_t i = 0; i < t->count; ++i)
    if (tevent_is_span(&t->events[i])) {
      ev[only.count] = t->events[i];
      ev[only.count++].cat[0] = '\0'; /* counted as work by tkernel_stats */
    }
  if (only.count && (k = tkernel_stats(&only, &n))) {
    fprintf(f, "\nRuntime spans\n  %-32s %8s %12s %10s\n", "name", "count", "total us", "mean us");
    for (size_t i = 0; i < n && i < 16; ++i)
      fprintf(f, "  %-32s %8zu %12.1f %10.2f\n", k[i].name, k[i].count, k[i].total, k[i].total / (double)k[i].count);
  }
  free(k);
  free(ev);
}

static const tfile_t *runs_file; /* qsort has no context argument in C11 */

static int by_run(const void *a, const void *b) {
  const tevent_t *x = &runs_file->events[*(const size_t *)a], *y = &runs_file->events[*(const size_t *)b];
  if (x->exec != y->exec) return x->exec < y->exec ? -1 : 1;
  return (x->run > y->run) - (x->run < y->run);
}

/* Per (exec, run): its critical path (the longest best[] among its slices)
 * against its wall time, averaged over the runs. */
static void run_averages(FILE *f, const tanalysis_t *a) {
  const tfile_t *t = a->t;
  size_t *idx = malloc((t->count + 1) * sizeof(*idx)), m = 0, runs = 0;
  if (!idx) return;
  for (size_t i = 0; i < t->count; ++i)
    if (t->events[i].run >= 0 && !tevent_is_span(&t->events[i])) idx[m++] = i;
  runs_file = t;
  tsort(idx, m, sizeof(*idx), by_run);
  double crit = 0, wall = 0, s = 0, e = 0, best = 0;
  for (size_t k = 0; k <= m; ++k) {
    const tevent_t *x = k < m ? &t->events[idx[k]] : NULL;
    if (!x || !k || by_run(&idx[k - 1], &idx[k])) {
      if (k) runs++, crit += best, wall += e - s;
      if (!x) break;
      s = x->ts, e = x->ts + x->dur, best = 0;
    }
    if (x->ts < s) s = x->ts;
    if (x->ts + x->dur > e) e = x->ts + x->dur;
    if (a->best[idx[k]] == a->best[idx[k]] && a->best[idx[k]] > best) best = a->best[idx[k]];
  }
  free(idx);
  if (runs > 1)
    fprintf(f, "  over %zu graph runs: critical path %.1f us on average, in %.1f us of wall time (%.0f%%)\n", runs,
            crit / (double)runs, wall / (double)runs, wall > 0 ? 100.0 * crit / wall : 0.0);
}

static void critical(FILE *f, const tanalysis_t *a) {
  const tfile_t *t = a->t;
  tpath_t p;
  fprintf(f, "\nCritical path");
  if (!a->deps_from) fprintf(f, " (the file has no dependencies: the longest slice alone)");
  else fprintf(f, " (dependencies from %s, %zu edges)", a->deps_from, a->npreds);
  if (tcritical_path(a, &p)) {
    fprintf(f, "\n  no slices\n");
    return;
  }
  if (p.run >= 0) fprintf(f, ", graph run %ld of exec %ld", p.run, p.exec);
  fprintf(f, "\n  %10s %10s %10s  %-28s %s\n", "start us", "dur us", "waited us", "name", "lane");
  double prev_end = NAN;
  for (size_t i = 0; i < p.n; ++i) {
    if (p.n > 40 && i == 20) {
      fprintf(f, "  ... %zu more\n", p.n - 40);
      i = p.n - 20;
      prev_end = NAN;
    }
    const tevent_t *e = &t->events[p.ev[i]];
    const char *proc = tfile_process_name(t, e->pid), *th = tfile_thread_name(t, e->pid, e->tid);
    char lane[2 * TNAME + 32];
    snprintf(lane, sizeof(lane), "%s%s%s", proc ? proc : "", proc && th ? " / " : "", th ? th : "");
    if (!proc && !th) snprintf(lane, sizeof(lane), "pid %ld tid %ld", e->pid, e->tid);
    char waited[24] = "";
    if (prev_end == prev_end) snprintf(waited, sizeof(waited), "%.2f", e->ts - prev_end);
    fprintf(f, "  %10.1f %10.2f %10s  %-28s %s\n", e->ts - p.first_start, e->dur, waited, e->name, lane);
    prev_end = e->ts + e->dur;
  }
  double span = p.last_end - p.first_start;
  fprintf(f, "  %zu slices: %.1f us of work on the path, %.1f us from its first start to its last end;\n", p.n, p.work,
          span);
  fprintf(f, "  the %s took %.1f us of wall time: the path is %.0f%% of it%s\n", p.run >= 0 ? "run" : "trace", p.wall,
          p.wall > 0 ? 100.0 * p.work / p.wall : 0.0,
          p.wall > 0 && p.work < 0.9 * p.wall ? " (the rest: waiting for queues, workers or the host)" : "");
  if (a->cyclic) fprintf(f, "  warning: %zu slices sit on or behind a dependency cycle and were left out\n", a->cyclic);
  run_averages(f, a);
  tpath_free(&p);
}

void tsummary(FILE *f, const char *label, const tanalysis_t *a, int top) {
  tfile_t *t = a->t;
  size_t work = 0;
  for (size_t i = 0; i < t->count; ++i) work += !tevent_is_span(&t->events[i]);
  fprintf(f, "%s: %zu slices (%zu packets, %zu spans), %zu counter samples, over %.3f ms%s%s\n", label, t->count,
          work, t->count - work, t->ncounters, (a->t1 - a->t0) / 1e3, t->producer[0] ? ", written by " : "",
          t->producer);
  if (t->dropped > 0)
    fprintf(f, "warning: the producer dropped %.0f events (its buffers were full): totals are low\n", t->dropped);
  if (!t->count) return;
  agents(f, a);
  kernels(f, t, top);
  copies(f, t);
  waiting(f, t);
  spans(f, t);
  counters(f, t);
  critical(f, a);
}
