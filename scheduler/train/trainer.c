/* The MLP (784-H-H-10, relu) or the CNN on Fashion-MNIST as two task
 * graphs: the training step (load batch -> forward -> softmax
 * cross-entropy -> backward -> SGD with momentum or AdamW) and a
 * forward-only evaluation graph that gets the trained parameters copied in. */
#include "scheduler/train/trainer.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

enum { PIXELS = 784, EVAL_BATCH = 1000, MAX_PARAMS = 24, LOCALS_MAX = 16 };

#define TRY(expr)                          \
  do {                                     \
    aq_status_t s_ = (expr);               \
    if (s_ != AQ_OK) return s_;            \
  } while (0)

/* Errors of the trainer's own (bad options): Aquila's are in aq_last_error. */
static _Thread_local char own_error[256];

static aq_status_t fail(aq_status_t s, const char *msg) {
  snprintf(own_error, sizeof(own_error), "%s", msg);
  return s;
}

const char *aq_trainer_error(aq_status_t s) {
  (void)s;
  return own_error[0] ? own_error : aq_last_error();
}

struct aq_trainer {
  aq_trainer_options_t o;
  const aq_fashion_set_t *train, *test;
  aq_graph_t *g, *eg;
  aq_exec_t *e, *ee;
  aq_tensor_t x, y, loss, params[MAX_PARAMS];
  /* The batch is double-buffered: step s runs with x and y bound to
   * xbuf[s % 2], ybuf[s % 2] while its loaders fill the other pair. [0] is
   * the exec's own memory for x and y, [1] allocated beside it. With the
   * buffers on a GPU, the loaders fill pinned staging buffers and copy.
   * Several GPUs of this process (a replica of the step each): a pair per
   * local rank, its shard of the process's rows, one staging buffer. */
  uint32_t locals;
  aq_tensor_t xs[LOCALS_MAX], ys[LOCALS_MAX]; /* each local rank's x and y */
  float *xbuf[LOCALS_MAX][2], *stage_x;
  int32_t *ybuf[LOCALS_MAX][2], *stage_y;
  aq_tensor_t ex, elogits, eparams[MAX_PARAMS];
  uint32_t nparams;
  uint32_t loaders;                          /* loader tasks, an equal number for each local rank */
  _Atomic uint32_t loaders_left[LOCALS_MAX]; /* this step's still filling each local rank's rows */
  uint32_t *perm;
  uint32_t step, steps, epoch;
  uint64_t rng;
  uint32_t batch; /* each rank's rows of each global batch (o.batch) */
};

/* PCG32: small, seeded, the same on every machine. */
static uint32_t pcg32(uint64_t *state) {
  uint64_t old = *state;
  *state = old * 6364136223846793005ull + 1442695040888963407ull;
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u), rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

static float uniform(uint64_t *state, float bound) {
  return bound * (2.0f * (float)pcg32(state) / 4294967296.0f - 1.0f);
}

/* A model's tensors: what the graph holds and how they start. Trained ones
 * are parameters; batch norm's running statistics are state in training and
 * inputs (copied in) for evaluation. */
typedef enum init { INIT_UNIFORM, INIT_ONES, INIT_ZEROS } init_t;
typedef struct spec {
  const char *name;
  uint32_t rank;
  int64_t dims[4];
  int64_t fan_in;
  init_t init;
  int running; /* a running statistic, not trained */
} spec_t;

