/* Performance models: how long a kernel takes, per kernel x shape class x
 * agent architecture, measured as tasks run and kept in a file across
 * processes (StarPU's history-based models).
 *
 * The shape class is the log2 bucket of the task's work-items and of the
 * bytes of tensors it touches; within a class the estimate scales with the
 * bytes. An architecture is "driver/isa/compute units" ("cpu/x86-64-avx512/2",
 * "cuda/sm_90/132"): agents of one kind share their models.
 *
 * The file is $AQ_PERF_DIR/models.tsv, else $XDG_CACHE_HOME/aquila/, else
 * ~/.cache/aquila/; one model a line: kernel, class, arch, samples, mean ns,
 * M2 (Welford's sum of squared deviations), mean bytes. Saving merges this
 * process's new samples into what the file holds then, so two processes
 * refining models at once lose little. The table is process-wide, behind a
 * mutex: it is touched at instantiation and after profiled runs only. */
#ifndef AQ_SCHEDULER_PERFMODEL_H_
#define AQ_SCHEDULER_PERFMODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/status.h"

enum { PERF_MIN_SAMPLES = 3, PERF_ARCH_MAX = 48, PERF_KERNEL_MAX = 64 };

typedef struct perf_key {
  char kernel[PERF_KERNEL_MAX]; /* kernel name, or "host:<task name>" */
  char arch[PERF_ARCH_MAX];
  uint32_t shape_class;
} perf_key_t;

/* The class of a task with this many work-items touching this many bytes. */
uint32_t perf_shape_class(uint64_t work_items, uint64_t bytes);

/* The model's estimate in ns for a task of `bytes`; *samples: how many runs
 * it rests on (0: none, the estimate is `fallback_ns`). Loads the file on
 * first use. */
double perf_estimate(const perf_key_t *key, double bytes, double fallback_ns, uint32_t *samples);

/* Adds one measurement (this process's; saved by perf_save). */
void perf_record(const perf_key_t *key, double bytes, double ns);

/* Merges this process's new samples into the file. */
aq_status_t perf_save(void);

/* The file's path (may not exist); "" when there is no place for it. */
const char *perf_path(char *buf, size_t size);

/* Forgets the in-memory table (tests: to re-read the file). */
void perf_reset(void);

#endif
