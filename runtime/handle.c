/* Handle tables: slot allocation, release and checked lookup. */
#include "runtime/handle.h"

#include <stdlib.h>

#include "runtime/status.h"

void aq_handle_table_init(aq_handle_table_t *t, const char *kind) {
  *t = (aq_handle_table_t){.kind = kind};
  pthread_mutex_init(&t->mutex, NULL);
}

void aq_handle_table_deinit(aq_handle_table_t *t) {
  for (int i = 0; i < AQ_HANDLE_CHUNKS; ++i) free(atomic_load(&t->chunks[i]));
  pthread_mutex_destroy(&t->mutex);
  *t = (aq_handle_table_t){0};
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
  *out_handle = ((uint64_t)gen << 32) | (index + 1);
  return AQ_OK;
}

aq_status_t aq_handle_release(aq_handle_table_t *t, uint64_t handle) {
  pthread_mutex_lock(&t->mutex);
  if (!aq_handle_get(t, handle)) {
    pthread_mutex_unlock(&t->mutex);
    return aq_error(AQ_ERROR_INVALID_HANDLE, "%s handle 0x%llx is %s", t->kind,
                    (unsigned long long)handle, handle ? "stale or foreign" : "null");
  }
  uint32_t index = (uint32_t)handle - 1;
  aq_handle_slot_t *s = aq_handle_slot(t, index);
  atomic_store(&s->generation, atomic_load(&s->generation) + 1); /* odd -> even */
  atomic_store(&s->object, NULL);
  s->next_free = t->free_head;
  t->free_head = index + 1;
  t->live--;
  pthread_mutex_unlock(&t->mutex);
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
