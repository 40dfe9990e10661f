/* Task graphs: declare deep-learning work once, run it many times.
 *
 * A graph holds tensors (name, dtype, shape, role) and tasks that read and
 * write them. Each op of the kernel library is one call that appends its task
 * and returns its output tensor (aq_op_matmul, aq_op_relu, ...); any kernel of
 * any loaded code object is a task too (aq_graph_add_kernel), and so is a host
 * function on a CPU agent (aq_graph_add_host). Dependencies come from the
 * reads and writes (read-after-write, write-after-read, write-after-write), in
 * the order tasks were added, plus explicit edges (aq_graph_add_edge).
 * aq_graph_backward appends the gradient tasks of a scalar loss for every
 * parameter; aq_op_sgd appends an in-place optimizer update.
 *
 * aq_graph_instantiate checks the graph (every error names the task and the
 * tensor), places each task on a lane (a queue of an agent: AQ_SCHED or the
 * options; eager, round-robin, pinned, NUMA locality, or HEFT over measured
 * performance models), gives every tensor memory in its agent's region
 * (activations share buffers by lifetime; with AQ_EXEC_REPLICATE a tensor has
 * a replica per NUMA node, kept coherent by copy tasks), and lowers the tasks
 * to per-lane AQL packet streams: packets in one queue follow each other; an
 * edge across queues becomes a barrier-AND packet over the last producer on
 * each other queue (five signals a packet, chained). aq_exec_run then only
 * resets signals and copies the prebuilt packets into the queues; it returns
 * at once, and aq_exec_wait (or the run's completion signal) tells when the
 * run is done. aq_exec_write_dot shows the placed graph.
 *
 * Graph and exec handles are opaque pointers; tensors are small ids valid
 * within their graph (and the execs made from it).
 */
#ifndef AQUILA_GRAPH_H_
#define AQUILA_GRAPH_H_

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "aquila/ops.h"
#include "aquila/queue.h"
#include "aquila/runtime.h"
#include "aquila/signal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_graph aq_graph_t;
typedef struct aq_exec aq_exec_t;
typedef struct aq_tensor { uint32_t id; } aq_tensor_t; /* id 0 is "no tensor" */
typedef struct aq_task { uint32_t id; } aq_task_t;

typedef enum aq_dtype { AQ_DTYPE_F32 = 1, AQ_DTYPE_I32 = 2 } aq_dtype_t;

typedef enum aq_tensor_role {
  AQ_ROLE_INPUT = 1,      /* written by the user before each run */
  AQ_ROLE_PARAMETER = 2,  /* trained; kept across runs; has a gradient */
  AQ_ROLE_ACTIVATION = 3, /* produced and consumed inside a run */
  AQ_ROLE_GRADIENT = 4,   /* made by aq_graph_backward */
  AQ_ROLE_CONSTANT = 5,   /* written once by the user */
  AQ_ROLE_STATE = 6,      /* optimizer state: zero at first, kept across runs */
} aq_tensor_role_t;

enum { AQ_MAX_RANK = 4 };

typedef struct aq_tensor_info {
  const char *name;
  aq_dtype_t dtype;
  aq_tensor_role_t role;
  uint32_t rank;
  int64_t dims[AQ_MAX_RANK];
  size_t bytes;
} aq_tensor_info_t;

typedef struct aq_graph_options {
  uint32_t reserved; /* zero */
} aq_graph_options_t;

aq_status_t aq_graph_create(const aq_graph_options_t *options, aq_graph_t **out_graph);
/* AQ_ERROR_BUSY while an exec made from the graph lives. So is adding a
 * tensor, a task (an op, a kernel, a host function, a backward pass) or an
 * edge: an exec is the graph as it was instantiated. */
aq_status_t aq_graph_destroy(aq_graph_t *graph);

aq_status_t aq_tensor_create(aq_graph_t *graph, const char *name, aq_dtype_t dtype,
                             aq_tensor_role_t role, uint32_t rank, const int64_t *dims,
                             aq_tensor_t *out_tensor);
aq_status_t aq_tensor_get_info(aq_graph_t *graph, aq_tensor_t tensor, aq_tensor_info_t *info);

/* ---- initial values: part of the graph, written at instantiation ---------- */
/* A parameter must be given values before the first run, by an initialiser
 * or by aq_exec_write / aq_exec_bind / aq_exec_tensor_data: otherwise
 * aq_exec_run refuses, naming it (zeros would train nothing and say
 * nothing). Fans: a 2-D tensor w[in, out] (as aq_op_matmul's b) has fan_in
 * = in and fan_out = out; a 4-D w[k, c, r, s] (as aq_op_conv2d's) fan_in =
 * c*r*s, fan_out = k*r*s; a 1-D tensor of n, n and n. */
