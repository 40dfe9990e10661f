/* Lanes, dependencies and the critical path. */
#include "analysis.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EPS 0.0015 /* microseconds: the writers' rounding, when binding flows to slices */

int tevent_is_span(const tevent_t *e) { return !strcmp(e->cat, "runtime"); }

int tevent_is_copy(const tevent_t *e) {
  return e->bytes > 0 || !strcmp(e->cat, "copy") || strcasestr(e->name, "copy") || strcasestr(e->name, "memcpy");
}

static int candidate(const tevent_t *e) { return !tevent_is_span(e) && strcmp(e->cat, "barrier"); }

static int by_lane(const void *a, const void *b) {
  const tevent_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
  return (x->dur < y->dur) - (x->dur > y->dur); /* the enclosing slice first */
}

/* ---- lanes ---------------------------------------------------------------- */

static int build_lanes(tanalysis_t *a) {
  tfile_t *t = a->t;
  tsort(t->events, t->count, sizeof(*t->events), by_lane);
  size_t n = 0;
  for (size_t i = 0; i < t->count; ++i)
    n += !i || t->events[i].pid != t->events[i - 1].pid || t->events[i].tid != t->events[i - 1].tid;
  a->lanes = calloc(n + 1, sizeof(*a->lanes));
  if (!a->lanes) return -1;
  a->t0 = INFINITY, a->t1 = -INFINITY;
  double s0 = INFINITY, s1 = -INFINITY; /* of everything, for traces of spans alone */
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (!i || e->pid != t->events[i - 1].pid || e->tid != t->events[i - 1].tid)
      a->lanes[a->nlanes++] = (tlane_t){.pid = e->pid, .tid = e->tid, .first = i, .spans_only = 1};
    tlane_t *l = &a->lanes[a->nlanes - 1];
    l->count++;
    if (e->ts < s0) s0 = e->ts;
    if (e->ts + e->dur > s1) s1 = e->ts + e->dur;
    if (tevent_is_span(e)) continue;
    l->spans_only = 0;
    if (e->ts < a->t0) a->t0 = e->ts;
    if (e->ts + e->dur > a->t1) a->t1 = e->ts + e->dur;
  }
  if (a->t0 > a->t1) a->t0 = s0, a->t1 = s1;
  if (a->t0 > a->t1) a->t0 = a->t1 = 0;
  /* Busy time is the union of a lane's slices (nested ones count once);
   * idle gaps are what the union leaves of the wall. */
  for (size_t k = 0; k < a->nlanes; ++k) {
    tlane_t *l = &a->lanes[k];
    double cover_end = a->t0;
    for (size_t i = l->first; i < l->first + l->count; ++i) {
      const tevent_t *e = &t->events[i];
      if (tevent_is_span(e) != l->spans_only) continue;
      double s = e->ts, end = e->ts + e->dur;
      if (s > cover_end) {
        double gap = s - cover_end;
        if (gap >= 1) l->gaps++;
        if (gap > l->gap_max) l->gap_max = gap, l->gap_at = cover_end;
        cover_end = s;
      }
      if (end > cover_end) l->busy += end - cover_end, cover_end = end;
    }
    if (a->t1 - cover_end > l->gap_max) l->gap_max = a->t1 - cover_end, l->gap_at = cover_end;
    if (a->t1 - cover_end >= 1) l->gaps++;
  }
  return 0;
}

/* ---- dependencies --------------------------------------------------------- */

typedef struct pair { size_t succ, pred; } pair_t;

typedef struct deps {
  pair_t *p;
  size_t n, cap;
  int full;
} deps_t;

static int add_dep(deps_t *d, size_t pred, size_t succ) {
  if (pred == succ) return 0;
  if (d->n == TDEPS_MAX) return d->full = 1, 0;
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 256;
    pair_t *g = realloc(d->p, cap * sizeof(*g));
    if (!g) return -1;
    d->p = g, d->cap = cap;
  }
  d->p[d->n++] = (pair_t){succ, pred};
  return 0;
}

static const tfile_t *sort_file; /* qsort has no context argument in C11 */

