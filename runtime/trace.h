/* The trace recorder as the runtime and the scheduler call it.
 *
 * The check on the hot path is aq_trace_on(): one relaxed load. A record is
 * a copy into the calling thread's own buffer (no lock, no clock call: the
 * caller passes the times it took anyway). Buffers are registered once per
 * thread and trace in a global list; the writer (trace_writer.c) turns them
 * into Chrome trace-event JSON on aq_trace_stop, aq_shut_down or exit.
 *
 * Times are CLOCK_MONOTONIC nanoseconds (aq_now_ns). A GPU driver maps its
 * device times onto that clock before it records (e.g. by taking one host
 * time beside one device event at queue creation and adding the device's
 * elapsed time to it).
 *
 * The record functions are exported (default visibility) so that tests and
 * out-of-tree drivers can feed the recorder; they are not public API. */
#ifndef AQ_RUNTIME_TRACE_H_
#define AQ_RUNTIME_TRACE_H_

#include <stdatomic.h>
#include <stdint.h>

extern _Atomic int aq_tracing;

static inline int aq_trace_on(void) { return atomic_load_explicit(&aq_tracing, memory_order_relaxed); }

/* One packet a processor ran, or one span of the runtime's own work
 * (queue == UINT32_MAX, category "runtime"). Zero means "not known" for
 * every field after status. */
typedef struct aq_trace_event {
  const char *name;     /* kernel, packet kind or span name: copied when recorded */
  const char *category; /* "kernel", "host", "barrier", "copy", "runtime": must outlive the trace
                           (a string literal) */
  uint64_t ready_ns;    /* dependencies met: taken up by the packet processor */
  uint64_t start_ns, end_ns;
  uint64_t packet;      /* index in its queue */
  uint64_t tag;         /* the packet's reserved2: a task graph's (run << 32 | exec << 20 | task + 1) */
  uint32_t agent;       /* agent index: the trace's process */
  uint32_t queue;       /* queue id: the trace's thread; UINT32_MAX for spans */
  int32_t status;       /* 0, or the failure's aq_status_t */
  uint32_t depth;       /* packets in its queue (written, not yet retired) when it was taken up */
  uint64_t dispatch_ns; /* written to its queue (the doorbell rung) */
  uint64_t bytes;       /* bytes a copy moved */
  double value;         /* category "counter": the counter's value at start_ns */
} aq_trace_event_t;

/* Records a packet or a span. */
void aq_trace_record(const aq_trace_event_t *event);
/* Records one of the runtime's own spans (instantiate, place, lower, a graph
 * run). tag as for packets, with task 0: (run << 32 | exec << 20), or 0. */
void aq_trace_span(const char *name, uint64_t begin_ns, uint64_t end_ns, uint64_t tag);
/* Records a counter's value now, or at t_ns (a "C" track of the agent's
 * process: "queue 3 depth", "memory cpu0.global"). name is copied. */
void aq_trace_counter(const char *name, uint32_t agent, double value);
void aq_trace_counter_at(const char *name, uint32_t agent, double value, uint64_t t_ns);
/* A task graph's dependency edges (task, predecessor), for flows, each
 * packet's "deps" and the critical path: tasks are numbered within exec. */
void aq_trace_edges(uint32_t exec, const uint32_t (*edges)[2], uint32_t count);
/* The names of a task graph's host and stream tasks (names[task], NULL for
 * the others; copied): the trace shows "load_batch" where its packet alone
 * says "host call", the packet's kind kept in its args. */
void aq_trace_task_names(uint32_t exec, const char *const *names, uint32_t count);

/* The reserved2 word of every AQL packet type, where Aquila's packet
 * processors find the trace tag (hardware queues would be given zero). */
static inline uint64_t aq_trace_tag_of(const void *packet) { return *(const uint64_t *)((const char *)packet + 48); }
static inline uint64_t aq_trace_tag(uint64_t run, uint32_t exec, uint32_t task) {
  return run << 32 | (uint64_t)(exec & 0xfff) << 20 | ((task + 1) & 0xfffff);
}

/* aq_init / aq_shut_down hooks. */
void aq_trace_init_from_env(void);
void aq_trace_shutdown(void);
/* After the agents have stopped: frees the buffers of a finished trace. */
void aq_trace_release(void);
/* Once per process, when a trace starts: SIGTERM and SIGINT flush it
 * before the process ends (runtime/trace_signals.c). */
void aq_trace_signals_install(void);

#endif
