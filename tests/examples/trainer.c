/* The training library (scheduler/train) through its API, on a small
 * synthetic set: bad options are refused by name, and training learns,
 * evaluates and repeats bit for bit from the same seed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/train/trainer.h"

enum { TRAIN_N = 512, TEST_N = 1000, PIXELS = 28 * 28 };

static void setup(void) { cr_assert_eq(aq_init(NULL), AQ_OK, "%s", aq_last_error()); }
static void teardown(void) { aq_shut_down(); }
TestSuite(trainer, .init = setup, .fini = teardown);

/* Images whose class is which band of rows is bright: learnable at once. */
static void synthetic(aq_fashion_set_t *s, uint32_t n, uint32_t seed) {
  *s = (aq_fashion_set_t){.count = n, .rows = 28, .cols = 28};
  s->images = malloc((size_t)n * PIXELS);
  s->labels = malloc(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t c = (i * 7 + seed) % AQ_FASHION_CLASSES;
    s->labels[i] = (uint8_t)c;
    for (uint32_t p = 0; p < PIXELS; ++p) s->images[(size_t)i * PIXELS + p] = p / 28 / 3 == c ? 200 : 10;
  }
}

static aq_trainer_options_t options(void) {
  return (aq_trainer_options_t){.model = "mlp", .optimizer = "sgd", .batch = 64, .hidden = 32, .lr = 0.05f,
                                .momentum = 0.9f, .seed = 7};
}

Test(trainer, bad_options_are_refused_by_name) {
  aq_fashion_set_t train, test;
  synthetic(&train, TRAIN_N, 0), synthetic(&test, TEST_N, 1);
  aq_trainer_t *t = NULL;
  aq_trainer_options_t o = options();
  cr_assert_eq(aq_trainer_create(NULL, &train, &test, &t), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT), "are required"));
  o.model = "resnet";
  cr_assert_eq(aq_trainer_create(&o, &train, &test, &t), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT), "mlp or cnn"));
  o = options(), o.optimizer = "lbfgs";
  cr_assert_eq(aq_trainer_create(&o, &train, &test, &t), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT), "sgd or adam"));
  o = options(), o.batch = TRAIN_N + 1;
  cr_assert_eq(aq_trainer_create(&o, &train, &test, &t), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT), "--batch"));
  cr_assert_null(t, "a refusal makes no trainer");
  aq_fashion_free(&train), aq_fashion_free(&test);
}

/* A trainer told it is one of 2 ranks over a communicator of 1 (this
 * process alone) is refused: its shard would not be the one it trains. */
Test(trainer, ranks_other_than_the_communicators_are_refused) {
  const char *why = "";
  cr_assert_eq(aq_comm_backend_status("mpi", &why), AQ_OK);
  if (*why) cr_skip_test("skipped: no MPI (%s)", why);
  aq_comm_t *c;
  cr_assert_eq(aq_comm_create_mpi(NULL, &(aq_comm_options_t){.no_nccl = 1}, &c), AQ_OK, "%s", aq_last_error());
  aq_fashion_set_t train, test;
  synthetic(&train, TRAIN_N, 0), synthetic(&test, TEST_N, 1);
  aq_trainer_t *t = NULL;
  aq_trainer_options_t o = options();
  o.comm = c, o.ranks = 2, o.rank = 0;
  cr_assert_eq(aq_trainer_create(&o, &train, &test, &t), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT), "must be the communicator's"), "%s",
            aq_trainer_error(AQ_ERROR_INVALID_ARGUMENT));
  cr_assert_null(t, "a refusal makes no trainer");
  o.ranks = 1; /* the communicator's own: accepted */
  cr_assert_eq(aq_trainer_create(&o, &train, &test, &t), AQ_OK, "%s", aq_trainer_error(AQ_OK));
  aq_trainer_destroy(t);
  cr_assert_eq(aq_comm_destroy(c), AQ_OK);
  aq_fashion_free(&train), aq_fashion_free(&test);
}

/* Three epochs: the first's losses, and the accuracy after the last. */
static double train3(const aq_trainer_options_t *o, const aq_fashion_set_t *train, const aq_fashion_set_t *test,
                    float *losses) {
  aq_trainer_t *t;
  cr_assert_eq(aq_trainer_create(o, train, test, &t), AQ_OK, "%s", aq_trainer_error(AQ_OK));
  cr_assert_eq(aq_trainer_steps_per_epoch(t), TRAIN_N / 64);
  cr_assert_not_null(aq_trainer_exec(t));
  for (uint32_t e = 0; e < 3; ++e) {
    aq_trainer_begin_epoch(t, e);
    float loss;
    for (uint32_t s = 0; s < TRAIN_N / 64; ++s)
      cr_assert_eq(aq_trainer_step(t, e ? &loss : &losses[s]), AQ_OK, "%s", aq_last_error());
  }
  double acc = -1;
  cr_assert_eq(aq_trainer_evaluate(t, &acc), AQ_OK, "%s", aq_last_error());
  aq_trainer_destroy(t);
  return acc;
}

Test(trainer, training_learns_and_repeats_from_its_seed) {
  aq_fashion_set_t train, test;
  synthetic(&train, TRAIN_N, 0), synthetic(&test, TEST_N, 1);
  aq_trainer_options_t o = options();
  float a[TRAIN_N / 64], b[TRAIN_N / 64];
  double acc_a = train3(&o, &train, &test, a), acc_b = train3(&o, &train, &test, b);
  for (int s = 0; s < TRAIN_N / 64; ++s) cr_assert(isfinite(a[s]) && a[s] == b[s], "step %d: %g vs %g", s, a[s], b[s]);
  cr_assert_lt(a[TRAIN_N / 64 - 1], a[0], "the loss falls over the epoch: %g -> %g", a[0], a[TRAIN_N / 64 - 1]);
  cr_assert_eq(acc_a, acc_b);
  cr_assert(acc_a > 0.5 && acc_a <= 1.0, "accuracy %g on bands of rows", acc_a);
  aq_fashion_free(&train), aq_fashion_free(&test);
}
