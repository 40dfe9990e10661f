/* Memory faults in CPU kernels.
 *
 * A CPU kernel runs on a worker thread of the runtime, so a kernel that
 * dereferences a bad pointer would take the whole process down. While a
 * kernel runs, its worker catches SIGSEGV, SIGBUS, SIGILL and SIGFPE on an
 * alternate stack and jumps back out of the kernel: the packet fails with
 * AQ_ERROR_KERNEL_FAULT, naming the signal and address, and the worker goes
 * on serving. Outside a kernel (or on any other thread) the signal goes to
 * the handler that was there before, or takes its default action. A kernel
 * that aborts cannot be resumed; a report naming the kernel, agent, queue
 * and packet goes to stderr before the process dies. */
#ifndef AQ_RUNTIME_DRIVERS_CPU_GUARD_H_
#define AQ_RUNTIME_DRIVERS_CPU_GUARD_H_

#include <stdint.h>

#include "aquila/kernel.h"

/* Where the kernel runs, for the messages. */
typedef struct cpu_guard_site {
  const char *kernel, *agent;
  uint32_t queue;
  uint64_t packet;
} cpu_guard_site_t;

/* Once per worker thread, before it runs kernels: its alternate stack (and
 * the process's handlers, the first time). Returns 0 on failure: kernels
 * then run unguarded. */
int aq_cpu_guard_thread_init(void);
void aq_cpu_guard_thread_deinit(void);

/* Calls fn(kernarg, ctx). If it faults, returns CPU_GUARD_FAULTED and
 * fills signo and addr. */
enum { CPU_GUARD_FAULTED = -0x7fff0001 };
int aq_cpu_guard_call(aq_cpu_kernel_fn_t fn, const void *kernarg, const aq_dispatch_ctx_t *ctx,
                   const cpu_guard_site_t *site, int *signo, uintptr_t *addr);

#endif /* AQ_RUNTIME_DRIVERS_CPU_GUARD_H_ */
