/* The trace as Chrome trace-event JSON (the format Perfetto UI and
 * chrome://tracing open):
 *   - "M" metadata: a process per agent (pid = agent index) and one for the
 *     runtime's own spans (pid AQ_TRACE_RUNTIME_PID), a thread per queue
 *     (tid = queue id + 1; tid 0 holds the spans), and each task graph's
 *     dependency edges ("aquila_edges", which aq-trace reads);
 *   - "X" complete events, one per packet or span, ts/dur in microseconds
 *     from aq_trace_start; args carry the packet index, the dispatch and
 *     ready times, the task, exec and run, the tasks it depended on, bytes;
 *   - "s"/"f" flow pairs from each predecessor's end to its dependent's
 *     start, run by run;
 *   - "C" counters: queue depth and memory in use per region, one track per
 *     name and process, a sample only where the value changed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "runtime/status.h"
#include "runtime/trace_store.h"

enum { AQ_TRACE_RUNTIME_PID = 1000, DEPS_LISTED_MAX = 32 };

typedef struct writer {
  FILE *f;
  uint64_t origin;
  const aq_trace_item_t **events, **counters;
  size_t nevents, ncounters;
  const aq_trace_item_t **tagged; /* packets with a task, barriers left out, by tag */
  size_t ntagged;
  const aq_trace_item_t **runs;   /* spans tagged with an exec and run ("graph run"), by tag */
  size_t nruns;
  uint32_t (*edges)[3];           /* (exec, task, pred), sorted */
  size_t nedges;
  const aq_trace_names_t *names;  /* the execs' host and stream tasks' names */
  int first;
} writer_t;

static double us(const writer_t *w, uint64_t t) { return (double)(int64_t)(t - w->origin) / 1e3; }

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void begin(writer_t *w) {
  fputs(w->first ? "\n" : ",\n", w->f);
  w->first = 0;
}

static int is_span(const aq_trace_event_t *e) { return e->queue == UINT32_MAX; }
static uint32_t pid_of(const aq_trace_event_t *e) { return is_span(e) ? AQ_TRACE_RUNTIME_PID : e->agent; }
static uint32_t tid_of(const aq_trace_event_t *e) { return is_span(e) ? 0 : e->queue + 1; }
static int has_task(const aq_trace_event_t *e) { return (e->tag & 0xfffff) != 0; }
static uint32_t exec_of(uint64_t tag) { return (uint32_t)(tag >> 20) & 0xfff; }
static uint32_t task_of(uint64_t tag) { return (uint32_t)(tag & 0xfffff) - 1; }
static uint32_t run_of(uint64_t tag) { return (uint32_t)(tag >> 32); }

static int cmp_tag(const void *a, const void *b) {
  uint64_t x = (*(const aq_trace_item_t *const *)a)->e.tag, y = (*(const aq_trace_item_t *const *)b)->e.tag;
  return (x > y) - (x < y);
}

static int cmp_edge(const void *a, const void *b) {
  const uint32_t *x = a, *y = b;
  for (int i = 0; i < 3; ++i)
    if (x[i] != y[i]) return (x[i] > y[i]) - (x[i] < y[i]);
  return 0;
}

static const aq_trace_item_t *find_tag(const writer_t *w, uint64_t tag) {
  size_t lo = 0, hi = w->ntagged;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->tagged[mid]->e.tag < tag) lo = mid + 1;
    else hi = mid;
  }
  return lo < w->ntagged && w->tagged[lo]->e.tag == tag ? w->tagged[lo] : NULL;
}