static int by_task_key(const void *a, const void *b) {
  const tevent_t *x = &sort_file->events[*(const size_t *)a], *y = &sort_file->events[*(const size_t *)b];
  if (x->exec != y->exec) return x->exec < y->exec ? -1 : 1;
  if (x->run != y->run) return x->run < y->run ? -1 : 1;
  if (x->task != y->task) return x->task < y->task ? -1 : 1;
  return (*(const size_t *)a > *(const size_t *)b) - (*(const size_t *)a < *(const size_t *)b);
}

static int by_edge(const void *a, const void *b) {
  const tedge_t *x = a, *y = b;
  if (x->exec != y->exec) return x->exec < y->exec ? -1 : 1;
  if (x->task != y->task) return x->task < y->task ? -1 : 1;
  return (x->pred > y->pred) - (x->pred < y->pred);
}

/* The first slice of (exec, run, task) in keys, or SIZE_MAX. */
static size_t find_task(const tfile_t *t, const size_t *keys, size_t n, long exec, long run, long task) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const tevent_t *e = &t->events[keys[mid]];
    int less = e->exec != exec ? e->exec < exec : e->run != run ? e->run < run : e->task < task;
    if (less) lo = mid + 1;
    else hi = mid;
  }
  if (lo == n) return SIZE_MAX;
  const tevent_t *e = &t->events[keys[lo]];
  return e->exec == exec && e->run == run && e->task == task ? keys[lo] : SIZE_MAX;
}

static int deps_from_edges(tanalysis_t *a, deps_t *d) {
  tfile_t *t = a->t;
  size_t *keys = malloc((t->count + 1) * sizeof(*keys)), n = 0;
  tedge_t *edges = malloc((t->nedges + 1) * sizeof(*edges));
  if (!keys || !edges) return free(keys), free(edges), -1;
  for (size_t i = 0; i < t->count; ++i)
    if (t->events[i].task >= 0 && t->events[i].exec >= 0 && candidate(&t->events[i])) keys[n++] = i;
  sort_file = t;
  tsort(keys, n, sizeof(*keys), by_task_key);
  if (t->nedges) memcpy(edges, t->edges, t->nedges * sizeof(*edges));
  tsort(edges, t->nedges, sizeof(*edges), by_edge);
  int rc = 0;
  for (size_t k = 0; k < n && !rc && !d->full; ++k) {
    const tevent_t *e = &t->events[keys[k]];
    if (k && !by_task_key(&keys[k - 1], &keys[k])) continue;
    size_t lo = 0, hi = t->nedges; /* the first edge of (exec, task) */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (edges[mid].exec < e->exec || (edges[mid].exec == e->exec && edges[mid].task < e->task)) lo = mid + 1;
      else hi = mid;
    }
    for (size_t j = lo; j < t->nedges && edges[j].exec == e->exec && edges[j].task == e->task && !rc; ++j) {
      if (j > lo && edges[j].pred == edges[j - 1].pred) continue;
      size_t p = find_task(t, keys, n, e->exec, e->run, edges[j].pred);
      if (p != SIZE_MAX) rc = add_dep(d, p, keys[k]);
    }
  }
  free(keys), free(edges);
  return rc;
}

static const tlane_t *find_lane(const tanalysis_t *a, long pid, long tid) {
  size_t lo = 0, hi = a->nlanes;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const tlane_t *l = &a->lanes[mid];
    if (l->pid < pid || (l->pid == pid && l->tid < tid)) lo = mid + 1;
    else hi = mid;
  }
  return lo < a->nlanes && a->lanes[lo].pid == pid && a->lanes[lo].tid == tid ? &a->lanes[lo] : NULL;
}

/* The slice a flow's end binds to: the innermost slice enclosing ts, or
 * (for an 'f' without "bp":"e") the next slice to start. */
static size_t bind(const tanalysis_t *a, const tflow_t *f) {
  const tlane_t *l = find_lane(a, f->pid, f->tid);
  if (!l) return SIZE_MAX;
  const tevent_t *ev = a->t->events + l->first;
  size_t lo = 0, hi = l->count; /* the first slice starting after ts + EPS */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ev[mid].ts <= f->ts + EPS) lo = mid + 1;
    else hi = mid;
  }
  if (!f->enclosing) {
    size_t k = lo; /* from the slices starting at ts itself */
    while (k > 0 && ev[k - 1].ts >= f->ts - EPS) k--;
    return k < l->count ? l->first + k : SIZE_MAX;
  }
  for (size_t k = lo, walked = 0; k > 0 && walked < 64; --k, ++walked)
    if (ev[k - 1].ts + ev[k - 1].dur >= f->ts - EPS) return l->first + k - 1;
  return SIZE_MAX;
}

