/* Auto-tuning: for each shape of an op with several GPU builds (the op
 * library's aq_op_build_t.builds), each build is timed once on a GPU model
 * and the fastest kept, as MIOpen's find step does; lowering then asks
 * for the kept choice before the launch rule (lower.c).
 *
 * The choices live in a process-wide table, loaded from and saved to
 * tuned.tsv beside the performance models (AQ_PERF_DIR, perfmodel.h). Its
 * first line names the format and the Aquila version that wrote it; then
 * one choice a line: the GPU model (aq_perf_arch's key), the kernel, the
 * shape (the op library's tune key), the build kept, and each candidate
 * timed with its median ns ("build:ns,build:ns"). A file of another
 * version, not Aquila's, or with a malformed line is ignored (the good
 * lines of a malformed file are kept) with a warning naming the file, and
 * rewritten at the next save: the file is a cache, never a reason to
 * fail. Saving merges into what the file holds then, under an advisory
 * lock (tuned.tsv.lock), through a temporary file renamed over it. */
#ifndef AQ_SCHEDULER_TUNE_H_
#define AQ_SCHEDULER_TUNE_H_

#include <stddef.h>
#include <stdint.h>

#include "aquila/code_object.h" /* before graph.h, which uses it */
#include "aquila/graph.h"
#include "scheduler/oplib.h"
#include "scheduler/perfmodel.h"

enum { TUNE_RUNS = 5 }; /* profiled runs of the candidates, after a warm-up: each one's median is kept */

typedef struct tune_entry {
  char arch[PERF_ARCH_MAX];
  aq_tuned_build_t b;
} tune_entry_t;

/* What reading a file found. */
enum { TUNE_FILE_OURS, TUNE_FILE_NONE, TUNE_FILE_STALE, TUNE_FILE_FOREIGN, TUNE_FILE_CORRUPT };

/* The file's path (may not exist); "" when there is no place for it. */
const char *aq_tune_path(char *buf, size_t size);
/* Reads path's choices into `into`; TUNE_FILE_*, and where the file is not
 * (wholly) read, why in `why` (naming the file). */
int aq_tune_read(const char *path, void (*into)(const tune_entry_t *, void *), void *user, char *why, size_t size);
/* Writes entries[0..n) as a whole file at path (through a temporary file). */
aq_status_t aq_tune_write(const char *path, const tune_entry_t *entries, size_t n);

/* Whether a choice timed build (one of its candidates). */
int aq_tune_timed(const aq_tuned_build_t *b, const char *build);
/* The kept choice for (arch, kernel, key) into *out (may be NULL); 0 if
 * none. Loads the file on first use. */
int aq_tune_find(const char *arch, const char *kernel, const char *key, tune_entry_t *out);
/* Keeps a choice (replacing one for the same arch, kernel and key). One of
 * no candidates is a failure to tune, the build the rule's: kept in this
 * process only, so that it is not timed again at every instantiation, and
 * never listed or saved. */
void aq_tune_put(const tune_entry_t *e);
/* Up to cap of the choices kept for arch into out; how many there are. */
size_t aq_tune_list(const char *arch, aq_tuned_build_t *out, size_t cap);
/* Merges this process's new choices into the file. */
aq_status_t aq_tune_save(void);
/* Forgets the table (tests: to read the file again). */
void aq_tune_reset(void);

/* Whether tuning is on (AQ_TUNE). */
int aq_tune_on(void);
/* The kept choice for op library kernel `kernel` with these kernargs on a
 * GPU of model arch, whatever AQ_TUNE says: the op library's name of the
 * build (*out: the entry), or NULL where none is kept or the library no
 * longer lists the build kept for the shape. */
const char *aq_tune_lookup(const oplib_t *lib, const char *arch, const char *kernel, const void *kernarg,
                           tune_entry_t *out);
/* The tuned build of op library kernel `kernel` with these kernargs (as
 * dispatched) on a GPU of model arch, or NULL: the launch rule's build.
 * While a tuning exec is made (aq_tune_force), task t's forced build.
 * The name returned is the op library's (it lives as long as it does). */
const char *aq_tune_choice(const oplib_t *lib, const char *arch, uint32_t t, const char *kernel, const void *kernarg);
/* While set (this thread), execs lower task t with builds[t] and tune
 * nothing themselves: the tuning exec's candidates (calibrate.c). NULL
 * clears it. */
void aq_tune_force(const char *const *builds, uint32_t n);
int aq_tune_forcing(void);

#endif
