/* The MLP (784-H-H-10, relu) on Fashion-MNIST as two task graphs: the
 * training step (load batch -> forward -> softmax cross-entropy -> backward
 * -> SGD with momentum) and a forward-only evaluation graph that gets the
 * trained parameters copied in. */
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PIXELS = 784, EVAL_BATCH = 1000, NPARAMS = 6 };

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

const char *trainer_error(aq_status_t s) {
  (void)s;
  return own_error[0] ? own_error : aq_last_error();
}

struct trainer {
  trainer_options_t o;
  const fashion_set_t *train, *test;
  aq_graph_t *g, *eg;
  aq_exec_t *e, *ee;
  aq_tensor_t x, y, x_next, y_next, loss, params[NPARAMS];
  aq_tensor_t ex, elogits, eparams[NPARAMS];
  uint32_t *perm;
  uint32_t step, steps;
  uint64_t rng;
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

/* Parameters: w1 784xH, b1 H, w2 HxH, b2 H, w3 Hx10, b3 10. */
static aq_status_t make_params(aq_graph_t *g, uint32_t h, aq_tensor_t p[NPARAMS]) {
  static const char *names[NPARAMS] = {"w1", "b1", "w2", "b2", "w3", "b3"};
  int64_t shapes[NPARAMS][2] = {{PIXELS, h}, {h, 0}, {h, h}, {h, 0}, {h, FASHION_CLASSES}, {FASHION_CLASSES, 0}};
  for (int i = 0; i < NPARAMS; ++i)
    TRY(aq_tensor_create(g, names[i], AQ_DTYPE_F32, AQ_ROLE_PARAMETER, shapes[i][1] ? 2 : 1,
                                           shapes[i], &p[i]));
  return AQ_OK;
}

static aq_status_t forward(aq_graph_t *g, aq_tensor_t x, const aq_tensor_t p[NPARAMS], aq_tensor_t *logits) {
  aq_tensor_t h1, h2;
  TRY(aq_op_matmul(g, x, p[0], p[1], 0, 0, AQ_ACTIVATION_RELU, &h1));
  TRY(aq_op_matmul(g, h1, p[2], p[3], 0, 0, AQ_ACTIVATION_RELU, &h2));
  return aq_op_matmul(g, h2, p[4], p[5], 0, 0, AQ_ACTIVATION_NONE, logits);
}

/* Normalises batch `step` of the epoch's order into the loader's buffers. */
static void load_into(trainer_t *t, uint32_t step) {
  float *x;
  int32_t *y;
  aq_exec_tensor_data(t->e, t->x_next, (void **)&x);
  aq_exec_tensor_data(t->e, t->y_next, (void **)&y);
  uint32_t b = t->o.batch;
  for (uint32_t r = 0; r < b; ++r) {
    uint32_t i = t->perm[((size_t)step * b + r) % t->train->count];
    const uint8_t *img = t->train->images + (size_t)i * PIXELS;
    for (int p = 0; p < PIXELS; ++p) x[(size_t)r * PIXELS + p] = (float)img[p] * (1.0f / 255.0f);
    y[r] = t->train->labels[i];
  }
}

/* The loader: a host task of the training graph, on a CPU agent. It fills
 * the buffers for the next step while the rest of the graph trains on this
 * one (the copies at the graph's head took this step's batch out first). */
static aq_status_t load_batch(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  trainer_t *t = user;
  load_into(t, t->step + 1);
  return AQ_OK;
}

static aq_status_t build_train(trainer_t *t) {
  aq_graph_t *g;
  TRY(aq_graph_create(NULL, &g));
  t->g = g;
  int64_t b = t->o.batch;
  /* Double-buffered input: the step copies the batch the last run's loader
   * left in x_next, then the loader refills x_next while the step runs. */
  TRY(aq_tensor_create(g, "x_next", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){b, PIXELS}, &t->x_next));
  TRY(aq_tensor_create(g, "labels_next", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){b}, &t->y_next));
  TRY(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 2, (int64_t[]){b, PIXELS}, &t->x));
  TRY(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_ACTIVATION, 1, (int64_t[]){b}, &t->y));
  TRY(aq_op_copy(g, t->x_next, t->x));
  TRY(aq_op_copy(g, t->y_next, t->y));
  aq_host_task_t load = {.name = "load_batch", .fn = load_batch, .user = t, .agent = -1, .write_count = 2,
                         .writes = {t->x_next, t->y_next}};
  TRY(aq_graph_add_host(g, &load, NULL));
  TRY(make_params(g, t->o.hidden, t->params));
  aq_tensor_t logits;
  TRY(forward(g, t->x, t->params, &logits));
  TRY(aq_op_softmax_xent(g, logits, t->y, &t->loss));
  TRY(aq_graph_backward(g, t->loss));
  aq_sgd_options_t sgd = {.lr = t->o.lr, .momentum = t->o.momentum, .weight_decay = t->o.weight_decay};
  aq_adam_options_t adam = {.lr = t->o.lr, .weight_decay = t->o.weight_decay, .decoupled = 1};
  int use_adam = t->o.optimizer && !strcmp(t->o.optimizer, "adam");
  for (int i = 0; i < NPARAMS; ++i) {
    aq_tensor_t grad;
    TRY(aq_graph_gradient(g, t->params[i], &grad));
    TRY(use_adam ? aq_op_adam(g, t->params[i], grad, &adam) : aq_op_sgd(g, t->params[i], grad, &sgd));
  }
  aq_exec_options_t eo = {.policy = t->o.policy, .kernel_agent_kinds = t->o.kernel_agent_kinds};
  return aq_graph_instantiate(g, &eo, &t->e);
}

