/* The trace recorder: per-thread event buffers, and the Chrome trace-event
 * JSON writer. */
#include "runtime/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/trace.h"
#include "runtime/runtime.h"
#include "runtime/status.h"
#include "runtime/wake.h"

enum { CHUNK = 8192 };

/* An event as stored: its name copied, since code objects (and their
 * kernels' names) may be unloaded before the trace is written. */
typedef struct stored {
  aq_trace_event_t e;
  char name[48];
} stored_t;

typedef struct chunk {
  stored_t events[CHUNK];
  _Atomic uint32_t count; /* published with release after each event */
  struct chunk *next;
} chunk_t;

typedef struct thread_buf {
  chunk_t *head, *tail;
  struct thread_buf *next;
} thread_buf_t;

_Atomic int aq_tracing;
static _Atomic uint32_t generation; /* a new one per start: stale buffers are left alone */
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static thread_buf_t *buffers;
static char path[1024];

typedef struct edges {
  uint32_t exec, count;
  uint32_t (*e)[2];
  struct edges *next;
} edges_t;
static edges_t *edge_lists;
static uint64_t started_ns;

static _Thread_local thread_buf_t *mine;
static _Thread_local uint32_t mine_generation;

static thread_buf_t *my_buffer(void) {
  uint32_t gen = atomic_load(&generation);
  if (mine && mine_generation == gen) return mine;
  thread_buf_t *b = calloc(1, sizeof(*b));
  chunk_t *c = b ? calloc(1, sizeof(*c)) : NULL;
  if (!c) {
    free(b);
    return NULL;
  }
  b->head = b->tail = c;
  pthread_mutex_lock(&mutex);
  if (atomic_load(&generation) != gen) { /* stopped meanwhile */
    pthread_mutex_unlock(&mutex);
    free(c), free(b);
    return NULL;
  }
  b->next = buffers;
  buffers = b;
  pthread_mutex_unlock(&mutex);
  mine = b;
  mine_generation = gen;
  return b;
}

void aq_trace_record(const aq_trace_event_t *e) {
  if (!aq_trace_on()) return;
  thread_buf_t *b = my_buffer();
  if (!b) return;
  chunk_t *c = b->tail;
  uint32_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
  if (n == CHUNK) {
    chunk_t *fresh = calloc(1, sizeof(*fresh));
    if (!fresh) return;
    c->next = fresh;
    b->tail = c = fresh;
    n = 0;
  }
  stored_t *st = &c->events[n];
  st->e = *e;
  size_t len = 0;
  if (e->name)
    while (len < sizeof(st->name) - 1 && e->name[len]) st->name[len] = e->name[len], ++len;
  st->name[len] = '\0';
  st->e.name = st->name;
  atomic_store_explicit(&c->count, n + 1, memory_order_release);
}

void aq_trace_edges(uint32_t exec, const uint32_t (*e)[2], uint32_t count) {
  if (!aq_trace_on()) return;
  edges_t *l = calloc(1, sizeof(*l));
  if (!l || !(l->e = malloc((count ? count : 1) * sizeof(*l->e)))) {
    free(l);
    return;
  }
  memcpy(l->e, e, count * sizeof(*e));
  l->exec = exec, l->count = count;
  pthread_mutex_lock(&mutex);
  l->next = edge_lists;
  edge_lists = l;
  pthread_mutex_unlock(&mutex);
}

void aq_trace_counter(const char *name, uint32_t agent, double value) {
  if (!aq_trace_on()) return;
  uint64_t now = aq_now_ns();
  aq_trace_event_t e = {.name = name, .category = "counter", .ready_ns = now, .start_ns = now, .end_ns = now,
                        .agent = agent, .queue = UINT32_MAX, .value = value};
  aq_trace_record(&e);
}

