/* What the trace recorder keeps, as the writer reads it: a list of
 * per-thread buffers (chunks of stored events, each chunk's count published
 * with release), and the task graphs' dependency edges. Private to
 * runtime/trace*.c. */
#ifndef AQ_RUNTIME_TRACE_STORE_H_
#define AQ_RUNTIME_TRACE_STORE_H_

#include <stdatomic.h>
#include <stdint.h>

#include "aquila/status.h"
#include "runtime/trace.h"

enum { AQ_TRACE_CHUNK = 4096, AQ_TRACE_NAME = 48 };

typedef enum { AQ_TRACE_ITEM_EVENT = 0, AQ_TRACE_ITEM_COUNTER = 1 } aq_trace_item_kind_t;

/* An event as stored: its name copied, since code objects (and their
 * kernels' names) may be unloaded before the trace is written. */
typedef struct aq_trace_item {
  aq_trace_event_t e; /* counters: name, agent, start_ns = the time */
  uint32_t kind;      /* aq_trace_item_kind_t */
  char name[AQ_TRACE_NAME];
} aq_trace_item_t;

typedef struct aq_trace_chunk {
  aq_trace_item_t items[AQ_TRACE_CHUNK];
  _Atomic uint32_t count;                /* published with release after each item */
  struct aq_trace_chunk *_Atomic next;   /* set before the first item of the next chunk */
} aq_trace_chunk_t;

typedef struct aq_trace_thread {
  aq_trace_chunk_t *head, *tail; /* tail: the owning thread's alone */
  struct aq_trace_thread *next;
} aq_trace_thread_t;

typedef struct aq_trace_edges {
  uint32_t exec, count;
  uint32_t (*e)[2]; /* (task, predecessor) */
  struct aq_trace_edges *next;
} aq_trace_edges_t;

/* One exec's task names (aq_trace_task_names): name[task] points into
 * text, or is NULL. */
typedef struct aq_trace_names {
  uint32_t exec, count;
  char **name, *text;
  struct aq_trace_names *next;
} aq_trace_names_t;

typedef struct aq_trace_snapshot {
  const aq_trace_thread_t *threads;
  const aq_trace_edges_t *edges;
  const aq_trace_names_t *names;
  uint64_t origin_ns;  /* the trace's time zero (aq_trace_start) */
  uint64_t dropped;    /* items not kept: over AQ_TRACE_MAX_MB, or no memory */
} aq_trace_snapshot_t;

/* Writes the snapshot as Chrome trace-event JSON (trace_writer.c). The
 * writer reads each chunk's count with acquire, so threads may still be
 * appending while it runs. */
aq_status_t aq_trace_write_json(const char *path, const aq_trace_snapshot_t *snapshot);

#endif
