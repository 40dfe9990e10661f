/* Elementwise updates that two kernels share: the standalone op and a
 * write-back that fuses it (a GEMM's, gemm.h's gemm_post_t; max-pool's
 * backward, pool.c). One body each, so the fused and unfused forms compute
 * every element alike. */
#ifndef AQ_KERNELS_CPU_UPDATE_H_
#define AQ_KERNELS_CPU_UPDATE_H_

#include <stdint.h>

/* AQ_KERNEL_SGD's rule on rows x cols elements (each array's row stride
 * its ld). */
void cpu_sgd_update(int64_t rows, int64_t cols, float *w, int64_t ldw, const float *grad, int64_t ldg,
                    float *velocity, int64_t ldv, float lr, float momentum, float wd);

/* AQ_KERNEL_RELU_BWD's rule on rows x cols elements: dx = dy where y > 0,
 * else 0. */
void cpu_relu_mask(int64_t rows, int64_t cols, const float *y, int64_t ldy, const float *dy, int64_t lddy, float *dx,
                   int64_t lddx);

#endif
