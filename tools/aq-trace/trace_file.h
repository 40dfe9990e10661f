/* A trace file as aq-trace reads it: the events of a Chrome trace-event
 * JSON file, whoever wrote it. Complete events ("X") and begin/end pairs
 * ("B"/"E") become slices; "C" counters, "s"/"t"/"f" flows and "M" names
 * are kept; Aquila's own extras (each packet's task, run, dispatch and
 * ready times, bytes; the graphs' "aquila_edges") are read where present.
 * Every field is checked: a value out of range is an error naming the
 * event, never a wrapped integer. */
#ifndef AQ_TRACE_FILE_H_
#define AQ_TRACE_FILE_H_

#include <stddef.h>

enum { TNAME = 64, TFILE_MAX_BYTES = 1 << 30 };

typedef struct tevent {
  char name[TNAME], cat[32];
  double ts, dur;         /* microseconds */
  double dispatch, ready; /* microseconds; NAN where the file does not say */
  double bytes;           /* bytes a copy moved; 0 if none */
  long pid, tid;
  long exec, task, run;   /* an Aquila graph task's; -1 otherwise */
  long status;
} tevent_t;

typedef struct tcounter {
  char name[TNAME];
  long pid;
  double ts, value;
} tcounter_t;

/* One end of a flow arrow. key joins the ends: category, name and id. */
typedef struct tflow {
  char key[TNAME + 48];
  char ph;                /* 's', 't' or 'f' */
  int enclosing;          /* 'f' binds to the enclosing slice ("bp":"e"), else to the next one */
  long pid, tid;
  double ts;
} tflow_t;

typedef struct tname {
  long pid, tid;          /* tid -1: the process's name */
  size_t seq;             /* order in the file: the first name given stands */
  char name[TNAME];
} tname_t;

/* A task graph's dependency edge: task depends on pred, within exec. */
typedef struct tedge {
  long exec, task, pred;
} tedge_t;

typedef struct tfile {
  tevent_t *events;
  size_t count;
  tcounter_t *counters;
  size_t ncounters;
  tflow_t *flows;
  size_t nflows;
  tname_t *names;
  size_t nnames;
  tedge_t *edges;
  size_t nedges;
  char producer[32];      /* otherData.producer: "aquila", or "" */
  double dropped;         /* events the producer could not keep */
  char truncated[160];    /* "" or where the file ended mid-value: the events are those before it */
} tfile_t;

/* 0, or -1 with a message naming the file and the fault. */
int tfile_load(const char *path, tfile_t *out, char *err, size_t err_size);
int tfile_parse(const char *text, size_t len, tfile_t *out, char *err, size_t err_size);
void tfile_free(tfile_t *t);

/* Names from the "M" events, or NULL. */
const char *tfile_process_name(const tfile_t *t, long pid);
const char *tfile_thread_name(const tfile_t *t, long pid, long tid);

/* qsort that accepts an empty (even NULL) array. */
void tsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* Copies at most size-1 bytes of src without splitting a UTF-8 sequence. */
void copy_utf8(char *dst, size_t size, const char *src);

#endif
