// Tanh and its backward (from the forward output).
#include "activations.cuh"
AQ_CUDA_UNARY(aq_tanh_f32, tanhf(x))
AQ_CUDA_UNARY_BWD(aq_tanh_bwd_f32, dy * (1.0f - x * x))
