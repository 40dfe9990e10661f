/* The op library's descriptors: kernel names, kernarg layouts, grid rules.
 *
 * Every op kernel of Aquila's own code objects (kernels-cpu.so, and the GPU
 * builds) is named here with the plain C struct that is its kernarg buffer,
 * so a caller fills one struct and dispatches any variant the same way. The
 * runtime knows none of this: ops are ordinary kernels found by name.
 *
 * Conventions: fp32 tensors, row-major, leading dimensions in elements.
 * Pointers are device addresses for the agent that runs the kernel. Each op
 * comes with a static inline *_grid function giving the dispatch grid and
 * work-group size its kernels expect; a kernel given a bad kernarg (NULL
 * pointer, negative size) fails with a non-zero code rather than touching
 * memory, so the fault names the kernel.
 */
#ifndef AQUILA_OPS_H_
#define AQUILA_OPS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What an op kernel's non-zero return means. The runtime's fault message
 * gives the kernel and the code ("failed (returned 2)"); an exec's failure
 * adds the meaning (aq_op_fault_string). */
typedef enum aq_op_fault {
  AQ_OP_FAULT_KERNARG = 1,     /* a NULL pointer or a negative size in the kernarg */
  AQ_OP_FAULT_INDEX_RANGE = 2, /* a label (softmax_xent) or an index (embedding) out of range */
  AQ_OP_FAULT_UNSUPPORTED = 3, /* a shape this variant does not take */
} aq_op_fault_t;

static inline const char *aq_op_fault_string(int code) {
  switch (code) {
    case AQ_OP_FAULT_KERNARG: return "a NULL pointer or a negative size in its arguments";
    case AQ_OP_FAULT_INDEX_RANGE: return "a label or index out of range (labels must lie in [0, classes))";
    case AQ_OP_FAULT_UNSUPPORTED: return "a shape this kernel variant does not take";
    default: return 0;
  }
}

typedef struct aq_dispatch_shape {
  uint32_t grid[3];       /* work-items */
  uint16_t workgroup[3];  /* work-items per group */
} aq_dispatch_shape_t;

/* A count of work-items as a packet's 32-bit grid size. Counts past
 * UINT32_MAX saturate to AQ_GRID_TOO_LARGE instead of wrapping (2^32 + 64
 * elements would otherwise be a grid of 64): the graph builder refuses a
 * task whose grid says so. */
#define AQ_GRID_TOO_LARGE UINT32_MAX
static inline uint32_t aq_grid_items(int64_t n) {
  return n < 1 ? 1u : n >= (int64_t)AQ_GRID_TOO_LARGE ? AQ_GRID_TOO_LARGE : (uint32_t)n;
}

/* ---- matmul: C = alpha * op(A) * op(B) + beta * C, then + bias, then act ----
 * op(A) is m x k (A stored k x m when trans_a), op(B) k x n (n x k when
 * trans_b). bias (may be NULL) has n entries, added to every row; beta == 0
 * means C is not read. batch > 1 repeats over stride_a/b/c elements.
 * Grid: aq_matmul_grid: up to AQ_MATMUL_MAX_GROUPS work-groups (of one
 * work-item) per batch entry along x, the batch along z. The CPU kernel cuts
 * the work into ctx->worker_count x AQ_MATMUL_PARTS_PER_WORKER parts (shared
 * out over the batch entries), each a block of C that one work-group packs
 * and computes, never more parts than the grid has groups; groups past the
 * last part return at once. Two parts
 * a worker, not one: the agent's workers take groups dynamically, so a
 * worker whose core is shared with another process hands the rest on (one
 * part each ran at 0.55x OpenBLAS at n = 1024 with one core busy, two at
 * 0.97-1.09x), at the price of packing the panels a little more often.
 * Where the AVX2 kernel cuts a tall product into row bands, its parts
 * share one packed op(B) through the dispatch's shared bytes, packed by
 * whichever part comes first, and are then twice as many (finer parts pack
 * nothing more).
 * The AVX-512 CPU kernel leaves out the zeros of op(A) (ReLU activations,
 * an image's background): element by element, row by row, where few of
 * A's values are nonzero (under 3/4 on Zen 4, whose loads keep up with its
 * multiply-adds; under 30% on other AVX-512 cores); else, on Zen 4, the
 * depth steps where a 12-row panel, or a 6-row half of one, is all zero. C keeps the dense sums' bits, except
 * that an Inf or NaN of B that meets only zeros of A no longer makes C NaN
 * (AQ_GEMM_SKIP_ZEROS=0 restores that). */
