/* Kernels the runtime tests dispatch: a CPU code object like any user's. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aquila/kernel.h"

#ifndef TEST_ABI_VERSION
#define TEST_ABI_VERSION AQ_CODE_OBJECT_VERSION
#endif
/* The op table it ships: 1 a good one, 0 none, 2 one naming a kernel it
 * lacks, 3 one whose learning rate lies past the kernarg. */
#ifndef TEST_OP_TABLE
#define TEST_OP_TABLE 1
#endif

static int noop(const void *kernarg, const aq_dispatch_ctx_t *ctx) {
  (void)kernarg;
  (void)ctx;
  return 0;
}

/* Counts every work-item it runs, into hits[linear id]. */
typedef struct { _Atomic uint32_t *hits; } count_args_t;
static int count(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const count_args_t *a = kernarg;
  for (uint32_t z = 0; z < c->group_size[2]; ++z)
    for (uint32_t y = 0; y < c->group_size[1]; ++y)
      for (uint32_t x = 0; x < c->group_size[0]; ++x) {
        uint64_t gx = (uint64_t)c->group_id[0] * c->workgroup_size[0] + x;
        uint64_t gy = (uint64_t)c->group_id[1] * c->workgroup_size[1] + y;
        uint64_t gz = (uint64_t)c->group_id[2] * c->workgroup_size[2] + z;
        atomic_fetch_add(&a->hits[(gz * c->grid_size[1] + gy) * c->grid_size[0] + gx], 1);
      }
  return 0;
}

/* Appends its tag to a log: the tests read the order packets ran in. */
typedef struct { _Atomic uint32_t *cursor; uint32_t *log; uint32_t tag; uint32_t sleep_us; } log_args_t;
static int log_tag(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)c;
  const log_args_t *a = kernarg;
  if (a->sleep_us) {
    struct timespec ts = {0, (long)a->sleep_us * 1000};
    nanosleep(&ts, 0);
  }
  a->log[atomic_fetch_add(a->cursor, 1)] = a->tag;
  return 0;
}

/* Fails with the code it is given. */
typedef struct { int code; } fault_args_t;
static int fault(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)c;
  return ((const fault_args_t *)kernarg)->code;
}

/* Busy-waits: a calibrated amount of work. */
typedef struct { uint64_t ns; } spin_args_t;
static int spin(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)c;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t.tv_nsec - t0.tv_nsec) <
         ((const spin_args_t *)kernarg)->ns);
  return 0;
}

/* Busy-waits ns, then records which worker ran its group. */
typedef struct { uint32_t *worker; uint64_t ns; } who_args_t;
static int who(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const who_args_t *a = kernarg;
  spin(&(spin_args_t){a->ns}, c);
  a->worker[c->group_id[0]] = c->worker_index;
  return 0;
}

/* Uses its group segment: fails if it is missing or not private. */
static int scratch(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)kernarg;
  if (!c->group_segment || c->group_segment_size < 4096 || ((uintptr_t)c->group_segment & 63)) return 3;
  volatile uint8_t *p = c->group_segment;
  for (int i = 0; i < 4096; ++i) p[i] = (uint8_t)(i + c->group_id[0]);
  for (int i = 0; i < 4096; ++i)
    if (p[i] != (uint8_t)(i + c->group_id[0])) return 4;
  return 0;
}

/* Adds up the work-items of every group it runs: a grid too large for a
 * hits[] array is still counted. */
typedef struct { _Atomic uint64_t *items; } tally_args_t;
static int tally(const void *kernarg, const aq_dispatch_ctx_t *c) {
  atomic_fetch_add(((const tally_args_t *)kernarg)->items,
                   (uint64_t)c->group_size[0] * c->group_size[1] * c->group_size[2]);
  return 0;
}

/* Writes through the pointer it is given: a bad one is a memory fault. */
typedef struct { volatile int *where; } poke_args_t;
static int poke(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)c;
  *((const poke_args_t *)kernarg)->where = 42;
  return 0;
}

