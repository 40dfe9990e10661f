/* aq-trace: what a trace says.
 *   aq-trace summary FILE       busy % per agent, idle gaps, top kernels, runtime spans
 *   aq-trace svg FILE -o OUT    a timeline, one lane per queue, for a browser
 *   aq-trace diff A B           kernel by kernel: count and time in A and B
 * A truncated, foreign or hostile file gets a clear error and exit status 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_file.h"

typedef struct kstat {
  char name[64];
  size_t count;
  double total;
} kstat_t;

static int is_span(const tevent_t *e) { return !strcmp(e->cat, "runtime"); }

static int by_total(const void *a, const void *b) {
  double x = ((const kstat_t *)a)->total, y = ((const kstat_t *)b)->total;
  return (x < y) - (x > y);
}

/* Totals per name, largest first; *n gets how many. */
static kstat_t *kernel_stats(const tfile_t *t, size_t *n) {
  kstat_t *k = calloc(t->count + 1, sizeof(*k));
  *n = 0;
  for (size_t i = 0; k && i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (is_span(e)) continue;
    size_t j = 0;
    while (j < *n && strcmp(k[j].name, e->name)) ++j;
    if (j == *n) snprintf(k[(*n)++].name, 64, "%s", e->name);
    k[j].count++;
    k[j].total += e->dur;
  }
  if (k) qsort(k, *n, sizeof(*k), by_total);
  return k;
}

static int by_lane_time(const void *a, const void *b) {
  const tevent_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid - y->pid;
  if (x->tid != y->tid) return x->tid - y->tid;
  return (x->ts > y->ts) - (x->ts < y->ts);
}

/* The critical path of one graph run: from the task that finished last,
 * back through the predecessor that finished last, to a task with none. The
 * run shown is the last of the exec with the most edges (a training step). */
static void critical_path(const tfile_t *t) {
  long exec = -1, best_edges = 0;
  for (size_t i = 0; i < t->nedges; ++i) {
    long n = 0;
    for (size_t j = 0; j < t->nedges; ++j) n += t->edges[j].exec == t->edges[i].exec;
    if (n > best_edges) best_edges = n, exec = t->edges[i].exec;
  }
  long run = -1;
  for (size_t i = 0; i < t->count; ++i)
    if (t->events[i].exec == exec && t->events[i].run > run && strcmp(t->events[i].cat, "barrier")) run = t->events[i].run;
  if (exec < 0 || run < 0) {
    printf("\nCritical path: the trace has no task graph run with dependency edges.\n");
    return;
  }
  const tevent_t *last = NULL;
  double first_start = INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (e->exec != exec || e->run != run || !strcmp(e->cat, "barrier")) continue;
    if (!last || e->ts + e->dur > last->ts + last->dur) last = e;
    if (e->ts < first_start) first_start = e->ts;
  }
  printf("\nCritical path of graph run %ld (exec %ld):\n", run, exec);
  double busy = 0, end = last->ts + last->dur, start = last->ts;
  const tevent_t *path[256];
  int n = 0;
  for (const tevent_t *e = last; e && n < 256;) {
    path[n++] = e;
    busy += e->dur;
    start = e->ts;
    const tevent_t *prev = NULL;
    for (size_t k = 0; k < t->nedges; ++k) {
      if (t->edges[k].exec != exec || t->edges[k].task != e->task) continue;
      for (size_t i = 0; i < t->count; ++i) {
        const tevent_t *q = &t->events[i];
        if (q->exec == exec && q->run == run && q->task == t->edges[k].pred && strcmp(q->cat, "barrier") &&
            (!prev || q->ts + q->dur > prev->ts + prev->dur))
          prev = q;
      }
    }
    e = prev;
  }
  for (int i = n - 1; i >= 0; --i)
    printf("  %10.1f us  %-28s %8.2f us\n", path[i]->ts - first_start, path[i]->name, path[i]->dur);
  printf("  %d tasks, %.1f us of work on a path of %.1f us; the run took %.1f us\n", n, busy, end - start,
         end - first_start);
}

