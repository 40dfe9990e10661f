/* Signals: 64-bit values that agents and threads use to say "done".
 *
 * As in HSA, a packet's completion signal is decremented by one when the
 * packet completes, so a signal created at N counts N packets down to zero.
 * Loads acquire, stores release and read-modify-writes are acquire-release.
 * A waiter spins briefly (aq_init_options_t.spin_us) and then sleeps on a
 * futex, so short waits are fast and long ones cost no CPU.
 *
 * A signal can also carry a failure: when a kernel faults, its completion
 * signal is marked failed and still decremented, so waiters wake and learn
 * of it (AQ_ERROR_KERNEL_FAULT) instead of hanging; barrier packets pass the
 * failure on to their own completion signal, so dependent work fails too.
 */
#ifndef AQUILA_SIGNAL_H_
#define AQUILA_SIGNAL_H_

#include <stdint.h>

#include "aquila/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_signal { uint64_t handle; } aq_signal_t;
typedef int64_t aq_signal_value_t;

#define AQ_TIMEOUT_INFINITE UINT64_MAX

typedef enum aq_signal_condition {
  AQ_SIGNAL_EQ = 0,
  AQ_SIGNAL_NE = 1,
  AQ_SIGNAL_LT = 2,
  AQ_SIGNAL_GTE = 3,
} aq_signal_condition_t;

aq_status_t aq_signal_create(aq_signal_value_t initial, aq_signal_t *out_signal);
aq_status_t aq_signal_destroy(aq_signal_t signal);

aq_status_t aq_signal_load(aq_signal_t signal, aq_signal_value_t *out_value);
aq_status_t aq_signal_store(aq_signal_t signal, aq_signal_value_t value);
aq_status_t aq_signal_add(aq_signal_t signal, aq_signal_value_t value);
aq_status_t aq_signal_subtract(aq_signal_t signal, aq_signal_value_t value);
aq_status_t aq_signal_exchange(aq_signal_t signal, aq_signal_value_t value,
                               aq_signal_value_t *out_old);
/* Stores desired if the value equals expected; *out_observed gets the value
 * seen before (equal to expected exactly when the store happened). */
aq_status_t aq_signal_cas(aq_signal_t signal, aq_signal_value_t expected,
                          aq_signal_value_t desired, aq_signal_value_t *out_observed);

/* Waits until (value COND compare) holds or timeout_ns passes
 * (AQ_ERROR_TIMEOUT; AQ_TIMEOUT_INFINITE waits forever). out_observed (may be
 * NULL) gets the last value seen. A failed signal returns
 * AQ_ERROR_KERNEL_FAULT once the condition holds, with the fault's message. */
aq_status_t aq_signal_wait(aq_signal_t signal, aq_signal_condition_t condition,
                           aq_signal_value_t compare, uint64_t timeout_ns,
                           aq_signal_value_t *out_observed);

/* The failure a signal carries (AQ_OK if none), and clears it when reset is
 * non-zero, so a signal can be reused after a fault. */
aq_status_t aq_signal_get_error(aq_signal_t signal, int reset, aq_status_t *out_error);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_SIGNAL_H_ */
