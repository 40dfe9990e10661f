/* The trace recorder as the runtime and the scheduler call it. The check
 * on the hot path is one relaxed load; a record is a copy into the calling
 * thread's own buffer. */
#ifndef AQ_RUNTIME_TRACE_H_
#define AQ_RUNTIME_TRACE_H_

#include <stdatomic.h>
#include <stdint.h>

extern _Atomic int aq_tracing;

static inline int aq_trace_on(void) { return atomic_load_explicit(&aq_tracing, memory_order_relaxed); }

typedef struct aq_trace_event {
  const char *name;     /* kernel or span name: copied when recorded */
  const char *category; /* "kernel", "host", "barrier", "runtime" */
  uint64_t ready_ns;    /* taken up by the packet processor (dependencies met) */
  uint64_t start_ns, end_ns;
  uint64_t packet;      /* index in its queue */
  uint64_t tag;         /* the packet's reserved2: a task graph's (run << 32 | exec << 20 | task + 1) */
  uint32_t agent;       /* agent index: the trace's process */
  uint32_t queue;       /* queue id: the trace's thread; UINT32_MAX for spans */
  int32_t status;       /* 0, or the failure's aq_status_t */
  double value;         /* category "counter": the counter's value at start_ns */
} aq_trace_event_t;

void aq_trace_record(const aq_trace_event_t *event);
/* A counter track's sample (queue depth, memory in use), on agent's process. */
void aq_trace_counter(const char *name, uint32_t agent, double value);
/* A task graph's dependency edges (task, predecessor), for flows and the
 * critical path: tasks are numbered within exec. */
void aq_trace_edges(uint32_t exec, const uint32_t (*edges)[2], uint32_t count);
/* The reserved2 word of every AQL packet type, where Aquila's packet
 * processors find the trace tag (hardware queues would be given zero). */
static inline uint64_t aq_trace_tag_of(const void *packet) { return *(const uint64_t *)((const char *)packet + 48); }

/* aq_init / aq_shut_down hooks. */
void aq_trace_init_from_env(void);
void aq_trace_shutdown(void);
/* After the agents have stopped: frees the buffers of a finished trace. */
void aq_trace_release(void);

#endif