static uint32_t model_specs(const aq_trainer_options_t *o, spec_t *s) {
  int64_t h = o->hidden;
  if (!strcmp(o->model, "mlp")) {
    spec_t mlp[] = {{"w1", 2, {PIXELS, h}, PIXELS, INIT_UNIFORM, 0}, {"b1", 1, {h}, PIXELS, INIT_UNIFORM, 0},
                    {"w2", 2, {h, h}, h, INIT_UNIFORM, 0},           {"b2", 1, {h}, h, INIT_UNIFORM, 0},
                    {"w3", 2, {h, AQ_FASHION_CLASSES}, h, INIT_UNIFORM, 0},
                    {"b3", 1, {AQ_FASHION_CLASSES}, h, INIT_UNIFORM, 0}};
    memcpy(s, mlp, sizeof(mlp));
    return sizeof(mlp) / sizeof(mlp[0]);
  }
  /* LeNet-5-like: conv 1->6 5x5 pad 2, bn, relu, pool 2; conv 6->16 5x5, bn,
   * relu, pool 2; dense 400-120-84-10. */
  spec_t cnn[] = {{"conv1.w", 4, {6, 1, 5, 5}, 25, INIT_UNIFORM, 0},   {"conv1.b", 1, {6}, 25, INIT_UNIFORM, 0},
                  {"bn1.gamma", 1, {6}, 1, INIT_ONES, 0},              {"bn1.beta", 1, {6}, 1, INIT_ZEROS, 0},
                  {"bn1.mean", 1, {6}, 1, INIT_ZEROS, 1},              {"bn1.var", 1, {6}, 1, INIT_ONES, 1},
                  {"conv2.w", 4, {16, 6, 5, 5}, 150, INIT_UNIFORM, 0}, {"conv2.b", 1, {16}, 150, INIT_UNIFORM, 0},
                  {"bn2.gamma", 1, {16}, 1, INIT_ONES, 0},             {"bn2.beta", 1, {16}, 1, INIT_ZEROS, 0},
                  {"bn2.mean", 1, {16}, 1, INIT_ZEROS, 1},             {"bn2.var", 1, {16}, 1, INIT_ONES, 1},
                  {"fc1.w", 2, {400, 120}, 400, INIT_UNIFORM, 0},      {"fc1.b", 1, {120}, 400, INIT_UNIFORM, 0},
                  {"fc2.w", 2, {120, 84}, 120, INIT_UNIFORM, 0},       {"fc2.b", 1, {84}, 120, INIT_UNIFORM, 0},
                  {"fc3.w", 2, {84, AQ_FASHION_CLASSES}, 84, INIT_UNIFORM, 0},
                  {"fc3.b", 1, {AQ_FASHION_CLASSES}, 84, INIT_UNIFORM, 0}};
  memcpy(s, cnn, sizeof(cnn));
  return sizeof(cnn) / sizeof(cnn[0]);
}

static aq_status_t make_params(aq_graph_t *g, const aq_trainer_options_t *o, int training, aq_tensor_t *p,
                               uint32_t *count) {
  spec_t s[MAX_PARAMS];
  uint32_t n = model_specs(o, s);
  for (uint32_t i = 0; i < n; ++i)
    TRY(aq_tensor_create(g, s[i].name, AQ_DTYPE_F32,
                         !s[i].running ? AQ_ROLE_PARAMETER : training ? AQ_ROLE_STATE : AQ_ROLE_INPUT, s[i].rank,
                         s[i].dims, &p[i]));
  *count = n;
  return AQ_OK;
}

static aq_status_t forward_mlp(aq_graph_t *g, aq_tensor_t x, const aq_tensor_t *p, aq_tensor_t *logits) {
  aq_tensor_t h1, h2;
  TRY(aq_op_matmul(g, x, p[0], p[1], 0, 0, AQ_ACTIVATION_RELU, &h1));
  TRY(aq_op_matmul(g, h1, p[2], p[3], 0, 0, AQ_ACTIVATION_RELU, &h2));
  return aq_op_matmul(g, h2, p[4], p[5], 0, 0, AQ_ACTIVATION_NONE, logits);
}

static aq_status_t conv_block(aq_graph_t *g, aq_tensor_t x, const aq_tensor_t *p, int pad, int training,
                              aq_tensor_t *out) {
  aq_conv2d_options_t co = {.pad_h = pad, .pad_w = pad};
  aq_batch_norm_options_t bo = {.training = training};
  aq_pool_options_t po = {.kernel_h = 2, .kernel_w = 2};
  aq_tensor_t c, b, r;
  TRY(aq_op_conv2d(g, x, p[0], p[1], &co, &c));
  TRY(aq_op_batch_norm(g, c, p[2], p[3], p[4], p[5], &bo, &b));
  TRY(aq_op_relu(g, b, &r));
  return aq_op_max_pool2d(g, r, &po, out);
}