static int summary(const char *path) {
  tfile_t t;
  char err[512];
  if (tfile_load(path, &t, err, sizeof(err))) return fprintf(stderr, "aq-trace: %s\n", err), 1;
  if (!t.count) {
    printf("%s: no events\n", path);
    tfile_free(&t);
    return 0;
  }
  double t0 = INFINITY, t1 = -INFINITY;
  for (size_t i = 0; i < t.count; ++i) {
    if (t.events[i].ts < t0) t0 = t.events[i].ts;
    if (t.events[i].ts + t.events[i].dur > t1) t1 = t.events[i].ts + t.events[i].dur;
  }
  double wall = t1 - t0;
  printf("%s: %zu events over %.3f ms\n\nAgents (busy = time in packets / (wall x queues used))\n", path, t.count,
         wall / 1e3);
  qsort(t.events, t.count, sizeof(tevent_t), by_lane_time);
  for (int pid = 0; pid < 64; ++pid) {
    double busy = 0, gap = 0;
    int lanes = 0, last_tid = -1;
    double lane_end = 0;
    for (size_t i = 0; i < t.count; ++i) {
      const tevent_t *e = &t.events[i];
      if (e->pid != pid || is_span(e)) continue;
      if (e->tid != last_tid) lanes++, last_tid = e->tid, lane_end = e->ts;
      busy += e->dur;
      if (e->ts - lane_end > gap) gap = e->ts - lane_end;
      if (e->ts + e->dur > lane_end) lane_end = e->ts + e->dur;
    }
    if (!lanes) continue;
    printf("  %-10s %5.1f%% busy over %d queue%s, longest idle gap %.1f us\n",
           t.pid_names[pid][0] ? t.pid_names[pid] : "agent", 100.0 * busy / (wall * lanes), lanes,
           lanes > 1 ? "s" : "", gap);
  }
  size_t nk;
  kstat_t *k = kernel_stats(&t, &nk);
  printf("\nTop kernels and packets by time\n  %-28s %8s %12s %10s\n", "name", "count", "total us", "mean us");
  for (size_t i = 0; k && i < nk && i < 12; ++i)
    printf("  %-28s %8zu %12.1f %10.2f\n", k[i].name, k[i].count, k[i].total, k[i].total / k[i].count);
  free(k);
  printf("\nRuntime spans\n");
  double runs = 0, run_total = 0;
  for (size_t i = 0; i < t.count; ++i)
    if (is_span(&t.events[i])) {
      if (!strcmp(t.events[i].name, "graph run")) runs++, run_total += t.events[i].dur;
      else printf("  %-16s %10.1f us\n", t.events[i].name, t.events[i].dur);
    }
  if (runs) printf("  %-16s %10.0f runs, %.1f us each on average\n", "graph run", runs, run_total / runs);
  critical_path(&t);
  tfile_free(&t);
  return 0;
}

static unsigned colour(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static void xml_text(FILE *f, const char *s) {
  for (; *s; ++s) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '\'') fputs("&#39;", f);
    else fputc(*s, f);
  }
}