typedef enum aq_init_kind {
  AQ_INIT_CONSTANT = 1,        /* every element = value (0.0 for a bias) */
  AQ_INIT_UNIFORM = 2,         /* uniform in [low, high) */
  AQ_INIT_NORMAL = 3,          /* normal(mean, stddev) */
  AQ_INIT_XAVIER_UNIFORM = 4,  /* Glorot: uniform(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) */
  AQ_INIT_XAVIER_NORMAL = 5,   /* Glorot: normal(0, gain * sqrt(2 / (fan_in + fan_out))) */
  AQ_INIT_KAIMING_UNIFORM = 6, /* He: uniform(-b, b), b = gain * sqrt(3 / fan_in) */
  AQ_INIT_KAIMING_NORMAL = 7,  /* He: normal(0, gain / sqrt(fan_in)) */
} aq_init_kind_t;

typedef struct aq_initializer {
  aq_init_kind_t kind;
  float value;        /* AQ_INIT_CONSTANT */
  float low, high;    /* AQ_INIT_UNIFORM */
  float mean, stddev; /* AQ_INIT_NORMAL */
  float gain;         /* Xavier: 0 = 1; Kaiming: 0 = sqrt(2), ReLU's */
  uint64_t seed;      /* the same seed, the same values, on any agent */
} aq_initializer_t;
/* Gives an f32 parameter, constant or state tensor its initial values:
 * every exec made from the graph writes them when it is instantiated.
 * Calling it again replaces the tensor's initialiser. */
aq_status_t aq_tensor_init(aq_graph_t *graph, aq_tensor_t tensor, const aq_initializer_t *options);

/* ---- ops: each appends a task; outputs are new activation tensors ---------- */
/* out = act(op(a) op(b) + bias); bias may be {0}. 2-D tensors. */
aq_status_t aq_op_matmul(aq_graph_t *graph, aq_tensor_t a, aq_tensor_t b, aq_tensor_t bias,
                         int trans_a, int trans_b, aq_activation_t activation,
                         aq_tensor_t *out);
aq_status_t aq_op_relu(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t *out);
aq_status_t aq_op_sigmoid(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t *out);
aq_status_t aq_op_tanh(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t *out);
aq_status_t aq_op_gelu(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t *out);
/* Drops each element with probability p, scaling the rest by 1 / (1 - p);
 * the mask is a hash of (seed, index): the same every run. */
aq_status_t aq_op_dropout(aq_graph_t *graph, aq_tensor_t x, float p, uint64_t seed, aq_tensor_t *out);
/* The mean softmax cross-entropy of logits (rows x classes) against int32
 * labels (rows): a scalar f32 tensor. */
aq_status_t aq_op_softmax_xent(aq_graph_t *graph, aq_tensor_t logits, aq_tensor_t labels,
                               aq_tensor_t *out_loss);

/* ---- convolutional networks (NCHW) ---- */
typedef struct aq_conv2d_options {
  int32_t stride_h, stride_w; /* 0 = 1 */
  int32_t pad_h, pad_w;
  int32_t dil_h, dil_w;       /* 0 = 1 */
} aq_conv2d_options_t;
/* y = conv2d(x[n,c,h,w], w[k,c,r,s]) + bias[k] (bias may be {0}). */
aq_status_t aq_op_conv2d(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t w, aq_tensor_t bias,
                         const aq_conv2d_options_t *options, aq_tensor_t *out);
typedef struct aq_pool_options {
  int32_t kernel_h, kernel_w; /* required */
  int32_t stride_h, stride_w; /* 0 = the kernel size */
  int32_t pad_h, pad_w;
} aq_pool_options_t;
aq_status_t aq_op_max_pool2d(aq_graph_t *graph, aq_tensor_t x, const aq_pool_options_t *options,
                             aq_tensor_t *out);
typedef struct aq_batch_norm_options {
  int training;   /* batch statistics (and running ones updated), else the running ones */
  float momentum; /* 0 = 0.1 */
  float eps;      /* 0 = 1e-5 */
} aq_batch_norm_options_t;
/* Per channel of x[n,c,...]; gamma, beta, running_mean, running_var have c
 * entries (running_* are STATE tensors when training, else inputs). */