static void free_buffers(void) {
  for (edges_t *l = edge_lists, *nl; l; l = nl) {
    nl = l->next;
    free(l->e);
    free(l);
  }
  edge_lists = NULL;
  for (thread_buf_t *b = buffers, *nb; b; b = nb) {
    nb = b->next;
    for (chunk_t *c = b->head, *nc; c; c = nc) {
      nc = c->next;
      free(c);
    }
    free(b);
  }
  buffers = NULL;
}

AQ_API aq_status_t aq_trace_start(const aq_trace_options_t *options) {
  pthread_mutex_lock(&mutex);
  if (atomic_load(&aq_tracing)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_BUSY, "a trace is already being recorded (to %s)", path);
  }
  const char *p = options && options->path ? options->path : getenv("AQ_TRACE");
  snprintf(path, sizeof(path), "%s", p && *p ? p : "aquila-trace.json");
  FILE *f = fopen(path, "w"); /* fail now, not after the run */
  if (!f) {
    int err = errno;
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_IO, "cannot write the trace to %s: %s", path, strerror(err));
  }
  fclose(f);
  free_buffers();
  atomic_fetch_add(&generation, 1);
  started_ns = aq_now_ns();
  atomic_store(&aq_tracing, 1);
  pthread_mutex_unlock(&mutex);
  return AQ_OK;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void write_event(FILE *f, const aq_trace_event_t *e, int *first) {
  fprintf(f, "%s\n{\"name\":", *first ? "" : ",");
  *first = 0;
  json_string(f, e->name);
  if (!strcmp(e->category, "counter")) {
    fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%u,\"args\":{\"value\":%.6g}}",
            (double)(e->start_ns - started_ns) / 1e3, e->agent, e->value);
    return;
  }
  fprintf(f, ",\"cat\":");
  json_string(f, e->category);
  double ts = (double)(e->start_ns - started_ns) / 1e3, dur = (double)(e->end_ns - e->start_ns) / 1e3;
  fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,\"tid\":%u", ts, dur, e->agent,
          e->queue == UINT32_MAX ? 0u : e->queue + 1);
  fprintf(f, ",\"args\":{\"packet\":%llu,\"ready_us\":%.3f,\"status\":%d", (unsigned long long)e->packet,
          (double)(e->ready_ns - started_ns) / 1e3, e->status);
  if (e->tag & 0xfffff)
    fprintf(f, ",\"exec\":%u,\"task\":%u,\"run\":%u", (unsigned)((e->tag >> 20) & 0xfff),
            (unsigned)((e->tag & 0xfffff) - 1), (unsigned)(e->tag >> 32));
  fprintf(f, "}}");
}

/* Flow arrows (Chrome "s"/"f" pairs) from each predecessor's end to its
 * dependent's start, run by run: events are found by their tag. */
static int by_tag(const void *a, const void *b) {
  uint64_t x = (*(const aq_trace_event_t *const *)a)->tag, y = (*(const aq_trace_event_t *const *)b)->tag;
  return (x > y) - (x < y);
}

static const aq_trace_event_t *find_tag(const aq_trace_event_t **sorted, size_t n, uint64_t tag) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (sorted[mid]->tag < tag) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && sorted[lo]->tag == tag ? sorted[lo] : NULL;
}