static int svg(const char *path, const char *out) {
  tfile_t t;
  char err[512];
  if (tfile_load(path, &t, err, sizeof(err))) return fprintf(stderr, "aq-trace: %s\n", err), 1;
  FILE *f = fopen(out, "w");
  if (!f) {
    tfile_free(&t);
    return fprintf(stderr, "aq-trace: cannot write %s\n", out), 1;
  }
  qsort(t.events, t.count, sizeof(tevent_t), by_lane_time);
  double t0 = INFINITY, t1 = -INFINITY;
  for (size_t i = 0; i < t.count; ++i) {
    if (t.events[i].ts < t0) t0 = t.events[i].ts;
    if (t.events[i].ts + t.events[i].dur > t1) t1 = t.events[i].ts + t.events[i].dur;
  }
  int lanes = 0;
  for (size_t i = 0; i < t.count; ++i)
    if (!i || t.events[i].pid != t.events[i - 1].pid || t.events[i].tid != t.events[i - 1].tid) lanes++;
  const double W = 1200, left = 140, lane_h = 22;
  double scale = t.count && t1 > t0 ? (W - left - 20) / (t1 - t0) : 1;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' font-family='sans-serif' font-size='11'>\n",
          W, 50 + lanes * lane_h);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<text x='10' y='16' font-size='13'>");
  xml_text(f, path);
  fprintf(f, ": %.3f ms</text>\n", t.count ? (t1 - t0) / 1e3 : 0);
  int lane = -1;
  for (size_t i = 0; i < t.count; ++i) {
    const tevent_t *e = &t.events[i];
    if (!i || e->pid != t.events[i - 1].pid || e->tid != t.events[i - 1].tid) {
      lane++;
      fprintf(f, "<text x='4' y='%.0f'>", 40 + lane * lane_h + 14);
      xml_text(f, t.pid_names[e->pid % 64][0] ? t.pid_names[e->pid % 64] : "agent");
      fprintf(f, " q%d</text>\n", e->tid);
    }
    unsigned c = colour(e->name);
    double w = e->dur * scale < 0.5 ? 0.5 : e->dur * scale;
    fprintf(f, "<rect x='%.2f' y='%.0f' width='%.2f' height='%.0f' fill='rgb(%u,%u,%u)'><title>", left + (e->ts - t0) * scale,
            40 + lane * lane_h, w, lane_h - 4, 60 + (c & 0x7f), 60 + ((c >> 8) & 0x7f), 60 + ((c >> 16) & 0x7f));
    xml_text(f, e->name);
    fprintf(f, " %.2f us</title></rect>\n", e->dur);
  }
  fprintf(f, "</svg>\n");
  int bad = fclose(f);
  tfile_free(&t);
  if (bad) return fprintf(stderr, "aq-trace: writing %s failed\n", out), 1;
  printf("%s: %d lanes\n", out, lanes);
  return 0;
}

static int diff(const char *a, const char *b) {
  tfile_t ta, tb;
  char err[512];
  if (tfile_load(a, &ta, err, sizeof(err))) return fprintf(stderr, "aq-trace: %s\n", err), 1;
  if (tfile_load(b, &tb, err, sizeof(err))) {
    tfile_free(&ta);
    return fprintf(stderr, "aq-trace: %s\n", err), 1;
  }
  size_t na, nb;
  kstat_t *ka = kernel_stats(&ta, &na), *kb = kernel_stats(&tb, &nb);
  printf("  %-28s %8s %8s %12s %12s %8s\n", "name", "count A", "count B", "total A us", "total B us", "change");
  for (size_t i = 0; i < na; ++i) {
    size_t j = 0;
    while (j < nb && strcmp(kb[j].name, ka[i].name)) ++j;
    double tb_total = j < nb ? kb[j].total : 0;
    printf("  %-28s %8zu %8zu %12.1f %12.1f %+7.1f%%\n", ka[i].name, ka[i].count, j < nb ? kb[j].count : 0,
           ka[i].total, tb_total, ka[i].total > 0 ? 100.0 * (tb_total - ka[i].total) / ka[i].total : 0.0);
  }
  for (size_t j = 0; j < nb; ++j) {
    size_t i = 0;
    while (i < na && strcmp(ka[i].name, kb[j].name)) ++i;
    if (i == na) printf("  %-28s %8d %8zu %12.1f %12.1f %8s\n", kb[j].name, 0, kb[j].count, 0.0, kb[j].total, "new");
  }
  free(ka), free(kb);
  tfile_free(&ta), tfile_free(&tb);
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: aq-trace summary FILE | aq-trace svg FILE -o OUT.svg | aq-trace diff A B\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "summary")) return summary(argv[2]);
  if (argc == 5 && !strcmp(argv[1], "svg") && !strcmp(argv[3], "-o")) return svg(argv[2], argv[4]);
  if (argc == 4 && !strcmp(argv[1], "diff")) return diff(argv[2], argv[3]);
  return usage();
}
