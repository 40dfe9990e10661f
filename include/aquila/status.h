/* Status codes and error messages.
 *
 * Every Aquila call returns an aq_status_t. AQ_OK is zero; every other value
 * names a class of failure. The class alone rarely says enough, so a failing
 * call also leaves a message in a per-thread buffer (aq_last_error) naming what
 * was wrong: which handle, which size, which kernel, which agent. A failure
 * never leaves the runtime unusable: the caller may fix the input and go on.
 */
#ifndef AQUILA_STATUS_H_
#define AQUILA_STATUS_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aq_status {
  AQ_OK = 0,
  AQ_ERROR_INVALID_ARGUMENT,   /* a null pointer, zero size, bad enum, bad flags */
  AQ_ERROR_INVALID_HANDLE,     /* a null, stale (destroyed) or foreign handle */
  AQ_ERROR_NOT_INITIALIZED,    /* aq_init has not been called */
  AQ_ERROR_OUT_OF_MEMORY,      /* host or device memory exhausted */
  AQ_ERROR_OUT_OF_RESOURCES,   /* a fixed table (signals, queues) is full */
  AQ_ERROR_TIMEOUT,            /* a wait or a full queue outlasted its timeout */
  AQ_ERROR_NOT_FOUND,          /* a name (kernel, file, agent) that does not exist */
  AQ_ERROR_INVALID_CODE_OBJECT,/* truncated, corrupt or foreign code object */
  AQ_ERROR_INCOMPATIBLE,       /* right format, wrong architecture or version */
  AQ_ERROR_INVALID_PACKET,     /* a malformed AQL packet reached a queue */
  AQ_ERROR_KERNEL_FAULT,       /* a kernel failed; the dependent work failed with it */
  AQ_ERROR_UNAVAILABLE,        /* a driver, device or feature this machine lacks */
  AQ_ERROR_IO,                 /* a file could not be read or written */
  AQ_ERROR_INVALID_GRAPH,      /* a task graph that cannot be instantiated */
  AQ_ERROR_BUSY,               /* the object is in use (a run in flight, a live exec) */
  AQ_ERROR_INTERNAL,           /* a bug in Aquila: please report it */
  AQ_STATUS_COUNT_
} aq_status_t;

/* A static, human-readable name for a status code ("AQ_ERROR_TIMEOUT"). Never
 * fails: unknown codes give "AQ_STATUS_UNKNOWN". */
const char *aq_status_string(aq_status_t status);

/* The message of the last failing Aquila call on this thread ("" if none). The
 * buffer belongs to the thread and stays valid until its next failing call. */
const char *aq_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_STATUS_H_ */
