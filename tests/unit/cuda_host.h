/* The few CUDA spellings that kernels/cuda's thread-level headers use, for
 * a host build that checks them (conv_gemm_maps.cc): one thread, one block. */
#ifndef AQ_TESTS_UNIT_CUDA_HOST_H_
#define AQ_TESTS_UNIT_CUDA_HOST_H_

#include <stdint.h>
#include <string.h>

#define __device__
#define __host__
#define __forceinline__ inline

struct int4 {
  int x, y, z, w;
};
struct uint4 {
  uint32_t x, y, z, w;
};
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
static inline uint32_t __umulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
static inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t shift) {
  return (uint32_t)((((uint64_t)hi << 32) | lo) >> (shift & 31));
}
/* The high word of hi:lo shifted left by shift (at most 32). */
static inline uint32_t __funnelshift_lc(uint32_t lo, uint32_t hi, uint32_t shift) {
  return (uint32_t)(((((uint64_t)hi << 32) | lo) << (shift < 32 ? shift : 32)) >> 32);
}
template <class T>
static inline T __ldg(const T *p) {
  return *p;
}
static const struct {
  unsigned x, y, z;
} threadIdx = {0, 0, 0};
static inline void __syncthreads(void) {}

#endif