#define AQ_KERNEL_MATMUL "aq_matmul_f32"
#define AQ_MATMUL_MAX_GROUPS 64
#define AQ_MATMUL_PARTS_PER_WORKER 2
#define AQ_MATMUL_MIN_PART 2048 /* elements of C below which a part is not worth cutting */
#define AQ_MATMUL_MIN_WORK 131072 /* multiply-adds (about a microsecond) below which a part is not worth cutting */

typedef enum aq_activation {
  AQ_ACTIVATION_NONE = 0,
  AQ_ACTIVATION_RELU = 1,
} aq_activation_t;

/* How an fp32 product is formed. DEFAULT: to fp32 accuracy, the agent's
 * fastest way: CPU agents one fp32 multiply-add per term; tensor-core GPUs
 * (sm_80 on) split each operand into two TF32 parts and add three TF32
 * products in fp32 (3xTF32: each term within about 2^-22 of its value,
 * where one fp32 rounding is 2^-24; over k terms the sums' own rounding is
 * of the same order). EXACT: one fp32 multiply-add per term everywhere (a
 * GPU's FFMA builds, slower). Either way a shape gives the same bits on
 * every run (no atomics). Any other value is refused as a bad kernarg. */
typedef enum aq_matmul_precision {
  AQ_MATMUL_PRECISION_DEFAULT = 0,
  AQ_MATMUL_PRECISION_EXACT = 1,
} aq_matmul_precision_t;

typedef struct aq_matmul_args {
  const float *a;
  const float *b;
  float *c;
  const float *bias;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t batch;
  int64_t stride_a, stride_b, stride_c;
  float alpha, beta;
  int32_t trans_a, trans_b;
  int32_t activation; /* aq_activation_t */
  int32_t precision;  /* aq_matmul_precision_t */
} aq_matmul_args_t;

/* ---- matmul with a fused consumer --------------------------------------------
 * The exec's fusion pass (scheduler/fuse.c) folds an elementwise consumer of
 * a product into the product's write-back, where each micro-tile is still in
 * registers or L1, instead of a second pass over C in memory:
 *   AQ_MATMUL_FUSE_RELU_MASK: C = the product where mask > 0, else 0 (relu's
 *     backward; mask is relu's forward output, row stride ldmask);
 *   AQ_MATMUL_FUSE_SGD: the product is the gradient of the weight C (row
 *     stride ldc), updated in place as AQ_KERNEL_SGD would, with velocity
 *     (row stride ldc). The weight takes the whole sum at once, so this needs
 *     beta 0, k <= AQ_MATMUL_FUSE_SGD_MAX_K (one depth slice), batch 1.
 * Both need no bias and no activation in mm. Each element's arithmetic is
 * that of the unfused pair. Grid: aq_matmul_grid(&args.mm). CPU only. */
#define AQ_KERNEL_MATMUL_FUSED "aq_matmul_fused_f32"
#define AQ_MATMUL_FUSE_SGD_MAX_K 512

typedef enum aq_matmul_fuse {
  AQ_MATMUL_FUSE_RELU_MASK = 1,
  AQ_MATMUL_FUSE_SGD = 2,
} aq_matmul_fuse_t;

typedef struct aq_matmul_fused_args {
  aq_matmul_args_t mm;
  int32_t fuse; /* aq_matmul_fuse_t */
  int32_t reserved_;
  const float *mask; /* RELU_MASK */
  int64_t ldmask;
  float *velocity; /* SGD */
  float lr, momentum, weight_decay;
} aq_matmul_fused_args_t;

