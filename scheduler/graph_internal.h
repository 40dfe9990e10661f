/* The scheduler's private structures: what a graph records, and what an
 * exec keeps to re-run it cheaply. */
#ifndef AQ_SCHEDULER_GRAPH_INTERNAL_H_
#define AQ_SCHEDULER_GRAPH_INTERNAL_H_

#include <stdatomic.h>

#include "aquila/code_object.h"
#include "aquila/graph.h"
#include "aquila/signal.h"

enum { TASK_KERNARG_MAX = 256, TASK_NAME_MAX = 64 };

/* TASK_STREAM: a call that puts work of its own on a GPU lane's stream (a
 * NCCL collective), lowered to an AQ_AGENT_DISPATCH_STREAM_CALL packet
 * whose return_address is its kernarg with its tensors' addresses filled
 * in, as a kernel's (in the GPU agent's kernarg arena, host memory); GPU
 * agents only. */
typedef enum task_kind { TASK_KERNEL = 1, TASK_HOST = 2, TASK_STREAM = 3 } task_kind_t;

/* What an op task means, for aq_graph_backward. */
typedef enum op_kind {
  OP_NONE = 0,
  OP_MATMUL,
  OP_RELU,
  OP_UNARY, /* sigmoid, tanh, gelu: bwd_kernel, differentiated from out or in */
  OP_DROPOUT,
  OP_CONV2D,     /* in: x, w, bias; out: y; kernarg: the forward's */
  OP_POOL,       /* max-pool; aux: the argmax tensor */
  OP_BATCH_NORM, /* in: x, gamma, beta; aux: mean, rstd (pairs: aux, aux + 1) */
  OP_RESHAPE,    /* out = in[0], another shape */
  OP_XENT,  /* writes probs and per-row losses */
  OP_MEAN,  /* the scalar loss of an OP_XENT */
  OP_OTHER, /* backward and optimizer tasks: not differentiated */
} op_kind_t;

typedef struct tensor {
  char name[48];
  aq_dtype_t dtype;
  aq_tensor_role_t role;
  uint32_t rank;
  int64_t dims[AQ_MAX_RANK];
  size_t bytes;
  uint32_t grad; /* gradient tensor id, after backward */
  aq_initializer_t init; /* kind 0: none (aq_tensor_init) */
} tensor_t;

typedef struct task {
  /* What placement and lowering read of every task comes first, so that
   * a pass over a large graph touches a few of each task's cache lines,
   * not all of them: instantiating makes a dozen such passes. */
  task_kind_t kind;
  int32_t agent;
  uint32_t nreads, nwrites;
  /* explicit edges */
  uint32_t nafter_all, nafter_any;
  uint32_t *after_all, *after_any;
  /* tensors, and where their addresses go in the kernarg */
  uint32_t reads[AQ_TASK_MAX_TENSORS], writes[AQ_TASK_MAX_TENSORS];
  /* kernel tasks: the op library's (code_object.handle == 0) or a user's */
  aq_code_object_t code_object;
  uint64_t cost_key; /* aq_kernel_task_t's: part of the performance model's key */
  aq_dispatch_shape_t shape;
  uint32_t kernarg_size;
  char kernel[64];
  uint32_t read_off[AQ_TASK_MAX_TENSORS], write_off[AQ_TASK_MAX_TENSORS];
  /* host tasks; stream tasks: stream_fn, with args as arg[1..3] */
  aq_host_call_fn_t fn;
  aq_stream_call_fn_t stream_fn;
  void *user;
  uint64_t args[3];
  /* op semantics */
  op_kind_t op;
  uint32_t in[3], out, aux;
  int trans_a, trans_b, activation;
  const char *bwd_kernel; /* OP_UNARY */
  int bwd_from_input;     /* OP_UNARY: f' from x (gelu) rather than y */
  uint64_t seed;          /* OP_DROPOUT */
  float p;                /* OP_DROPOUT */
  char name[TASK_NAME_MAX];
  uint8_t kernarg[TASK_KERNARG_MAX];
} task_t;

