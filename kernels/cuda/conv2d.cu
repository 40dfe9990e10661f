// conv2d (NCHW; stride, padding, dilation) on GPUs in fp32, forward and both
// backwards: the direct loops of conv2d_direct.cuh over float tensors (the
// launch shapes and the work each thread does are described there).
#include "conv2d_direct.cuh"

AQ_KERNEL void aq_conv2d_f32(aq_conv2d_args_t a) {
  if (!a.x || !a.w || !a.y || !conv::valid(a)) return;
  conv::forward(a, a.x, a.w);
}

AQ_KERNEL void aq_conv2d_bwd_data_f32(aq_conv2d_args_t a) {
  if (!a.w || !a.dy || !a.dx || !conv::valid(a)) return;
  conv::backward_data(a, a.w, a.dy);
}

AQ_KERNEL void aq_conv2d_bwd_filter_f32(aq_conv2d_args_t a) {
  if (!a.x || !a.dy || !a.dw || !conv::valid(a)) return;
  conv::backward_filter(a, a.x, a.dy);
}