/* The grid of a matmul: min(AQ_MATMUL_MAX_GROUPS, max(m n / AQ_MATMUL_MIN_PART,
 * m n k / AQ_MATMUL_MIN_WORK)) groups (at least one) per batch entry: a
 * narrow but deep product (a classifier's 256 x 10 logits over 1024
 * features) has little C but enough work for every worker. */
static inline aq_dispatch_shape_t aq_matmul_grid(aq_matmul_args_t *a) {
  int64_t elems = (a->m > 0 ? a->m : 0) * (a->n > 0 ? a->n : 0), g = elems / AQ_MATMUL_MIN_PART;
  int64_t work = elems * (a->k > 0 ? a->k : 0) / AQ_MATMUL_MIN_WORK;
  if (work > g) g = work;
  if (g > AQ_MATMUL_MAX_GROUPS) g = AQ_MATMUL_MAX_GROUPS;
  if (g < 1) g = 1;
  aq_dispatch_shape_t s = {{(uint32_t)g, 1, aq_grid_items(a->batch)}, {1, 1, 1}};
  return s;
}

/* ---- elementwise over n contiguous floats ----------------------------------
 * Grid: n work-items, work-groups of AQ_ELEMENTWISE_WG. */
#define AQ_ELEMENTWISE_WG 4096

/* y = relu(x); in place allowed. */
#define AQ_KERNEL_RELU "aq_relu_f32"
/* dx = dy * (y > 0), with y the forward output; in place allowed (dx = dy). */
#define AQ_KERNEL_RELU_BWD "aq_relu_bwd_f32"
typedef struct aq_relu_args {
  const float *x;  /* forward: input; backward: the forward output y */
  const float *dy; /* backward only */
  float *y;        /* forward: output; backward: dx */
  int64_t n;
} aq_relu_args_t;

/* Pointwise activations and their backwards, with the relu struct's layout
 * (x, dy, y, n). Forward: y = f(x). Backward: y (as dx) = dy * f'(.), where
 * x holds the forward output for sigmoid and tanh, and the forward input for
 * gelu (tanh approximation, as PyTorch's approximate='tanh'). */
typedef struct aq_relu_args aq_unary_args_t;
#define AQ_KERNEL_SIGMOID "aq_sigmoid_f32"
#define AQ_KERNEL_SIGMOID_BWD "aq_sigmoid_bwd_f32"
#define AQ_KERNEL_TANH "aq_tanh_f32"
#define AQ_KERNEL_TANH_BWD "aq_tanh_bwd_f32"
#define AQ_KERNEL_GELU "aq_gelu_f32"
#define AQ_KERNEL_GELU_BWD "aq_gelu_bwd_f32"

/* Row-wise softmax and log-softmax over cols, and their backwards:
 * softmax: dx = y * (dy - sum(dy * y)); log-softmax: dx = dy - exp(y) sum(dy),
 * with y the forward output. Grid: aq_rows_grid(rows). */
#define AQ_KERNEL_SOFTMAX "aq_softmax_f32"
#define AQ_KERNEL_SOFTMAX_BWD "aq_softmax_bwd_f32"
#define AQ_KERNEL_LOG_SOFTMAX "aq_log_softmax_f32"
#define AQ_KERNEL_LOG_SOFTMAX_BWD "aq_log_softmax_bwd_f32"
typedef struct aq_softmax_args {
  const float *x;  /* forward input */
  const float *y;  /* backward: the forward output */
  const float *dy; /* backward */
  float *out;      /* forward: y; backward: dx */
  int64_t rows, cols;
} aq_softmax_args_t;

/* Dropout with a counter-based generator: element i is kept when
 * hash(seed, i) >= p * 2^32, and scaled by 1 / (1 - p); the backward
 * recomputes the same mask from the seed. Grid: aq_elementwise_grid(n). */
