/* The trace recorder: per-thread buffers without locks on the record path,
 * start / stop / flush, AQ_TRACE, and writing at exit.
 *
 * A thread's first record after a start allocates its buffer and links it
 * into the global list under the mutex; after that a record is a copy into
 * the buffer's tail chunk and one release store of the chunk's count. The
 * writer may run while threads still append (aq_trace_flush, or a worker
 * that saw tracing on an instant before aq_trace_stop): it reads only what
 * the counts have published. Buffers live until the next start or the
 * runtime's end, never less: a late appender must not write freed memory.
 *
 * Counters of memory in use are sampled from the records themselves: the
 * first record at least AQ_TRACE_SAMPLE_NS after the last sample reads each
 * region's in_use (atomics the memory module keeps anyway), so sampling
 * needs no thread of its own and costs nothing when nothing runs. */
#include "runtime/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/trace.h"
#include "runtime/driver.h"
#include "runtime/memory.h"
#include "runtime/runtime.h"
#include "runtime/settings.h"
#include "runtime/status.h"
#include "runtime/trace_store.h"
#include "runtime/wake.h"

enum { SAMPLE_NS = 1000000 }; /* memory counters: at most one sample a millisecond */

_Atomic int aq_tracing;
static _Atomic uint32_t generation; /* a new one per start and stop: threads take fresh buffers */
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static aq_trace_thread_t *threads;
static aq_trace_edges_t *edge_lists;
static aq_trace_names_t *name_lists;
static char path[1024];
static uint64_t origin_ns;
static _Atomic uint64_t chunks_left;   /* the memory budget, in chunks */
static _Atomic uint64_t dropped;
static _Atomic uint64_t next_sample_ns;

static _Thread_local aq_trace_thread_t *mine;
static _Thread_local uint32_t mine_generation;

static aq_trace_chunk_t *new_chunk(void) {
  uint64_t left = atomic_load_explicit(&chunks_left, memory_order_relaxed);
  do {
    if (!left) return NULL;
  } while (!atomic_compare_exchange_weak(&chunks_left, &left, left - 1));
  /* calloc: a chunk is big enough to come straight from mmap, zeroed for
   * free, its pages touched only as events fill them. */
  return calloc(1, sizeof(aq_trace_chunk_t));
}

static aq_trace_thread_t *my_buffer(void) {
  uint32_t gen = atomic_load_explicit(&generation, memory_order_acquire);
  if (mine && mine_generation == gen) return mine;
  aq_trace_thread_t *b = calloc(1, sizeof(*b));
  aq_trace_chunk_t *c = b ? new_chunk() : NULL;
  if (!c) {
    free(b);
    return NULL;
  }
  b->head = b->tail = c;
  pthread_mutex_lock(&mutex);
  if (atomic_load(&generation) != gen || !atomic_load(&aq_tracing)) { /* stopped meanwhile */
    pthread_mutex_unlock(&mutex);
    free(c), free(b);
    return NULL;
  }
  b->next = threads;
  threads = b;
  pthread_mutex_unlock(&mutex);
  mine = b;
  mine_generation = gen;
  return b;
}

/* The slot for one more item in this thread's buffer, or NULL (counted as
 * dropped). The caller fills it and calls publish(). */
static aq_trace_item_t *reserve(aq_trace_chunk_t **chunk, uint32_t *index) {
  aq_trace_thread_t *b = my_buffer();
  if (!b) {
    atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
    return NULL;
  }
  aq_trace_chunk_t *c = b->tail;
  uint32_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
  if (n == AQ_TRACE_CHUNK) {
    aq_trace_chunk_t *fresh = new_chunk();
    if (!fresh) {
      atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
      return NULL;
    }
    atomic_store_explicit(&c->next, fresh, memory_order_release);
    b->tail = c = fresh;
    n = 0;
  }
  *chunk = c;
  *index = n;
  return &c->items[n];
}

static void publish(aq_trace_chunk_t *c, uint32_t index) {
  atomic_store_explicit(&c->count, index + 1, memory_order_release);
}

static void copy_name(char *to, const char *from) {
  size_t len = 0;
  if (from)
    while (len < AQ_TRACE_NAME - 1 && from[len]) to[len] = from[len], ++len;
  to[len] = '\0';
}

AQ_API void aq_trace_counter_at(const char *name, uint32_t agent, double value, uint64_t t_ns) {
  if (!aq_trace_on()) return;
  aq_trace_chunk_t *c;
  uint32_t i;
  aq_trace_item_t *it = reserve(&c, &i);
  if (!it) return;
  it->kind = AQ_TRACE_ITEM_COUNTER;
  it->e = (aq_trace_event_t){.agent = agent, .start_ns = t_ns, .end_ns = t_ns, .queue = UINT32_MAX, .value = value};
  copy_name(it->name, name);
  it->e.name = it->name;
  publish(c, i);
}

AQ_API void aq_trace_counter(const char *name, uint32_t agent, double value) {
  if (aq_trace_on()) aq_trace_counter_at(name, agent, value, aq_now_ns());
}

