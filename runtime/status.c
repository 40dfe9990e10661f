/* Status names and the per-thread last-error message. */
#include "runtime/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

static const char *const names[AQ_STATUS_COUNT_] = {
    [AQ_OK] = "AQ_OK",
    [AQ_ERROR_INVALID_ARGUMENT] = "AQ_ERROR_INVALID_ARGUMENT",
    [AQ_ERROR_INVALID_HANDLE] = "AQ_ERROR_INVALID_HANDLE",
    [AQ_ERROR_NOT_INITIALIZED] = "AQ_ERROR_NOT_INITIALIZED",
    [AQ_ERROR_OUT_OF_MEMORY] = "AQ_ERROR_OUT_OF_MEMORY",
    [AQ_ERROR_OUT_OF_RESOURCES] = "AQ_ERROR_OUT_OF_RESOURCES",
    [AQ_ERROR_TIMEOUT] = "AQ_ERROR_TIMEOUT",
    [AQ_ERROR_NOT_FOUND] = "AQ_ERROR_NOT_FOUND",
    [AQ_ERROR_INVALID_CODE_OBJECT] = "AQ_ERROR_INVALID_CODE_OBJECT",
    [AQ_ERROR_INCOMPATIBLE] = "AQ_ERROR_INCOMPATIBLE",
    [AQ_ERROR_INVALID_PACKET] = "AQ_ERROR_INVALID_PACKET",
    [AQ_ERROR_KERNEL_FAULT] = "AQ_ERROR_KERNEL_FAULT",
    [AQ_ERROR_UNAVAILABLE] = "AQ_ERROR_UNAVAILABLE",
    [AQ_ERROR_IO] = "AQ_ERROR_IO",
    [AQ_ERROR_INVALID_GRAPH] = "AQ_ERROR_INVALID_GRAPH",
    [AQ_ERROR_BUSY] = "AQ_ERROR_BUSY",
    [AQ_ERROR_INTERNAL] = "AQ_ERROR_INTERNAL",
};

AQ_API const char *aq_status_string(aq_status_t status) {
  if ((unsigned)status >= AQ_STATUS_COUNT_ || !names[status]) return "AQ_STATUS_UNKNOWN";
  return names[status];
}

AQ_API const char *aq_last_error(void) { return last_error; }

aq_status_t aq_error(aq_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return status;
}

void aq_error_clear(void) { last_error[0] = '\0'; }

aq_status_t aq_error_annotate(aq_status_t status, const char *fmt, ...) {
  char context[256], rest[sizeof(last_error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(context, sizeof(context), fmt, ap);
  va_end(ap);
  snprintf(rest, sizeof(rest), "%s", last_error);
  snprintf(last_error, sizeof(last_error), "%s: %s", context, rest);
  return status;
}

void aq_error_save(aq_error_saved_t *saved) { snprintf(saved->message, sizeof(saved->message), "%s", last_error); }

aq_status_t aq_error_restore(aq_status_t status, const aq_error_saved_t *saved) {
  snprintf(last_error, sizeof(last_error), "%s", saved->message);
  return status;
}