static aq_status_t forward_cnn(aq_graph_t *g, aq_tensor_t x, const aq_tensor_t *p, int training,
                               aq_tensor_t *logits) {
  aq_tensor_info_t info;
  TRY(aq_tensor_get_info(g, x, &info));
  int64_t b = info.dims[0];
  aq_tensor_t img, b1, b2, flat, h1, h2;
  TRY(aq_op_reshape(g, x, 4, (int64_t[]){b, 1, 28, 28}, &img));
  TRY(conv_block(g, img, p, 2, training, &b1));
  TRY(conv_block(g, b1, p + 6, 0, training, &b2));
  TRY(aq_op_reshape(g, b2, 2, (int64_t[]){b, 400}, &flat));
  TRY(aq_op_matmul(g, flat, p[12], p[13], 0, 0, AQ_ACTIVATION_RELU, &h1));
  TRY(aq_op_matmul(g, h1, p[14], p[15], 0, 0, AQ_ACTIVATION_RELU, &h2));
  return aq_op_matmul(g, h2, p[16], p[17], 0, 0, AQ_ACTIVATION_NONE, logits);
}

static aq_status_t forward(aq_trainer_t *t, aq_graph_t *g, aq_tensor_t x, const aq_tensor_t *p, int training,
                           aq_tensor_t *logits) {
  return !strcmp(t->o.model, "cnn") ? forward_cnn(g, x, p, training, logits) : forward_mlp(g, x, p, logits);
}

/* The batch is loaded by LOADERS host tasks (or one a local rank, if there
 * are more), each a share of one local rank's rows, on as many CPU lanes:
 * one alone took 120-300 us a batch on the H100 machine, longer than the
 * GPU's step. */
enum { LOADERS = 4 };

static uint32_t loaders_per_rank(const aq_trainer_t *t) { return t->loaders / t->locals; }

/* One image's bytes as floats in [0, 1]. GCC's -O2 left this loop scalar (a
 * convert, a multiply and a store a pixel); SSE2, which every x86-64 has,
 * does 16 pixels a step with the same products. */
static void to_unit_floats(const uint8_t *img, float *x) {
  int p = 0;
#if defined(__x86_64__)
  const __m128 scale = _mm_set1_ps(1.0f / 255.0f);
  const __m128i zero = _mm_setzero_si128();
  for (; p + 16 <= PIXELS; p += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(img + p));
    __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
    _mm_storeu_ps(x + p, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)), scale));
    _mm_storeu_ps(x + p + 4, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)), scale));
    _mm_storeu_ps(x + p + 8, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)), scale));
    _mm_storeu_ps(x + p + 12, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)), scale));
  }
#endif
  for (; p < PIXELS; ++p) x[p] = (float)img[p] * (1.0f / 255.0f);
}

/* Augmentation: whether row r of batch `step` this epoch is mirrored. A
 * hash of the seed and the position, not a shared random stream, so the
 * loaders need no order among themselves and a seed repeats bit for bit. */
static int mirrored(const aq_trainer_t *t, uint32_t step, uint32_t r) {
  uint64_t h = (t->o.seed + 0x632be59bd9b4e019ull) ^ ((uint64_t)t->epoch << 40 | (uint64_t)step << 16 | r);
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
  return (int)(h & 1);
}

static void mirror(float *img) {
  for (int row = 0; row < 28; ++row)
    for (int a = 0, b = 27; a < b; ++a, --b) {
      float v = img[row * 28 + a];
      img[row * 28 + a] = img[row * 28 + b], img[row * 28 + b] = v;
    }
}

/* Normalises rows [r0, r1) of batch `step` of the epoch's order into its
 * buffers (or the staging ones). */
static void load_rows(aq_trainer_t *t, uint32_t step, uint32_t r0, uint32_t r1) {
  uint32_t b = t->o.batch, first = t->o.rank * t->batch; /* this process's shard */
  for (uint32_t r = r0; r < r1; ++r) {
    uint32_t l = r / t->batch, at = t->stage_x ? r : r % t->batch;
    float *x = t->stage_x ? t->stage_x : t->xbuf[l][step % 2];
    int32_t *y = t->stage_y ? t->stage_y : t->ybuf[l][step % 2];
    uint32_t i = t->perm[((size_t)step * b + first + r) % t->train->count];
    const uint8_t *img = t->train->images + (size_t)i * PIXELS;
    /* The images of a shuffled batch are scattered over 47 MB: fetching a
     * few ahead hides the cache misses (115 -> 47 us a batch of 256). */
    const uint8_t *ahead =
        t->train->images + (size_t)t->perm[((size_t)step * b + first + r + 4) % t->train->count] * PIXELS;
    for (int l = 0; l < PIXELS; l += 64) __builtin_prefetch(ahead + l);
    to_unit_floats(img, x + (size_t)at * PIXELS);
    if (t->o.flip && mirrored(t, step, r)) mirror(x + (size_t)at * PIXELS);
    y[at] = t->train->labels[i];
  }
}