static int by_flow(const void *a, const void *b) {
  const tflow_t *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
  static const char order[] = "stf";
  return (int)(strchr(order, x->ph) - order) - (int)(strchr(order, y->ph) - order);
}

static int deps_from_flows(tanalysis_t *a, deps_t *d) {
  tfile_t *t = a->t;
  tsort(t->flows, t->nflows, sizeof(*t->flows), by_flow);
  size_t from = SIZE_MAX;
  for (size_t i = 0; i < t->nflows && !d->full; ++i) {
    const tflow_t *f = &t->flows[i];
    if (i && strcmp(f->key, t->flows[i - 1].key)) from = SIZE_MAX;
    size_t at = bind(a, f);
    if (f->ph != 's' && from != SIZE_MAX && at != SIZE_MAX && add_dep(d, from, at)) return -1;
    from = f->ph == 'f' ? SIZE_MAX : at;
  }
  return 0;
}

static int by_succ(const void *a, const void *b) {
  const pair_t *x = a, *y = b;
  if (x->succ != y->succ) return x->succ < y->succ ? -1 : 1;
  return (x->pred > y->pred) - (x->pred < y->pred);
}

static int by_pred(const void *a, const void *b) {
  const pair_t *x = a, *y = b;
  if (x->pred != y->pred) return x->pred < y->pred ? -1 : 1;
  return (x->succ > y->succ) - (x->succ < y->succ);
}

/* Longest path by Kahn's order: a slice is weighed once all its
 * predecessors are; what a cycle holds back is never weighed. */
static int longest_paths(tanalysis_t *a, pair_t *p, size_t np) {
  size_t n = a->t->count;
  size_t *succ_off = calloc(n + 1, sizeof(*succ_off)), *succs = malloc((np + 1) * sizeof(*succs));
  size_t *indeg = calloc(n + 1, sizeof(*indeg)), *queue = malloc((n + 1) * sizeof(*queue));
  a->best = malloc((n + 1) * sizeof(*a->best));
  a->via = malloc((n + 1) * sizeof(*a->via));
  if (!succ_off || !succs || !indeg || !queue || !a->best || !a->via) {
    free(succ_off), free(succs), free(indeg), free(queue);
    return -1;
  }
  tsort(p, np, sizeof(*p), by_pred);
  for (size_t k = 0; k < np; ++k) succ_off[p[k].pred + 1]++, succs[k] = p[k].succ, indeg[p[k].succ]++;
  for (size_t i = 0; i < n; ++i) succ_off[i + 1] += succ_off[i];
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < n; ++i) {
    a->best[i] = NAN, a->via[i] = SIZE_MAX;
    if (!indeg[i]) queue[tail++] = i;
  }
  while (head < tail) {
    size_t u = queue[head++];
    const tevent_t *e = &a->t->events[u];
    double longest = 0;
    for (size_t k = a->pred_off[u]; k < a->pred_off[u + 1]; ++k) {
      size_t q = a->preds[k];
      if (a->best[q] == a->best[q] && a->best[q] > longest) longest = a->best[q], a->via[u] = q;
    }
    a->best[u] = candidate(e) ? longest + e->dur : NAN;
    for (size_t k = succ_off[u]; k < succ_off[u + 1]; ++k)
      if (!--indeg[succs[k]]) queue[tail++] = succs[k];
  }
  a->cyclic = n - tail;
  free(succ_off), free(succs), free(indeg), free(queue);
  return 0;
}

