/* my-kernels.so: a CPU code object of your own, built the way Aquila's op
 * library is (examples/user_kernels/module.mk):
 *
 *   cc -std=c11 -O2 -fPIC -shared -fvisibility=hidden -I<aquila>/include \
 *      -o my-kernels.so my_kernels.c
 *
 * Each kernel is called once per work-group with the packet's kernarg and
 * loops over the group's work-items itself; a non-zero return is a fault,
 * reported with the kernel's name. The table exported by
 * AQ_DEFINE_CODE_OBJECT is all the runtime looks for. */
#include <stdint.h>

#include "aquila/kernel.h"
#include "my_kernels.h"

/* The work-items of this group along x: [*lo, *hi). */
static void span(const aq_dispatch_ctx_t *c, uint64_t *lo, uint64_t *hi) {
  *lo = (uint64_t)c->group_id[0] * c->workgroup_size[0];
  *hi = *lo + c->group_size[0];
}

static int fill(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const my_fill_args_t *a = kernarg;
  if (!a->x) return 1;
  uint64_t lo, hi;
  span(c, &lo, &hi);
  for (uint64_t i = lo; i < hi; ++i) a->x[i] = a->start + a->step * (float)i;
  return 0;
}

static int saxpy(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const my_saxpy_args_t *a = kernarg;
  if (!a->x || !a->y) return 1;
  uint64_t lo, hi;
  span(c, &lo, &hi);
  for (uint64_t i = lo; i < hi; ++i) a->y[i] = a->a * a->x[i] + a->y[i];
  return 0;
}

static int scale(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const my_scale_args_t *a = kernarg;
  if (!a->x) return 1;
  uint64_t lo, hi;
  span(c, &lo, &hi);
  for (uint64_t i = lo; i < hi; ++i) a->x[i] *= a->s;
  return 0;
}

static const aq_kernel_desc_t kernels[] = {
    {"my_fill", fill, sizeof(my_fill_args_t), 8, 0, 0},
    {"my_saxpy", saxpy, sizeof(my_saxpy_args_t), 8, 0, 0},
    {"my_scale", scale, sizeof(my_scale_args_t), 8, 0, 0},
};
AQ_DEFINE_CODE_OBJECT("examples/user_kernels", kernels);
