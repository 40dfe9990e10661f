/* Traces: where the time went.
 *
 * While tracing is on, every packet an agent runs is recorded (agent, queue,
 * kernel or packet kind, packet index, when its processor took it up, when
 * it began and ended, all on the host's monotonic clock), and so are the
 * scheduler's own spans (instantiate, each run). Recording goes to
 * per-thread buffers without locks; aq_trace_stop (or aq_shut_down, or the
 * process's exit) writes them as Chrome trace-event JSON, which Perfetto and
 * chrome://tracing open: a process per agent, a thread per queue. `aq-trace`
 * summarises, draws and compares such files.
 *
 * AQ_TRACE=path turns tracing on at aq_init.
 */
#ifndef AQUILA_TRACE_H_
#define AQUILA_TRACE_H_

#include "aquila/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_trace_options {
  const char *path; /* NULL: AQ_TRACE, else "aquila-trace.json" */
} aq_trace_options_t;

/* Starts recording (AQ_ERROR_BUSY if it already is). */
aq_status_t aq_trace_start(const aq_trace_options_t *options);
/* Stops recording and writes the file. */
aq_status_t aq_trace_stop(void);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_TRACE_H_ */
