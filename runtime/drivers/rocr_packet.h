/* The rocr driver's pure parts: nothing here calls ROCr or reads runtime
 * state, so tests drive them with CPU memory (tests/runtime/rocr.c links
 * this object itself).
 *
 * - Forwarding an AQL packet into a hardware ring slot: the same bytes, with
 *   the completion signal, barrier dependencies and kernarg address replaced
 *   by their HSA counterparts, and the header stored last.
 * - The in-flight table: one entry per packet on a hardware queue, each with
 *   an HSA signal (created once, reused) and a kernarg slot. It maps the
 *   Aquila completion signal to the HSA signal the GPU decrements.
 * - Kernel descriptors of an hsaco (code object v3+: `name.kd` symbols). */
#ifndef AQ_RUNTIME_DRIVERS_ROCR_PACKET_H_
#define AQ_RUNTIME_DRIVERS_ROCR_PACKET_H_

#include <hsa/hsa.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What changes between the Aquila packet and the hardware one. */
typedef struct rocr_patch {
  uint64_t completion;      /* HSA signal handle, 0: none */
  uint64_t deps[5];         /* barrier packets: HSA signal handles, 0: none */
  void *kernarg;            /* dispatch: the copy in kernarg memory, NULL: keep */
  uint32_t min_group, min_private; /* dispatch: the kernel's fixed segment sizes */
} rocr_patch_t;

/* Writes src (a live 64-byte AQL packet) into dst, a hardware ring slot whose
 * header is INVALID: body first, then header and setup with release. */
void aq_rocr_packet_forward(const void *src, void *dst, const rocr_patch_t *patch);

enum { ROCR_INFLIGHT_MAX = 256 };
enum { ROCR_FREE = 0, ROCR_BUSY = 1, ROCR_DONE = 2 };

typedef struct rocr_inflight {
  _Atomic uint32_t state;   /* FREE -> BUSY (forwarder) -> DONE (one completer) -> FREE */
  _Atomic uint32_t holds;   /* barriers in flight that wait on this entry's signal */
  uint64_t aq_signal;       /* the packet's Aquila completion signal, 0: none */
  uint64_t hsa_signal;      /* the signal the GPU decrements for it */
  void *kernarg;            /* this entry's slot of kernarg memory */
  const char *what;         /* kernel name, for fault messages */
  int16_t held[5];          /* entries this barrier holds, -1: none */
  void *owner;              /* the queue, for completion callbacks */
} rocr_inflight_t;

typedef struct rocr_inflight_table {
  rocr_inflight_t e[ROCR_INFLIGHT_MAX];
  uint32_t count;           /* entries in use (<= ROCR_INFLIGHT_MAX) */
  uint32_t next;            /* where the next search for a free entry starts */
} rocr_inflight_table_t;

/* Forwarder only. A FREE entry nobody holds, now BUSY for aq_signal; -1 if
 * every entry is busy or held (wait for a completion). */
int aq_rocr_inflight_acquire(rocr_inflight_table_t *t, uint64_t aq_signal);
/* Forwarder only. The one BUSY entry completing aq_signal; -1 if none or
 * several (then its value is not one packet's to decide). */
int aq_rocr_inflight_find(rocr_inflight_table_t *t, uint64_t aq_signal);
/* The barrier entry b waits on entry dep's HSA signal: dep is not reused
 * until b is released. */
void aq_rocr_inflight_hold(rocr_inflight_table_t *t, int b, int dep);
/* Any thread: 1 if the caller moved entry i from BUSY to DONE and so must
 * complete its Aquila signal (the GPU's completion and a queue error race). */
int aq_rocr_inflight_claim(rocr_inflight_table_t *t, int i);
/* After a claim: drops the entry's holds and frees it. */
void aq_rocr_inflight_release(rocr_inflight_table_t *t, int i);
/* Entries BUSY or DONE now. */
uint32_t aq_rocr_inflight_busy(rocr_inflight_table_t *t);

/* A kernel descriptor's sizes (AMDGPU ABI: bytes 0, 4, 8 of the 64). */
typedef struct rocr_kd {
  char name[128];           /* without ".kd" */
  uint32_t group_size, private_size, kernarg_size;
} rocr_kd_t;

/* The kernels of an AMDGPU ELF (bounds-checked): how many there are (fills
 * out[0..min(n, capacity))), or -1 if the symbol table is malformed. */
int aq_rocr_hsaco_kernels(const void *bytes, size_t size, rocr_kd_t *out, int capacity);

#endif