/* Memory in use, region by region: agents and their regions live as long
 * as the runtime, and records come only from a running runtime's threads
 * (or from programs with no agents at all). */
static void sample_memory(uint64_t t) {
  uint64_t due = atomic_load_explicit(&next_sample_ns, memory_order_relaxed);
  if (t < due || !atomic_compare_exchange_strong(&next_sample_ns, &due, t + SAMPLE_NS)) return;
  for (uint32_t a = 0; a < aq_agent_count(); ++a) {
    const aq_agent_impl_t *agent = aq_agent_at(a);
    for (uint32_t r = 0; agent && r < agent->region_count && r < AQ_AGENT_REGIONS_MAX; ++r) {
      const aq_region_impl_t *region = agent->regions[r];
      if (!region) continue;
      char name[AQ_TRACE_NAME];
      snprintf(name, sizeof(name), "memory %s", region->info.name);
      aq_trace_counter_at(name, a, (double)atomic_load_explicit(&region->in_use, memory_order_relaxed), t);
    }
  }
}

AQ_API void aq_trace_record(const aq_trace_event_t *e) {
  if (!aq_trace_on()) return;
  if (e->category && !strcmp(e->category, "counter")) {
    aq_trace_counter_at(e->name, e->agent, e->value, e->start_ns);
    return;
  }
  aq_trace_chunk_t *c;
  uint32_t i;
  aq_trace_item_t *it = reserve(&c, &i);
  if (!it) return;
  it->kind = AQ_TRACE_ITEM_EVENT;
  it->e = *e;
  if (!it->e.category) it->e.category = "packet";
  copy_name(it->name, e->name);
  it->e.name = it->name;
  publish(c, i);
  if (e->end_ns >= atomic_load_explicit(&next_sample_ns, memory_order_relaxed)) sample_memory(e->end_ns);
}

AQ_API void aq_trace_span(const char *name, uint64_t begin_ns, uint64_t end_ns, uint64_t tag) {
  if (!aq_trace_on()) return;
  aq_trace_event_t ev = {.name = name, .category = "runtime", .ready_ns = begin_ns, .start_ns = begin_ns,
                         .end_ns = end_ns, .tag = tag & ~(uint64_t)0xfffff, .queue = UINT32_MAX};
  aq_trace_record(&ev);
}

AQ_API void aq_trace_edges(uint32_t exec, const uint32_t (*e)[2], uint32_t count) {
  if (!aq_trace_on()) return;
  aq_trace_edges_t *l = calloc(1, sizeof(*l));
  if (!l || !(l->e = malloc((count ? count : 1) * sizeof(*l->e)))) {
    free(l);
    atomic_fetch_add(&dropped, 1);
    return;
  }
  if (count) memcpy(l->e, e, count * sizeof(*e));
  l->exec = exec & 0xfff, l->count = count;
  pthread_mutex_lock(&mutex);
  l->next = edge_lists;
  edge_lists = l;
  pthread_mutex_unlock(&mutex);
}

AQ_API void aq_trace_task_names(uint32_t exec, const char *const *names, uint32_t count) {
  if (!aq_trace_on()) return;
  size_t bytes = 0;
  for (uint32_t t = 0; t < count; ++t) bytes += names[t] ? strlen(names[t]) + 1 : 0;
  aq_trace_names_t *l = calloc(1, sizeof(*l));
  if (!l || !(l->name = calloc(count ? count : 1, sizeof(*l->name))) || !(l->text = malloc(bytes ? bytes : 1))) {
    if (l) free(l->name);
    free(l);
    atomic_fetch_add(&dropped, 1);
    return;
  }
  char *p = l->text;
  for (uint32_t t = 0; t < count; ++t)
    if (names[t]) l->name[t] = p, p += sprintf(p, "%s", names[t]) + 1;
  l->exec = exec & 0xfff, l->count = count;
  pthread_mutex_lock(&mutex);
  l->next = name_lists;
  name_lists = l;
  pthread_mutex_unlock(&mutex);
}

static void free_buffers(void) {
  for (aq_trace_names_t *l = name_lists, *nl; l; l = nl) {
    nl = l->next;
    free(l->name), free(l->text), free(l);
  }
  name_lists = NULL;
  for (aq_trace_edges_t *l = edge_lists, *nl; l; l = nl) {
    nl = l->next;
    free(l->e);
    free(l);
  }
  edge_lists = NULL;
  for (aq_trace_thread_t *b = threads, *nb; b; b = nb) {
    nb = b->next;
    for (aq_trace_chunk_t *c = b->head, *nc; c; c = nc) {
      nc = atomic_load(&c->next);
      free(c);
    }
    free(b);
  }
  threads = NULL;
}

static uint64_t budget_chunks(void) {
  uint64_t v = aq_setting_u64(AQ_SET_TRACE_MAX_MB);
  if (!v) v = 2048; /* not read yet: a trace started before aq_init */
  uint64_t chunks = (uint64_t)v * (1ull << 20) / sizeof(aq_trace_chunk_t);
  return chunks ? chunks : 1;
}