/* With a GPU, local rank l's staged rows go over in two copies, images and
 * labels: a copy of each loader's rows (eight a step) took 100 us a loader
 * on the H100 machine, their DMAs queued one behind another. */
static aq_status_t stage_out(aq_trainer_t *t, uint32_t step, uint32_t l) {
  if (!t->stage_x) return AQ_OK;
  size_t rows = (size_t)l * t->batch;
  TRY(aq_memory_copy(t->xbuf[l][step % 2], t->stage_x + rows * PIXELS, (size_t)t->batch * PIXELS * sizeof(float)));
  return aq_memory_copy(t->ybuf[l][step % 2], t->stage_y + rows, (size_t)t->batch * sizeof(int32_t));
}

/* A loader: a host task of the training graph, on a CPU agent. It fills its
 * share of one local rank's part of the next step's buffers while the rest
 * of the graph trains on this step's. */
static aq_status_t load_share(void *user, uint64_t share, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  aq_trainer_t *t = user;
  uint32_t per = loaders_per_rank(t), l = (uint32_t)share / per, q = (uint32_t)share % per, b = t->batch;
  load_rows(t, t->step + 1, l * b + b * q / per, l * b + b * (q + 1) / per);
  /* The rank's last loader to finish sends its rows (the count's ordering
   * makes the others' rows visible to it): one rank's copies run beside
   * another's, each GPU's on its own link, where one loader sending every
   * rank's took longer than the step on four GPUs. */
  return atomic_fetch_sub(&t->loaders_left[l], 1) == 1 ? stage_out(t, t->step + 1, l) : AQ_OK;
}

/* Local rank `local`'s copy of input x (*mine) and its second buffer,
 * where the exec put the first (in the region its readers reach,
 * returned in r). */
static aq_status_t second_buffer(aq_trainer_t *t, aq_tensor_t x, uint32_t local, aq_tensor_t *mine, void **first,
                                 void **second, aq_region_t *r) {
  aq_tensor_info_t info;
  TRY(aq_tensor_get_info(t->g, x, &info));
  TRY(aq_exec_local_tensor(t->e, x, local, mine));
  TRY(aq_exec_tensor_data(t->e, *mine, first));
  TRY(aq_memory_lookup(*first, r, NULL, NULL));
  return aq_memory_allocate(*r, info.bytes, second);
}

/* The batch buffers; with them on a GPU, the loaders stage the batch in
 * pinned host memory (the GPU agent's host region) and copy it over. */
static aq_status_t find_buffers(aq_trainer_t *t) {
  aq_region_t r, ry;
  aq_region_info_t info;
  for (uint32_t l = 0; l < t->locals; ++l) {
    TRY(second_buffer(t, t->x, l, &t->xs[l], (void **)&t->xbuf[l][0], (void **)&t->xbuf[l][1], &r));
    TRY(second_buffer(t, t->y, l, &t->ys[l], (void **)&t->ybuf[l][0], (void **)&t->ybuf[l][1], &ry));
  }
  TRY(aq_region_get_info(r, &info));
  if (info.flags & AQ_REGION_HOST_ACCESSIBLE) return AQ_OK;
  aq_region_t regions[8];
  size_t n = 0;
  TRY(aq_agent_regions(info.agent, regions, 8, &n));
  for (size_t i = 0; i < n && i < 8 && !t->stage_x; ++i) {
    aq_region_info_t ri;
    TRY(aq_region_get_info(regions[i], &ri));
    if (!(ri.flags & AQ_REGION_HOST_ACCESSIBLE) || (ri.flags & AQ_REGION_MANAGED)) continue;
    size_t rows = (size_t)t->batch * t->locals;
    TRY(aq_memory_allocate(regions[i], rows * PIXELS * sizeof(float), (void **)&t->stage_x));
    TRY(aq_memory_allocate(regions[i], rows * sizeof(int32_t), (void **)&t->stage_y));
  }
  return t->stage_x ? AQ_OK : fail(AQ_ERROR_UNAVAILABLE, "no pinned host memory to stage batches for the GPU");
}

