/* The runtime's settings as the CPU kernels see them: taken from the first
 * dispatch context that carries them (table.c's entries do it), every
 * setting's default before that. Kernels never read the environment. */
#ifndef AQ_KERNELS_CPU_SETTINGS_H_
#define AQ_KERNELS_CPU_SETTINGS_H_

#include "aquila/kernel.h"

void aq_cpu_settings_take(const aq_dispatch_ctx_t *ctx);
const aq_kernel_settings_t *aq_cpu_settings(void);

#endif