#define AQ_KERNEL_DROPOUT "aq_dropout_f32"
#define AQ_KERNEL_DROPOUT_BWD "aq_dropout_bwd_f32"
typedef struct aq_dropout_args {
  const float *x; /* forward: input; backward: dy */
  float *y;       /* forward: output; backward: dx */
  int64_t n;
  uint64_t seed;
  float p;
  int32_t reserved_;
} aq_dropout_args_t;

static inline uint32_t aq_dropout_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* Layer norm over the cols of each row: y = (x - mean) * rstd * gamma + beta,
 * saving mean and rstd per row for the backward. Backward: dx per row
 * (aq_rows_grid), then dgamma / dbeta per column (AQ_KERNEL_LAYER_NORM_BWD_PARAMS,
 * aq_cols_grid). gamma / beta may be NULL (1 and 0). */
#define AQ_KERNEL_LAYER_NORM "aq_layer_norm_f32"
#define AQ_KERNEL_LAYER_NORM_BWD "aq_layer_norm_bwd_f32"
#define AQ_KERNEL_LAYER_NORM_BWD_PARAMS "aq_layer_norm_bwd_params_f32"
typedef struct aq_layer_norm_args {
  const float *x, *gamma, *beta;
  float *y;
  float *mean, *rstd; /* rows each */
  const float *dy;    /* backward */
  float *dx, *dgamma, *dbeta;
  int64_t rows, cols;
  float eps;
  int32_t reserved_;
} aq_layer_norm_args_t;

/* Embedding: out[i, :] = table[ids[i], :]. Backward: dtable[v, :] += dout[i, :]
 * for every i with ids[i] = v, a column per work-item (no races). An id out
 * of range is a kernel fault. Forward grid: aq_rows_grid(count); backward:
 * aq_cols_grid(dim). */
#define AQ_KERNEL_EMBEDDING "aq_embedding_f32"
#define AQ_KERNEL_EMBEDDING_BWD "aq_embedding_bwd_f32"
typedef struct aq_embedding_args {
  const float *table;  /* vocab x dim */
  const int32_t *ids;  /* count */
  float *out;          /* forward: count x dim */
  const float *dout;   /* backward */
  float *dtable;       /* backward: accumulated into */
  int64_t vocab, dim, count;
} aq_embedding_args_t;

/* fp32 <-> bf16 (bf16 as uint16_t, round to nearest even; NaN stays NaN).
 * Grid: aq_elementwise_grid(n). */
#define AQ_KERNEL_CAST_F32_BF16 "aq_cast_f32_bf16"
#define AQ_KERNEL_CAST_BF16_F32 "aq_cast_bf16_f32"
typedef struct aq_cast_args {
  const void *src;
  void *dst;
  int64_t n;
} aq_cast_args_t;

static inline uint16_t aq_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float aq_bf16_to_f32(uint16_t b) {
  union { uint32_t u; float f; } v = {(uint32_t)b << 16};
  return v.f;
}

/* ---- convolution, pooling, batch norm (NCHW) ------------------------------
 * conv2d: y[n,k,p,q] = bias[k] + sum_{c,r,s} x[n,c,p*sh-ph+r*dh, q*sw-pw+s*dw] w[k,c,r,s]
 * (positions outside x read as zero); p and q must be aq_conv_out's. Forward
 * grid: aq_planes_grid(n*k), one per output plane; backward data: n*c (one
 * per input plane); backward filter: k*c (one per filter slice; dbias[k] is
 * written too when dbias is not NULL). The CPU kernels run these as GEMMs
 * with an implicit im2col and, like matmul, cut the work into
 * AQ_MATMUL_PARTS_PER_WORKER parts per worker of the agent (images first);
 * the surplus groups return at once. precision is matmul's
 * (aq_matmul_precision_t): the CPU kernels are exact either way; GPU builds
 * at the default may take tensor cores at fp32 accuracy (ops_gpu.h). */
