/* aq_copy: moves a tensor's bytes, whatever its dtype (a batch from the
 * loader's buffer into the one the step reads). */
#include <string.h>

#include "aquila/ops.h"
#include "kernels/cpu/grid.h"
#include "kernels/cpu/table.h"

static int copy(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  const aq_copy_args_t *a = kernarg;
  if (!a->src || !a->dst || a->bytes < 0 || a->bytes % 4) return 1;
  int64_t lo, hi;
  if (!aq_group_range(ctx, a->bytes / 4, &lo, &hi)) return 0;
  memcpy((char *)a->dst + lo * 4, (const char *)a->src + lo * 4, (size_t)(hi - lo) * 4);
  return 0;
}

const aq_kernel_desc_t aq_cpu_copy_desc = {AQ_KERNEL_COPY, copy, sizeof(aq_copy_args_t), 8, 0, 0};
