/* Internal error reporting: every failing path goes through aq_error, which
 * records a per-thread message and returns the status, so a call site reads
 * `return aq_error(AQ_ERROR_INVALID_ARGUMENT, "size is 0");`. */
#ifndef AQ_RUNTIME_STATUS_H_
#define AQ_RUNTIME_STATUS_H_

#include "aquila/status.h"

#define AQ_API __attribute__((visibility("default")))

aq_status_t aq_error(aq_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears this thread's message: called by successful public entry points
 * that want a stale message not to linger (optional). */
void aq_error_clear(void);

/* Evaluates expr; returns its status from the enclosing function if not OK. */
#define AQ_RETURN_IF_ERROR(expr)                                              \
  do {                                                                        \
    aq_status_t aq_s_ = (expr);                                               \
    if (aq_s_ != AQ_OK) return aq_s_;                                         \
  } while (0)

#endif /* AQ_RUNTIME_STATUS_H_ */
