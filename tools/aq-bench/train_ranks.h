/* aq-bench train --ranks N (train_ranks.c): data-parallel scaling under
 * mpirun, called by the train suite once it has its options and data. */
#ifndef AQ_BENCH_TRAIN_RANKS_H_
#define AQ_BENCH_TRAIN_RANKS_H_

#include "scheduler/train/trainer.h"

/* o: the suite's options (--batch is per rank); prints rank 0's lines. */
int aq_bench_train_ranks(aq_trainer_options_t *o, const char *placement,
                         const aq_fashion_set_t *train, const aq_fashion_set_t *test);

#endif
