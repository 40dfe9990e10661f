/* gemm_share.h: packed B shared by the parts of one product. */
#include "kernels/cpu/gemm_share.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "aquila/kernel.h"

/* A B past this many bytes packed is not shared: the pool would keep it. */
#define SHARE_MAX_BYTES ((size_t)64 << 20)

/* ---- the pool of buffers ---------------------------------------------------
 * Products come one after another (a training step's, a benchmark's), so
 * the buffers are kept for the next rather than allocated each time; a
 * lock per product is nothing beside its packing. */
typedef struct share_buf {
  struct share_buf *next;
  size_t size;
} share_buf_t;

/* The pool keeps the newest POOL_KEEP buffers within POOL_KEEP_BYTES
 * (the one just given back always: a product's B is at most
 * SHARE_MAX_BYTES). */
enum { POOL_KEEP = 4, BUF_HEAD = 64 };
#define POOL_KEEP_BYTES (2 * SHARE_MAX_BYTES)

/* A buffer of megabytes in transparent huge pages where the kernel gives
 * them on request: the parts' reads of a packed B then miss the TLB once
 * each 2 MB, not each 4 KB. */
enum { HUGE_PAGE = 2u << 20 };
static void *buf_alloc(size_t size) {
  void *p = NULL;
  if (size < HUGE_PAGE) return posix_memalign(&p, 64, size) ? NULL : p;
  size = (size + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
  if (posix_memalign(&p, HUGE_PAGE, size)) return NULL;
  (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static share_buf_t *pool;

static share_buf_t *pool_get(size_t size) {
  pthread_mutex_lock(&pool_lock);
  share_buf_t **at = &pool, *b = NULL;
  for (; *at; at = &(*at)->next)
    if ((*at)->size >= size) {
      b = *at, *at = b->next;
      break;
    }
  pthread_mutex_unlock(&pool_lock);
  if (b) return b;
  b = buf_alloc(BUF_HEAD + size);
  if (!b) return NULL;
  b->size = size;
  return b;
}

static void pool_put(share_buf_t *b) {
  pthread_mutex_lock(&pool_lock);
  b->next = pool, pool = b;
  int n = 0;
  size_t kept = 0;
  share_buf_t **at = &pool;
  while (*at && ++n <= POOL_KEEP && (kept += (*at)->size) <= POOL_KEEP_BYTES) at = &(*at)->next;
  share_buf_t *extra = *at; /* the oldest, past what the pool keeps */
  *at = NULL;
  pthread_mutex_unlock(&pool_lock);
  while (extra) {
    share_buf_t *next = extra->next;
    free(extra);
    extra = next;
  }
}

__attribute__((destructor)) static void pool_free(void) {
  while (pool) {
    share_buf_t *next = pool->next;
    free(pool);
    pool = next;
  }
}

/* ---- the share ----------------------------------------------------------------- */

enum { SETUP_NONE = 0, SETUP_BUSY = 1, SETUP_READY = 2, SETUP_OFF = 3 };
enum { CHUNK_FREE = 0, CHUNK_PACKING = 1, CHUNK_READY = 2 };

/* Lives in the dispatch's shared bytes (zero at its start). */
struct gemm_share {
  _Atomic uint32_t setup;
  _Atomic uint32_t closed; /* parts done with it: the last gives the buffer back */
  share_buf_t *buf;
  int64_t parts;
  gemm_share_shape_t shape;
};
_Static_assert(sizeof(gemm_share_t) <= AQ_DISPATCH_SHARED_BYTES, "the share must fit a dispatch's shared bytes");

static inline void relax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

static int64_t round_up(int64_t x, int64_t unit) { return (x + unit - 1) / unit * unit; }

/* Chunks of one KC slice, and of all of them (a byte of state each). */
static int64_t slice_chunks(const gemm_share_shape_t *sh) {
  return (sh->n + sh->nc - 1) / sh->nc * ((sh->nc + sh->chunk - 1) / sh->chunk);
}
static size_t chunk_count(const gemm_share_shape_t *sh) {
  return (size_t)((sh->k + sh->kc - 1) / sh->kc) * (size_t)slice_chunks(sh);
}

/* Floats of the packed B (its panels zero-padded to nr columns). */
static size_t packed_floats(const gemm_share_shape_t *sh) { return (size_t)sh->k * (size_t)round_up(sh->n, sh->nr); }

static float *packed(const gemm_share_t *s) { return (float *)((char *)s->buf + BUF_HEAD); }

static _Atomic uint8_t *chunk_states(const gemm_share_t *s) {
  return (_Atomic uint8_t *)(packed(s) + packed_floats(&s->shape));
}

static size_t share_bytes(const gemm_share_shape_t *sh) { return packed_floats(sh) * sizeof(float) + chunk_count(sh); }

int gemm_share_fits(const gemm_share_shape_t *shape) { return share_bytes(shape) <= SHARE_MAX_BYTES; }

/* The setup, by the first part to come; the others wait for it, which is
 * a running part's few instructions, never a part yet to start. */
gemm_share_t *gemm_share_open(void *shared, int64_t parts, const gemm_share_shape_t *shape) {
  gemm_share_t *s = shared;
  if (!s || parts < 2 || shape->k <= 0 || shape->n <= 0) return NULL;
  uint32_t none = SETUP_NONE;
  if (atomic_compare_exchange_strong(&s->setup, &none, SETUP_BUSY)) {
    s->shape = *shape;
    s->parts = parts;
    s->buf = gemm_share_fits(shape) ? pool_get(share_bytes(shape)) : NULL;
    if (s->buf) memset((void *)chunk_states(s), 0, chunk_count(shape));
    atomic_store_explicit(&s->setup, s->buf ? SETUP_READY : SETUP_OFF, memory_order_release);
  }
  uint32_t st;
  while ((st = atomic_load_explicit(&s->setup, memory_order_acquire)) == SETUP_BUSY) relax();
  return st == SETUP_READY ? s : NULL;
}

void gemm_share_close(gemm_share_t *s) {
  if (atomic_fetch_add_explicit(&s->closed, 1, memory_order_acq_rel) + 1 == s->parts) pool_put(s->buf);
}

/* Two passes over the block's chunks: the first packs those no part has
 * taken and passes over those another is packing; the second takes those
 * from the shared copy if they are ready by then, else packs them here. */
void gemm_share_block(gemm_share_t *s, int64_t jc0, int64_t ncc, int64_t l0, int64_t kc, gemm_share_pack_fn pack,
                      const void *ctx, float *private, const float **out) {
  const gemm_share_shape_t *sh = &s->shape;
  int64_t npad = round_up(sh->n, sh->nr), per_block = (sh->nc + sh->chunk - 1) / sh->chunk;
  int64_t count = (ncc + sh->chunk - 1) / sh->chunk;
  _Atomic uint8_t *st = chunk_states(s) + l0 / sh->kc * slice_chunks(sh) + jc0 / sh->nc * per_block;
  float *base = packed(s) + l0 * npad;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t i = 0; i < count; ++i) {
      if (pass && out[i]) continue;
      int64_t j = jc0 + i * sh->chunk, cols = jc0 + ncc - j < sh->chunk ? jc0 + ncc - j : sh->chunk;
      float *shared = base + j / sh->nr * kc * sh->nr;
      uint8_t state = atomic_load_explicit(&st[i], memory_order_acquire), free_ = CHUNK_FREE;
      if (state == CHUNK_READY) {
        out[i] = shared;
      } else if (!pass && state == CHUNK_FREE &&
                 atomic_compare_exchange_strong_explicit(&st[i], &free_, CHUNK_PACKING, memory_order_relaxed,
                                                         memory_order_relaxed)) {
        pack(ctx, j, cols, l0, kc, shared);
        atomic_store_explicit(&st[i], CHUNK_READY, memory_order_release);
        out[i] = shared;
      } else if (!pass) {
        out[i] = NULL; /* another part is packing it */
      } else {
        out[i] = private + i * sh->chunk * kc;
        pack(ctx, j, cols, l0, kc, (float *)out[i]);
      }
    }
}
