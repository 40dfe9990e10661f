/* Handle tables: slot allocation, release and checked lookup. */
#include "runtime/handle.h"

#include <sched.h>
#include <stdlib.h>

#include "runtime/status.h"

uint32_t aq_handle_new_tag(void) {
  static _Atomic uint32_t next;
  uint32_t tag;
  do tag = atomic_fetch_add(&next, 1) + 1;
  while (!(tag & 0xffff));
  return tag & 0xffff;
}

/* A table's chunks and mutex outlive aq_shut_down: a call racing it may
 * still look a handle up, and must read a slot (and find it stale), not
 * freed memory. The next aq_init reuses them under a new tag. */
void aq_handle_table_init(aq_handle_table_t *t, const char *kind) {
  if (!t->kind) pthread_mutex_init(&t->mutex, NULL);
  pthread_mutex_lock(&t->mutex);
  t->kind = kind;
  __atomic_store_n(&t->tag, aq_handle_new_tag(), __ATOMIC_RELAXED);
  t->count = t->free_head = t->live = 0;
  pthread_mutex_unlock(&t->mutex);
}

void aq_handle_table_deinit(aq_handle_table_t *t) {
  pthread_mutex_lock(&t->mutex);
  for (uint32_t i = 0; i < t->count; ++i) {
    aq_handle_slot_t *s = aq_handle_slot(t, i);
    uint32_t gen = atomic_load(&s->generation);
    if (gen & 1) atomic_store(&s->generation, gen + 1);
    atomic_store(&s->object, NULL);
  }
  __atomic_store_n(&t->tag, 0, __ATOMIC_RELAXED); /* no handle has tag 0: every lookup fails until init */
  t->count = t->free_head = t->live = 0;
  pthread_mutex_unlock(&t->mutex);
}

void aq_handle_release_all(aq_handle_table_t *t, void (*fn)(void *object, void *user), void *user) {
  pthread_mutex_lock(&t->mutex);
  for (uint32_t i = 0; i < t->count; ++i) {
    aq_handle_slot_t *s = aq_handle_slot(t, i);
    uint32_t gen = atomic_load(&s->generation);
    void *o = atomic_load(&s->object);
    if (!o || !(gen & 1)) continue;
    atomic_store(&s->generation, gen + 1);
    while (atomic_load_explicit(&s->refs, memory_order_acquire)) sched_yield();
    atomic_store(&s->object, NULL);
    t->live--;
    fn(o, user);
  }
  pthread_mutex_unlock(&t->mutex);
}

aq_status_t aq_handle_alloc(aq_handle_table_t *t, void *object, uint64_t *out_handle) {
  pthread_mutex_lock(&t->mutex);
  uint32_t index;
  if (t->free_head) {
    index = t->free_head - 1;
    t->free_head = aq_handle_slot(t, index)->next_free;
  } else {
    if (t->count == AQ_HANDLE_CHUNK * AQ_HANDLE_CHUNKS) {
      pthread_mutex_unlock(&t->mutex);
      return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "too many live %s objects (%u)", t->kind,
                      t->count);
    }
    index = t->count;
    if (!atomic_load(&t->chunks[index / AQ_HANDLE_CHUNK])) {
      aq_handle_slot_t *chunk = calloc(AQ_HANDLE_CHUNK, sizeof(*chunk));
      if (!chunk) {
        pthread_mutex_unlock(&t->mutex);
        return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for the %s table", t->kind);
      }
      atomic_store_explicit(&t->chunks[index / AQ_HANDLE_CHUNK], chunk, memory_order_release);
    }
    t->count++;
  }
  aq_handle_slot_t *s = aq_handle_slot(t, index);
  atomic_store(&s->object, object);
  uint32_t gen = atomic_load(&s->generation) + 1; /* even -> odd: live */
  atomic_store_explicit(&s->generation, gen, memory_order_release);
  t->live++;
  pthread_mutex_unlock(&t->mutex);
  *out_handle = aq_handle_make(t->tag, gen, index);
  return AQ_OK;
}

aq_status_t aq_handle_release(aq_handle_table_t *t, uint64_t handle) {
  pthread_mutex_lock(&t->mutex);
  if (!aq_handle_get(t, handle)) {
    pthread_mutex_unlock(&t->mutex);
    return aq_error(AQ_ERROR_INVALID_HANDLE, "%s handle 0x%llx is %s", t->kind,
                    (unsigned long long)handle, handle ? "stale or foreign" : "null");
  }
  uint32_t index = aq_handle_index1(handle) - 1;
  aq_handle_slot_t *s = aq_handle_slot(t, index);
  atomic_store(&s->generation, atomic_load(&s->generation) + 1); /* odd -> even */
  t->live--;
  pthread_mutex_unlock(&t->mutex);
  /* Callers that acquired it before finish their call; none can start. */
  while (atomic_load_explicit(&s->refs, memory_order_acquire)) sched_yield();
  pthread_mutex_lock(&t->mutex);
  atomic_store(&s->object, NULL);
  s->next_free = t->free_head;
  t->free_head = index + 1;
  pthread_mutex_unlock(&t->mutex);
  return AQ_OK;
}

uint32_t aq_handle_refs(aq_handle_table_t *t, uint64_t handle) {
  uint32_t index = aq_handle_index1(handle);
  if (!aq_handle_get(t, handle)) return 0;
  return atomic_load(&aq_handle_slot(t, index - 1)->refs);
}

aq_status_t aq_handle_resolve_ref(aq_handle_table_t *t, uint64_t handle, void **out_object) {
  void *o = aq_handle_acquire(t, handle);
  if (!o) return aq_handle_resolve(t, handle, out_object); /* its message */
  *out_object = o;
  return AQ_OK;
}

aq_status_t aq_handle_resolve(aq_handle_table_t *t, uint64_t handle, void **out_object) {
  void *o = aq_handle_get(t, handle);
  if (!o)
    return aq_error(AQ_ERROR_INVALID_HANDLE, "%s handle 0x%llx is %s", t->kind,
                    (unsigned long long)handle,
                    handle ? "stale (destroyed) or foreign" : "null");
  *out_object = o;
  return AQ_OK;
}

void aq_handle_for_each(aq_handle_table_t *t, void (*fn)(void *object, void *user),
                        void *user) {
  pthread_mutex_lock(&t->mutex);
  for (uint32_t i = 0; i < t->count; ++i) {
    aq_handle_slot_t *s = aq_handle_slot(t, i);
    void *o = atomic_load(&s->object);
    if (o && (atomic_load(&s->generation) & 1)) fn(o, user);
  }
  pthread_mutex_unlock(&t->mutex);
}
