/* A ring of the most recent fault messages. */
#include "runtime/fault.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

enum { FAULTS = 256, FAULT_MSG = 256 };

static struct {
  pthread_mutex_t mutex;
  uint32_t next;
  uint32_t ids[FAULTS];
  aq_status_t status[FAULTS];
  char msg[FAULTS][FAULT_MSG];
} faults = {.mutex = PTHREAD_MUTEX_INITIALIZER, .next = 1};

uint32_t aq_fault_record(aq_status_t status, const char *fmt, ...) {
  pthread_mutex_lock(&faults.mutex);
  uint32_t id = faults.next++;
  if (faults.next == 0) faults.next = 1;
  uint32_t i = id % FAULTS;
  faults.ids[i] = id;
  faults.status[i] = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(faults.msg[i], FAULT_MSG, fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&faults.mutex);
  return id;
}

aq_status_t aq_fault_message(uint32_t id, char *buf, size_t size) {
  pthread_mutex_lock(&faults.mutex);
  uint32_t i = id % FAULTS;
  aq_status_t s = AQ_ERROR_KERNEL_FAULT;
  if (faults.ids[i] == id) {
    snprintf(buf, size, "%s", faults.msg[i]);
    s = faults.status[i];
  } else {
    snprintf(buf, size, "fault %u: no longer recorded", id);
  }
  pthread_mutex_unlock(&faults.mutex);
  return s;
}