static aq_status_t build_eval(trainer_t *t) {
  aq_graph_t *g;
  TRY(aq_graph_create(NULL, &g));
  t->eg = g;
  TRY(
      aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){EVAL_BATCH, PIXELS}, &t->ex));
  TRY(make_params(g, t->o.hidden, t->eparams));
  TRY(forward(g, t->ex, t->eparams, &t->elogits));
  aq_exec_options_t eo = {.policy = t->o.policy, .kernel_agent_kinds = t->o.kernel_agent_kinds};
  return aq_graph_instantiate(g, &eo, &t->ee);
}

/* PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static aq_status_t init_params(trainer_t *t) {
  uint64_t state = t->o.seed * 2654435761ull + 1;
  for (int i = 0; i < NPARAMS; ++i) {
    aq_tensor_info_t info;
    TRY(aq_tensor_get_info(t->g, t->params[i], &info));
    float *w = malloc(info.bytes);
    if (!w) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the parameters");
    int64_t fan_in = info.rank == 2 ? info.dims[0] : (i == 1 ? PIXELS : t->o.hidden);
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t k = 0; k < info.bytes / 4; ++k) w[k] = uniform(&state, bound);
    aq_status_t s = aq_exec_write(t->e, t->params[i], w, info.bytes);
    free(w);
    TRY(s);
  }
  return AQ_OK;
}

aq_status_t trainer_create(const trainer_options_t *o, const fashion_set_t *train, const fashion_set_t *test,
                           trainer_t **out) {
  own_error[0] = '\0';
  if (strcmp(o->model, "mlp"))
    return fail(AQ_ERROR_INVALID_ARGUMENT,
                "this build trains --model mlp only: the cnn needs the conv2d, pool and batch-norm kernels, "
                "which are not built yet");
  if (o->optimizer && strcmp(o->optimizer, "sgd") && strcmp(o->optimizer, "adam"))
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--optimizer must be sgd or adam");
  if (o->batch == 0 || o->batch > train->count || !(o->lr > 0) || o->hidden == 0)
    return fail(AQ_ERROR_INVALID_ARGUMENT, "--batch must be in [1, training set size], --lr > 0, hidden > 0");
  if (train->rows * train->cols != PIXELS || test->rows * test->cols != PIXELS || test->count % EVAL_BATCH)
    return fail(AQ_ERROR_INVALID_ARGUMENT, "expected 28x28 images and a test set in thousands");
  trainer_t *t = calloc(1, sizeof(*t));
  if (!t) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the trainer");
  t->o = *o;
  t->train = train;
  t->test = test;
  t->steps = train->count / o->batch;
  t->perm = malloc(train->count * sizeof(uint32_t));
  aq_status_t s = t->perm ? AQ_OK : fail(AQ_ERROR_OUT_OF_MEMORY, "no memory");
  for (uint32_t i = 0; s == AQ_OK && i < train->count; ++i) t->perm[i] = i;
  if (s == AQ_OK) s = build_train(t);
  if (s == AQ_OK) s = build_eval(t);
  if (s == AQ_OK) s = init_params(t);
  if (s != AQ_OK) {
    trainer_destroy(t);
    return s;
  }
  *out = t;
  return AQ_OK;
}

void trainer_destroy(trainer_t *t) {
  if (!t) return;
  if (t->e) aq_exec_destroy(t->e);
  if (t->ee) aq_exec_destroy(t->ee);
  if (t->g) aq_graph_destroy(t->g);
  if (t->eg) aq_graph_destroy(t->eg);
  free(t->perm);
  free(t);
}

uint32_t trainer_steps_per_epoch(const trainer_t *t) { return t->steps; }
aq_exec_t *trainer_exec(trainer_t *t) { return t->e; }

void trainer_begin_epoch(trainer_t *t, uint32_t epoch) {
  uint64_t state = (t->o.seed + 1) * 0x9e3779b97f4a7c15ull + epoch;
  for (uint32_t i = t->train->count - 1; i > 0; --i) {
    uint32_t j = pcg32(&state) % (i + 1), tmp = t->perm[i];
    t->perm[i] = t->perm[j];
    t->perm[j] = tmp;
  }
  t->step = 0;
  load_into(t, 0); /* the first step's batch; each step's loader fetches the next */
}