/* The first edge of (exec, task), or nedges. */
static size_t first_edge(const writer_t *w, uint32_t exec, uint32_t task) {
  size_t lo = 0, hi = w->nedges;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const uint32_t *e = w->edges[mid];
    if (e[0] < exec || (e[0] == exec && e[1] < task)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int collect(writer_t *w, const aq_trace_snapshot_t *s) {
  size_t n = 0, k = 0;
  for (const aq_trace_thread_t *b = s->threads; b; b = b->next)
    for (const aq_trace_chunk_t *c = b->head; c; c = atomic_load_explicit(&c->next, memory_order_acquire))
      n += atomic_load_explicit(&c->count, memory_order_acquire);
  for (const aq_trace_edges_t *l = s->edges; l; l = l->next) k += l->count;
  w->events = malloc((n + 1) * sizeof(*w->events));
  w->counters = malloc((n + 1) * sizeof(*w->counters));
  w->tagged = malloc((n + 1) * sizeof(*w->tagged));
  w->runs = malloc((n + 1) * sizeof(*w->runs));
  w->edges = malloc((k + 1) * sizeof(*w->edges));
  if (!w->events || !w->counters || !w->tagged || !w->runs || !w->edges) return -1;
  /* Counts are read again: a thread may have appended since, and the
   * arrays hold only n. */
  for (const aq_trace_thread_t *b = s->threads; b; b = b->next)
    for (const aq_trace_chunk_t *c = b->head; c; c = atomic_load_explicit(&c->next, memory_order_acquire)) {
      uint32_t count = atomic_load_explicit(&c->count, memory_order_acquire);
      for (uint32_t i = 0; i < count && w->nevents + w->ncounters < n; ++i) {
        const aq_trace_item_t *it = &c->items[i];
        if (it->kind == AQ_TRACE_ITEM_COUNTER) {
          w->counters[w->ncounters++] = it;
          continue;
        }
        w->events[w->nevents++] = it;
        if (has_task(&it->e) && !is_span(&it->e) && strcmp(it->e.category, "barrier"))
          w->tagged[w->ntagged++] = it;
        if (is_span(&it->e) && it->e.tag >> 20 && !has_task(&it->e)) w->runs[w->nruns++] = it;
      }
    }
  qsort(w->tagged, w->ntagged, sizeof(*w->tagged), cmp_tag);
  qsort(w->runs, w->nruns, sizeof(*w->runs), cmp_tag);
  for (const aq_trace_edges_t *l = s->edges; l; l = l->next)
    for (uint32_t i = 0; i < l->count; ++i) {
      uint32_t *e = w->edges[w->nedges++];
      e[0] = l->exec, e[1] = l->e[i][0], e[2] = l->e[i][1];
    }
  qsort(w->edges, w->nedges, sizeof(*w->edges), cmp_edge);
  return 0;
}

/* ---- metadata --------------------------------------------------------- */

typedef struct lane { uint32_t pid, tid; } lane_t;

static int cmp_lane(const void *a, const void *b) {
  const lane_t *x = a, *y = b;
  if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
  return (x->tid > y->tid) - (x->tid < y->tid);
}

static void process_name(writer_t *w, uint32_t pid) {
  char name[AQ_NAME_MAX + 16];
  const aq_agent_impl_t *a = pid == AQ_TRACE_RUNTIME_PID ? NULL : aq_agent_at(pid);
  if (pid == AQ_TRACE_RUNTIME_PID) snprintf(name, sizeof(name), "aquila runtime");
  else if (a) snprintf(name, sizeof(name), "%s", a->info.name);
  else snprintf(name, sizeof(name), "agent %u", pid);
  begin(w);
  fprintf(w->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,\"args\":{\"name\":", pid);
  json_string(w->f, name);
  fputs("}}", w->f);
  begin(w);
  fprintf(w->f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,\"args\":{\"sort_index\":%u}}",
          pid, pid);
}

static void write_metadata(writer_t *w) {
  lane_t *lanes = malloc((w->nevents + w->ncounters + aq_agent_count() + 1) * sizeof(*lanes));
  size_t n = 0;
  if (!lanes) return;
  for (uint32_t a = 0; a < aq_agent_count(); ++a) lanes[n++] = (lane_t){a, UINT32_MAX};
  for (size_t i = 0; i < w->nevents; ++i) lanes[n++] = (lane_t){pid_of(&w->events[i]->e), tid_of(&w->events[i]->e)};
  for (size_t i = 0; i < w->ncounters; ++i) lanes[n++] = (lane_t){w->counters[i]->e.agent, UINT32_MAX};
  qsort(lanes, n, sizeof(*lanes), cmp_lane);
  for (size_t i = 0; i < n; ++i) {
    if (i && !cmp_lane(&lanes[i], &lanes[i - 1])) continue;
    if (!i || lanes[i].pid != lanes[i - 1].pid) process_name(w, lanes[i].pid);
    if (lanes[i].tid == UINT32_MAX) continue; /* a process with counters only */
    begin(w);
    fprintf(w->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":", lanes[i].pid,
            lanes[i].tid);
    char name[32];
    if (lanes[i].pid == AQ_TRACE_RUNTIME_PID) snprintf(name, sizeof(name), "spans");
    else snprintf(name, sizeof(name), "queue %u", lanes[i].tid - 1);
    json_string(w->f, name);
    fprintf(w->f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"args\":{\"sort_index\":%u}}",
            lanes[i].pid, lanes[i].tid, lanes[i].tid);
  }
  free(lanes);
  /* The graphs' edges, exec by exec, for aq-trace's critical path. */
  for (size_t i = 0; i < w->nedges;) {
    uint32_t exec = w->edges[i][0];
    begin(w);
    fprintf(w->f, "{\"name\":\"aquila_edges\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,\"args\":{\"exec\":%u,\"edges\":[",
            AQ_TRACE_RUNTIME_PID, exec);
    for (size_t j = i; i < w->nedges && w->edges[i][0] == exec; ++i)
      fprintf(w->f, "%s[%u,%u]", i > j ? "," : "", w->edges[i][1], w->edges[i][2]);
    fputs("]}}", w->f);
  }
}

/* ---- events and flows ------------------------------------------------- */

/* When a graph run's packets were written: its run span (tagged with exec
 * and run) begins just before the scheduler writes them, so a packet whose
 * processor did not stamp dispatch_ns gets that. 0 if there is no such span. */
static uint64_t run_dispatch(const writer_t *w, uint64_t tag) {
  uint64_t key = tag & ~(uint64_t)0xfffff;
  size_t lo = 0, hi = w->nruns;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->runs[mid]->e.tag < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < w->nruns && w->runs[lo]->e.tag == key ? w->runs[lo]->e.start_ns : 0;
}

/* The name of task `task` of exec `exec` (the newest exec of that number),
 * or NULL: only host and stream tasks are named. */
static const char *task_name(const writer_t *w, uint32_t exec, uint32_t task) {
  for (const aq_trace_names_t *l = w->names; l; l = l->next)
    if (l->exec == exec) return task < l->count ? l->name[task] : NULL;
  return NULL;
}

static void write_event(writer_t *w, const aq_trace_event_t *event) {
  FILE *f = w->f;
  aq_trace_event_t copy = *event, *e = &copy;
  /* A host or stream call is shown by its task's name ("load_batch"),
   * its packet's kind kept in args. */
  const char *kind = NULL;
  if (has_task(e) && !is_span(e) && (!strcmp(e->name, "host call") || !strcmp(e->name, "stream call"))) {
    const char *name = task_name(w, exec_of(e->tag), task_of(e->tag));
    if (name) kind = e->name, e->name = name;
  }
  if (!e->dispatch_ns && has_task(e) && !is_span(e)) {
    e->dispatch_ns = run_dispatch(w, e->tag);
    if (e->dispatch_ns > e->start_ns) e->dispatch_ns = 0; /* not this run's: a stale span */
  }
  begin(w);
  fputs("{\"name\":", f);
  json_string(f, e->name);
  fputs(",\"cat\":", f);
  json_string(f, e->category);
  uint64_t end = e->end_ns < e->start_ns ? e->start_ns : e->end_ns;
  fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,\"tid\":%u,\"args\":{", us(w, e->start_ns),
          (double)(end - e->start_ns) / 1e3, pid_of(e), tid_of(e));
  const char *sep = "";
  if (!is_span(e)) fprintf(f, "\"packet\":%llu", (unsigned long long)e->packet), sep = ",";
  if (e->dispatch_ns) fprintf(f, "%s\"dispatch_us\":%.3f", sep, us(w, e->dispatch_ns)), sep = ",";
  if (e->ready_ns) fprintf(f, "%s\"ready_us\":%.3f", sep, us(w, e->ready_ns)), sep = ",";
  if (!is_span(e)) fprintf(f, "%s\"status\":%d", sep, e->status), sep = ",";
  if (e->depth) fprintf(f, "%s\"depth\":%u", sep, e->depth), sep = ",";
  if (e->bytes) fprintf(f, "%s\"bytes\":%llu", sep, (unsigned long long)e->bytes), sep = ",";
  if (kind) fprintf(f, "%s\"kind\":\"%s\"", sep, kind), sep = ",";
  if (e->tag >> 20) fprintf(f, "%s\"exec\":%u,\"run\":%u", sep, exec_of(e->tag), run_of(e->tag)), sep = ",";
  if (has_task(e)) {
    uint32_t exec = exec_of(e->tag), task = task_of(e->tag), listed = 0;
    fprintf(f, "%s\"task\":%u,\"deps\":[", sep, task);
    for (size_t i = first_edge(w, exec, task); i < w->nedges && w->edges[i][0] == exec && w->edges[i][1] == task;
         ++i)
      if (listed++ < DEPS_LISTED_MAX) fprintf(f, "%s%u", listed > 1 ? "," : "", w->edges[i][2]);
    fputc(']', f);
    if (listed > DEPS_LISTED_MAX) fprintf(f, ",\"ndeps\":%u", listed);
  }
  fputs("}}", f);
}

static void write_flows(writer_t *w) {
  uint64_t flow = 0;
  for (size_t i = 0; i < w->ntagged; ++i) {
    const aq_trace_event_t *to = &w->tagged[i]->e;
    if (i && w->tagged[i - 1]->e.tag == to->tag) continue; /* a duplicate tag: drawn once */
    uint32_t exec = exec_of(to->tag), task = task_of(to->tag);
    for (size_t j = first_edge(w, exec, task); j < w->nedges && w->edges[j][0] == exec && w->edges[j][1] == task;
         ++j) {
      const aq_trace_item_t *from = find_tag(w, aq_trace_tag(run_of(to->tag), exec, w->edges[j][2]));
      if (!from) continue;
      ++flow;
      /* The start sits just inside the predecessor, so viewers bind it to
       * that slice; the finish binds to the slice that encloses it. */
      uint64_t at = from->e.end_ns > from->e.start_ns ? from->e.end_ns - 1 : from->e.start_ns;
      begin(w);
      fprintf(w->f, "{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"s\",\"id\":%llu,\"ts\":%.3f,\"pid\":%u,\"tid\":%u},",
              (unsigned long long)flow, us(w, at), pid_of(&from->e), tid_of(&from->e));
      fprintf(w->f, "\n{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%llu,\"ts\":%.3f,"
                    "\"pid\":%u,\"tid\":%u}",
              (unsigned long long)flow, us(w, to->start_ns), pid_of(to), tid_of(to));
    }
  }
}

/* ---- counters --------------------------------------------------------- */

typedef struct sample {
  uint32_t agent;
  char name[AQ_TRACE_NAME];
  uint64_t t;
  double value;
  int64_t delta; /* queue depth from dispatch times: +1 written, -1 done */
} sample_t;

static int cmp_sample(const void *a, const void *b) {
  const sample_t *x = a, *y = b;
  if (x->agent != y->agent) return (x->agent > y->agent) - (x->agent < y->agent);
  int c = strcmp(x->name, y->name);
  if (c) return c;
  if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
  return (x->delta > y->delta) - (x->delta < y->delta); /* at one instant, leaving before arriving */
}

static const char *unit_of(const char *name) {
  if (!strncmp(name, "memory ", 7)) return "bytes";
  if (!strncmp(name, "queue ", 6)) return "packets";
  return "value";
}

static void write_counters(writer_t *w) {
  /* Queues that report their depth are taken at their word; for the others
   * the depth is derived: packets written (dispatch) and not yet done. */
  size_t cap = w->ncounters + 2 * w->nevents + 1, n = 0;
  sample_t *s = malloc(cap * sizeof(*s));
  if (!s) return;
  for (size_t i = 0; i < w->ncounters; ++i) {
    const aq_trace_item_t *c = w->counters[i];
    s[n] = (sample_t){.agent = c->e.agent, .t = c->e.start_ns, .value = c->e.value};
    snprintf(s[n++].name, AQ_TRACE_NAME, "%s", c->name);
  }
  for (size_t i = 0; i < w->nevents; ++i) {
    const aq_trace_event_t *e = &w->events[i]->e;
    if (is_span(e) || (!e->depth && !e->dispatch_ns)) continue;
    sample_t x = {.agent = e->agent};
    snprintf(x.name, AQ_TRACE_NAME, "queue %u depth", e->queue);
    if (e->depth) {
      x.t = e->start_ns, x.value = e->depth;
      s[n++] = x;
    } else {
      x.t = e->dispatch_ns, x.delta = 1;
      s[n++] = x;
      x.t = e->end_ns < e->dispatch_ns ? e->dispatch_ns : e->end_ns, x.delta = -1;
      s[n++] = x;
    }
  }
  qsort(s, n, sizeof(*s), cmp_sample);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int derived = 1;
    while (j < n && s[j].agent == s[i].agent && !strcmp(s[j].name, s[i].name)) derived &= s[j++].delta != 0;
    double level = 0, last = -1;
    for (size_t k = i; k < j; ++k) {
      if (!derived && s[k].delta) continue; /* a reported depth wins */
      double v = derived ? (level += (double)s[k].delta) : s[k].value;
      if (derived && k + 1 < j && s[k + 1].t == s[k].t) continue; /* one sample per instant */
      if (k > i && v == last) continue;
      last = v;
      begin(w);
      fputs("{\"name\":", w->f);
      json_string(w->f, s[k].name);
      fprintf(w->f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%u,\"tid\":0,\"args\":{\"%s\":%.17g}}", us(w, s[k].t),
              s[k].agent, unit_of(s[k].name), v);
    }
    i = j;
  }
  free(s);
}

