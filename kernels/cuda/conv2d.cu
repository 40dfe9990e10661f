// conv2d (NCHW; stride, padding, dilation) on GPUs in fp32, forward and both
// backwards: tiled in shared memory where the planes fit (conv2d_tiled.cuh;
// the backward filter staged where its taps fit a thread, conv2d_filter.cuh),
// else the direct loops of conv2d_direct.cuh (the launch shapes and the
// work each thread does are described there).
#include "conv2d_filter.cuh"

AQ_KERNEL void aq_conv2d_f32(aq_conv2d_args_t a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
  if (!conv::tiled(a, 0)) return conv::forward(a, a.x, a.w);
  const int taps = conv::one_channel_taps(a);
  if (taps == 3) conv::forward_one_channel<3>(a);
  else if (taps == 5) conv::forward_one_channel<5>(a);
  else conv::forward_tiled(a);
}

AQ_KERNEL void aq_conv2d_bwd_data_f32(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
  if (!conv::tiled(a, 1)) conv::backward_data(a, a.w, a.dy);
  else if (!aq_conv2d_data_runs(&a)) conv::backward_data_tiled(a);
  else if (a.c == 1) a.s <= 3 ? conv::backward_data_runs<3, 1>(a) : conv::backward_data_runs<5, 1>(a);
  else a.s <= 3 ? conv::backward_data_runs<3, 2>(a) : conv::backward_data_runs<5, 2>(a);
}

AQ_KERNEL void __launch_bounds__(AQ_GPU_CONV2D_TILED_FILTER_BLOCK) aq_conv2d_bwd_filter_f32(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  if (conv::tiled(a, 2)) conv::backward_filter_tiled<1>(a);
  else conv::backward_filter_fast<float, 1>(a, a.x, a.dy);
}

// The same, the batch split over a cluster (ops_gpu.h: the grid's x a
// multiple of the cluster).
AQ_KERNEL void AQ_CONV_CLUSTER(AQ_GPU_CONV2D_BWD_FILTER_SPLIT) __launch_bounds__(AQ_GPU_CONV2D_TILED_FILTER_BLOCK)
    aq_conv2d_bwd_filter_f32_split(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  if (conv::tiled(a, 2)) conv::backward_filter_tiled<AQ_GPU_CONV2D_BWD_FILTER_SPLIT>(a);
  else conv::backward_filter_fast<float, AQ_GPU_CONV2D_BWD_FILTER_SPLIT>(a, a.x, a.dy);
}

// The staged builds (conv2d_filter.cuh; ops_gpu.h), over clusters of 8, 4
// and 16.
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_f32_staged, AQ_GPU_CONV2D_BWD_FILTER_SPLIT, float)
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_f32_staged4, AQ_GPU_CONV2D_STAGED_FEW, float)
AQ_CONV2D_STAGED_KERNEL(aq_conv2d_bwd_filter_f32_staged16, AQ_GPU_CONV2D_STAGED_MANY, float)
