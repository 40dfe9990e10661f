/* Live-object sets (live.h). */
#include "scheduler/live.h"

#include <stdlib.h>

int aq_live_add(live_set_t *s, void *p) {
  pthread_mutex_lock(&s->mutex);
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    void **n = realloc(s->items, cap * sizeof(*n));
    if (!n) {
      pthread_mutex_unlock(&s->mutex);
      return 0;
    }
    s->items = n, s->cap = cap;
  }
  s->items[s->n++] = p;
  pthread_mutex_unlock(&s->mutex);
  return 1;
}

int aq_live_remove(live_set_t *s, void *p) {
  pthread_mutex_lock(&s->mutex);
  size_t i = 0;
  while (i < s->n && s->items[i] != p) ++i;
  int found = i < s->n;
  if (found) s->items[i] = s->items[--s->n];
  pthread_mutex_unlock(&s->mutex);
  return found;
}
