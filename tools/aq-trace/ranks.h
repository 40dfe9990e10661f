/* Several ranks' traces (AQ_TRACE=run-%r.json under mpirun) as one: each
 * rank's processes named "rank R: ..." and its times shifted onto rank
 * 0's clock, aligned on the end of each rank's first collective. Processes
 * of different machines share no clock, and even one machine's ranks start
 * theirs at different moments; a collective's end is one instant on every
 * rank (none ends before the last joins), where its start is each rank's
 * own arrival. */
#ifndef AQ_TRACE_RANKS_H_
#define AQ_TRACE_RANKS_H_

#include "trace_file.h"

/* Merges files[0..n) (rank r = files[r]) into out, taking their contents
 * (each is left empty); offsets (may be NULL) gets each rank's shift in us.
 * 0, or -1 with a message naming the file (paths[r]) that has no
 * collective to align on. */
int tfile_merge_ranks(tfile_t *files, const char *const *paths, size_t n, tfile_t *out, double *offsets, char *err,
                      size_t err_size);

#endif /* AQ_TRACE_RANKS_H_ */
