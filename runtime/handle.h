/* Generation-checked handle tables.
 *
 * Public handles are 64-bit: a table tag (16 bits), a generation (23 bits)
 * and a slot index plus one (25 bits), so zero is never valid. Freeing a
 * slot advances its generation, which is how a stale handle is told apart
 * from a live one without following a dangling pointer. Every table (and
 * the signal pool) takes a new tag each time it is set up, so a handle of
 * one type is refused as another, and one from before aq_shut_down +
 * aq_init is refused though the new table's slots restart at generation 0.
 * Lookups take no lock; allocation and release take the table's mutex (they
 * are not on hot paths). */
#ifndef AQ_RUNTIME_HANDLE_H_
#define AQ_RUNTIME_HANDLE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "aquila/status.h"

enum { AQ_HANDLE_CHUNK = 1024, AQ_HANDLE_CHUNKS = 64 };

#define AQ_HANDLE_INDEX_BITS 25
#define AQ_HANDLE_GEN_BITS 23
#define AQ_HANDLE_GEN_MASK ((1u << AQ_HANDLE_GEN_BITS) - 1)

static inline uint64_t aq_handle_make(uint32_t tag, uint32_t gen, uint32_t index) {
  return (uint64_t)tag << (AQ_HANDLE_INDEX_BITS + AQ_HANDLE_GEN_BITS) |
         (uint64_t)(gen & AQ_HANDLE_GEN_MASK) << AQ_HANDLE_INDEX_BITS | (index + 1);
}
/* index + 1; 0 for no slot */
static inline uint32_t aq_handle_index1(uint64_t h) {
  return (uint32_t)(h & ((1u << AQ_HANDLE_INDEX_BITS) - 1));
}
static inline uint32_t aq_handle_gen(uint64_t h) {
  return (uint32_t)(h >> AQ_HANDLE_INDEX_BITS) & AQ_HANDLE_GEN_MASK;
}
static inline uint32_t aq_handle_tag(uint64_t h) {
  return (uint32_t)(h >> (AQ_HANDLE_INDEX_BITS + AQ_HANDLE_GEN_BITS));
}
/* Whether a slot's generation is the handle's (and live: odd). */
static inline int aq_handle_gen_matches(uint32_t slot_gen, uint64_t h) {
  return (slot_gen & AQ_HANDLE_GEN_MASK) == aq_handle_gen(h) && (slot_gen & 1);
}
/* A tag no table set up before has (wraps after 65535 set-ups). */
uint32_t aq_handle_new_tag(void);

typedef struct aq_handle_slot {
  _Atomic(void *) object;
  _Atomic uint32_t generation; /* odd while live */
  _Atomic uint32_t refs;       /* callers between acquire and put */
  uint32_t next_free;
} aq_handle_slot_t;

typedef struct aq_handle_table {
  const char *kind; /* "queue", "signal": for error messages */
  uint32_t tag;
  pthread_mutex_t mutex;
  _Atomic(aq_handle_slot_t *) chunks[AQ_HANDLE_CHUNKS];
  uint32_t count;     /* slots ever used */
  uint32_t free_head; /* index + 1 of the first free slot, 0 if none */
  uint32_t live;
} aq_handle_table_t;

void aq_handle_table_init(aq_handle_table_t *t, const char *kind);
void aq_handle_table_deinit(aq_handle_table_t *t);

aq_status_t aq_handle_alloc(aq_handle_table_t *t, void *object, uint64_t *out_handle);
/* Releases a live handle; returns AQ_ERROR_INVALID_HANDLE if it is not.
 * Lookups fail from then on; it returns once every caller that acquired
 * the handle before has put it back, so the object may then be freed. */
aq_status_t aq_handle_release(aq_handle_table_t *t, uint64_t handle);

static inline aq_handle_slot_t *aq_handle_slot(aq_handle_table_t *t, uint32_t index) {
  aq_handle_slot_t *chunk =
      atomic_load_explicit(&t->chunks[index / AQ_HANDLE_CHUNK], memory_order_acquire);
  return chunk ? &chunk[index % AQ_HANDLE_CHUNK] : 0;
}

/* The slot a handle of this table names (live or not), or NULL. */
static inline aq_handle_slot_t *aq_handle_slot_of(aq_handle_table_t *t, uint64_t handle) {
  uint32_t index = aq_handle_index1(handle);
  if (index == 0 || aq_handle_tag(handle) != __atomic_load_n(&t->tag, __ATOMIC_RELAXED) ||
      index > AQ_HANDLE_CHUNK * AQ_HANDLE_CHUNKS)
    return 0;
  return aq_handle_slot(t, index - 1);
}

/* The live object behind a handle, or NULL for a null, stale or foreign one. */
static inline void *aq_handle_get(aq_handle_table_t *t, uint64_t handle) {
  aq_handle_slot_t *s = aq_handle_slot_of(t, handle);
  if (!s || !aq_handle_gen_matches(atomic_load_explicit(&s->generation, memory_order_acquire), handle))
    return 0;
  return atomic_load_explicit(&s->object, memory_order_acquire);
}

/* The live object behind a handle, referenced: the handle cannot be
 * released (and the object freed) until aq_handle_put. NULL if none. */
static inline void *aq_handle_acquire(aq_handle_table_t *t, uint64_t handle) {
  aq_handle_slot_t *s = aq_handle_slot_of(t, handle);
  if (!s) return 0;
  atomic_fetch_add(&s->refs, 1);
  /* Checked after the reference is taken: a release that marked the slot
   * dead before this point is seen here; one after it waits for us. */
  if (!aq_handle_gen_matches(atomic_load(&s->generation), handle)) {
    atomic_fetch_sub(&s->refs, 1);
    return 0;
  }
  return atomic_load_explicit(&s->object, memory_order_acquire);
}
static inline void aq_handle_put(aq_handle_table_t *t, uint64_t handle) {
  atomic_fetch_sub_explicit(&aq_handle_slot(t, aq_handle_index1(handle) - 1)->refs, 1, memory_order_release);
}
/* Callers holding the handle now (0 for none, or a stale handle). */
uint32_t aq_handle_refs(aq_handle_table_t *t, uint64_t handle);

/* Lookup that sets the error message: "invalid queue handle 0x... (stale)". */
aq_status_t aq_handle_resolve(aq_handle_table_t *t, uint64_t handle, void **out_object);
/* The same, referenced (aq_handle_put when done). */
aq_status_t aq_handle_resolve_ref(aq_handle_table_t *t, uint64_t handle, void **out_object);

/* Releases every live handle, each once its callers have put it back, and
 * hands its object to fn (under the table's lock: fn must not use the
 * table). For aq_shut_down. */
void aq_handle_release_all(aq_handle_table_t *t, void (*fn)(void *object, void *user), void *user);

/* Calls fn for every live object (under the table's lock). */
void aq_handle_for_each(aq_handle_table_t *t, void (*fn)(void *object, void *user),
                        void *user);

#endif /* AQ_RUNTIME_HANDLE_H_ */