int tanalyze(tfile_t *t, tanalysis_t *a, char *err, size_t err_size) {
  memset(a, 0, sizeof(*a));
  a->t = t;
  deps_t d = {0};
  int rc = build_lanes(a);
  if (!rc && t->nedges) rc = deps_from_edges(a, &d), a->deps_from = "task graph edges";
  if (!rc && !d.n && t->nflows) rc = deps_from_flows(a, &d), a->deps_from = "flow events";
  if (!rc && !d.n) a->deps_from = NULL;
  if (!rc) {
    tsort(d.p, d.n, sizeof(*d.p), by_succ);
    a->pred_off = calloc(t->count + 2, sizeof(*a->pred_off));
    a->preds = malloc((d.n + 1) * sizeof(*a->preds));
    rc = !a->pred_off || !a->preds ? -1 : 0;
  }
  if (!rc) {
    for (size_t k = 0; k < d.n; ++k) a->pred_off[d.p[k].succ + 1]++, a->preds[k] = d.p[k].pred;
    for (size_t i = 0; i < t->count; ++i) a->pred_off[i + 1] += a->pred_off[i];
    a->npreds = d.n;
    rc = longest_paths(a, d.p, d.n);
  }
  free(d.p);
  if (rc) {
    tanalysis_free(a);
    snprintf(err, err_size, "out of memory analysing %zu events", t->count);
  }
  return rc;
}

void tanalysis_free(tanalysis_t *a) {
  free(a->lanes), free(a->pred_off), free(a->preds), free(a->best), free(a->via);
  memset(a, 0, sizeof(*a));
}

/* ---- the critical path ---------------------------------------------------- */

int tcritical_path(const tanalysis_t *a, tpath_t *p) {
  memset(p, 0, sizeof(*p));
  const tfile_t *t = a->t;
  size_t end = SIZE_MAX, n = 0;
  for (size_t i = 0; i < t->count; ++i)
    if (a->best[i] == a->best[i] && (end == SIZE_MAX || a->best[i] > a->best[end])) end = i;
  if (end == SIZE_MAX) return -1;
  for (size_t u = end; u != SIZE_MAX && n <= t->count; u = a->via[u]) n++;
  p->ev = malloc(n * sizeof(*p->ev));
  if (!p->ev) return -1;
  p->n = n;
  for (size_t u = end, k = n; u != SIZE_MAX && k > 0; u = a->via[u]) p->ev[--k] = u;
  p->work = a->best[end];
  p->first_start = t->events[p->ev[0]].ts;
  p->last_end = t->events[end].ts + t->events[end].dur;
  p->exec = t->events[end].exec, p->run = t->events[end].run;
  if (p->run < 0) {
    p->wall = a->t1 - a->t0;
    return 0;
  }
  double s = INFINITY, e = -INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *x = &t->events[i];
    if (x->exec != p->exec || x->run != p->run || tevent_is_span(x)) continue;
    if (x->ts < s) s = x->ts;
    if (x->ts + x->dur > e) e = x->ts + x->dur;
  }
  p->wall = e - s;
  return 0;
}

void tpath_free(tpath_t *p) {
  free(p->ev);
  memset(p, 0, sizeof(*p));
}

/* ---- per-name statistics -------------------------------------------------- */

static int by_name(const void *a, const void *b) {
  return strcmp(sort_file->events[*(const size_t *)a].name, sort_file->events[*(const size_t *)b].name);
}

static int by_total(const void *a, const void *b) {
  const tkstat_t *x = a, *y = b;
  if (x->total != y->total) return x->total < y->total ? 1 : -1;
  return strcmp(x->name, y->name);
}

tkstat_t *tkernel_stats(const tfile_t *t, size_t *n) {
  size_t *idx = malloc((t->count + 1) * sizeof(*idx)), m = 0;
  tkstat_t *k = calloc(t->count + 1, sizeof(*k));
  *n = 0;
  if (!idx || !k) return free(idx), free(k), NULL;
  for (size_t i = 0; i < t->count; ++i)
    if (!tevent_is_span(&t->events[i])) idx[m++] = i;
  sort_file = t;
  tsort(idx, m, sizeof(*idx), by_name);
  for (size_t j = 0; j < m; ++j) {
    const tevent_t *e = &t->events[idx[j]];
    if (!*n || strcmp(k[*n - 1].name, e->name)) {
      tkstat_t *s = &k[(*n)++];
      memcpy(s->name, e->name, sizeof(s->name));
      s->min = INFINITY, s->max = -INFINITY;
    }
    tkstat_t *s = &k[*n - 1];
    s->count++;
    s->total += e->dur;
    s->bytes += e->bytes;
    if (e->dur < s->min) s->min = e->dur;
    if (e->dur > s->max) s->max = e->dur;
  }
  free(idx);
  tsort(k, *n, sizeof(*k), by_total);
  return k;
}
