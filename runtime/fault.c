/* A ring of the most recent fault messages. A fault's id carries its
 * status in its low byte, so that a signal failed long ago (its first fault
 * sticks until reset, while later faults overwrite the ring) still reports
 * the status it failed with once its message is gone. */
#include "runtime/fault.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

enum { FAULTS = 256, FAULT_MSG = 256, STATUS_BITS = 8 };
_Static_assert(AQ_STATUS_COUNT_ <= 1 << STATUS_BITS, "a status fits a fault id's low byte");

static struct {
  pthread_mutex_t mutex;
  uint32_t next; /* the next record's sequence number, from 1 */
  uint32_t ids[FAULTS];
  char msg[FAULTS][FAULT_MSG];
} faults = {.mutex = PTHREAD_MUTEX_INITIALIZER, .next = 1};

uint32_t aq_fault_record(aq_status_t status, const char *fmt, ...) {
  if ((unsigned)status >= AQ_STATUS_COUNT_ || status == AQ_OK) status = AQ_ERROR_INTERNAL;
  pthread_mutex_lock(&faults.mutex);
  const uint32_t seq = faults.next++;
  if (faults.next == 1u << (32 - STATUS_BITS)) faults.next = 1;
  const uint32_t id = seq << STATUS_BITS | (uint32_t)status, i = seq % FAULTS;
  faults.ids[i] = id;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(faults.msg[i], FAULT_MSG, fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&faults.mutex);
  return id;
}

aq_status_t aq_fault_message(uint32_t id, char *buf, size_t size) {
  const aq_status_t s = (aq_status_t)(id & ((1u << STATUS_BITS) - 1));
  pthread_mutex_lock(&faults.mutex);
  const uint32_t i = (id >> STATUS_BITS) % FAULTS;
  if (faults.ids[i] == id)
    snprintf(buf, size, "%s", faults.msg[i]);
  else
    snprintf(buf, size, "fault %u (%s): its message is no longer recorded", id >> STATUS_BITS, aq_status_string(s));
  pthread_mutex_unlock(&faults.mutex);
  return s;
}