aq_status_t aq_trace_write_json(const char *path, const aq_trace_snapshot_t *snapshot) {
  writer_t w = {.origin = snapshot->origin_ns, .first = 1, .names = snapshot->names};
  if (collect(&w, snapshot)) {
    free(w.events), free(w.counters), free(w.tagged), free(w.runs), free(w.edges);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to write the trace %s", path);
  }
  /* Written beside the file, synced, then renamed over it: a process
   * killed mid-write leaves the last complete trace, never a torn one. */
  aq_status_t s = AQ_OK;
  char tmp[4200];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
    free(w.events), free(w.counters), free(w.tagged), free(w.runs), free(w.edges);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "trace path %s is too long", path);
  }
  w.f = fopen(tmp, "w");
  if (!w.f) {
    s = aq_error(AQ_ERROR_IO, "cannot write the trace to %s: %s", tmp, strerror(errno));
  } else {
    static char buf[1 << 16];
    setvbuf(w.f, buf, _IOFBF, sizeof(buf));
    fprintf(w.f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"aquila\",\"clock\":\"CLOCK_MONOTONIC\","
                 "\"origin_ns\":%llu,\"dropped\":%llu},\"traceEvents\":[",
            (unsigned long long)snapshot->origin_ns, (unsigned long long)snapshot->dropped);
    write_metadata(&w);
    for (size_t i = 0; i < w.nevents; ++i) write_event(&w, &w.events[i]->e);
    write_flows(&w);
    write_counters(&w);
    fputs("\n]}\n", w.f);
    int bad = fflush(w.f) != 0 || ferror(w.f) || fsync(fileno(w.f)) != 0;
    if (fclose(w.f) || bad) s = aq_error(AQ_ERROR_IO, "writing the trace to %s failed: %s", tmp, strerror(errno));
    else if (rename(tmp, path)) s = aq_error(AQ_ERROR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (s != AQ_OK) unlink(tmp);
  }
  free(w.events), free(w.counters), free(w.tagged), free(w.runs), free(w.edges);
  return s;
}
