/* Epilogue fusion: after placement, a matmul whose one consumer is an
 * elementwise op it can apply in its write-back (relu's backward, an SGD
 * update) runs as one kernel, aq_matmul_fused_f32, at the consumer's place
 * in the plan, and a bias gradient (a sum over rows) with its SGD update as
 * aq_sum_rows_sgd_f32; the product's own task gets no packet. */
#ifndef AQ_SCHEDULER_FUSE_H_
#define AQ_SCHEDULER_FUSE_H_

#include "aquila/ops.h"
#include "scheduler/plan.h"

typedef struct fusion {
  uint32_t *product;  /* per task: the product task its kernel takes in, or UINT32_MAX */
  uint8_t *absorbed;  /* per task: 1 when its work runs in its consumer's kernel */
  uint32_t *unstored; /* per tensor: the consumer task whose kernel takes it in
                         instead of storing it, or UINT32_MAX */
  uint32_t count;
} fusion_t;

/* The fused forms, as bits of fuse_in_t.agent_fuses. */
enum { FUSE_MATMUL_RELU_MASK = 1u << 0, FUSE_MATMUL_SGD = 1u << 1, FUSE_SUM_ROWS_SGD = 1u << 2 };

typedef struct fuse_in {
  aq_graph_t *graph;
  uint32_t nlanes;
  const uint32_t *lane_agent; /* lane -> agent index */
  /* agent -> the FUSE_* forms it runs: where the fused kernel exists, and
   * fusing measured faster there */
  const uint8_t *agent_fuses;
  int off; /* AQ_EXEC_NO_FUSION or AQ_FUSION=0: plan no fusion */
} fuse_in_t;

/* Finds the fusable pairs; each consumer then waits for its product's
 * producers too, the product's other successors wait for the consumer, and
 * the plan's order and lane positions follow (the product task stays the
 * consumer's predecessor, so what follows the consumer still follows every
 * task that touched the product's operands). The arrays are allocated even
 * when nothing fuses. */
aq_status_t aq_fuse_plan(const fuse_in_t *in, plan_t *plan, fusion_t *out);
void aq_fusion_free(fusion_t *f);

/* For a consumer that took product in: the fused kernel it runs, the bytes
 * of that kernel's arguments, and where in them the learning rate is
 * (SIZE_MAX: no optimizer). */
const char *aq_fuse_kernel(const aq_graph_t *g, uint32_t product);
size_t aq_fuse_kernarg_size(const aq_graph_t *g, uint32_t product);
size_t aq_fuse_lr_offset(const aq_graph_t *g, uint32_t consumer, uint32_t product);

/* The fused kernel's arguments, into out (aq_fuse_kernarg_size bytes), from
 * the consumer's and the product's kernargs with their tensor addresses
 * filled in. */
void aq_fuse_kernarg(const aq_graph_t *g, uint32_t consumer, uint32_t product, const void *consumer_args,
                  const void *product_args, void *out);

#endif
