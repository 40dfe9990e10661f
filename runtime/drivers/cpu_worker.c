/* CPU workers: the packet processor of the CPU agents.
 *
 * Each queue is drained in order by whichever worker owns it at the time, so
 * packets of one queue launch and complete in order and the barrier bit is
 * met by construction; queues of one agent run side by side. A dispatch of
 * more than one work-group is published on its queue so idle workers of the
 * agent take groups too. A barrier whose dependencies are pending never
 * holds a worker: the queue is left and revisited when a dependency changes
 * (the signal wakes the agent) or, failing that, on a short timer. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/drivers/cpu.h"
#include "runtime/drivers/cpu_guard.h"
#include "runtime/fault.h"
#include "runtime/settings.h"
#include "runtime/status.h"
#include "runtime/trace.h"

enum { DRAIN_BATCH = 256 };

/* A worker that has run work-groups of a dispatch split over workers (a
 * product's parts) stays awake this many times AQ_SPIN_US before it
 * sleeps. Its spin yields the core on every pass, so it costs the threads
 * with work little; a sleeping worker, once woken, waited long for its
 * core on the 2-core machine (longer than all the runtime's other
 * overheads of a small product together), and a product paid that once
 * per worker when it came just after the other waiters' spin had run
 * out. Workers that ran only single-group packets (a GPU step's loaders)
 * keep the plain spin: sixteen of them spinning cost a GPU step time. */
enum { WORKER_SPIN_FACTOR = 10 };
/* The first AQ_CPU_WATCHERS workers watch the agent's queues: they spin
 * when idle, then sleep on its doorbell, which submissions and signals
 * ring. The others (on agents of more cores) are a reserve for dispatches
 * split over more workers: they sleep apart, so that the doorbell's
 * wake-ups go to a watcher, and only such a dispatch wakes them. Sixty-four
 * workers watching one agent's queues made a graph of tiny tasks many times
 * slower than sixteen: their passes and yields compete with the workers
 * that have work. */
static int is_reserve(const cpu_worker_t *w) { return w->index >= w->agent->watchers; }

/* A group segment of megabytes (a GEMM's packed panels, read over and
 * over) is asked for in transparent huge pages where the kernel gives them
 * on request: its pages then cost a TLB entry each 2 MB. */