static void write_flows(FILE *f) {
  size_t n = 0, k = 0;
  for (thread_buf_t *b = buffers; b; b = b->next)
    for (chunk_t *c = b->head; c; c = c->next) n += atomic_load(&c->count);
  const aq_trace_event_t **tagged = malloc((n ? n : 1) * sizeof(*tagged));
  if (!tagged) return;
  for (thread_buf_t *b = buffers; b; b = b->next)
    for (chunk_t *c = b->head; c; c = c->next)
      for (uint32_t i = 0; i < atomic_load(&c->count); ++i)
        if ((c->events[i].e.tag & 0xfffff) && strcmp(c->events[i].e.category, "barrier")) tagged[k++] = &c->events[i].e;
  qsort(tagged, k, sizeof(*tagged), by_tag);
  uint64_t flow = 0;
  for (size_t i = 0; i < k; ++i) {
    const aq_trace_event_t *to = tagged[i];
    uint64_t exec = (to->tag >> 20) & 0xfff, task = (to->tag & 0xfffff) - 1, run = to->tag >> 32;
    for (edges_t *l = edge_lists; l; l = l->next) {
      if (l->exec != exec) continue;
      for (uint32_t j = 0; j < l->count; ++j) {
        if (l->e[j][0] != task) continue;
        const aq_trace_event_t *from = find_tag(tagged, k, run << 32 | exec << 20 | (l->e[j][1] + 1));
        if (!from) continue;
        ++flow;
        fprintf(f, ",\n{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"s\",\"id\":%llu,\"ts\":%.3f,\"pid\":%u,\"tid\":%u}",
                (unsigned long long)flow, (double)(from->end_ns - started_ns) / 1e3 - 0.001, from->agent,
                from->queue + 1);
        fprintf(f, ",\n{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%llu,\"ts\":%.3f,"
                   "\"pid\":%u,\"tid\":%u}",
                (unsigned long long)flow, (double)(to->start_ns - started_ns) / 1e3, to->agent, to->queue + 1);
      }
    }
  }
  free(tagged);
}

static aq_status_t write_trace(void) {
  FILE *f = fopen(path, "w");
  if (!f) return aq_error(AQ_ERROR_IO, "cannot write the trace to %s: %s", path, strerror(errno));
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"aquila\"},\"traceEvents\":[");
  int first = 1;
  for (uint32_t a = 0; a < aq_agent_count(); ++a) {
    fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":", first ? "" : ",", a);
    json_string(f, aq_agent_at(a)->info.name);
    fprintf(f, "}}");
    first = 0;
  }
  for (edges_t *l = edge_lists; l; l = l->next) {
    fprintf(f, "%s\n{\"name\":\"aquila_edges\",\"ph\":\"M\",\"pid\":0,\"args\":{\"exec\":%u,\"edges\":[",
            first ? "" : ",", l->exec);
    first = 0;
    for (uint32_t i = 0; i < l->count; ++i) fprintf(f, "%s[%u,%u]", i ? "," : "", l->e[i][0], l->e[i][1]);
    fprintf(f, "]}}");
  }
  for (thread_buf_t *b = buffers; b; b = b->next)
    for (chunk_t *c = b->head; c; c = c->next) {
      uint32_t n = atomic_load_explicit(&c->count, memory_order_acquire);
      for (uint32_t i = 0; i < n; ++i) write_event(f, &c->events[i].e, &first);
    }
  if (!first) write_flows(f);
  fprintf(f, "\n]}\n");
  if (fclose(f)) return aq_error(AQ_ERROR_IO, "writing the trace to %s failed", path);
  return AQ_OK;
}

AQ_API aq_status_t aq_trace_stop(void) {
  pthread_mutex_lock(&mutex);
  if (!atomic_load(&aq_tracing)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_trace_stop: no trace is being recorded");
  }
  atomic_store(&aq_tracing, 0);
  atomic_fetch_add(&generation, 1); /* threads start afresh next time */
  /* The buffers stay until the next start or the runtime's end: a worker
   * that saw tracing on a moment ago may still be appending. */
  aq_status_t s = write_trace();
  pthread_mutex_unlock(&mutex);
  return s;
}

void aq_trace_release(void) {
  pthread_mutex_lock(&mutex);
  if (!atomic_load(&aq_tracing)) free_buffers();
  pthread_mutex_unlock(&mutex);
}

void aq_trace_init_from_env(void) {
  const char *p = getenv("AQ_TRACE");
  if (p && *p && !atomic_load(&aq_tracing) && aq_trace_start(NULL) != AQ_OK)
    fprintf(stderr, "aquila: AQ_TRACE: %s\n", aq_last_error());
}

void aq_trace_shutdown(void) {
  if (atomic_load(&aq_tracing) && aq_trace_stop() != AQ_OK) fprintf(stderr, "aquila: trace: %s\n", aq_last_error());
}
