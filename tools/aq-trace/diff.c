/* aq-trace diff: what changed between two runs, kernel by kernel (count,
 * total and mean time in each, the change in %), largest change first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

typedef struct row {
  const tkstat_t *a, *b;
  double change; /* total B - total A */
} row_t;

static int by_change(const void *x, const void *y) {
  const row_t *p = x, *q = y;
  double a = fabs(p->change), b = fabs(q->change);
  if (a != b) return a < b ? 1 : -1;
  return strcmp(p->a ? p->a->name : p->b->name, q->a ? q->a->name : q->b->name);
}

static int by_stat_name(const void *x, const void *y) {
  return strcmp(((const tkstat_t *)x)->name, ((const tkstat_t *)y)->name);
}

static double wall_of(const tfile_t *t) {
  double s = INFINITY, e = -INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    if (tevent_is_span(&t->events[i])) continue;
    if (t->events[i].ts < s) s = t->events[i].ts;
    if (t->events[i].ts + t->events[i].dur > e) e = t->events[i].ts + t->events[i].dur;
  }
  return e > s ? e - s : 0;
}

static void pct(char *out, size_t size, double from, double to) {
  if (from > 0) snprintf(out, size, "%+.1f%%", 100.0 * (to - from) / from);
  else snprintf(out, size, "%s", to > 0 ? "new" : "=");
}

void tdiff(FILE *f, const char *label_a, const tfile_t *a, const char *label_b, const tfile_t *b) {
  size_t na = 0, nb = 0;
  tkstat_t *ka = tkernel_stats(a, &na), *kb = tkernel_stats(b, &nb);
  row_t *rows = malloc((na + nb + 1) * sizeof(*rows));
  if (!ka || !kb || !rows) {
    fprintf(f, "out of memory\n");
    free(ka), free(kb), free(rows);
    return;
  }
  tsort(ka, na, sizeof(*ka), by_stat_name);
  tsort(kb, nb, sizeof(*kb), by_stat_name);
  size_t n = 0, i = 0, j = 0;
  double ta = 0, tb = 0;
  while (i < na || j < nb) {
    int c = i == na ? 1 : j == nb ? -1 : strcmp(ka[i].name, kb[j].name);
    row_t r = {c <= 0 ? &ka[i] : NULL, c >= 0 ? &kb[j] : NULL, 0};
    r.change = (r.b ? r.b->total : 0) - (r.a ? r.a->total : 0);
    ta += r.a ? r.a->total : 0, tb += r.b ? r.b->total : 0;
    rows[n++] = r;
    i += c <= 0, j += c >= 0;
  }
  tsort(rows, n, sizeof(*rows), by_change);
  fprintf(f, "A: %s\nB: %s\n\n  %-32s %8s %8s %12s %12s %10s %10s %9s %9s\n", label_a, label_b, "name", "count A",
          "count B", "total A us", "total B us", "mean A us", "mean B us", "total", "mean");
  for (size_t k = 0; k < n; ++k) {
    const tkstat_t *x = rows[k].a, *y = rows[k].b;
    double mx = x ? x->total / (double)x->count : 0, my = y ? y->total / (double)y->count : 0;
    char dt[24], dm[24];
    if (!y) snprintf(dt, sizeof(dt), "gone"), snprintf(dm, sizeof(dm), "-");
    else pct(dt, sizeof(dt), x ? x->total : 0, y->total), pct(dm, sizeof(dm), mx, my);
    fprintf(f, "  %-32s %8zu %8zu %12.1f %12.1f %10.2f %10.2f %9s %9s\n", x ? x->name : y->name, x ? x->count : 0,
            y ? y->count : 0, x ? x->total : 0.0, y ? y->total : 0.0, mx, my, dt, dm);
  }
  char d[24], w[24];
  pct(d, sizeof(d), ta, tb);
  double wa = wall_of(a), wb = wall_of(b);
  pct(w, sizeof(w), wa, wb);
  fprintf(f, "\n  %-32s %8s %8s %12.1f %12.1f %10s %10s %9s\n", "all packets", "", "", ta, tb, "", "", d);
  fprintf(f, "  %-32s %8s %8s %12.1f %12.1f %10s %10s %9s\n", "wall time", "", "", wa, wb, "", "", w);
  free(ka), free(kb), free(rows);
}