aq_status_t aq_op_batch_norm(aq_graph_t *graph, aq_tensor_t x, aq_tensor_t gamma, aq_tensor_t beta,
                             aq_tensor_t running_mean, aq_tensor_t running_var,
                             const aq_batch_norm_options_t *options, aq_tensor_t *out);
/* The same elements in another shape (a copy: tensors do not alias). */
aq_status_t aq_op_reshape(aq_graph_t *graph, aq_tensor_t x, uint32_t rank, const int64_t *dims,
                          aq_tensor_t *out);

/* dst = src (same size, any dtype): e.g. a batch from the buffer a loader
 * fills for the next run into the one this run computes on. */
aq_status_t aq_op_copy(aq_graph_t *graph, aq_tensor_t src, aq_tensor_t dst);

typedef struct aq_sgd_options {
  float lr;            /* required, > 0 */
  float momentum;      /* 0 = plain SGD */
  float weight_decay;
} aq_sgd_options_t;
/* param -= lr * velocity, velocity = momentum * velocity + grad + wd * param. */
aq_status_t aq_op_sgd(aq_graph_t *graph, aq_tensor_t param, aq_tensor_t grad,
                      const aq_sgd_options_t *options);

typedef struct aq_adam_options {
  float lr;            /* required, > 0 */
  float beta1, beta2;  /* 0 = 0.9, 0.999 */
  float eps;           /* 0 = 1e-8 */
  float weight_decay;
  int decoupled;       /* AdamW: decay the weights apart from the gradient */
} aq_adam_options_t;
/* Adam or AdamW, in place; its moment and step state start at zero. */
aq_status_t aq_op_adam(aq_graph_t *graph, aq_tensor_t param, aq_tensor_t grad,
                       const aq_adam_options_t *options);

/* Appends the gradient tasks of the scalar loss for every parameter it
 * depends on. */
aq_status_t aq_graph_backward(aq_graph_t *graph, aq_tensor_t loss);
/* The gradient tensor of a parameter, after aq_graph_backward. */
aq_status_t aq_graph_gradient(aq_graph_t *graph, aq_tensor_t param, aq_tensor_t *out_grad);

/* ---- user tasks ---------------------------------------------------------- */
enum { AQ_TASK_MAX_TENSORS = 16 };

typedef struct aq_kernel_task {
  const char *name;             /* for errors, traces and DOT */
  aq_code_object_t code_object;
  const char *kernel;           /* kernel name in the code object */
  const void *kernarg;          /* copied at add time */
  uint32_t kernarg_size;
  aq_dispatch_shape_t shape;
  /* Tensors it reads and writes; the address of tensor reads[i] is written
   * at kernarg offset read_offsets[i] (UINT32_MAX: not passed), likewise for
   * writes, when the graph is instantiated. */
  uint32_t read_count, write_count;
  aq_tensor_t reads[AQ_TASK_MAX_TENSORS], writes[AQ_TASK_MAX_TENSORS];
  uint32_t read_offsets[AQ_TASK_MAX_TENSORS], write_offsets[AQ_TASK_MAX_TENSORS];
  int32_t agent;                /* pinned agent index, -1 = let the scheduler place it */
  /* What else sets the task's time, for kernels whose kernarg does (a loop
   * count, a spin time): tasks of one kernel and tensor sizes but another
   * cost_key are timed and modelled apart (StarPU's footprint). 0: the
   * tensors' sizes and the grid say it all. */
  uint64_t cost_key;
} aq_kernel_task_t;
aq_status_t aq_graph_add_kernel(aq_graph_t *graph, const aq_kernel_task_t *task,
                                aq_task_t *out_task);

/* A host function run on a CPU agent: fn(user, a1, a2, a3) as in
 * AQ_AGENT_DISPATCH_HOST_CALL. It declares the tensors it touches. */
typedef struct aq_host_task {
  const char *name;
  aq_host_call_fn_t fn;
  void *user;
  uint64_t args[3];
  uint32_t read_count, write_count;
  aq_tensor_t reads[AQ_TASK_MAX_TENSORS], writes[AQ_TASK_MAX_TENSORS];
  int32_t agent;
} aq_host_task_t;
aq_status_t aq_graph_add_host(aq_graph_t *graph, const aq_host_task_t *task, aq_task_t *out_task);

typedef enum aq_edge_kind {
  AQ_EDGE_AFTER_ALL = 0, /* ATMI's requires: after every one of the tasks (barrier-AND) */
  AQ_EDGE_AFTER_ANY = 1, /* ATMI's needs_any: after any one of them (barrier-OR) */
} aq_edge_kind_t;
aq_status_t aq_graph_add_edge(aq_graph_t *graph, aq_task_t task, aq_edge_kind_t kind,
                              const aq_task_t *after, uint32_t after_count);

