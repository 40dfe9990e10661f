/* The settings the CPU kernels run under (settings.h). */
#include "kernels/cpu/settings.h"

/* First wins: the kernels pick their paths once per process (simd.h). */
static aq_kernel_settings_t taken = {.gemm_skip_zeros = 1};
static int state; /* 0: none yet, 1: one worker copying, 2: taken */

void aq_cpu_settings_take(const aq_dispatch_ctx_t *ctx) {
  if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 2 || !ctx || !ctx->settings) return;
  int none = 0;
  if (__atomic_compare_exchange_n(&state, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    taken = *ctx->settings;
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2) {
    /* another worker is copying: a few loads */
  }
}

const aq_kernel_settings_t *aq_cpu_settings(void) {
  static const aq_kernel_settings_t defaults = {.gemm_skip_zeros = 1};
  return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == 2 ? &taken : &defaults;
}