static aq_status_t build_train(aq_trainer_t *t) {
  aq_graph_t *g;
  TRY(aq_graph_create(NULL, &g));
  t->g = g;
  int64_t b = t->batch;
  /* Double-buffered input (xbuf, ybuf): each run binds x and labels to one
   * pair of buffers while its loaders fill the other, so the graph copies
   * nothing. The loaders declare no tensors: they run side by side from the
   * run's start (x stays where its readers are, on the GPU if they run
   * there). */
  TRY(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){b, PIXELS}, &t->x));
  TRY(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){b}, &t->y));
  t->loaders = t->locals * (LOADERS > t->locals ? LOADERS / t->locals : 1);
  for (uint32_t q = 0; q < t->loaders; ++q) {
    aq_host_task_t load = {.name = "load_batch", .fn = load_share, .user = t, .agent = -1, .args = {q}};
    aq_task_t task;
    TRY(aq_graph_add_host(g, &load, &task));
  }
  TRY(make_params(g, &t->o, 1, t->params, &t->nparams));
  aq_tensor_t logits;
  TRY(forward(t, g, t->x, t->params, 1, &logits));
  TRY(aq_op_softmax_xent(g, logits, t->y, &t->loss));
  TRY(aq_graph_backward(g, t->loss));
  aq_data_parallel_options_t dp = {.bucket_bytes = t->o.bucket_bytes};
  if (t->o.comm) TRY(aq_graph_data_parallel(g, t->o.comm, &dp));
  aq_sgd_options_t sgd = {.lr = t->o.lr, .momentum = t->o.momentum, .weight_decay = t->o.weight_decay};
  aq_adam_options_t adam = {.lr = t->o.lr, .weight_decay = t->o.weight_decay, .decoupled = 1};
  int use_adam = t->o.optimizer && !strcmp(t->o.optimizer, "adam");
  spec_t specs[MAX_PARAMS];
  model_specs(&t->o, specs);
  for (uint32_t i = 0; i < t->nparams; ++i) {
    if (specs[i].running) continue;
    aq_tensor_t grad;
    TRY(aq_graph_gradient(g, t->params[i], &grad));
    TRY(use_adam ? aq_op_adam(g, t->params[i], grad, &adam) : aq_op_sgd(g, t->params[i], grad, &sgd));
  }
  aq_exec_options_t eo = {.policy = t->o.policy, .kernel_agent_kinds = t->o.kernel_agent_kinds};
  return aq_graph_instantiate(g, &eo, &t->e);
}

static aq_status_t build_eval(aq_trainer_t *t) {
  aq_graph_t *g;
  TRY(aq_graph_create(NULL, &g));
  t->eg = g;
  TRY(
      aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){EVAL_BATCH, PIXELS}, &t->ex));
  uint32_t n;
  TRY(make_params(g, &t->o, 0, t->eparams, &n));
  TRY(forward(t, g, t->ex, t->eparams, 0, &t->elogits));
  aq_exec_options_t eo = {.policy = t->o.policy, .kernel_agent_kinds = t->o.kernel_agent_kinds};
  return aq_graph_instantiate(g, &eo, &t->ee);
}

/* PyTorch's defaults: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
 * biases; batch norm's gamma 1, beta 0, running mean 0, variance 1. */
static aq_status_t init_params(aq_trainer_t *t) {
  uint64_t state = t->o.seed * 2654435761ull + 1;
  spec_t specs[MAX_PARAMS];
  model_specs(&t->o, specs);
  for (uint32_t i = 0; i < t->nparams; ++i) {
    aq_tensor_info_t info;
    TRY(aq_tensor_get_info(t->g, t->params[i], &info));
    float *w = malloc(info.bytes);
    if (!w) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the parameters");
    float bound = 1.0f / sqrtf((float)specs[i].fan_in);
    for (size_t k = 0; k < info.bytes / 4; ++k)
      w[k] = specs[i].init == INIT_UNIFORM ? uniform(&state, bound) : specs[i].init == INIT_ONES ? 1.0f : 0.0f;
    aq_status_t s = aq_exec_write(t->e, t->params[i], w, info.bytes);
    free(w);
    TRY(s);
  }
  return AQ_OK;
}

