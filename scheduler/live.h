/* A set of live objects (graphs, execs), so that destroying one twice is
 * an error rather than a double free. Only create and destroy look here:
 * the objects' other calls stay lock-free. */
#ifndef AQ_SCHEDULER_LIVE_H_
#define AQ_SCHEDULER_LIVE_H_

#include <pthread.h>
#include <stddef.h>

typedef struct live_set {
  pthread_mutex_t mutex;
  void **items;
  size_t n, cap;
} live_set_t;

#define LIVE_SET_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0}

/* 0 if there is no memory to remember p. */
int aq_live_add(live_set_t *s, void *p);
/* Whether p was live; it no longer is. */
int aq_live_remove(live_set_t *s, void *p);

#endif
