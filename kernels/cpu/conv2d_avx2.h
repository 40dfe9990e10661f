/* conv2d's vector direct paths (conv2d_avx2.c). */
#ifndef AQ_KERNELS_CPU_CONV2D_AVX2_H_
#define AQ_KERNELS_CPU_CONV2D_AVX2_H_

#include <stddef.h>

#include "aquila/ops.h"

/* Whether the wide path takes a: stride and dilation 1, C R S within one
 * depth slice of the GEMM, so its sums are the GEMM path's bit for bit,
 * and its scratch (forward and filter gradient) within the GEMM's. */
int conv2d_wide_fits(const aq_conv2d_args_t *a);

/* Floats of scratch conv2d_fwd_wide_avx2 needs. */
size_t conv2d_wide_fwd_floats(const aq_conv2d_args_t *a);

/* The forward of images [n0, n1) on the padded-width grid (AVX2 + FMA). */
void conv2d_fwd_wide_avx2(const aq_conv2d_args_t *a, int64_t n0, int64_t n1, float *scratch);

/* Floats of scratch conv2d_bwd_filter_wide_avx2 needs. */
size_t conv2d_wide_bwd_floats(const aq_conv2d_args_t *a);

/* The filters a part of conv2d_bwd_filter_wide_avx2 takes come in
 * multiples of this (16 where the filters ride in the lanes). */
int64_t conv2d_dw_filter_unit(const aq_conv2d_args_t *a);

/* dw for filters [k0, k1) x taps [l0, l1) of the c r s flattened, summed
 * over the whole batch (AVX2 + FMA): each output sums its lanes over the
 * images' positions in order, then (positions in the lanes) across its 8
 * lanes in order, so it does not depend on how the work is cut into
 * parts. */
void conv2d_bwd_filter_wide_avx2(const aq_conv2d_args_t *a, int64_t k0, int64_t k1, int64_t l0, int64_t l1,
                                 float *scratch);

/* The data gradient's column matrix of image n, dcol (C R S x P Q) = W^T
 * dy[n], its rows conv2d_cols_ld(a) floats apart (P Q rounded up to 16);
 * dyc: scratch for K rows of as many floats (AVX2 + FMA). */
int64_t conv2d_cols_ld(const aq_conv2d_args_t *a);
void conv2d_bwd_data_cols_avx2(const aq_conv2d_args_t *a, int64_t n, float *dyc, float *dcol);

/* dx[n] (C planes, every value written) from that column matrix, at stride
 * 1, where conv2d_col2im_fits: each value sums its taps in (r, s) order
 * from zero, as adding the columns into zeros tap by tap does. dcol needs
 * COLS_GUARD readable floats before it and after its last row. */
enum { COLS_GUARD = 64 };
int conv2d_col2im_fits(const aq_conv2d_args_t *a);
void conv2d_col2im_avx2(const aq_conv2d_args_t *a, const float *dcol, int64_t ld, float *dx);

#endif
