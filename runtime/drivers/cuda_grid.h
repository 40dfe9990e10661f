/* CUDA's launch limits, in blocks along x, y and z: what a grid of
 * work-items in work-groups needs, and whether CUDA launches it. The CUDA
 * queue checks each dispatch packet against them, and graph building
 * refuses a GPU shape past them early, with the task's name
 * (aq_graph_check_gpu_grid), so both read them here. */
#ifndef AQ_RUNTIME_DRIVERS_CUDA_GRID_H_
#define AQ_RUNTIME_DRIVERS_CUDA_GRID_H_

#include <stdint.h>

static inline uint64_t aq_cuda_grid_max_blocks(int dim) { return dim == 0 ? 2147483647u : 65535u; }

/* Blocks of wg work-items covering items along dim (64-bit: a grid near
 * 2^32 must not wrap to a handful of blocks); 0 past CUDA's limit there. */
static inline uint64_t aq_cuda_grid_blocks(uint64_t items, uint64_t wg, int dim) {
  uint64_t b = (items + wg - 1) / wg;
  return b <= aq_cuda_grid_max_blocks(dim) ? b : 0;
}

#endif /* AQ_RUNTIME_DRIVERS_CUDA_GRID_H_ */
