/* Epilogue fusion: after placement, a product whose one consumer is an op
 * it can apply in its write-back runs with it as one kernel at the
 * consumer's place in the plan; the product's own task gets no packet.
 * Which pairs fuse, into what, and how their kernargs merge is the op
 * library's to say (kernel.h's aq_op_fusion_t): in Aquila's, a matmul with
 * relu's backward or an SGD update (aq_matmul_fused_f32), a bias gradient
 * (a sum over rows) with its SGD update (aq_sum_rows_sgd_f32), batch norm
 * with relu (aq_batch_norm_apply_relu_f32), max-pool's backward with
 * relu's (aq_max_pool2d_bwd_relu_f32). */
#ifndef AQ_SCHEDULER_FUSE_H_
#define AQ_SCHEDULER_FUSE_H_

#include "aquila/ops.h"
#include "scheduler/oplib.h"
#include "scheduler/plan.h"

typedef struct fusion {
  uint32_t *product;  /* per task: the product task its kernel takes in, or UINT32_MAX */
  uint8_t *absorbed;  /* per task: 1 when its work runs in its consumer's kernel */
  uint32_t *unstored; /* per tensor: the consumer task whose kernel takes it in
                         instead of storing it, or UINT32_MAX */
  uint8_t *rule;      /* per task: 1 + the library's rule its fused kernel follows, or 0 */
  const aq_op_fusion_t *rules; /* the library's rules */
  uint32_t count;
  /* Update groups (fuse_group.c): SGD updates one lane queues together run
   * as one aq_sgd_momentum_multi_f32 at the place of the group's last (its
   * lead); the others are absorbed. Per task: its group's lead, or
   * UINT32_MAX; the next in its group (UINT32_MAX after the lead); per
   * lead: the group's first. */
  uint32_t *lead, *next, *first;
  uint32_t groups;
} fusion_t;

typedef struct fuse_in {
  aq_graph_t *graph;
  uint32_t nlanes;
  const uint32_t *lane_agent; /* lane -> agent index */
  const oplib_t *lib;         /* the fusion rules */
  /* agent -> the rules it runs, bit r for lib's fusion r: where the fused
   * kernel exists, and fusing measured faster there */
  const uint32_t *agent_fuses;
  int off; /* AQ_EXEC_NO_FUSION or AQ_FUSION=0: plan no fusion */
} fuse_in_t;

/* Finds the fusable pairs; each consumer then waits for its product's
 * producers too, the product's other successors wait for the consumer, and
 * the plan's order and lane positions follow (the product task stays the
 * consumer's predecessor, so what follows the consumer still follows every
 * task that touched the product's operands). The arrays are allocated even
 * when nothing fuses. */
aq_status_t aq_fuse_plan(const fuse_in_t *in, plan_t *plan, fusion_t *out);
/* t's kernarg as a dispatch would see it, as far as the op library's rules
 * look (TASK_KERNARG_MAX bytes): every tensor slot non-null (a bias read
 * is a bias). */
void aq_task_planned_kernarg(const aq_graph_t *g, const task_t *t, uint8_t *out);
void aq_fusion_free(fusion_t *f);

typedef struct group_in {
  aq_graph_t *graph;
  uint32_t nlanes;
  const uint32_t *lane_agent; /* lane -> agent index */
  const uint8_t *agent_groups; /* agent -> 1 where it runs AQ_KERNEL_SGD_MULTI and fuses */
} group_in_t;

/* Update groups, on the plan's final lane order (after sequencing): on each
 * lane, SGD updates that nothing in the run waits for, up to
 * AQ_SGD_MULTI_MAX, between which the lane waits for no other lane's
 * tasks it had not waited for; each group's lead then also waits for its
 * members' predecessors. */
aq_status_t aq_fuse_groups(const group_in_t *in, plan_t *plan, fusion_t *f);

/* For a consumer that took its product in: the fused kernel it runs, the
 * bytes of that kernel's arguments, and where in them the learning rate is
 * (SIZE_MAX: no optimizer). */
const char *aq_fuse_kernel(const fusion_t *f, uint32_t consumer);
size_t aq_fuse_kernarg_size(const fusion_t *f, uint32_t consumer);
size_t aq_fuse_lr_offset(const fusion_t *f, uint32_t consumer);

/* For an absorbed product (not an update group's member): the consumer
 * whose kernel runs it, found by the one output it does not store. */
uint32_t aq_fuse_consumer_of(const fusion_t *f, const task_t *product);

/* The fused kernel's arguments, into out (aq_fuse_kernarg_size bytes), from
 * the consumer's and the product's kernargs with their tensor addresses
 * filled in. */
void aq_fuse_kernarg(const fusion_t *f, uint32_t consumer, const void *consumer_args, const void *product_args,
                     void *out);

#endif