aq_status_t trainer_step(trainer_t *t, float *out_loss) {
  TRY(aq_exec_run(t->e));
  aq_status_t s = aq_exec_wait(t->e, 600ull * 1000000000ull);
  t->step++;
  if (s != AQ_OK) return s;
  return out_loss ? aq_exec_read(t->e, t->loss, out_loss, sizeof(float)) : AQ_OK;
}

aq_status_t trainer_evaluate(trainer_t *t, double *out_accuracy) {
  /* The trained parameters into the evaluation graph (wherever each lives). */
  for (int i = 0; i < NPARAMS; ++i) {
    aq_tensor_info_t info;
    TRY(aq_tensor_get_info(t->g, t->params[i], &info));
    float *w = malloc(info.bytes);
    if (!w) return fail(AQ_ERROR_OUT_OF_MEMORY, "no memory for the parameters");
    aq_status_t s = aq_exec_read(t->e, t->params[i], w, info.bytes);
    if (s == AQ_OK) s = aq_exec_write(t->ee, t->eparams[i], w, info.bytes);
    free(w);
    TRY(s);
  }
  size_t xbytes = (size_t)EVAL_BATCH * PIXELS * sizeof(float), lbytes = (size_t)EVAL_BATCH * FASHION_CLASSES * 4;
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
      const float *l = logits + (size_t)r * FASHION_CLASSES;
      int best = 0;
      for (int c = 1; c < FASHION_CLASSES; ++c)
        if (l[c] > l[best]) best = c;
      correct += best == t->test->labels[b0 + r];
    }
  }
  free(x), free(logits);
  TRY(s);
  *out_accuracy = (double)correct / t->test->count;
  return AQ_OK;
}