/* Says it started, then busy-waits ns (UINT64_MAX: for ever). */
typedef struct { _Atomic int *started; uint64_t ns; } busy_args_t;
static int busy(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const busy_args_t *a = kernarg;
  atomic_store(a->started, 1);
  spin_args_t s = {a->ns};
  return spin(&s, c);
}

/* Aborts: a fault no worker can recover from. */
static int die(const void *kernarg, const aq_dispatch_ctx_t *c) {
  (void)kernarg, (void)c;
  abort();
}

/* An optimizer as a user would write one: w -= lr, each step (a gradient
 * of ones); its op table entry says where lr is, for
 * aq_exec_set_learning_rate. */
typedef struct { float *w; int64_t n; float lr; int32_t reserved_; } descend_args_t;
static int descend(const void *kernarg, const aq_dispatch_ctx_t *c) {
  const descend_args_t *a = kernarg;
  if (c->group_id[0] == 0)
    for (int64_t i = 0; i < a->n; ++i) a->w[i] -= a->lr;
  return 0;
}

static const aq_kernel_desc_t kernels[] = {
    {"noop", noop, 0, 0, 0, 0},
    {"count", count, sizeof(count_args_t), 8, 0, 0},
    {"log_tag", log_tag, sizeof(log_args_t), 8, 0, 0},
    {"fault", fault, sizeof(fault_args_t), 4, 0, 0},
    {"spin", spin, sizeof(spin_args_t), 8, 0, 0},
    {"scratch", scratch, 0, 0, 4096, 0},
    {"who", who, sizeof(who_args_t), 8, 0, 0},
    {"tally", tally, sizeof(tally_args_t), 8, 0, 0},
    {"poke", poke, sizeof(poke_args_t), 8, 0, 0},
    {"busy", busy, sizeof(busy_args_t), 8, 0, 0},
    {"abort", die, 0, 0, 0, 0},
    {"descend", descend, sizeof(descend_args_t), 8, 0, 0},
};

#if TEST_OP_TABLE
static const aq_op_desc_t ops[] = {
    {TEST_OP_TABLE == 2 ? "no_such_kernel" : "descend", AQ_OP_OPTIMIZER,
     TEST_OP_TABLE == 3 ? (uint32_t)sizeof(descend_args_t) : (uint32_t)offsetof(descend_args_t, lr),
     AQ_OP_FIELD_NONE, 0},
};
#if TEST_OP_TABLE == 4 /* a fusion with a flag no runtime knows (1u << 7) */
static int any_pair(const void *product, const void *consumer) { return (void)product, (void)consumer, 1; }
static void keep_product(const void *product, const void *consumer, void *fused) {
  (void)consumer, memcpy(fused, product, sizeof(count_args_t));
}
static const aq_op_fusion_t fusions[] = {
    {"count", "descend", "count", offsetof(descend_args_t, w), sizeof(count_args_t), AQ_OP_FIELD_NONE, 1u << 7,
     any_pair, keep_product},
};
#define TEST_FUSIONS fusions
#define TEST_FUSION_COUNT 1
#else
#define TEST_FUSIONS NULL
#define TEST_FUSION_COUNT 0
#endif
/* no builds for other agents */
__attribute__((visibility("default"))) const aq_op_table_t aq_op_table = {
    AQ_OP_TABLE_MAGIC, AQ_OP_TABLE_VERSION, sizeof(ops) / sizeof(ops[0]), TEST_FUSION_COUNT, ops, TEST_FUSIONS, 0, 0,
    NULL};
#endif

__attribute__((visibility("default"))) const aq_code_object_table_t aq_code_object_table = {
    AQ_CODE_OBJECT_MAGIC, TEST_ABI_VERSION, AQ_ISA_NATIVE,
    sizeof(kernels) / sizeof(kernels[0]), kernels, "aquila tests"};
