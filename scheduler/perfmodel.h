/* Performance models: how long a kernel takes, per kernel x shape class x
 * agent architecture, measured as tasks run and kept in a file across
 * processes (StarPU's history-based models).
 *
 * The shape class is the log2 bucket of the task's work-items and of the
 * bytes of tensors it touches; within a class the estimate scales with the
 * bytes. An architecture is the agent's identity, not its index:
 * "driver/isa/compute units/device model" ("cpu/x86-64-avx512/2/AMD_EPYC",
 * "cuda/sm_90/132/NVIDIA_H100_80GB_HBM3"): agents of one model share their
 * models, and another machine's file does not mislead this one.
 *
 * Timing spikes (a page fault storm, another process on the cores) must not
 * corrupt a model and pile work onto one agent, as StarPU's users report:
 * once a model rests on PERF_MIN_SAMPLES, a sample more than PERF_OUTLIER
 * times off its mean either way is set aside, not merged; a run of
 * PERF_OUTLIER_RUN such samples in a row means the agent really changed,
 * and they replace the model.
 *
 * The file is $AQ_PERF_DIR/models.tsv, else $XDG_CACHE_HOME/aquila/, else
 * ~/.cache/aquila/. Its first line names the format and the Aquila version
 * that wrote it; then one model a line: kernel, class, arch, samples, mean
 * ns, M2 (Welford's sum of squared deviations), mean bytes. A file of
 * another version is ignored (with a warning on stderr) and rewritten at
 * the next save; a file that is not Aquila's is ignored and never
 * overwritten; malformed lines are skipped. Saving merges this process's
 * new samples into what the file holds then, under an advisory lock
 * (models.tsv.lock) and through a temporary file renamed over it, so two
 * processes calibrating at once lose nothing and a crash leaves the old
 * file whole. The table is process-wide, behind a mutex: it is touched at
 * instantiation and after profiled runs only. */
#ifndef AQ_SCHEDULER_PERFMODEL_H_
#define AQ_SCHEDULER_PERFMODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/runtime.h"
#include "aquila/status.h"

enum { PERF_MIN_SAMPLES = 3, PERF_ARCH_MAX = 128, PERF_KERNEL_MAX = 96, PERF_OUTLIER = 4, PERF_OUTLIER_RUN = 8 };
/* A model whose samples add up to this much measured time counts as resting
 * on PERF_MIN_SAMPLES: a kernel of seconds is not run three times to learn
 * its time (a calibration runs it once past its warm-up). */
#define PERF_SETTLED_NS 1000000000ull

typedef struct perf_key {
  char kernel[PERF_KERNEL_MAX]; /* kernel name ("@<cost key>" after it), or "host:<task name>" */
  char arch[PERF_ARCH_MAX];
  uint32_t shape_class;
} perf_key_t;

/* The model key's architecture for an agent (see above). */
void aq_perf_arch(const aq_agent_info_t *agent, char *out, size_t size);

/* The class of a task with this many work-items touching this many bytes. */
uint32_t aq_perf_shape_class(uint64_t work_items, uint64_t bytes);

/* The model's estimate in ns for a task of `bytes`; *samples: how many runs
 * it rests on (0: none, the estimate is `fallback_ns`). Loads the file on
 * first use. */
double aq_perf_estimate(const perf_key_t *key, double bytes, double fallback_ns, uint32_t *samples);

/* Adds one measurement (this process's; saved by aq_perf_save); 0 if it was
 * set aside as an outlier. */
int aq_perf_record(const perf_key_t *key, double bytes, double ns);

/* Merges this process's new samples into the file. */
aq_status_t aq_perf_save(void);

/* The file's path (may not exist); "" when there is no place for it. */
const char *aq_perf_path(char *buf, size_t size);

/* Makes the directories above path's file (0; -1 if one cannot be). */
int aq_perf_mkdirs(char *path);

/* Forgets the in-memory table (tests: to re-read the file). */
void aq_perf_reset(void);

#endif
