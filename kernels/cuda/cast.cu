// fp32 <-> bf16, rounding to nearest even as the CPU kernels do.
#include "common.cuh"

AQ_KERNEL void aq_cast_f32_bf16(aq_cast_args_t p) {
  int64_t i = global_x();
  if (i >= p.n) return;
  uint32_t u = __float_as_uint(((const float *)p.src)[i]);
  uint16_t b = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                                                : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  ((uint16_t *)p.dst)[i] = b;
}

AQ_KERNEL void aq_cast_bf16_f32(aq_cast_args_t p) {
  int64_t i = global_x();
  if (i < p.n) ((float *)p.dst)[i] = __uint_as_float((uint32_t)((const uint16_t *)p.src)[i] << 16);
}
