/* The aq_error of the scheduler objects this program links itself
 * (units.h): libaquila's is hidden, and keeps its message to itself. */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/status.h"
#include "units.h"

char units_error[256];

aq_status_t aq_error(aq_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(units_error, sizeof(units_error), fmt, ap);
  va_end(ap);
  return status;
}