#define AQ_KERNEL_CONV2D "aq_conv2d_f32"
#define AQ_KERNEL_CONV2D_BWD_DATA "aq_conv2d_bwd_data_f32"
#define AQ_KERNEL_CONV2D_BWD_FILTER "aq_conv2d_bwd_filter_f32"
typedef struct aq_conv2d_args {
  const float *x, *w, *bias; /* bias may be NULL */
  float *y;
  const float *dy;           /* backward */
  float *dx, *dw, *dbias;    /* backward (dbias may be NULL) */
  int64_t n, c, h, wd;       /* input: n x c x h x wd */
  int64_t k, r, s;           /* filters: k x c x r x s */
  int64_t p, q;              /* output: n x k x p x q */
  int32_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int32_t precision;         /* aq_matmul_precision_t */
} aq_conv2d_args_t;

/* One work-item per plane (or slice, or channel), in at most
 * AQ_PLANES_MAX_GROUPS work-groups of consecutive planes: the grid of
 * conv2d, pooling and batch norm on CPUs. (A group per plane would have a
 * CPU agent call the kernel thousands of times per dispatch for a batch of
 * images, to little purpose: the GEMM-based conv2d cuts its work by worker
 * anyway. GPU builds launch by kernels/cuda/launch.h.) */
#define AQ_PLANES_MAX_GROUPS 64
static inline aq_dispatch_shape_t aq_planes_grid(int64_t planes) {
  int64_t p = planes > 0 ? planes : 1, wg = (p + AQ_PLANES_MAX_GROUPS - 1) / AQ_PLANES_MAX_GROUPS;
  if (wg > 65535) wg = 65535;
  aq_dispatch_shape_t s = {{aq_grid_items(p), 1, 1}, {(uint16_t)wg, 1, 1}};
  return s;
}

static inline int64_t aq_conv_out(int64_t in, int64_t k, int32_t stride, int32_t pad, int32_t dil) {
  return (in + 2 * pad - (int64_t)dil * (k - 1) - 1) / stride + 1;
}

/* 2-D pooling over each (n, c) plane, window kh x kw, stride, padding;
 * max-pool saves the argmax (index into the plane, -1 if the window saw only
 * padding) for its backward. Grid: aq_planes_grid(n*c). */
#define AQ_KERNEL_MAX_POOL "aq_max_pool2d_f32"
#define AQ_KERNEL_MAX_POOL_BWD "aq_max_pool2d_bwd_f32"
#define AQ_KERNEL_AVG_POOL "aq_avg_pool2d_f32"
#define AQ_KERNEL_AVG_POOL_BWD "aq_avg_pool2d_bwd_f32"
typedef struct aq_pool_args {
  const float *x;
  float *y;
  int32_t *argmax;     /* max-pool: n*c*p*q */
  const float *dy;     /* backward */
  float *dx;           /* backward */
  int64_t planes, h, w, p, q;
  int32_t kh, kw, stride_h, stride_w, pad_h, pad_w;
} aq_pool_args_t;

/* Max-pool's backward with relu's backward in its write-back, as the exec's
 * fusion pass runs a pool backward whose dx only relu's backward reads:
 * pool.dx = the pooled gradient where mask > 0, else 0 (mask: relu's
 * forward output, the pool's input, planes * h * w floats). Each element
 * is what aq_max_pool2d_bwd_f32 then aq_relu_bwd_f32 write. Grid: the pool
 * backward's. */
#define AQ_KERNEL_MAX_POOL_BWD_RELU "aq_max_pool2d_bwd_relu_f32"
typedef struct aq_pool_relu_bwd_args {
  aq_pool_args_t pool;
  const float *mask;
} aq_pool_relu_bwd_args_t;

