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

/* Puts "context: " before this thread's message and returns status: each
 * layer a failure passes on its way up says what it was doing, as in
 * "instantiate: lower: task 'matmul(x,w1)': agent cpu0 has no kernel ...". */
aq_status_t aq_error_annotate(aq_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A cleanup after a failure may fail too (and set its own message): save
 * the first message before it and restore it after, so the first error is
 * the one reported. */
typedef struct aq_error_saved {
  char message[512];
} aq_error_saved_t;
void aq_error_save(aq_error_saved_t *saved);
aq_status_t aq_error_restore(aq_status_t status, const aq_error_saved_t *saved);

/* Evaluates expr; if not OK, adds the printf-formatted context to the
 * message and returns the status from the enclosing function. */
#define AQ_RETURN_IF_ERROR_CTX(expr, ...)                                     \
  do {                                                                        \
    aq_status_t aq_s_ = (expr);                                               \
    if (aq_s_ != AQ_OK) return aq_error_annotate(aq_s_, __VA_ARGS__);         \
  } while (0)

/* Evaluates expr; returns its status from the enclosing function if not OK. */
#define AQ_RETURN_IF_ERROR(expr)                                              \
  do {                                                                        \
    aq_status_t aq_s_ = (expr);                                               \
    if (aq_s_ != AQ_OK) return aq_s_;                                         \
  } while (0)

#endif /* AQ_RUNTIME_STATUS_H_ */
