/* The training library (libaquila-train.a): a training job as a small API
 * that examples/train_fashion, `aq-bench train` and the tests share. It
 * builds the model's task graph (MLP or CNN; the batch loader is a host
 * task of the same graph), sets up its optimizer (SGD with momentum or
 * AdamW, a cosine schedule), instantiates it, and runs steps, evaluations
 * and checkpoints. Built on the public API only (aquila/aquila.h). */
#ifndef AQ_SCHEDULER_TRAIN_TRAINER_H_
#define AQ_SCHEDULER_TRAIN_TRAINER_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/aquila.h"
#include "scheduler/train/fashion_data.h"

typedef struct aq_trainer_options {
  const char *model;        /* "mlp" */
  const char *optimizer;    /* "sgd" (momentum) or "adam" (AdamW) */
  uint32_t batch;           /* 256 */
  uint32_t hidden;          /* 1024 */
  float lr, momentum, weight_decay;
  uint64_t seed;
  aq_sched_policy_t policy; /* placement */
  uint32_t kernel_agent_kinds; /* 0: any agent; else 1 << aq_agent_kind_t */
  int flip;                 /* augment: mirror each image left-right with probability 1/2 (seeded) */
  uint32_t cosine_epochs;   /* > 0: the learning rate falls from lr towards 0 on a cosine over these
                               epochs (set at each aq_trainer_begin_epoch); 0: constant */
  /* Data parallelism: this process is rank `rank` of `ranks` in comm (NULL:
   * alone) and trains on its share of every global batch of `batch` rows
   * (batch / ranks of them, the same shuffled order on every rank). */
  aq_comm_t *comm;
  uint32_t rank, ranks;
  size_t bucket_bytes; /* gradient bytes an all-reduce bucket gathers; 0: the library's default */
} aq_trainer_options_t;

typedef struct aq_trainer aq_trainer_t;

/* Returns AQ_OK or an error; aq_trainer_error() says what was wrong. */
aq_status_t aq_trainer_create(const aq_trainer_options_t *o, const aq_fashion_set_t *train, const aq_fashion_set_t *test,
                           aq_trainer_t **out);
void aq_trainer_destroy(aq_trainer_t *t);
const char *aq_trainer_error(aq_status_t status);

uint32_t aq_trainer_steps_per_epoch(const aq_trainer_t *t);
/* Shuffles the training set for this epoch (seeded: the same seed, the same
 * order). */
void aq_trainer_begin_epoch(aq_trainer_t *t, uint32_t epoch);
/* One step: load the next batch, forward, backward, update. */
aq_status_t aq_trainer_step(aq_trainer_t *t, float *out_loss);
/* Test-set accuracy with the current parameters. */
aq_status_t aq_trainer_evaluate(aq_trainer_t *t, double *out_accuracy);
/* Checkpoints: the training exec's state (aq_exec_save) and, in its user
 * data, what the next epoch needs to go on bit for bit: the epochs done,
 * the data order they left (each epoch shuffles the last one's), and
 * extra_size bytes of the caller's (its metrics). */
aq_status_t aq_trainer_save(aq_trainer_t *t, const char *path, uint32_t epochs_done, const void *extra, size_t extra_size);
/* Restores a checkpoint of aq_trainer_save, after checking that it continues
 * this run (the same data, seed, batch and ranks) and that its extra bytes
 * fit in room: a refusal changes nothing. The next epoch to train is
 * *out_epochs_done. */
aq_status_t aq_trainer_resume(aq_trainer_t *t, const char *path, uint32_t *out_epochs_done, void *extra, size_t room,
                           size_t *out_extra_size);
/* The training exec, for DOT dumps and statistics. */
aq_exec_t *aq_trainer_exec(aq_trainer_t *t);

#endif