/* Batch norm over (n, h, w) per channel. Training: y = (x - mean) rstd gamma
 * + beta with the batch's statistics (saved), running_mean/var updated with
 * momentum; inference (training == 0): the running statistics. Backward:
 * dx, dgamma, dbeta. Grid: aq_planes_grid(c), one per channel.
 *
 * The graph runs each pass as two kernels instead, so that a channel's
 * values spread over many work-groups (a GPU has far more SMs than a CNN
 * has channels): each channel's n * hw values, in (n, h, w) order, are cut
 * into `slices` even slices (aq_batch_norm_slices), and
 *  - _stats writes each slice's sums into partial[(ch * slices + s) * 2 ..]:
 *    forward, of x - shift and of its square, shift being the channel's
 *    first value x[ch * hw] (one pass, no cancellation); backward, of dy and
 *    of dy (x - mean);
 *  - _apply adds a channel's partials in slice order (so every slice sees
 *    the same statistics, and the results depend on the shape only), then
 *    normalises its slice (y; training: slice 0 also writes mean, rstd and
 *    the running statistics) or, backward, computes its slice's dx (slice 0
 *    also dgamma and dbeta). Inference needs only _apply.
 * Grid of both: aq_planes_grid(c * slices), an item a slice. */
#define AQ_KERNEL_BATCH_NORM "aq_batch_norm_f32"
#define AQ_KERNEL_BATCH_NORM_BWD "aq_batch_norm_bwd_f32"
#define AQ_KERNEL_BATCH_NORM_STATS "aq_batch_norm_stats_f32"
#define AQ_KERNEL_BATCH_NORM_APPLY "aq_batch_norm_apply_f32"
#define AQ_KERNEL_BATCH_NORM_BWD_STATS "aq_batch_norm_bwd_stats_f32"
#define AQ_KERNEL_BATCH_NORM_BWD_APPLY "aq_batch_norm_bwd_apply_f32"
typedef struct aq_batch_norm_args {
  const float *x, *gamma, *beta;
  float *y, *mean, *rstd, *running_mean, *running_var;
  const float *dy;
  float *dx, *dgamma, *dbeta;
  int64_t n, c, hw;
  float eps, momentum;
  int32_t training;
  int32_t slices;  /* the two-kernel passes: slices of a channel, >= 1 */
  double *partial; /* the two-kernel passes: c * slices * 2 sums */
} aq_batch_norm_args_t;

/* _apply with relu in its write-back: y = relu(batch norm of x), the
 * statistics written as _apply writes them; each element is what
 * aq_batch_norm_apply_f32 then aq_relu_f32 write. The exec's fusion pass
 * runs it where relu is the only reader of the normalised values, y then
 * being relu's output. Kernargs and grid: _apply's. */
#define AQ_KERNEL_BATCH_NORM_APPLY_RELU "aq_batch_norm_apply_relu_f32"

/* Slices a channel enough for some 4 work-groups per SM of a large GPU
 * (528: an H100's 132), none of fewer than AQ_BATCH_NORM_SLICE_MIN values. */
#define AQ_BATCH_NORM_SLICE_MIN 2048
#define AQ_BATCH_NORM_FILL 528
static inline int32_t aq_batch_norm_slices(int64_t n, int64_t c, int64_t hw) {
  int64_t m = n * hw, want = c > 0 ? (AQ_BATCH_NORM_FILL + c - 1) / c : 1;
  int64_t most = (m + AQ_BATCH_NORM_SLICE_MIN - 1) / AQ_BATCH_NORM_SLICE_MIN;
  int64_t s = want < most ? want : most;
  return (int32_t)(s < 1 ? 1 : s);
}

/* z = alpha * x + beta * y (y may be NULL: z = alpha * x). */
#define AQ_KERNEL_AXPBY "aq_axpby_f32"
typedef struct aq_axpby_args {
  const float *x, *y;
  float *z;
  int64_t n;
  float alpha, beta;
} aq_axpby_args_t;

static inline aq_dispatch_shape_t aq_elementwise_grid(int64_t n) {
  aq_dispatch_shape_t s = {{aq_grid_items(n), 1, 1}, {AQ_ELEMENTWISE_WG, 1, 1}};
  return s;
}

