/* collectives-cpu.so: the kernel that hands a task's tensor addresses to
 * the runtime (call.h). One work-item; it never fails: what goes wrong is
 * reported by the task that completes the work it starts. */
#include "kernels/comm/call.h"

#include "aquila/kernel.h"

static int tensor_call(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)ctx;
  const aq_tensor_call_args_t *a = kernarg;
  if (!a->fn) return 1;
  a->fn(a->user, a->ptrs);
  return 0;
}

static const aq_kernel_desc_t kernels[] = {
    {AQ_KERNEL_TENSOR_CALL, tensor_call, sizeof(aq_tensor_call_args_t), 8, 0, 0},
};
AQ_DEFINE_CODE_OBJECT("aquila collectives", kernels);
