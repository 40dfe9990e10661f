/* A trace file as aq-trace reads it: the complete ("X") events of a Chrome
 * trace-event JSON file, whoever wrote it. */
#ifndef AQ_TRACE_FILE_H_
#define AQ_TRACE_FILE_H_

#include <stddef.h>

typedef struct tevent {
  char name[64], cat[24];
  double ts, dur; /* microseconds */
  int pid, tid;
  long exec, task, run; /* an Aquila graph task's, else -1 */
} tevent_t;

/* A task graph's dependency edges (task, predecessor), from Aquila's
 * "aquila_edges" metadata. */
typedef struct tedge {
  long exec, task, pred;
} tedge_t;

typedef struct tfile {
  tevent_t *events;
  size_t count;
  tedge_t *edges;
  size_t nedges;
  char pid_names[64][64];
} tfile_t;

/* 0, or -1 with a message naming the file and the fault. */
int tfile_load(const char *path, tfile_t *out, char *err, size_t err_size);
int tfile_parse(const char *text, size_t len, tfile_t *out, char *err, size_t err_size);
void tfile_free(tfile_t *t);

#endif
