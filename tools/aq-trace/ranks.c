/* Several ranks' traces on one timeline (ranks.h). */
#include "ranks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The end of t's first collective (category "collective", as Aquila's MPI
 * and NCCL calls are recorded), or NAN. */
static double first_collective_end(const tfile_t *t) {
  double best = NAN;
  for (size_t i = 0; i < t->count; ++i)
    if (!strcmp(t->events[i].cat, "collective") && !(t->events[i].ts >= best)) best = t->events[i].ts;
  for (size_t i = 0; i < t->count; ++i)
    if (!strcmp(t->events[i].cat, "collective") && t->events[i].ts == best) return best + t->events[i].dur;
  return NAN;
}

/* The smallest and largest pid of every event, counter, flow and name. */
static void pid_range(const tfile_t *f, size_t n, long *lo, long *hi) {
  *lo = 0, *hi = 0;
#define SEE(p) (*lo = (p) < *lo ? (p) : *lo, *hi = (p) > *hi ? (p) : *hi)
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < f[r].count; ++i) SEE(f[r].events[i].pid);
    for (size_t i = 0; i < f[r].ncounters; ++i) SEE(f[r].counters[i].pid);
    for (size_t i = 0; i < f[r].nflows; ++i) SEE(f[r].flows[i].pid);
    for (size_t i = 0; i < f[r].nnames; ++i) SEE(f[r].names[i].pid);
  }
#undef SEE
}

/* Appends n items of size bytes to *dst (holding *count), freeing src. */
static int append(void **dst, size_t *count, void *src, size_t n, size_t size) {
  if (!n) return free(src), 0;
  void *m = realloc(*dst, (*count + n) * size);
  if (!m) return free(src), -1;
  memcpy((char *)m + *count * size, src, n * size);
  *dst = m, *count += n;
  free(src);
  return 0;
}

/* Rank r's contents, renumbered: pid + shift, times + dt, its execs apart
 * from other ranks', its processes named for the rank. */
static void renumber(tfile_t *t, size_t r, long shift, double dt) {
  long execs = (long)r << 20; /* Aquila numbers execs per process, below 2^12 */
  for (size_t i = 0; i < t->count; ++i) {
    tevent_t *e = &t->events[i];
    e->pid += shift, e->ts += dt;
    if (e->dispatch == e->dispatch) e->dispatch += dt;
    if (e->ready == e->ready) e->ready += dt;
    if (e->exec >= 0) e->exec += execs;
  }
  for (size_t i = 0; i < t->ncounters; ++i) t->counters[i].pid += shift, t->counters[i].ts += dt;
  for (size_t i = 0; i < t->nflows; ++i) {
    tflow_t *f = &t->flows[i];
    char key[sizeof(f->key)];
    snprintf(key, sizeof(key), "r%zu:%s", r, f->key);
    memcpy(f->key, key, sizeof(key));
    f->pid += shift, f->ts += dt;
  }
  for (size_t i = 0; i < t->nedges; ++i) t->edges[i].exec += execs;
  for (size_t i = 0; i < t->nnames; ++i) {
    tname_t *m = &t->names[i];
    m->pid += shift;
    if (m->tid != -1) continue;
    char name[TNAME];
    snprintf(name, sizeof(name), "rank %zu: %s", r, m->name);
    copy_utf8(m->name, sizeof(m->name), name);
  }
}

int tfile_merge_ranks(tfile_t *f, const char *const *paths, size_t n, tfile_t *out, double *offsets, char *err,
                      size_t err_size) {
  memset(out, 0, sizeof(*out));
  double end0 = NAN;
  for (size_t r = 0; r < n; ++r) {
    double end = first_collective_end(&f[r]);
    if (end != end)
      return snprintf(err, err_size,
                      "%s has no collective to align the ranks on (a trace of a data-parallel run records one per "
                      "all-reduce)",
                      paths[r]),
             -1;
    if (!r) end0 = end;
    if (offsets) offsets[r] = end0 - end;
  }
  long lo, hi;
  pid_range(f, n, &lo, &hi);
  int bad = 0;
  for (size_t r = 0; r < n; ++r) {
    renumber(&f[r], r, (long)r * (hi - lo + 1) - lo, end0 - first_collective_end(&f[r]));
    out->dropped += f[r].dropped;
    if (!out->truncated[0] && f[r].truncated[0]) snprintf(out->truncated, sizeof(out->truncated), "%s", f[r].truncated);
    if (!r) memcpy(out->producer, f[r].producer, sizeof(out->producer));
    bad |= append((void **)&out->events, &out->count, f[r].events, f[r].count, sizeof(tevent_t));
    bad |= append((void **)&out->counters, &out->ncounters, f[r].counters, f[r].ncounters, sizeof(tcounter_t));
    bad |= append((void **)&out->flows, &out->nflows, f[r].flows, f[r].nflows, sizeof(tflow_t));
    bad |= append((void **)&out->names, &out->nnames, f[r].names, f[r].nnames, sizeof(tname_t));
    bad |= append((void **)&out->edges, &out->nedges, f[r].edges, f[r].nedges, sizeof(tedge_t));
    memset(&f[r], 0, sizeof(f[r]));
  }
  if (bad) {
    tfile_free(out);
    return snprintf(err, err_size, "no memory to merge %zu rank traces", n), -1;
  }
  return 0;
}