/* ---- broadcasting binary ops: z = x + y, x - y, x * y, z = alpha * (x op y) --
 * z is contiguous (row-major) of shape[0..rank); x and y are read through
 * their own strides in elements, so a stride of 0 broadcasts along that
 * dimension and transposed or sliced inputs need no copy. rank is 1 to
 * AQ_MAX_BCAST_RANK (fold extra leading dimensions away first). The
 * backward of a broadcast operand is the reduction of the gradient over
 * the broadcast dimensions (AQ_KERNEL_REDUCE_SUM); of mul, one more mul.
 * Scale is AQ_KERNEL_AXPBY with y = NULL. Grid: aq_elementwise_grid(numel z). */
#define AQ_KERNEL_ADD "aq_add_f32"
#define AQ_KERNEL_SUB "aq_sub_f32"
#define AQ_KERNEL_MUL "aq_mul_f32"
#define AQ_MAX_BCAST_RANK 4
typedef struct aq_binary_args {
  const float *x, *y;
  float *z;
  int64_t shape[AQ_MAX_BCAST_RANK];    /* of z */
  int64_t stride_x[AQ_MAX_BCAST_RANK]; /* elements; 0 broadcasts */
  int64_t stride_y[AQ_MAX_BCAST_RANK];
  int32_t rank;
  float alpha; /* 0 means 1 */
} aq_binary_args_t;

/* ---- sum / mean over axes ----------------------------------------------------
 * out = alpha * reduce(x over the dimensions whose bit is set in axes) +
 * beta * out (beta == 0: out is not read). x has shape[0..rank) with strides
 * in elements; out is contiguous over the kept dimensions, in order. mean
 * divides by the count of reduced elements. Sums accumulate in double.
 * Grid: aq_elementwise_grid(numel out), a work-item per output. */
#define AQ_KERNEL_REDUCE_SUM "aq_reduce_sum_f32"
#define AQ_KERNEL_REDUCE_MEAN "aq_reduce_mean_f32"
typedef struct aq_reduce_args {
  const float *x;
  float *out;
  int64_t shape[AQ_MAX_BCAST_RANK];
  int64_t stride[AQ_MAX_BCAST_RANK];
  int32_t rank;
  uint32_t axes; /* bit d: reduce dimension d */
  float alpha;   /* 0 means 1 */
  float beta;
} aq_reduce_args_t;

/* ---- softmax cross-entropy with integer labels ----------------------------
 * logits: rows x classes. Forward writes each row's loss into loss[row] and
 * the softmax into probs (rows x classes). Backward writes
 * dlogits = (probs - onehot(label)) * scale (scale is usually 1/rows).
 * Given dlogits, the forward writes it too, in the same pass (the same
 * values: a training graph's loss needs no backward kernel of its own).
 * A label outside [0, classes) is a kernel fault. Grid: rows work-items,
 * work-groups of AQ_ROWS_WG. */
#define AQ_KERNEL_SOFTMAX_XENT "aq_softmax_xent_f32"
#define AQ_KERNEL_SOFTMAX_XENT_BWD "aq_softmax_xent_bwd_f32"
#define AQ_ROWS_WG 64
typedef struct aq_softmax_xent_args {
  const float *logits;  /* forward */
  const int32_t *labels;
  float *probs;         /* forward: out; backward: in */
  float *loss;          /* forward: rows losses */
  float *dlogits;       /* backward: out; forward: out if not NULL */
  int64_t rows, classes;
  float scale;          /* for dlogits */
  int32_t reserved_;
} aq_softmax_xent_args_t;

static inline aq_dispatch_shape_t aq_rows_grid(int64_t rows) {
  aq_dispatch_shape_t s = {{aq_grid_items(rows), 1, 1}, {AQ_ROWS_WG, 1, 1}};
  return s;
}

/* ---- sum over rows: out[j] = alpha * sum_i x[i, j] + beta * out[j] --------
 * x: rows x cols (leading dimension ldx). The bias gradient of a dense
 * layer. Grid: cols work-items, work-groups of AQ_COLS_WG. */
