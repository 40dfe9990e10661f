/* Fault records: what failed, where. A kernel fault happens on a worker or a
 * packet-processor thread, far from the thread that will learn of it by
 * waiting on a signal; the message is kept here under a small id that the
 * failed signal carries, and the waiter's aq_last_error gets it back. */
#ifndef AQ_RUNTIME_FAULT_H_
#define AQ_RUNTIME_FAULT_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/status.h"

/* Records a message; returns its id (never 0), which carries the status
 * (AQ_ERROR_INTERNAL for AQ_OK or an unknown one). Keeps the last 256
 * messages. */
uint32_t aq_fault_record(aq_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Copies the message of id into buf (that it is no longer recorded, if
 * gone) and returns its status, gone or not. */
aq_status_t aq_fault_message(uint32_t id, char *buf, size_t size);

#endif /* AQ_RUNTIME_FAULT_H_ */