struct aq_graph {
  tensor_t *tensors; /* [0] unused: id 0 is "no tensor" */
  uint32_t ntensors, cap_tensors;
  task_t *tasks;
  uint32_t ntasks, cap_tasks;
  _Atomic int execs; /* live execs made from it */
  uint32_t *names;    /* open addressing over tensor names: tensor ids, 0 empty */
  uint32_t names_cap; /* a power of two, at least twice the tensors */
  uint32_t name_suffix; /* generated names made unique so far (graph.c's make_unique) */
  int group;          /* 0: none; 1: unordered; 2: ordered */
  uint32_t group_first; /* index of the group's first task */
  /* The communicator of several GPUs of this process that its collectives
   * use: instantiation replicates the step per GPU (ranks.h). */
  struct aq_comm *ranks_comm;
};

/* Appends a tensor / task; the task's id is its index + 1. */
aq_status_t aq_graph_new_tensor(aq_graph_t *g, const char *name, aq_dtype_t dtype, aq_tensor_role_t role,
                             uint32_t rank, const int64_t *dims, uint32_t *out_id);
aq_status_t aq_graph_new_task(aq_graph_t *g, const task_t *t, uint32_t *out_id);
/* The partial sums a batch norm pass's two kernels pass on (ops_nn.c). */
aq_status_t aq_batch_norm_partial(aq_graph_t *g, int64_t channels, int32_t slices, const char *name, uint32_t *out);
tensor_t *aq_graph_tensor(aq_graph_t *g, aq_tensor_t t); /* NULL if not of g */
/* A generated name: "fn(a)", or "fn(a,b)" where b is not NULL, in size
 * bytes. An operand too long for its share is cut and its open parentheses
 * closed after "..", so the name stays balanced. A tensor's generated name
 * that another tensor already has gets "#2", "#3", ... (aq_graph_new_tensor). */
void aq_graph_name(char *out, size_t size, const char *fn, const char *a, const char *b);
/* src in at most room characters (plus the NUL), cut as aq_graph_name cuts. */
void aq_graph_fit(char *out, size_t room, const char *src);

/* Adds a kernel task of the op library, with the tensor slots given. */
typedef struct slot {
  uint32_t tensor;
  uint32_t offset; /* in the kernarg; UINT32_MAX if not passed */
} slot_t;
aq_status_t aq_graph_op_task(aq_graph_t *g, const char *name, const char *kernel, const void *kernarg,
                          uint32_t kernarg_size, aq_dispatch_shape_t shape, const slot_t *reads,
                          uint32_t nreads, const slot_t *writes, uint32_t nwrites, uint32_t *out_task);

/* A GPU launch shape (the op library's, for kernel of task) refused
 * (AQ_ERROR_INVALID_GRAPH, naming the task and the limit) where CUDA could
 * not launch it: 2^31 - 1 blocks along x, 65535 along y and z, and a grid
 * of 2^32 work-items or more along any (AQ_GRID_TOO_LARGE). A product of 5
 * million rows would otherwise launch wrong. */
aq_status_t aq_graph_check_gpu_grid(const char *task, const char *kernel, aq_dispatch_shape_t shape);

/* For a failed op-library task: ": <what its code means>" after a fault
 * message that says "(returned N)", else "". */
const char *aq_graph_fault_meaning(const task_t *task, const char *fault);

/* Initial values (init.c): writes every initialised tensor of g into the
 * exec made from it (after its memory is planned); and, before its first
 * run, refuses a parameter some task reads that was neither initialised nor
 * given data (given: per tensor id of g, set by aq_exec_write and the like). */
aq_status_t aq_graph_write_initial_values(aq_exec_t *e, const aq_graph_t *g);
aq_status_t aq_graph_check_parameters(const aq_graph_t *g, const uint8_t *given);

#endif /* AQ_SCHEDULER_GRAPH_INTERNAL_H_ */