/* The path with "%r" as this process's rank in an MPI job (what mpirun
 * tells its processes; 0 outside one): each rank its own trace. Returns the
 * length the whole path needs, as snprintf does. */
static size_t with_rank(const char *p, char *out, size_t size) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMIX_RANK");
  if (!rank) rank = "0";
  const char *at = strstr(p, "%r");
  if (!at) return (size_t)snprintf(out, size, "%s", p);
  return (size_t)snprintf(out, size, "%.*s%s%s", (int)(at - p), p, rank, at + 2);
}

AQ_API aq_status_t aq_trace_start(const aq_trace_options_t *options) {
  /* A trace may start before aq_init: it reads the settings itself. */
  if (!aq_runtime_ready()) AQ_RETURN_IF_ERROR(aq_settings_load(NULL));
  pthread_mutex_lock(&mutex);
  if (atomic_load(&aq_tracing)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_BUSY, "a trace is already being recorded (to %s)", path);
  }
  const char *p = options && options->path && *options->path ? options->path : aq_setting_text(AQ_SET_TRACE);
  char want[sizeof(path)];
  if (with_rank(p && *p ? p : "aquila-trace.json", want, sizeof(want)) >= sizeof(want)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "the trace's path is longer than %zu bytes", sizeof(path) - 1);
  }
  FILE *f = fopen(want, "w"); /* fail now, not after the run */
  if (!f) {
    int err = errno;
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_IO, "cannot write the trace to %s: %s", want, strerror(err));
  }
  fclose(f);
  memcpy(path, want, sizeof(path));
  free_buffers();
  atomic_store(&chunks_left, budget_chunks());
  atomic_store(&dropped, 0);
  atomic_store(&next_sample_ns, 0);
  atomic_fetch_add(&generation, 1);
  origin_ns = aq_now_ns();
  atomic_store(&aq_tracing, 1);
  pthread_mutex_unlock(&mutex);
  aq_trace_signals_install();
  return AQ_OK;
}

static aq_status_t write_locked(void) {
  aq_trace_snapshot_t s = {threads, edge_lists, name_lists, origin_ns, atomic_load(&dropped)};
  return aq_trace_write_json(path, &s);
}

/* Drivers that read GPU times back later hand over what they have. */
static void drivers_flush(void) {
  if (!atomic_load(&aq_tracing)) return;
  for (unsigned i = 0; i < aq_driver_count; ++i)
    if (aq_drivers[i]->trace_flush) aq_drivers[i]->trace_flush();
}

AQ_API aq_status_t aq_trace_flush(void) {
  drivers_flush();
  pthread_mutex_lock(&mutex);
  if (!atomic_load(&aq_tracing)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_trace_flush: no trace is being recorded");
  }
  aq_status_t s = write_locked();
  pthread_mutex_unlock(&mutex);
  return s;
}

AQ_API aq_status_t aq_trace_stop(void) {
  /* A last sample, so every memory track reaches the end of the trace
   * (before the mutex: a first record takes it to register a buffer). */
  drivers_flush();
  if (atomic_load(&aq_tracing)) {
    atomic_store(&next_sample_ns, 0);
    sample_memory(aq_now_ns());
  }
  pthread_mutex_lock(&mutex);
  if (!atomic_load(&aq_tracing)) {
    pthread_mutex_unlock(&mutex);
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_trace_stop: no trace is being recorded");
  }
  atomic_store(&aq_tracing, 0);
  atomic_fetch_add(&generation, 1); /* threads start afresh next time */
  aq_status_t s = write_locked();
  uint64_t lost = atomic_load(&dropped);
  pthread_mutex_unlock(&mutex);
  if (s == AQ_OK && lost)
    fprintf(stderr, "aquila: trace %s: %llu events dropped (over AQ_TRACE_MAX_MB or out of memory)\n", path,
            (unsigned long long)lost);
  return s;
}

void aq_trace_release(void) {
  pthread_mutex_lock(&mutex);
  if (!atomic_load(&aq_tracing)) free_buffers();
  pthread_mutex_unlock(&mutex);
}

void aq_trace_init_from_env(void) {
  const char *p = aq_setting_text(AQ_SET_TRACE);
  if (*p && !atomic_load(&aq_tracing) && aq_trace_start(NULL) != AQ_OK)
    fprintf(stderr, "aquila: AQ_TRACE: %s\n", aq_last_error());
}

void aq_trace_shutdown(void) {
  if (atomic_load(&aq_tracing) && aq_trace_stop() != AQ_OK) fprintf(stderr, "aquila: trace: %s\n", aq_last_error());
}

/* A program that exits without aq_trace_stop or aq_shut_down still gets its
 * trace (a destructor, not atexit: it also runs if the library is unloaded). */
__attribute__((destructor)) static void trace_at_exit(void) {
  if (atomic_load(&aq_tracing) && aq_trace_stop() != AQ_OK)
    fprintf(stderr, "aquila: trace at exit: %s\n", aq_last_error());
}