aq_status_t aq_trainer_create(const aq_trainer_options_t *o, const aq_fashion_set_t *train, const aq_fashion_set_t *test,
                           aq_trainer_t **out) {
  own_error[0] = '\0';
  if (!o || !train || !test || !out || !o->model)
    return fail(AQ_ERROR_INVALID_ARGUMENT, "aq_trainer_create: options (with a model), both sets and out are required");
  if (strcmp(o->model, "mlp") && strcmp(o->model, "cnn"))
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--model must be mlp or cnn");
  if (o->optimizer && strcmp(o->optimizer, "sgd") && strcmp(o->optimizer, "adam"))
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--optimizer must be sgd or adam");
  if (o->batch == 0 || o->batch > train->count || !(o->lr > 0) || o->hidden == 0)
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--batch must be in [1, training set size], --lr > 0, hidden > 0");
  uint32_t ranks = o->comm && o->ranks ? o->ranks : 1;
  aq_comm_info_t ci = {.size = 1, .local_ranks = 1};
  if (o->comm && aq_comm_get_info(o->comm, &ci) != AQ_OK) return AQ_ERROR_INVALID_ARGUMENT;
  if (o->batch % ranks || (o->comm && o->rank >= ranks))
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--batch (the global batch) must be a multiple of the ranks");
  if (o->comm && (ranks != ci.size || o->rank != ci.rank))
    return fail(AQ_ERROR_INVALID_ARGUMENT, "the trainer's rank and ranks must be the communicator's");
  if (train->rows * train->cols != PIXELS || test->rows * test->cols != PIXELS || test->count % EVAL_BATCH)
    return fail(AQ_ERROR_INVALID_ARGUMENT, "expected 28x28 images and a test set in thousands");
  aq_trainer_t *t = calloc(1, sizeof(*t));
  if (!t) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the trainer");
  t->o = *o;
  t->train = train;
  t->test = test;
  t->steps = train->count / o->batch;
  t->batch = o->batch / ranks;
  t->locals = ci.local_ranks;
  t->perm = malloc(train->count * sizeof(uint32_t));
  aq_status_t s = t->perm ? AQ_OK : fail(AQ_ERROR_OUT_OF_MEMORY, "no memory");
  for (uint32_t i = 0; s == AQ_OK && i < train->count; ++i) t->perm[i] = i;
  if (s == AQ_OK) s = build_train(t);
  if (s == AQ_OK) s = find_buffers(t);
  if (s == AQ_OK) s = build_eval(t);
  if (s == AQ_OK) s = init_params(t);
  if (s != AQ_OK) {
    aq_trainer_destroy(t);
    return s;
  }
  *out = t;
  return AQ_OK;
}

void aq_trainer_destroy(aq_trainer_t *t) {
  if (!t) return;
  if (t->stage_x) aq_memory_free(t->stage_x);
  if (t->stage_y) aq_memory_free(t->stage_y);
  for (uint32_t l = 0; l < LOCALS_MAX; ++l) {
    if (t->xbuf[l][1]) aq_memory_free(t->xbuf[l][1]);
    if (t->ybuf[l][1]) aq_memory_free(t->ybuf[l][1]);
  }
  if (t->e) aq_exec_destroy(t->e);
  if (t->ee) aq_exec_destroy(t->ee);
  if (t->g) aq_graph_destroy(t->g);
  if (t->eg) aq_graph_destroy(t->eg);
  free(t->perm);
  free(t);
}

uint32_t aq_trainer_steps_per_epoch(const aq_trainer_t *t) { return t->steps; }
aq_exec_t *aq_trainer_exec(aq_trainer_t *t) { return t->e; }

