/* Reading trace files: the JSON first (json.c bounds it), then each event,
 * checking every field it uses. */
#include "trace_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"

/* Pending "B" events wait on a per-lane stack no deeper than this. */
enum { BE_DEPTH_MAX = 256 };
#define LIMIT_US 1e15 /* about 31 years: any time beyond is not a time */

void tsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

void copy_utf8(char *dst, size_t size, const char *src) {
  size_t n = 0;
  if (!size) return;
  while (src && src[n] && n < size - 1) n++;
  /* Back off over a sequence cut short: continuation bytes, then its lead. */
  if (src && src[n]) {
    size_t k = n;
    while (k > 0 && ((unsigned char)src[k] & 0xc0) == 0x80) k--;
    n = k;
  }
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

typedef struct reader {
  tfile_t *t;
  char *err;
  size_t err_size;
  size_t cap_events, cap_counters, cap_flows, cap_names, cap_edges;
  tevent_t *be;     /* "B"/"E" events, matched after the pass */
  size_t nbe, cap_be;
  size_t elements;  /* of the event array, read whole */
  int refused;      /* an element was refused: the error is not the file's end */
} reader_t;

static int failf(reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(reader_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, r->err_size, fmt, ap);
  va_end(ap);
  return -1;
}

/* Grows *array (of elem bytes, *cap of them) to hold one more than n. */
static int grow(void **array, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  void *g = realloc(*array, c * elem);
  if (!g) return -1;
  *array = g, *cap = c;
  return 0;
}
#define GROW(r, arr, cap, n) grow((void **)&(arr), &(r)->cap, (n), sizeof(*(arr)))

static int num(const jval_t *v, double *out) {
  if (!v || v->type != J_NUM) return 0;
  *out = v->num;
  return 1;
}

static const char *str(const jval_t *v) { return v && v->type == J_STR ? v->str : NULL; }

/* An integer field within [lo, hi], or def where absent; -1 if present but
 * not such an integer. */
static int integer(const jval_t *obj, const char *key, double lo, double hi, long def, long *out) {
  const jval_t *v = json_get(obj, key);
  if (!v) return *out = def, 0;
  double d;
  if (!num(v, &d) || d != floor(d) || d < lo || d > hi) return -1;
  *out = (long)d;
  return 0;
}

static int time_field(const jval_t *obj, const char *key, double *out, int required) {
  const jval_t *v = json_get(obj, key);
  if (!v) {
    *out = NAN;
    return required ? -1 : 0;
  }
  if (!num(v, out) || *out < -LIMIT_US || *out > LIMIT_US) return -1;
  return 0;
}

static int lane(reader_t *r, const jval_t *e, size_t index, long *pid, long *tid) {
  if (integer(e, "pid", -2147483648.0, 2147483647.0, 0, pid) || integer(e, "tid", -2147483648.0, 2147483647.0, 0, tid))
    return failf(r, "event %zu: pid and tid must be integers of 32 bits", index);
  return 0;
}

/* Names are sorted and made unique after the pass (sort_names), so a file
 * of a million names costs n log n, not n squared. */
static int add_name(reader_t *r, long pid, long tid, const char *name) {
  tfile_t *t = r->t;
  if (GROW(r, t->names, cap_names, t->nnames)) return failf(r, "out of memory");
  tname_t *n = &t->names[t->nnames];
  n->pid = pid, n->tid = tid, n->seq = t->nnames++;
  copy_utf8(n->name, sizeof(n->name), name);
  return 0;
}

static int by_pid_tid_seq(const void *a, const void *b) {
  const tname_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void sort_names(tfile_t *t) {
  if (!t->nnames) return;
  tsort(t->names, t->nnames, sizeof(*t->names), by_pid_tid_seq);
  size_t k = 1;
  for (size_t i = 1; i < t->nnames; ++i)
    if (t->names[i].pid != t->names[k - 1].pid || t->names[i].tid != t->names[k - 1].tid) t->names[k++] = t->names[i];
  t->nnames = k;
}

static int metadata(reader_t *r, const jval_t *e, size_t index, const char *name) {
  long pid, tid;
  if (lane(r, e, index, &pid, &tid)) return -1;
  const jval_t *args = json_get(e, "args");
  tfile_t *t = r->t;
  if (!strcmp(name, "process_name") || !strcmp(name, "thread_name")) {
    const char *s = str(json_get(args, "name"));
    return s ? add_name(r, pid, name[0] == 'p' ? -1 : tid, s) : 0;
  }
  if (strcmp(name, "aquila_edges")) return 0;
  long exec;
  if (integer(args, "exec", 0, 1e9, -1, &exec)) return failf(r, "event %zu: aquila_edges: bad exec", index);
  const jval_t *list = json_get(args, "edges");
  if (!list || list->type != J_ARR) return failf(r, "event %zu: aquila_edges without an edges array", index);
  size_t k = 0;
  for (const jval_t *x = list->child; x; x = x->next, ++k) {
    double a, b;
    if (x->type != J_ARR || !num(x->child, &a) || !x->child->next || !num(x->child->next, &b) ||
        x->child->next->next || a != floor(a) || b != floor(b) || a < 0 || b < 0 || a > 1e9 || b > 1e9)
      return failf(r, "event %zu: aquila_edges: edge %zu is not a pair of task numbers", index, k);
    if (GROW(r, t->edges, cap_edges, t->nedges)) return failf(r, "out of memory");
    t->edges[t->nedges++] = (tedge_t){exec, (long)a, (long)b};
  }
  return 0;
}

static int counter(reader_t *r, const jval_t *e, size_t index, const char *name) {
  long pid, tid;
  double ts;
  if (lane(r, e, index, &pid, &tid)) return -1;
  if (time_field(e, "ts", &ts, 1)) return failf(r, "event %zu: a counter without a usable ts", index);
  const jval_t *args = json_get(e, "args");
  int single = args && args->type == J_OBJ && args->child && !args->child->next;
  for (const jval_t *a = args && args->type == J_OBJ ? args->child : NULL; a; a = a->next) {
    double v;
    if (!num(a, &v)) continue; /* Chrome ignores series that are not numbers */
    if (GROW(r, r->t->counters, cap_counters, r->t->ncounters)) return failf(r, "out of memory");
    tcounter_t *c = &r->t->counters[r->t->ncounters++];
    char full[2 * TNAME];
    snprintf(full, sizeof(full), single ? "%s" : "%s.%s", name, a->key ? a->key : "");
    copy_utf8(c->name, sizeof(c->name), full);
    c->pid = pid, c->ts = ts, c->value = v;
  }
  return 0;
}

static int flow(reader_t *r, const jval_t *e, size_t index, const char *name, char ph) {
  tflow_t f = {.ph = ph};
  if (lane(r, e, index, &f.pid, &f.tid)) return -1;
  if (time_field(e, "ts", &f.ts, 1)) return failf(r, "event %zu: a flow without a usable ts", index);
  const jval_t *id = json_get(e, "id");
  if (!id) id = json_get(json_get(e, "id2"), "global");
  if (!id) id = json_get(json_get(e, "id2"), "local");
  char idtext[40];
  if (id && id->type == J_NUM) snprintf(idtext, sizeof(idtext), "%.17g", id->num);
  else if (id && id->type == J_STR) copy_utf8(idtext, sizeof(idtext), id->str);
  else return failf(r, "event %zu: a flow event without an id", index);
  const char *cat = str(json_get(e, "cat"));
  char key[sizeof(f.key) + 64];
  snprintf(key, sizeof(key), "%.24s\x1f%.40s\x1f%s", cat ? cat : "", name, idtext);
  copy_utf8(f.key, sizeof(f.key), key);
  const char *bp = str(json_get(e, "bp"));
  f.enclosing = ph != 'f' || (bp && !strcmp(bp, "e"));
  if (GROW(r, r->t->flows, cap_flows, r->t->nflows)) return failf(r, "out of memory");
  r->t->flows[r->t->nflows++] = f;
  return 0;
}

static int slice(reader_t *r, const jval_t *e, size_t index, const char *name, char ph) {
  tevent_t ev;
  memset(&ev, 0, sizeof(ev));
  if (lane(r, e, index, &ev.pid, &ev.tid)) return -1;
  if (time_field(e, "ts", &ev.ts, 1)) return failf(r, "event %zu: missing or impossible ts", index);
  if (ph == 'X' && (time_field(e, "dur", &ev.dur, 0) || (ev.dur == ev.dur && (ev.dur < 0 || ev.dur > LIMIT_US))))
    return failf(r, "event %zu: impossible dur", index);
  if (ev.dur != ev.dur) ev.dur = 0; /* an X without dur: an instant */
  copy_utf8(ev.name, sizeof(ev.name), name);
  const char *cat = str(json_get(e, "cat"));
  copy_utf8(ev.cat, sizeof(ev.cat), cat ? cat : "");
  const jval_t *args = json_get(e, "args");
  if (time_field(args, "dispatch_us", &ev.dispatch, 0) || time_field(args, "ready_us", &ev.ready, 0))
    return failf(r, "event %zu: impossible dispatch_us or ready_us", index);
  if (!num(json_get(args, "bytes"), &ev.bytes) || ev.bytes < 0 || ev.bytes > 1e18) ev.bytes = 0;
  if (integer(args, "exec", 0, 1e9, -1, &ev.exec) || integer(args, "task", 0, 1e9, -1, &ev.task) ||
      integer(args, "run", 0, 1e12, -1, &ev.run) || integer(args, "status", -1e9, 1e9, 0, &ev.status))
    return failf(r, "event %zu: exec, task, run and status must be small integers", index);
  if (ph == 'X') {
    if (GROW(r, r->t->events, cap_events, r->t->count)) return failf(r, "out of memory");
    r->t->events[r->t->count++] = ev;
    return 0;
  }
  ev.status = ph; /* 'B' or 'E', until matched */
  ev.dur = (double)r->nbe;  /* order in the file: a tie-breaker */
  if (GROW(r, r->be, cap_be, r->nbe)) return failf(r, "out of memory");
  r->be[r->nbe++] = ev;
  return 0;
}

static int by_lane_then_time(const void *a, const void *b) {
  const tevent_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
  return x->dur < y->dur ? -1 : x->dur > y->dur;
}

/* "B"/"E" pairs into slices: per lane, an "E" ends the latest open "B".
 * Unmatched ones are dropped, as viewers do. */
static int match_begin_end(reader_t *r) {
  tsort(r->be, r->nbe, sizeof(*r->be), by_lane_then_time);
  size_t stack[BE_DEPTH_MAX], depth = 0;
  for (size_t i = 0; i < r->nbe; ++i) {
    tevent_t *e = &r->be[i];
    if (i && (e->pid != r->be[i - 1].pid || e->tid != r->be[i - 1].tid)) depth = 0;
    if (e->status == 'B') {
      if (depth == BE_DEPTH_MAX) return failf(r, "begin events nested more than %d deep", BE_DEPTH_MAX);
      stack[depth++] = i;
      continue;
    }
    if (!depth) continue;
    tevent_t s = r->be[stack[--depth]];
    s.dur = e->ts - s.ts;
    s.status = 0;
    if (!s.name[0]) copy_utf8(s.name, sizeof(s.name), e->name);
    if (GROW(r, r->t->events, cap_events, r->t->count)) return failf(r, "out of memory");
    r->t->events[r->t->count++] = s;
  }
  return 0;
}

/* One element of the event array, as the JSON reader hands it over. */
static int one_event(void *ctx, const jval_t *e, size_t index, size_t offset) {
  reader_t *r = ctx;
  int rc = 0;
  if (e->type != J_OBJ) {
    rc = failf(r, "event %zu is not an object", index);
  } else {
    const char *ph = str(json_get(e, "ph")), *name = str(json_get(e, "name"));
    if (!ph || !ph[0] || ph[1]) return 0; /* no phase, no event: skipped, as viewers do */
    if (!name) name = "";
    switch (ph[0]) {
      case 'X':
      case 'B':
      case 'E': rc = slice(r, e, index, name, ph[0]); break;
      case 'C': rc = counter(r, e, index, name); break;
      case 's':
      case 't':
      case 'f': rc = flow(r, e, index, name, ph[0]); break;
      case 'M': rc = metadata(r, e, index, name); break;
      default: break; /* instants, async, objects...: not used here */
    }
  }
  if (rc) {
    r->refused = 1;
    size_t len = strlen(r->err);
    if (len < r->err_size) snprintf(r->err + len, r->err_size - len, " (the event at byte %zu)", offset);
  }
  r->elements++;
  return rc;
}

int tfile_parse(const char *text, size_t len, tfile_t *out, char *err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  reader_t r = {.t = out, .err = err, .err_size = err_size};
  int cut = 0;
  jval_t *root = json_parse_events_cut(text, len, one_event, &r, err, err_size, &cut);
  int rc = root ? 0 : -1;
  /* A file cut short (a process killed while writing it) still holds the
   * events before the cut: they are the trace, marked truncated. */
  if (!root && cut && !r.refused && r.elements) {
    snprintf(out->truncated, sizeof(out->truncated), "%s", err);
    sort_names(out);
    rc = match_begin_end(&r);
    free(r.be);
    if (rc) tfile_free(out);
    return rc;
  }
  const jval_t *list = root && root->type == J_ARR ? root : json_get(root, "traceEvents");
  if (!rc && (!list || list->type != J_ARR))
    rc = failf(&r, "not a Chrome trace: neither an array of events nor an object with a traceEvents array");
  if (!rc) {
    const jval_t *other = json_get(root, "otherData");
    const char *producer = str(json_get(other, "producer"));
    copy_utf8(out->producer, sizeof(out->producer), producer ? producer : "");
    if (!num(json_get(other, "dropped"), &out->dropped) || out->dropped < 0) out->dropped = 0;
    sort_names(out);
    rc = match_begin_end(&r);
  }
  free(r.be);
  json_free(root);
  if (rc) tfile_free(out);
  return rc;
}

int tfile_load(const char *path, tfile_t *out, char *err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    snprintf(err, err_size, "%s: not a regular file", path);
    return -1;
  }
  if (st.st_size > TFILE_MAX_BYTES) {
    fclose(f);
    snprintf(err, err_size, "%s: %lld bytes is more than aq-trace reads (1 GiB)", path, (long long)st.st_size);
    return -1;
  }
  size_t n = (size_t)st.st_size;
  char *text = malloc(n + 1);
  if (!text || fread(text, 1, n, f) != n) {
    free(text);
    fclose(f);
    snprintf(err, err_size, "%s: read failed", path);
    return -1;
  }
  fclose(f);
  char inner[384];
  int rc = tfile_parse(text, n, out, inner, sizeof(inner));
  if (rc) snprintf(err, err_size, "%s: %s", path, inner);
  else if (out->truncated[0])
    fprintf(stderr, "aq-trace: %s: cut short (%s): reading the %zu events before the cut\n", path, out->truncated,
            out->count);
  free(text);
  return rc;
}

void tfile_free(tfile_t *t) {
  free(t->events);
  free(t->counters);
  free(t->flows);
  free(t->names);
  free(t->edges);
  memset(t, 0, sizeof(*t));
}

const char *tfile_process_name(const tfile_t *t, long pid) { return tfile_thread_name(t, pid, -1); }

const char *tfile_thread_name(const tfile_t *t, long pid, long tid) {
  size_t lo = 0, hi = t->nnames;
  tname_t key = {.pid = pid, .tid = tid, .seq = 0};
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (by_pid_tid_seq(&t->names[mid], &key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < t->nnames && t->names[lo].pid == pid && t->names[lo].tid == tid ? t->names[lo].name : NULL;
}
