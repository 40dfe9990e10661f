/* Generation-checked handle tables.
 *
 * Public handles are 64-bit: the high half is a generation, the low half a
 * slot index plus one, so zero is never valid. Freeing a slot advances its
 * generation, which is how a stale handle is told apart from a live one
 * without following a dangling pointer. Lookups take no lock; allocation and
 * release take the table's mutex (they are not on hot paths). */
#ifndef AQ_RUNTIME_HANDLE_H_
#define AQ_RUNTIME_HANDLE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "aquila/status.h"

enum { AQ_HANDLE_CHUNK = 1024, AQ_HANDLE_CHUNKS = 64 };

typedef struct aq_handle_slot {
  _Atomic(void *) object;
  _Atomic uint32_t generation; /* odd while live */
  uint32_t next_free;
} aq_handle_slot_t;

typedef struct aq_handle_table {
  const char *kind; /* "queue", "signal": for error messages */
  pthread_mutex_t mutex;
  _Atomic(aq_handle_slot_t *) chunks[AQ_HANDLE_CHUNKS];
  uint32_t count;     /* slots ever used */
  uint32_t free_head; /* index + 1 of the first free slot, 0 if none */
  uint32_t live;
} aq_handle_table_t;

void aq_handle_table_init(aq_handle_table_t *t, const char *kind);
void aq_handle_table_deinit(aq_handle_table_t *t);

aq_status_t aq_handle_alloc(aq_handle_table_t *t, void *object, uint64_t *out_handle);
/* Releases a live handle; returns AQ_ERROR_INVALID_HANDLE if it is not. */
aq_status_t aq_handle_release(aq_handle_table_t *t, uint64_t handle);

static inline aq_handle_slot_t *aq_handle_slot(aq_handle_table_t *t, uint32_t index) {
  aq_handle_slot_t *chunk =
      atomic_load_explicit(&t->chunks[index / AQ_HANDLE_CHUNK], memory_order_acquire);
  return chunk ? &chunk[index % AQ_HANDLE_CHUNK] : 0;
}

/* The live object behind a handle, or NULL for a null, stale or foreign one. */
static inline void *aq_handle_get(aq_handle_table_t *t, uint64_t handle) {
  uint32_t index = (uint32_t)handle, gen = (uint32_t)(handle >> 32);
  if (index == 0 || !(gen & 1) || index > AQ_HANDLE_CHUNK * AQ_HANDLE_CHUNKS) return 0;
  aq_handle_slot_t *s = aq_handle_slot(t, index - 1);
  if (!s || atomic_load_explicit(&s->generation, memory_order_acquire) != gen) return 0;
  return atomic_load_explicit(&s->object, memory_order_acquire);
}

/* Lookup that sets the error message: "invalid queue handle 0x... (stale)". */
aq_status_t aq_handle_resolve(aq_handle_table_t *t, uint64_t handle, void **out_object);

/* Calls fn for every live object (under the table's lock). */
void aq_handle_for_each(aq_handle_table_t *t, void (*fn)(void *object, void *user),
                        void *user);

#endif /* AQ_RUNTIME_HANDLE_H_ */
