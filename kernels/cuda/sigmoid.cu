// Sigmoid and its backward (from the forward output).
#include "activations.cuh"
AQ_CUDA_UNARY(aq_sigmoid_f32, 1.0f / (1.0f + __expf(-x)))
AQ_CUDA_UNARY_BWD(aq_sigmoid_bwd_f32, dy * x * (1.0f - x))