/* Task groups, as ATMI's streams: between begin and end, the tasks added to
 * an ordered group run one after another (each after the one added before
 * it, whatever they read and write); an unordered group only collects them,
 * and aq_graph_group_end hands back its tasks for an edge to wait on all of
 * them. Groups do not nest. */
aq_status_t aq_graph_group_begin(aq_graph_t *graph, int ordered);
/* Ends the group; *out_first / *out_count (may be NULL) name its tasks:
 * ids first .. first + count - 1. */
aq_status_t aq_graph_group_end(aq_graph_t *graph, aq_task_t *out_first, uint32_t *out_count);

/* ---- instantiate and run ------------------------------------------------- */
typedef enum aq_sched_policy {
  AQ_SCHED_DEFAULT = 0,     /* AQ_SCHED, else eager */
  AQ_SCHED_EAGER = 1,       /* each ready task on the agent that frees first */
  AQ_SCHED_ROUND_ROBIN = 2, /* tasks dealt to agents in turn */
  AQ_SCHED_PINNED = 3,      /* the task's agent, else agent 0 */
  AQ_SCHED_LOCALITY = 4,    /* a task on the agent whose node holds its inputs */
  /* HEFT: tasks by upward rank, each where it finishes first according to
   * performance models measured per kernel x shape class x agent (transfer
   * costs included: edge latencies and bandwidths measured once per process
   * by a ping between queues and a copy calibration). Models live in
   * $AQ_PERF_DIR/models.tsv (default ~/.cache/aquila/). An op-library kernel
   * without a model on an agent that may run it is measured there before
   * placement (a calibration exec of its own, once per machine); other
   * tasks short of samples are measured in the exec's first runs (a
   * profiled run stamps each CPU task's start and end, and takes each GPU
   * kernel's time from the GPU) and the file refined. */
  AQ_SCHED_HEFT = 5,
} aq_sched_policy_t;

/* aq_exec_options_t.flags */
#define AQ_EXEC_NO_MEMORY_REUSE (1u << 0) /* every activation keeps its own buffer */
#define AQ_EXEC_PROFILE (1u << 1)         /* profile every run: refine the models */
/* A replica of each tensor per memory domain that uses it (a CPU agent's
 * NUMA node, a GPU's device memory), kept coherent by copy tasks the planner
 * inserts (MSI-like states; between host and GPU, the op library's aq_copy on
 * the GPU's queue); without it tasks read remote memory in place, and a
 * tensor both a CPU and a GPU touch lives in pinned host memory. Also
 * AQ_MEMORY=replicate. (AQ_MEMORY=unified instead puts such tensors in
 * managed memory, with prefetch tasks where they change sides.) */
#define AQ_EXEC_REPLICATE (1u << 2)
/* Every task runs as its own kernel. By default, on GPU agents, a matmul
 * whose only consumer is relu's backward or an SGD update runs that
 * consumer in its write-back, and so does a bias gradient (a sum over rows)
 * its SGD update, batch norm relu and max-pool's backward relu's backward:
 * one launch and one pass over the result fewer. The product itself is
 * then never stored, and aq_exec_read refuses it. On CPU agents only the
 * elementwise pairs (batch norm's and max-pool's) fuse by default. Also
 * AQ_FUSION=0; AQ_FUSION=1 fuses every pair on CPU agents too. */
#define AQ_EXEC_NO_FUSION (1u << 3)
/* Every fp32 product on a GPU agent one FFMA a term (ops.h's
 * AQ_MATMUL_PRECISION_EXACT), as on CPU agents, instead of the default
 * 3xTF32 on tensor cores (the H100 MLP step: 180 us instead of 144). Also
 * AQ_MATMUL_PRECISION=exact. */
#define AQ_EXEC_EXACT_MATMUL (1u << 4)

typedef struct aq_exec_options {
  aq_sched_policy_t policy;
  uint32_t queue_size;      /* packets per agent queue; 0 = fits the graph */
  /* Which kinds of agent may run kernel tasks: a mask of 1 << aq_agent_kind_t;
   * 0 = any (host tasks always run on CPU agents). */
  uint32_t kernel_agent_kinds;
  /* AQ_EXEC_* bits. By default activations share buffers by lifetime: an
   * activation's memory is reused once every task touching it is done, so
   * aq_exec_read refuses an activation whose buffer a later task reuses
   * (read what you need from a task, or pass AQ_EXEC_NO_MEMORY_REUSE). */
  uint32_t flags;
} aq_exec_options_t;