void aq_trainer_begin_epoch(aq_trainer_t *t, uint32_t epoch) {
  uint64_t state = (t->o.seed + 1) * 0x9e3779b97f4a7c15ull + epoch;
  t->epoch = epoch;
  if (t->o.cosine_epochs) {
    double f = epoch < t->o.cosine_epochs ? 0.5 * (1.0 + cos(M_PI * epoch / t->o.cosine_epochs)) : 0.0;
    float lr = (float)(t->o.lr * (f > 1e-3 ? f : 1e-3));
    if (aq_exec_set_learning_rate(t->e, lr) != AQ_OK)
      fprintf(stderr, "train_fashion: epoch %u's learning rate: %s\n", epoch + 1, aq_last_error());
  }
  for (uint32_t i = t->train->count - 1; i > 0; --i) {
    uint32_t j = pcg32(&state) % (i + 1), tmp = t->perm[i];
    t->perm[i] = t->perm[j];
    t->perm[j] = tmp;
  }
  t->step = 0;
  /* the first step's batch; each step's loaders fetch the next */
  load_rows(t, 0, 0, t->batch * t->locals);
  aq_status_t s = AQ_OK;
  for (uint32_t l = 0; l < t->locals && s == AQ_OK; ++l) s = stage_out(t, 0, l);
  if (s != AQ_OK) fprintf(stderr, "train_fashion: loading the first batch: %s\n", aq_last_error());
}

aq_status_t aq_trainer_step(aq_trainer_t *t, float *out_loss) {
  uint32_t s2 = t->step % 2;
  for (uint32_t l = 0; l < t->locals; ++l) {
    TRY(aq_exec_bind(t->e, t->xs[l], t->xbuf[l][s2], (size_t)t->batch * PIXELS * sizeof(float)));
    TRY(aq_exec_bind(t->e, t->ys[l], t->ybuf[l][s2], (size_t)t->batch * sizeof(int32_t)));
  }
  for (uint32_t l = 0; l < t->locals; ++l) atomic_store(&t->loaders_left[l], loaders_per_rank(t));
  TRY(aq_exec_run(t->e));
  aq_status_t s = aq_exec_wait(t->e, 600ull * 1000000000ull);
  t->step++;
  if (s != AQ_OK) return s;
  return out_loss ? aq_exec_read(t->e, t->loss, out_loss, sizeof(float)) : AQ_OK;
}

aq_status_t aq_trainer_evaluate(aq_trainer_t *t, double *out_accuracy) {
  /* The trained parameters and running statistics into the evaluation graph
   * (wherever each lives). */
  for (uint32_t i = 0; i < t->nparams; ++i) {
    aq_tensor_info_t info;
    TRY(aq_tensor_get_info(t->g, t->params[i], &info));
    float *w = malloc(info.bytes);
    if (!w) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the parameters");
    aq_status_t s = aq_exec_read(t->e, t->params[i], w, info.bytes);
    if (s == AQ_OK) s = aq_exec_write(t->ee, t->eparams[i], w, info.bytes);
    free(w);
    TRY(s);
  }
  size_t xbytes = (size_t)EVAL_BATCH * PIXELS * sizeof(float), lbytes = (size_t)EVAL_BATCH * AQ_FASHION_CLASSES * 4;
  float *x = malloc(xbytes), *logits = malloc(lbytes);
  if (!x || !logits) {
    free(x), free(logits);
    return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory to evaluate");
  }
  uint32_t correct = 0;
  aq_status_t s = AQ_OK;
  for (uint32_t b0 = 0; s == AQ_OK && b0 < t->test->count; b0 += EVAL_BATCH) {
    for (size_t k = 0; k < (size_t)EVAL_BATCH * PIXELS; ++k)
      x[k] = (float)t->test->images[(size_t)b0 * PIXELS + k] * (1.0f / 255.0f);
    s = aq_exec_write(t->ee, t->ex, x, xbytes);
    if (s == AQ_OK) s = aq_exec_run(t->ee);
    if (s == AQ_OK) s = aq_exec_wait(t->ee, 600ull * 1000000000ull);
    if (s == AQ_OK) s = aq_exec_read(t->ee, t->elogits, logits, lbytes);
    for (uint32_t r = 0; s == AQ_OK && r < EVAL_BATCH; ++r) {
      const float *l = logits + (size_t)r * AQ_FASHION_CLASSES;
      int best = 0;
      for (int c = 1; c < AQ_FASHION_CLASSES; ++c)
        if (l[c] > l[best]) best = c;
      correct += best == t->test->labels[b0 + r];
    }
  }
  free(x), free(logits);
  TRY(s);
  *out_accuracy = (double)correct / t->test->count;
  return AQ_OK;
}