#define AQ_KERNEL_SUM_ROWS "aq_sum_rows_f32"
#define AQ_COLS_WG 256
typedef struct aq_sum_rows_args {
  const float *x;
  float *out;
  int64_t rows, cols, ldx;
  float alpha, beta;
} aq_sum_rows_args_t;

/* The sum over rows with the SGD update of the weight it is the gradient of
 * (a dense layer's bias) in its write-back, as the exec's fusion pass runs
 * the pair (scheduler/fuse.c): sr.out is the weight, updated in place as
 * AQ_KERNEL_SGD would with velocity; sr.beta must be 0. Each element's
 * arithmetic is that of the unfused pair. Grid: aq_cols_grid(sr.cols). */
#define AQ_KERNEL_SUM_ROWS_SGD "aq_sum_rows_sgd_f32"
typedef struct aq_sum_rows_sgd_args {
  aq_sum_rows_args_t sr;
  float *velocity;
  float lr, momentum, weight_decay;
  int32_t reserved_;
} aq_sum_rows_sgd_args_t;

static inline aq_dispatch_shape_t aq_cols_grid(int64_t cols) {
  aq_dispatch_shape_t s = {{aq_grid_items(cols), 1, 1}, {AQ_COLS_WG, 1, 1}};
  return s;
}

/* dst = src, bytes long (any dtype). Grid: aq_elementwise_grid(bytes / 4),
 * a work-item per 4 bytes. */
#define AQ_KERNEL_COPY "aq_copy"
typedef struct aq_copy_args {
  const void *src;
  void *dst;
  int64_t bytes; /* a multiple of 4 */
} aq_copy_args_t;

/* ---- SGD with momentum and weight decay, in place ---------------------------
 * g' = grad + weight_decay * w;  v = momentum * v + g';  w -= lr * v
 * (PyTorch's SGD). Grid: aq_elementwise_grid(n). */
#define AQ_KERNEL_SGD "aq_sgd_momentum_f32"
typedef struct aq_sgd_args {
  float *w;
  const float *grad;
  float *velocity;
  int64_t n;
  float lr, momentum, weight_decay;
  int32_t reserved_;
} aq_sgd_args_t;

/* ---- several SGD updates in one dispatch --------------------------------------
 * What the scheduler makes of updates queued together in one lane (a
 * model's many small parameters would each cost a launch): entries
 * t[0..count) are aq_sgd_momentum_f32's arguments, unchanged. With
 * work-groups of W items, entry k takes ceil(t[k].n / W) groups, in entry
 * order; the grid is the sum of the entries' n, each rounded up to W. */
#define AQ_KERNEL_SGD_MULTI "aq_sgd_momentum_multi_f32"
#define AQ_SGD_MULTI_MAX 8
typedef struct aq_sgd_multi_args {
  aq_sgd_args_t t[AQ_SGD_MULTI_MAX];
  int32_t count, reserved_;
} aq_sgd_multi_args_t;

/* ---- Adam / AdamW, in place ---------------------------------------------------
 * t = *steps + 1 (the updates done so far, kept in a one-float tensor that
 * AQ_KERNEL_INCREMENT advances after the update);
 * m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 * w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * plus weight decay: decoupled (AdamW: w -= lr wd w) or as L2 (g += wd w).
 * Grid: aq_elementwise_grid(n). */
#define AQ_KERNEL_ADAM "aq_adam_f32"
typedef struct aq_adam_args {
  float *w;
  const float *grad;
  float *m, *v;
  const float *steps;
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay;
  int32_t decoupled; /* 1: AdamW */
} aq_adam_args_t;

/* x[0] += 1. Grid: one work-item. */
#define AQ_KERNEL_INCREMENT "aq_increment_f32"
typedef struct aq_increment_args {
  float *x;
} aq_increment_args_t;

/* ---- mean of n floats into out[0] (a scalar loss) ---------------------------
 * Grid: one work-item. */
#define AQ_KERNEL_MEAN "aq_mean_f32"
typedef struct aq_mean_args {
  const float *x;
  float *out;
  int64_t n;
} aq_mean_args_t;

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_OPS_H_ */