enum { HUGE_PAGE = 2u << 20 };
static void *scratch_alloc(size_t size) {
  void *p = NULL;
  if (size < HUGE_PAGE) return posix_memalign(&p, 64, size) ? NULL : p;
  size = (size + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
  if (posix_memalign(&p, HUGE_PAGE, size)) return NULL;
  (void)madvise(p, size, MADV_HUGEPAGE); /* advice: without it the pages stay small */
  return p;
}

static int ensure_scratch(cpu_worker_t *w, size_t size) {
  if (size <= w->scratch_size) return 1;
  void *p = scratch_alloc(size);
  if (!p) return 0;
  free(w->scratch);
  w->scratch = p;
  w->scratch_size = size;
  return 1;
}

static uint32_t group_fault(cpu_worker_t *w, cpu_queue_t *cq, const cpu_dispatch_t *d, int code, int signo,
                            uintptr_t addr) {
  const char *name = d->kernel->desc->name;
  if (code == CPU_GUARD_FAULTED)
    return aq_fault_record(AQ_ERROR_KERNEL_FAULT,
                           "kernel '%s' faulted (%s at address %#lx) on agent %s, queue %u, packet %llu", name,
                           strsignal(signo), (unsigned long)addr, w->agent->agent->info.name, cq->queue->id,
                           (unsigned long long)d->packet);
  return aq_fault_record(AQ_ERROR_KERNEL_FAULT,
                         "kernel '%s' failed (returned %d) on agent %s, queue %u, packet %llu", name, code,
                         w->agent->agent->info.name, cq->queue->id, (unsigned long long)d->packet);
}

/* Work-groups a worker claims at once. Grids of a few groups (a product's
 * parts, whose real work sits in the first groups) are claimed one by one.
 * Past CLAIM_FROM groups, guided self-scheduling: an eighth of each
 * worker's share of what is left, so millions of tiny groups are not one
 * contended atomic add each, while the last ones still go one by one to
 * whoever is free. */
enum { CLAIM_FROM = 4096, CLAIM_MAX = 1024 };
static uint64_t claim_size(cpu_dispatch_t *d, uint64_t workers) {
  if (d->total < CLAIM_FROM) return 1;
  uint64_t next = atomic_load_explicit(&d->next, memory_order_relaxed);
  uint64_t left = next < d->total ? d->total - next : 0, c = left / (workers * 8);
  return c < 1 ? 1 : c > CLAIM_MAX ? CLAIM_MAX : c;
}

static void set_group_size(const cpu_dispatch_t *d, int i, aq_dispatch_ctx_t *ctx) {
  uint64_t left = d->grid[i] - (uint64_t)ctx->group_id[i] * d->workgroup[i];
  ctx->group_size[i] = (uint32_t)(left < d->workgroup[i] ? left : d->workgroup[i]);
}

/* Group g's id and size (the last group of a dimension may be partial). */
static void set_group(const cpu_dispatch_t *d, uint64_t g, aq_dispatch_ctx_t *ctx) {
  uint64_t gyz = g / d->groups[0], id[3] = {g % d->groups[0], gyz % d->groups[1], gyz / d->groups[1]};
  for (int i = 0; i < 3; ++i) ctx->group_id[i] = (uint32_t)id[i], set_group_size(d, i, ctx);
}

/* The group after ctx's, in the order of set_group's ids, without its
 * divisions. */
static void next_group(const cpu_dispatch_t *d, aq_dispatch_ctx_t *ctx) {
  for (int i = 0; i < 3; ++i) {
    if (++ctx->group_id[i] < d->groups[i] || i == 2) {
      set_group_size(d, i, ctx);
      return;
    }
    ctx->group_id[i] = 0;
    set_group_size(d, i, ctx);
  }
}

/* The context of d's groups on worker w (its group segment, if the kernel
 * has one; no memory for it fails the dispatch). */
static void init_ctx(cpu_dispatch_t *d, cpu_worker_t *w, aq_dispatch_ctx_t *ctx) {
  const aq_kernel_desc_t *k = d->kernel->desc;
  *ctx = (aq_dispatch_ctx_t){.dims = d->dims, .worker_index = w->index, .worker_count = w->agent->worker_count,
                             .settings = aq_kernel_settings(), .dispatch_shared = d->shared};
  memcpy(ctx->workgroup_size, d->workgroup, sizeof(ctx->workgroup_size));
  memcpy(ctx->grid_size, d->grid, sizeof(ctx->grid_size));
  memcpy(ctx->group_count, d->groups, sizeof(ctx->group_count));
  if (!k->group_segment_size) return;
  if (!ensure_scratch(w, k->group_segment_size)) {
    uint32_t none = 0;
    uint32_t f = aq_fault_record(AQ_ERROR_OUT_OF_MEMORY, "kernel '%s': no memory for %u bytes of group segment",
                                 k->name, k->group_segment_size);
    atomic_compare_exchange_strong(&d->fault, &none, f);
  }
  ctx->group_segment = w->scratch;
  ctx->group_segment_size = k->group_segment_size;
}

/* Where a fault in d's kernel is said to have happened. */
static cpu_guard_site_t site_of(const cpu_dispatch_t *d, const cpu_worker_t *w, const cpu_queue_t *cq) {
  return (cpu_guard_site_t){d->kernel->desc->name, w->agent->agent->info.name, cq->queue->id, d->packet};
}

/* Runs ctx's group unless the dispatch failed already; a failure is the
 * dispatch's, the first one kept. */
static void run_group(cpu_dispatch_t *d, cpu_worker_t *w, cpu_queue_t *cq, const cpu_guard_site_t *site,
                      const aq_dispatch_ctx_t *ctx) {
  if (atomic_load_explicit(&d->fault, memory_order_relaxed) || ctx->group_segment_size > w->scratch_size) return;
  int signo = 0;
  uintptr_t addr = 0;
  int rc = aq_cpu_guard_call(d->kernel->desc->fn, d->kernarg, ctx, site, &signo, &addr);
  if (rc) {
    uint32_t none = 0, f = group_fault(w, cq, d, rc, signo, addr);
    atomic_compare_exchange_strong(&d->fault, &none, f);
  }
}

/* Runs work-groups of d until none is left; returns how many it ran. */
static uint64_t run_groups(cpu_dispatch_t *d, cpu_worker_t *w, cpu_queue_t *cq) {
  aq_dispatch_ctx_t ctx;
  init_ctx(d, w, &ctx);
  uint64_t ran = 0, workers = w->agent->worker_count ? w->agent->worker_count : 1;
  cpu_guard_site_t site = site_of(d, w, cq);
  for (;;) {
    uint64_t claim = claim_size(d, workers), g = atomic_fetch_add_explicit(&d->next, claim, memory_order_relaxed);
    if (g >= d->total) break;
    set_group(d, g, &ctx);
    for (uint64_t end = g + claim; g < end && g < d->total; ++g, ++ran, next_group(d, &ctx))
      run_group(d, w, cq, &site, &ctx);
  }
  if (ran) atomic_fetch_add_explicit(&d->done, ran, memory_order_acq_rel);
  if (ran && d->total > 1) w->ran_shared = 1;
  return ran;
}

/* A dispatch of one group (a task graph's small kernels): no claims and
 * no count, nobody helps. */
static void run_one_group(cpu_dispatch_t *d, cpu_worker_t *w, cpu_queue_t *cq) {
  aq_dispatch_ctx_t ctx;
  init_ctx(d, w, &ctx);
  for (int i = 0; i < 3; ++i) set_group_size(d, i, &ctx); /* group 0 */
  cpu_guard_site_t site = site_of(d, w, cq);
  run_group(d, w, cq, &site, &ctx);
}

int aq_cpu_help_dispatch(cpu_queue_t *cq, cpu_worker_t *w) {
  cpu_dispatch_t *d = atomic_load(&cq->active);
  if (!d) return 0;
  atomic_fetch_add(&d->helpers, 1);
  int ran = 0;
  if (atomic_load(&cq->active) == d) ran = run_groups(d, w, cq) != 0;
  atomic_fetch_sub(&d->helpers, 1);
  return ran;
}

static uint32_t invalid(cpu_worker_t *w, cpu_queue_t *cq, uint64_t index, const char *what) {
  return aq_fault_record(AQ_ERROR_INVALID_PACKET, "agent %s, queue %u, packet %llu: %s",
                         w->agent->agent->info.name, cq->queue->id, (unsigned long long)index, what);
}

static uint32_t run_dispatch(cpu_queue_t *cq, cpu_worker_t *w, uint64_t index,
                             const hsa_kernel_dispatch_packet_t *p, const cpu_kernel_t *k);

enum { KERNEL_NAME_MAX = 64 };

/* The kernel is held while it runs, its code object cannot go meanwhile:
 * the worker's hazard goes up before the kernel is looked up, so an unload
 * that marked the kernel dead before is seen by the lookup, and one after
 * waits for the hazard to come down (aq_cpu_co_unload). Its helpers run
 * under it: the dispatch ends after them. name, if not NULL, receives the
 * kernel's name for the trace, copied under the hazard: the trace records
 * it after, when the code object (which holds the name) may be gone. */
static uint32_t kernel_dispatch(cpu_queue_t *cq, cpu_worker_t *w, uint64_t index,
                                const hsa_kernel_dispatch_packet_t *p, char *name) {
  /* an exchange, not a store: a full barrier before the lookup's loads
   * (TSan takes no fences) */
  atomic_exchange(&w->running_kernel, p->kernel_object);
  const cpu_kernel_t *k = aq_cpu_kernel_lookup(p->kernel_object);
  uint32_t fault;
  if (k) {
    if (name) snprintf(name, KERNEL_NAME_MAX, "%s", k->desc->name);
    atomic_store(&cq->running_packet, index);
    atomic_store(&cq->running, k->desc->name);
    fault = run_dispatch(cq, w, index, p, k);
    atomic_store(&cq->running, NULL);
  } else {
    fault = invalid(w, cq, index, "kernel_object is not a loaded CPU kernel (unloaded, or foreign)");
  }
  atomic_store_explicit(&w->running_kernel, 0, memory_order_release);
  return fault;
}

static uint32_t run_dispatch(cpu_queue_t *cq, cpu_worker_t *w, uint64_t index,
                             const hsa_kernel_dispatch_packet_t *p, const cpu_kernel_t *k) {
  uint32_t dims = (p->setup >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
  if (dims < 1) return invalid(w, cq, index, "setup gives 0 grid dimensions (must be 1, 2 or 3)");
  cpu_dispatch_t *d = &cq->dispatch;
  uint32_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
  uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
  d->total = 1;
  for (uint32_t i = 0; i < 3; ++i) {
    if (i >= dims) wg[i] = grid[i] = 1;
    if (!wg[i] || !grid[i]) {
      char msg[160];
      snprintf(msg, sizeof(msg), "kernel '%s': %s size %c is 0", k->desc->name, !wg[i] ? "work-group" : "grid",
               "xyz"[i]);
      return invalid(w, cq, index, msg);
    }
    d->workgroup[i] = wg[i];
    d->grid[i] = grid[i];
    /* 64-bit: a grid near 2^32 must not wrap to no groups at all. */
    d->groups[i] = (uint32_t)(((uint64_t)grid[i] + wg[i] - 1) / wg[i]);
    if (__builtin_mul_overflow(d->total, (uint64_t)d->groups[i], &d->total)) {
      char msg[160];
      snprintf(msg, sizeof(msg), "kernel '%s': the grid has more than 2^64 work-groups", k->desc->name);
      return invalid(w, cq, index, msg);
    }
  }
  if (k->desc->kernarg_size && !p->kernarg_address) {
    char msg[160];
    snprintf(msg, sizeof(msg), "kernel '%s' takes %u bytes of kernargs; kernarg_address is NULL",
             k->desc->name, k->desc->kernarg_size);
    return invalid(w, cq, index, msg);
  }
  d->kernel = k;
  d->packet = index;
  d->kernarg = p->kernarg_address;
  d->dims = dims;
  atomic_store_explicit(&d->next, 0, memory_order_relaxed);
  atomic_store_explicit(&d->done, 0, memory_order_relaxed);
  atomic_store_explicit(&d->fault, 0, memory_order_relaxed);
  memset(d->shared, 0, sizeof(d->shared));
  if (d->total > 1 && w->agent->worker_count > 1) {
    atomic_store(&cq->active, d);
    uint64_t helpers = d->total - 1 < w->agent->worker_count - 1 ? d->total - 1 : w->agent->worker_count - 1;
    aq_wake_some(&w->agent->agent->doorbell, (int)helpers);
    uint32_t watchers = w->agent->watchers;
    if (helpers >= watchers) aq_wake_some(&w->agent->reserve, (int)(helpers - (watchers - 1)));
  }
  if (d->total == 1) run_one_group(d, w, cq);
  else run_groups(d, w, cq);
  if (d->total > 1 && w->agent->worker_count > 1) {
    while (atomic_load_explicit(&d->done, memory_order_acquire) < d->total) aq_cpu_relax();
    atomic_store(&cq->active, NULL);
    while (atomic_load(&d->helpers) != 0) aq_cpu_relax();
  }
  return atomic_load(&d->fault);
}

static uint32_t agent_dispatch(cpu_queue_t *cq, cpu_worker_t *w, uint64_t index,
                               const hsa_agent_dispatch_packet_t *p) {
  if (p->type != AQ_AGENT_DISPATCH_HOST_CALL) {
    char msg[96];
    snprintf(msg, sizeof(msg), "agent dispatch type 0x%x is unknown (CPU agents run 0x%x, host call)",
             p->type, AQ_AGENT_DISPATCH_HOST_CALL);
    return invalid(w, cq, index, msg);
  }
  aq_host_call_fn_t fn = (aq_host_call_fn_t)(uintptr_t)p->arg[0];
  if (!fn) return invalid(w, cq, index, "host call with a NULL function in arg[0]");
  aq_status_t s = fn(p->return_address, p->arg[1], p->arg[2], p->arg[3]);
  if (s == AQ_OK) return 0;
  return aq_fault_record(s, "host call on agent %s, queue %u failed: %s: %s",
                         w->agent->agent->info.name, cq->queue->id, aq_status_string(s), aq_last_error());
}

int aq_cpu_queue_ready(cpu_queue_t *cq) {
  aq_queue_impl_t *q = cq->queue;
  uint64_t index = atomic_load_explicit(&q->read_index, memory_order_relaxed);
  hsa_packet_type_t type = aq_queue_peek(q, index);
  if (type == HSA_PACKET_TYPE_INVALID) return 0;
  if (type == HSA_PACKET_TYPE_BARRIER_AND || type == HSA_PACKET_TYPE_BARRIER_OR) {
    uint32_t fault = 0;
    return aq_barrier_poll(q->ring + (index & q->mask) * AQ_PACKET_SIZE, type, &fault) == AQ_BARRIER_MET;
  }
  return 1;
}

int aq_cpu_process_packet(cpu_queue_t *cq, cpu_worker_t *w) {
  aq_queue_impl_t *q = cq->queue;
  uint64_t index = atomic_load_explicit(&q->read_index, memory_order_relaxed);
  hsa_packet_type_t type = aq_queue_peek(q, index);
  if (type == HSA_PACKET_TYPE_INVALID) return 0;
  const uint8_t *p = q->ring + (index & q->mask) * AQ_PACKET_SIZE;
  uint16_t header = *(const uint16_t *)p;
  uint32_t fault = 0;
  hsa_signal_t completion = {0};
  int traced = aq_trace_on();
  char kernel_name[KERNEL_NAME_MAX] = "unknown kernel";
  aq_trace_event_t ev = {.packet = index, .agent = w->agent->agent->info.index, .queue = q->id,
                         .category = "barrier", .name = type == HSA_PACKET_TYPE_BARRIER_OR ? "barrier-OR" : "barrier-AND"};
  if (traced) {
    ev.ready_ns = ev.start_ns = aq_now_ns();
    ev.tag = aq_trace_tag_of(p);
    ev.depth = (uint32_t)(atomic_load_explicit(&q->write_index, memory_order_relaxed) - index);
  }
  switch (type) {
    case HSA_PACKET_TYPE_KERNEL_DISPATCH: {
      completion = ((const hsa_kernel_dispatch_packet_t *)p)->completion_signal;
      ev.category = "kernel";
      fault = kernel_dispatch(cq, w, index, (const void *)p, traced ? kernel_name : NULL);
      ev.name = kernel_name;
      break;
    }
    case HSA_PACKET_TYPE_AGENT_DISPATCH:
      completion = ((const hsa_agent_dispatch_packet_t *)p)->completion_signal;
      ev.name = "host call";
      ev.category = "host";
      fault = agent_dispatch(cq, w, index, (const void *)p);
      break;
    case HSA_PACKET_TYPE_BARRIER_AND:
    case HSA_PACKET_TYPE_BARRIER_OR:
      completion = ((const hsa_barrier_and_packet_t *)p)->completion_signal;
      if (aq_barrier_poll(p, type, &fault) == AQ_BARRIER_PENDING) {
        aq_barrier_watch(p, &w->agent->agent->doorbell);
        fault = 0;
        if (aq_barrier_poll(p, type, &fault) == AQ_BARRIER_PENDING) return 0;
      }
      break;
    default: {
      char msg[64];
      snprintf(msg, sizeof(msg), "packet type %u is not one a CPU agent runs", (unsigned)type);
      fault = invalid(w, cq, index, msg);
      completion.handle = 0;
    }
  }
  /* Release fence: the packet's writes are visible before its signal. */
  if ((header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3) atomic_thread_fence(memory_order_release);
  if (fault) {
    char msg[8];
    aq_queue_note_failure(q, aq_fault_message(fault, msg, sizeof(msg)), fault);
  }
  /* The end is stamped before the signal moves: a consumer on another
   * queue may start the moment it does, and must not appear to overlap. */
  if (traced) ev.end_ns = aq_now_ns();
  aq_queue_retire(q, index);
  aq_packet_complete(completion, fault);
  if (traced) {
    ev.status = fault ? (int32_t)atomic_load(&q->error) : 0;
    aq_trace_record(&ev);
  }
  return 1;
}

static void bind_worker(cpu_worker_t *w) {
  if (!w->agent->bind) return;
  /* Best effort: a container may forbid some cores; the worker still runs. */
  hwloc_set_cpubind(aq_topology(), w->cpuset, HWLOC_CPUBIND_THREAD);
}

static void release_held(cpu_worker_t *w) {
  cpu_queue_t *cq = w->held;
  if (!cq) return;
  w->held = NULL;
  atomic_store(&cq->owner, 0);
  atomic_fetch_sub(&cq->refs, 1);
}

static int drain(cpu_queue_t *cq, cpu_worker_t *w) {
  int n = 0;
  while (n < DRAIN_BATCH && aq_cpu_process_packet(cq, w)) n++;
  return n;
}

/* The held queue first; it is let go after a spin time without packets. */
static int poll_held(cpu_worker_t *w) {
  if (!w->held) return 0;
  if (atomic_load(&w->held->detaching)) {
    release_held(w);
    return 0;
  }
  if (drain(w->held, w)) {
    w->held_idle_since = 0;
    return 1;
  }
  uint64_t now = aq_now_ns();
  if (!w->held_idle_since) w->held_idle_since = now;
  else if (now - w->held_idle_since > aq_runtime_config()->spin_ns) release_held(w);
  return 0;
}

/* A doorbell or a signal wakes one sleeping worker. When one event readies
 * several queues at once (a barrier over a GPU copy heading the lanes of
 * a batch's loaders), the worker that takes the first wakes another for the
 * rest, and so on: else they ran one after another, or waited for the
 * sleepers' 200 us poll. */
static void pass_on_wake(cpu_worker_t *w, const cpu_queue_t *taken) {
  cpu_agent_t *ca = w->agent;
  /* A watcher if one sleeps, else the reserve: queues ready side by side
   * are work for every worker. */
  aq_wake_t *bed = &ca->agent->doorbell;
  if (!atomic_load_explicit(&bed->sleepers, memory_order_relaxed)) bed = &ca->reserve;
  if (!atomic_load_explicit(&bed->sleepers, memory_order_relaxed)) return;
  uint32_t slots = atomic_load(&ca->queue_slots);
  for (uint32_t i = 0; i < slots; ++i) {
    cpu_queue_t *cq = atomic_load(&ca->queues[i]);
    if (!cq || cq == taken || atomic_load_explicit(&cq->owner, memory_order_relaxed)) continue;
    atomic_fetch_add(&cq->refs, 1);
    int ready = atomic_load(&ca->queues[i]) == cq && aq_cpu_queue_ready(cq);
    atomic_fetch_sub(&cq->refs, 1);
    if (ready) {
      aq_wake_one(bed);
      return;
    }
  }
}

/* One pass over the agent's queues: help dispatches, drain queues. */
static int poll_queues(cpu_worker_t *w) {
  cpu_agent_t *ca = w->agent;
  int worked = poll_held(w);
  uint32_t slots = atomic_load(&ca->queue_slots);
  for (uint32_t k = 0; k < slots; ++k) {
    uint32_t i = (k + w->index) % slots;
    cpu_queue_t *cq = atomic_load(&ca->queues[i]);
    /* Drained by another worker, with nothing to help with: skip it without
     * touching its cache lines (the state is never freed under us). */
    if (!cq || cq == w->held ||
        (atomic_load_explicit(&cq->owner, memory_order_relaxed) &&
         !atomic_load_explicit(&cq->active, memory_order_relaxed)))
      continue;
    atomic_fetch_add(&cq->refs, 1);
    if (atomic_load(&ca->queues[i]) == cq) {
      worked |= aq_cpu_help_dispatch(cq, w);
      int expected = 0;
      if (aq_cpu_queue_ready(cq) && atomic_compare_exchange_strong(&cq->owner, &expected, 1)) {
        pass_on_wake(w, cq);
        if (drain(cq, w)) {
          worked = 1;
          release_held(w);
          w->held = cq; /* keeps the owner flag and the reference */
          w->held_idle_since = 0;
          continue;
        }
        atomic_store(&cq->owner, 0);
      }
    }
    atomic_fetch_sub(&cq->refs, 1);
  }
  return worked;
}

static int any_ready(cpu_agent_t *ca, int *pending) {
  uint32_t slots = atomic_load(&ca->queue_slots);
  for (uint32_t i = 0; i < slots; ++i) {
    cpu_queue_t *cq = atomic_load(&ca->queues[i]);
    if (!cq || (atomic_load(&cq->owner) && !atomic_load(&cq->active))) continue;
    atomic_fetch_add(&cq->refs, 1);
    int ready = atomic_load(&ca->queues[i]) == cq &&
                (atomic_load(&cq->active) || aq_cpu_queue_ready(cq));
    if (atomic_load(&ca->queues[i]) == cq &&
        aq_queue_peek(cq->queue, atomic_load(&cq->queue->read_index)) != HSA_PACKET_TYPE_INVALID)
      *pending = 1;
    atomic_fetch_sub(&cq->refs, 1);
    if (ready) return 1;
  }
  return 0;
}

/* Pauses `relax` times, looking at the held queue every eighth pause; 1 if
 * its next packet became ready meanwhile (the caller then skips the yield).
 * The longest backoff and a yield each take microseconds, and a barrier of
 * the held queue that another worker's packet had just satisfied (a chain
 * of small tasks crossing lanes, as in the METG stencil) waited for both.
 * The look only reads the queue and its barrier's signals, which this
 * worker holds. */
static int relax_watching(cpu_worker_t *w, int relax) {
  for (int i = 0; i < relax; ++i) {
    aq_cpu_relax();
    if ((i & 7) == 7 && w->held && aq_cpu_queue_ready(w->held)) return 1;
  }
  return 0;
}

void *aq_cpu_worker_main(void *arg) {
  cpu_worker_t *w = arg;
  cpu_agent_t *ca = w->agent;
  aq_wake_t *doorbell = &ca->agent->doorbell;
  bind_worker(w);
  aq_cpu_guard_thread_init();
  uint64_t spin_ns = aq_runtime_config()->spin_ns, idle_since = 0;
  int relax = 16, worked = 0; /* worked: since it last slept */
  while (atomic_load_explicit(&ca->running, memory_order_relaxed)) {
    if (poll_queues(w)) {
      idle_since = 0, relax = 16, worked = 1;
      continue;
    }
    uint64_t now = aq_now_ns();
    if (!idle_since) idle_since = now;
    /* A reserve worker woken for work watches like the others until it
     * has been idle a spin's time. */
    uint64_t spin = w->ran_shared ? spin_ns * WORKER_SPIN_FACTOR : is_reserve(w) && !worked ? 0 : spin_ns;
    if (now - idle_since < spin) {
      /* Each empty pass touches every queue's reference count: sixteen
       * workers passing back to back kept those lines moving between cores
       * and slowed the threads with work to do (a GPU training step: 410 ->
       * 310 us with 5 us spins instead of 20). Pause longer and longer. */
      if (relax_watching(w, relax)) continue;
      if (relax < 128) relax *= 2;
      /* A thread woken on this core (the host that waits for the run, a GPU
       * queue's processor) runs now rather than after our spin: from the
       * first empty pass, since the host of a product that just ended
       * waits for this core while the backoff is still short. */
      sched_yield();
      continue;
    }
    relax = 16, worked = 0;
    w->ran_shared = 0;
    release_held(w); /* before sleeping: producers must wake someone now */
    aq_wake_t *bed = is_reserve(w) ? &ca->reserve : doorbell;
    uint32_t e = aq_wake_prepare(bed);
    int pending = 0;
    if (!any_ready(ca, &pending) && atomic_load(&ca->running))
      /* A barrier waiting on a signal that another agent watches cannot
       * wake us; a watcher polls for it every 200 µs. */
      aq_wake_sleep(bed, e, pending && !is_reserve(w) ? 200000ull : 0);
    aq_wake_finish(bed);
    idle_since = 0;
  }
  release_held(w);
  aq_cpu_guard_thread_deinit();
  return NULL;
}
