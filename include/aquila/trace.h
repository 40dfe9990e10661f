/* Traces: where the time went.
 *
 * While tracing is on, every packet an agent runs is recorded: its agent and
 * queue, its kernel (or packet kind), its index in the queue, the task and
 * graph run it belongs to, and four times on the host's monotonic clock, as
 * in ATMI's task profile: dispatch (written to the queue), ready (its
 * dependencies met, taken up by the packet processor), start and end. GPU
 * drivers map device times onto that clock. A task graph's packets also
 * carry the tasks they depended on; copies carry the bytes they moved. The
 * scheduler's own spans (instantiate, place, lower, each graph run) and
 * counters (queue depth, memory in use per region) are recorded beside them.
 *
 * Recording goes to per-thread buffers without locks; aq_trace_stop (or
 * aq_shut_down, or the process's exit) writes them as Chrome trace-event
 * JSON, which Perfetto UI and chrome://tracing open: a process per agent, a
 * thread per queue, flow arrows for dependencies, counter tracks. The
 * `aq-trace` tool summarises (busy time, idle gaps, top kernels, copies,
 * critical path), draws (SVG timeline) and compares such files.
 *
 * AQ_TRACE=path turns tracing on at aq_init; AQ_TRACE_MAX_MB (default 2048)
 * bounds the memory the buffers may take, beyond which events are dropped
 * and counted in the file's otherData.dropped.
 */
#ifndef AQUILA_TRACE_H_
#define AQUILA_TRACE_H_

#include "aquila/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_trace_options {
  const char *path; /* NULL or "": AQ_TRACE, else "aquila-trace.json" */
} aq_trace_options_t;

/* Starts recording (AQ_ERROR_BUSY if it already is). The file is created
 * at once, so an unwritable path fails here (AQ_ERROR_IO), not at the end.
 * Works with or without aq_init. */
aq_status_t aq_trace_start(const aq_trace_options_t *options);
/* Stops recording and writes the file. */
aq_status_t aq_trace_stop(void);
/* Writes what has been recorded so far and goes on recording (a long run's
 * trace, readable before the run ends). */
aq_status_t aq_trace_flush(void);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_TRACE_H_ */
