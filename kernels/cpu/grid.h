/* The slice of a 1-D grid that one work-group covers. */
#ifndef AQ_KERNELS_CPU_GRID_H_
#define AQ_KERNELS_CPU_GRID_H_

#include <stdint.h>

#include "aquila/kernel.h"

/* [lo, hi) of this group within n items; 0 if it is empty. */
static inline int aq_group_range(const aq_dispatch_ctx_t *ctx, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = (int64_t)ctx->group_id[0] * ctx->workgroup_size[0];
  *hi = *lo + ctx->group_size[0];
  if (*hi > n) *hi = n;
  return *lo < *hi;
}

#endif
