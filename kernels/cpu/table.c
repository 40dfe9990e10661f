/* The exported kernel table of kernels-cpu.so. Each op's source defines its
 * descriptors; list them here. */
#include "kernels/cpu/table.h"

static aq_kernel_desc_t kernels[2];

__attribute__((constructor)) static void fill(void) {
  kernels[0] = aq_cpu_noop_desc;
  kernels[1] = aq_cpu_busy_wait_desc;
}

AQ_DEFINE_CODE_OBJECT("aquila op library (cpu)", kernels);