aq_status_t aq_graph_instantiate(aq_graph_t *graph, const aq_exec_options_t *options,
                                 aq_exec_t **out_exec);
aq_status_t aq_exec_destroy(aq_exec_t *exec);

/* Copies bytes into / out of a tensor's memory between runs. size must be
 * the tensor's size exactly. */
aq_status_t aq_exec_write(aq_exec_t *exec, aq_tensor_t tensor, const void *src, size_t size);
aq_status_t aq_exec_read(aq_exec_t *exec, aq_tensor_t tensor, void *dst, size_t size);
/* The tensor's memory itself: host-accessible for tensors on CPU agents and
 * for GPU tensors a CPU task writes (pinned host memory, or any GPU tensor
 * under AQ_MEMORY=unified); otherwise a device address, for kernels only. */
aq_status_t aq_exec_tensor_data(aq_exec_t *exec, aq_tensor_t tensor, void **out_data);

/* Points an input or constant tensor at the caller's memory (exactly the
 * tensor's size, 16-byte aligned, kept alive while runs use it): tasks then
 * read it in place. CPU tasks reach any host memory; a GPU agent's tasks
 * only memory allocated from that agent's regions (device, pinned or
 * managed). Between runs only; rewrites the kernargs that hold the address.
 * Binding one of two buffers in turn double-buffers an input: the host fills
 * one while a run reads the other, with no copy in the graph. */
aq_status_t aq_exec_bind(aq_exec_t *exec, aq_tensor_t tensor, void *data, size_t size);

/* Starts a run; AQ_ERROR_BUSY if the previous one has not finished. Every
 * input a task reads before any task writes it must have been given data
 * first (aq_exec_write, aq_exec_bind or aq_exec_tensor_data): the first run
 * refuses, naming the tensor and the task, otherwise. */
aq_status_t aq_exec_run(aq_exec_t *exec);
/* The run's completion signal: 1 while a run is in flight, 0 once every
 * task of it is done (wait on it, or give it to a barrier packet of
 * another queue). aq_exec_wait still reports the run's faults (it returns at
 * once then), and records profiled runs. Owned by the exec. */
aq_status_t aq_exec_completion_signal(aq_exec_t *exec, aq_signal_t *out_signal);
/* Waits for the run; a failed task's fault comes back here.
 * AQ_ERROR_TIMEOUT leaves the run in flight: wait again. Once the CPU lanes
 * are done, the waiter looks at the GPU lanes without sleeping for about as
 * long as the last run took, if that was under 1 ms (a short GPU run would
 * otherwise end while it sleeps, and pay a wake-up). */
aq_status_t aq_exec_wait(aq_exec_t *exec, uint64_t timeout_ns);

/* Sets the learning rate of every optimizer task (aq_op_sgd, aq_op_adam) of
 * the exec from its next run on: a schedule (step or cosine decay) without
 * instantiating again. Between runs only (AQ_ERROR_BUSY while one is in
 * flight); lr must be finite and > 0; AQ_ERROR_NOT_FOUND if the exec has
 * no optimizer task. */
aq_status_t aq_exec_set_learning_rate(aq_exec_t *exec, float lr);

/* ---- checkpoints --------------------------------------------------------- */
/* A checkpoint is what a training run needs to go on in another process:
 * every parameter and STATE tensor of the graph (optimizer moments and
 * velocities, Adam's step count, batch norm's running statistics), the
 * exec's run count (aq_exec_info_t.runs), and a blob of the caller's (its
 * epoch, its data order). Nothing else a run depends on changes between
 * runs: dropout's mask is a hash of (seed, index), the same every run; the
 * learning rate is the caller's schedule (aq_exec_set_learning_rate after
 * loading). Between runs only (AQ_ERROR_BUSY otherwise).
 *
 * The file, little-endian:
 *   header, 40 bytes:  magic "AQCKPT\n\x1a" (8), version u32 (1),
 *                      tensor count u32, runs u64, user-data bytes u64,
 *                      file bytes u64 (the whole file, CRC included)
 *   per tensor, in the graph's order:
 *                      name length u32 (1-47), name (no NUL), dtype u32
 *                      (aq_dtype_t), role u32 (aq_tensor_role_t), rank u32,
 *                      dims i64 x rank, data bytes u64, data
 *   the user data
 *   CRC-32 u32 (IEEE 802.3, as zlib's crc32) of every byte before it.
 *
 * aq_exec_save writes it atomically: a temporary file in the same
 * directory, flushed and synced, renamed over path, the directory synced;
 * a process killed at any point leaves the previous checkpoint or the new
 * one. */