/* The user data of a trainer's checkpoint: this head, the data order
 * (count entries), then the caller's extra bytes. */
#define CKPT_MAGIC "AQFASHN1"
typedef struct ckpt_head {
  char magic[8];
  uint32_t epochs_done, count;
  uint64_t seed;
  uint32_t batch, ranks;
} ckpt_head_t;

aq_status_t aq_trainer_save(aq_trainer_t *t, const char *path, uint32_t epochs_done, const void *extra, size_t extra_size) {
  ckpt_head_t h = {.magic = CKPT_MAGIC, .epochs_done = epochs_done, .count = t->train->count, .seed = t->o.seed,
                   .batch = t->o.batch, .ranks = t->o.batch / t->batch};
  size_t order = (size_t)h.count * sizeof(uint32_t), size = sizeof(h) + order + extra_size;
  uint8_t *blob = malloc(size);
  if (!blob) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for a checkpoint");
  memcpy(blob, &h, sizeof(h));
  memcpy(blob + sizeof(h), t->perm, order);
  if (extra_size) memcpy(blob + sizeof(h) + order, extra, extra_size);
  own_error[0] = '\0';
  aq_status_t s = aq_exec_save_with(t->e, path, blob, size);
  free(blob);
  return s;
}

/* Whether a checkpoint's head continues this run; else why not, in own_error. */
static aq_status_t check_head(const aq_trainer_t *t, const char *path, const ckpt_head_t *h, size_t size) {
  char why[160] = "";
  if (size < sizeof(*h) || memcmp(h->magic, CKPT_MAGIC, 8))
    snprintf(why, sizeof(why), "it is not a train_fashion checkpoint");
  else if (h->count != t->train->count || size < sizeof(*h) + (size_t)h->count * sizeof(uint32_t))
    snprintf(why, sizeof(why), "it was made on a training set of %u images, not %u", h->count, t->train->count);
  else if (h->seed != t->o.seed)
    snprintf(why, sizeof(why), "it was made with --seed %llu, not %llu", (unsigned long long)h->seed,
             (unsigned long long)t->o.seed);
  else if (h->batch != t->o.batch || h->ranks != t->o.batch / t->batch)
    snprintf(why, sizeof(why), "it was made with --batch %u on %u ranks, not %u on %u", h->batch, h->ranks,
             t->o.batch, t->o.batch / t->batch);
  if (!why[0]) return AQ_OK;
  snprintf(own_error, sizeof(own_error), "cannot resume from %s: %s", path, why);
  return AQ_ERROR_INCOMPATIBLE;
}

aq_status_t aq_trainer_resume(aq_trainer_t *t, const char *path, uint32_t *out_epochs_done, void *extra, size_t room,
                           size_t *out_extra_size) {
  own_error[0] = '\0';
  size_t size;
  TRY(aq_checkpoint_user_data(path, NULL, 0, &size));
  uint8_t *blob = malloc(size ? size : 1);
  if (!blob) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory to read a checkpoint");
  ckpt_head_t h;
  memset(&h, 0, sizeof(h));
  aq_status_t s = aq_checkpoint_user_data(path, blob, size, NULL);
  if (s == AQ_OK && size >= sizeof(h)) memcpy(&h, blob, sizeof(h));
  if (s == AQ_OK) s = check_head(t, path, &h, size);
  size_t order = (size_t)t->train->count * sizeof(uint32_t), extra_size = size - sizeof(h) - order;
  if (s == AQ_OK && extra_size > room) {
    snprintf(own_error, sizeof(own_error), "cannot resume from %s: it has %u epochs done, more than this run's",
             path, h.epochs_done);
    s = AQ_ERROR_INCOMPATIBLE;
  }
  if (s == AQ_OK) s = aq_exec_load(t->e, path); /* checked whole before it changes anything */
  if (s == AQ_OK) {
    memcpy(t->perm, blob + sizeof(h), order);
    if (extra_size) memcpy(extra, blob + sizeof(h) + order, extra_size);
    *out_epochs_done = h.epochs_done;
    if (out_extra_size) *out_extra_size = extra_size;
  }
  free(blob);
  return s;
}