aq_status_t aq_exec_save(aq_exec_t *exec, const char *path);
/* The same, with user_size bytes of the caller's kept beside the tensors. */
aq_status_t aq_exec_save_with(aq_exec_t *exec, const char *path, const void *user, size_t user_size);
/* Restores the tensors and the run count. The whole file is read and
 * checked before the exec is touched, and any refusal leaves the exec as it
 * was: a missing file (AQ_ERROR_NOT_FOUND); a file that is not a
 * checkpoint, is truncated or fails its CRC (AQ_ERROR_IO); another format
 * version, a tensor the graph lacks or has with another dtype or shape, a
 * parameter or state tensor of the graph the file lacks
 * (AQ_ERROR_INCOMPATIBLE). Each error names the file and what is wrong. */
aq_status_t aq_exec_load(aq_exec_t *exec, const char *path);
/* The caller's blob of a checkpoint, after the same checks of the file:
 * copied into dst (room bytes; NULL: only the size) and its size in
 * *out_size (may be NULL). Read it before aq_exec_load to check that the
 * checkpoint suits the run it would continue. */
aq_status_t aq_checkpoint_user_data(const char *path, void *dst, size_t room, size_t *out_size);

typedef struct aq_exec_info {
  uint32_t tasks;
  uint32_t packets;          /* kernel, host and barrier packets of one run */
  uint32_t barriers;         /* of which barrier packets (cross-queue edges) */
  uint32_t agents_used;
  uint32_t queues;           /* lanes used: a CPU agent has one per worker */
  uint64_t runs;
  size_t bytes;              /* tensor memory */
  uint32_t local_ranks;      /* replicas of the step, one per GPU of a communicator of this process's
                                GPUs (aq_exec_local_tensor); 1 otherwise */
} aq_exec_info_t;
aq_status_t aq_exec_get_info(aq_exec_t *exec, aq_exec_info_t *info);

/* Writes the placed graph as DOT: one node per task with its agent, lane,
 * kernel and variant (the code object that runs it), estimated time and
 * finish; one edge per dependency, cross-queue edges dashed. */
aq_status_t aq_exec_write_dot(aq_exec_t *exec, const char *path);

/* Why each task runs where it does, as text: the placement's estimates of
 * the whole run (under heft: the placement kept, the best over all agents
 * and the best single agent), the measured link costs, then one line per
 * task with its agent and lane, its estimated time on every agent that
 * may run it (a model's, or a guess marked '?'), and the reason for the
 * choice. Writes to out (stdout, stderr or a file of the caller's). */
aq_status_t aq_exec_explain(aq_exec_t *exec, FILE *out);

/* ---- Auto-tuning ------------------------------------------------------------
 * Where an op has several GPU builds for a shape (the op library lists
 * them: kernels/cuda/launch.h), the first instantiation that may run it on
 * a GPU times each build there once and keeps the fastest, per GPU model,
 * in AQ_PERF_DIR/tuned.tsv, as MIOpen's find step does; later starts read
 * it and time nothing. AQ_TUNE=0: the launch rule's build, untimed. */
#define AQ_TUNED_CANDIDATES_MAX 16
typedef struct aq_tuned_build {
  char kernel[64];  /* the op's kernel */
  char shape[192];  /* its kernargs' shape, as the op library writes it */
  char build[64];   /* the build that runs */
  uint32_t candidates;
  char candidate[AQ_TUNED_CANDIDATES_MAX][64];
  double candidate_ns[AQ_TUNED_CANDIDATES_MAX]; /* each one's median time */
} aq_tuned_build_t;

/* The choices kept for agent's model: up to capacity of them into out;
 * *count: how many there are. */
aq_status_t aq_tuned_builds(aq_agent_t agent, aq_tuned_build_t *out, size_t capacity, size_t *count);
/* The choice kept for an op library kernel and its kernargs (tensor slots
 * as a dispatch sees them) on agent; AQ_ERROR_NOT_FOUND where there is none
 * (the launch rule's build runs), or AQ_TUNE=0. */
aq_status_t aq_tuned_build(aq_agent_t agent, const char *kernel, const void *kernarg, aq_tuned_build_t *out);

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_GRAPH_H_ */
