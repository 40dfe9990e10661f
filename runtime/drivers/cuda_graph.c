/* CUDA graphs for stretches of kernel dispatches that repeat.
 *
 * An exec writes the same packets into its GPU queue at every run, and each
 * one costs the packet processor a cuLaunchKernel (4.1 us on an H100) where
 * a node of a CUDA graph costs 0.79 us. So the processor remembers what it
 * launches. A stretch is a run of kernel dispatch packets between packets of
 * other kinds (barriers); it also ends at a kernel with a completion signal
 * (whose stream write must follow it) and at STRETCH_MAX kernels. A stretch
 * seen twice with the same bytes (each packet but its trace tag, and the
 * kernarg bytes it points at) is captured into a CUDA graph. From then on,
 * where a stretch starts with that graph's first packet and the packets
 * after it match too, one cuGraphLaunch replaces the launches; its last
 * packet's completion is written after it as before. Anything different (an
 * argument, a grid, a packet not yet published) launches plainly, so results
 * never depend on the cache, only the time does. The decision lives here in
 * the driver: any producer's repeating packets gain, not only execs'.
 *
 * While tracing, kernels launch one by one, so a trace keeps every kernel
 * with its own GPU time (traced runs show the launch-bound time, without
 * graphs), unless AQ_CUDA_GRAPHS=traced: then traced runs replay graphs as
 * untraced ones do, and each graph launch is one timed slice, named for its
 * first and last kernels: the run's real timeline, without the per-kernel
 * breakdown. Profiling (HEFT) always times kernels one by one. A fault
 * inside a graph is reported against the graph, with the names of its
 * first and last kernels: CUDA does not say which node failed.
 *
 * AQ_CUDA_GRAPHS=0 turns it off, =1 on (the default), =traced on in traced
 * runs too; read when a GPU queue is created; a driver without the graph
 * entry points has it off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/drivers/cuda.h"
#include "runtime/settings.h"
#include "runtime/status.h"

enum {
  STRETCH_MIN = 2,     /* one kernel gains nothing from a graph */
  STRETCH_MAX = 256,
  ENTRIES = 16,        /* stretches remembered per queue */
  PUBLISH_WAIT_NS = 50000, /* for the rest of a stretch its producer is still writing */
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  TAG_OFFSET = 48,     /* reserved2: the trace tag, which changes every traced run */
};

typedef enum { SEEN, READY, UNGRAPHABLE } entry_state_t;

/* A stretch: packets, each one's kernarg size, the kernarg bytes. */
typedef struct stretch {
  uint32_t n, kbytes;
  size_t cap;
  uint8_t *buf; /* n * 64 bytes of packets, n kernarg sizes, kbytes of kernargs */
} stretch_t;

typedef struct entry {
  stretch_t s;
  entry_state_t state;
  CUgraphExec exec;
  uint64_t used;
  char what[160]; /* names the graph in fault messages (a pending completion points here) */
  char label[112]; /* and in traces */
} entry_t;

struct cuda_graphs {
  entry_t entries[ENTRIES];
  int traced; /* AQ_CUDA_GRAPHS=traced */
  uint64_t clock;
  CUstream capture;
  /* The stretch being launched one by one. */
  uint32_t n, kbytes;
  size_t kcap;
  uint8_t *kernargs;
  uint32_t ksize[STRETCH_MAX];
  uint8_t packets[STRETCH_MAX * AQ_PACKET_SIZE];
};

static uint8_t *packet_at(const stretch_t *s, uint32_t i) { return s->buf + (size_t)i * AQ_PACKET_SIZE; }
static uint32_t *ksizes(const stretch_t *s) { return (uint32_t *)(s->buf + (size_t)s->n * AQ_PACKET_SIZE); }
static uint8_t *kernargs(const stretch_t *s) { return (uint8_t *)(ksizes(s) + s->n); }

static int same_packet(const uint8_t *a, const uint8_t *b) {
  return !memcmp(a, b, TAG_OFFSET) && !memcmp(a + TAG_OFFSET + 8, b + TAG_OFFSET + 8, AQ_PACKET_SIZE - TAG_OFFSET - 8);
}

/* 0: off, 1: on, 2: on in traced runs too, -1: a bad value (why says). */
static int wanted(char *why, size_t size) {
  (void)why, (void)size; /* aq_init refused any other value */
  uint64_t v = aq_setting_u64(AQ_SET_CUDA_GRAPHS);
  return v == AQ_CUDA_GRAPHS_OFF ? 0 : v == AQ_CUDA_GRAPHS_ON ? 1 : 2;
}

aq_status_t aq_cuda_graph_init(cuda_queue_t *cq) {
  char why[160];
  int on = wanted(why, sizeof(why));
  if (on < 0) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s", why);
  int api = aq_cu.cuStreamBeginCapture && aq_cu.cuStreamEndCapture && aq_cu.cuGraphInstantiateWithFlags && aq_cu.cuGraphLaunch &&
            aq_cu.cuGraphExecDestroy && aq_cu.cuGraphDestroy;
  if (on && api) cq->graphs = calloc(1, sizeof(*cq->graphs)); /* no memory: no graphs, no harm */
  if (cq->graphs) cq->graphs->traced = on == 2;
  return AQ_OK;
}

void aq_cuda_graph_release(cuda_queue_t *cq) {
  cuda_graphs_t *g = cq->graphs;
  if (!g) return;
  char where[64];
  snprintf(where, sizeof(where), "%s, queue %u: CUDA graphs", cq->agent->agent->info.name, cq->queue->id);
  for (int i = 0; i < ENTRIES; ++i) {
    if (g->entries[i].exec) aq_cuda_checked(aq_cu.cuGraphExecDestroy(g->entries[i].exec), "cuGraphExecDestroy", where);
    free(g->entries[i].s.buf);
  }
  if (g->capture) aq_cuda_checked(aq_cu.cuStreamDestroy(g->capture), "cuStreamDestroy", where);
  free(g->kernargs);
  free(g);
  cq->graphs = NULL;
}

/* Captures the entry's launches, on a stream of its own (a failed capture
 * leaves the queue's stream as it was), through the queue's own launch path. */
static void build(cuda_queue_t *cq, entry_t *e) {
  cuda_graphs_t *g = cq->graphs;
  e->state = UNGRAPHABLE; /* unless all goes well: not tried again */
  if (!g->capture && aq_cu.cuStreamCreate(&g->capture, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    g->capture = NULL;
    return;
  }
  if (aq_cu.cuStreamBeginCapture(g->capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return;
  CUstream stream = cq->stream;
  cq->stream = g->capture;
  uint32_t failed = 0;
  const uint8_t *ka = kernargs(&e->s);
  for (uint32_t i = 0; i < e->s.n && !failed; ++i) {
    hsa_kernel_dispatch_packet_t p;
    memcpy(&p, packet_at(&e->s, i), sizeof(p));
    p.kernarg_address = (void *)ka; /* the bytes as they were: the graph keeps its own copy */
    ka += ksizes(&e->s)[i];
    failed = aq_cuda_dispatch(cq, &p);
  }
  cq->stream = stream;
  CUgraph graph = NULL;
  CUresult r = aq_cu.cuStreamEndCapture(g->capture, &graph);
  if (r == CUDA_SUCCESS && graph && !failed && aq_cu.cuGraphInstantiateWithFlags(&e->exec, graph, 0) == CUDA_SUCCESS)
    e->state = READY;
  else
    e->exec = NULL;
  if (graph) aq_cuda_checked(aq_cu.cuGraphDestroy(graph), "cuGraphDestroy", cq->agent->agent->info.name);
}

static int same_stretch(const cuda_graphs_t *g, const stretch_t *s) {
  return s->n == g->n && s->kbytes == g->kbytes && !memcmp(s->buf, g->packets, (size_t)g->n * AQ_PACKET_SIZE) &&
         !memcmp(ksizes(s), g->ksize, g->n * sizeof(uint32_t)) && !memcmp(kernargs(s), g->kernargs, g->kbytes);
}

static void describe(entry_t *e) {
  const hsa_kernel_dispatch_packet_t *first = (const void *)packet_at(&e->s, 0),
                                     *last = (const void *)packet_at(&e->s, e->s.n - 1);
  const cuda_kernel_t *a = aq_cuda_kernel_lookup(first->kernel_object), *b = aq_cuda_kernel_lookup(last->kernel_object);
  snprintf(e->what, sizeof(e->what),
           "one of the %u kernels of a CUDA graph ('%s' .. '%s'; AQ_CUDA_GRAPHS=0 launches them one by one)", e->s.n,
           a && a->name ? a->name : "?", b && b->name ? b->name : "?");
  snprintf(e->label, sizeof(e->label), "CUDA graph of %u: %s .. %s", e->s.n, a && a->name ? a->name : "?",
           b && b->name ? b->name : "?");
}

/* The stretch seen for the first time: it takes the least recently used
 * entry's place. */
static void remember(cuda_graphs_t *g) {
  entry_t *e = &g->entries[0];
  for (int i = 1; i < ENTRIES; ++i)
    if (g->entries[i].used < e->used) e = &g->entries[i];
  size_t need = (size_t)g->n * (AQ_PACKET_SIZE + sizeof(uint32_t)) + g->kbytes;
  if (need > e->s.cap) {
    uint8_t *buf = realloc(e->s.buf, need);
    if (!buf) return;
    e->s.buf = buf, e->s.cap = need;
  }
  if (e->exec) /* one still running is freed when it ends */
    aq_cuda_checked(aq_cu.cuGraphExecDestroy(e->exec), "cuGraphExecDestroy", "a CUDA graph replaced");
  e->exec = NULL;
  e->state = SEEN;
  e->used = ++g->clock;
  e->s.n = g->n, e->s.kbytes = g->kbytes;
  memcpy(e->s.buf, g->packets, (size_t)g->n * AQ_PACKET_SIZE);
  memcpy(ksizes(&e->s), g->ksize, g->n * sizeof(uint32_t));
  memcpy(kernargs(&e->s), g->kernargs, g->kbytes);
  describe(e);
}

/* The stretch launched one by one has ended: a second sighting becomes a
 * graph, a first one is remembered. */
static void finish(cuda_queue_t *cq) {
  cuda_graphs_t *g = cq->graphs;
  if (g->n >= STRETCH_MIN) {
    entry_t *found = NULL;
    for (int i = 0; i < ENTRIES && !found; ++i)
      if (g->entries[i].used && same_stretch(g, &g->entries[i].s)) found = &g->entries[i];
    if (!found) remember(g);
    else {
      found->used = ++g->clock;
      if (found->state == SEEN) build(cq, found);
    }
  }
  g->n = g->kbytes = 0;
}

void aq_cuda_graph_observe(cuda_queue_t *cq, const hsa_kernel_dispatch_packet_t *p) {
  cuda_graphs_t *g = cq->graphs;
  if (!g) return;
  const cuda_kernel_t *k = p ? aq_cuda_kernel_lookup(p->kernel_object) : NULL;
  if (!k) {
    finish(cq);
    return;
  }
  if (g->kbytes + k->kernarg_size > g->kcap) {
    size_t cap = g->kcap ? g->kcap * 2 : 4096;
    while (cap < g->kbytes + k->kernarg_size) cap *= 2;
    uint8_t *b = realloc(g->kernargs, cap);
    if (!b) {
      g->n = g->kbytes = 0;
      return;
    }
    g->kernargs = b, g->kcap = cap;
  }
  memcpy(g->packets + (size_t)g->n * AQ_PACKET_SIZE, p, AQ_PACKET_SIZE);
  memset(g->packets + (size_t)g->n * AQ_PACKET_SIZE + TAG_OFFSET, 0, 8);
  if (k->kernarg_size) memcpy(g->kernargs + g->kbytes, p->kernarg_address, k->kernarg_size);
  g->ksize[g->n++] = k->kernarg_size;
  g->kbytes += k->kernarg_size;
  /* Ended here, the next packet may start a graph's worth. */
  if (p->completion_signal.handle || g->n == STRETCH_MAX || g->n == cq->queue->size) finish(cq);
}

/* Whether the packets from index on are the entry's stretch. They were
 * reserved together; the producer may still be writing the last ones. */
static int matches(cuda_queue_t *cq, const entry_t *e, uint64_t index) {
  aq_queue_impl_t *q = cq->queue;
  if (e->s.n > q->size || atomic_load_explicit(&q->write_index, memory_order_acquire) < index + e->s.n) return 0;
  const uint8_t *ka = kernargs(&e->s);
  uint64_t deadline = 0;
  for (uint32_t i = 0; i < e->s.n; ++i) {
    while (aq_queue_peek(q, index + i) == HSA_PACKET_TYPE_INVALID) {
      uint64_t now = aq_now_ns();
      if (!deadline) deadline = now + PUBLISH_WAIT_NS;
      else if (now > deadline) return 0;
    }
    const uint8_t *p = q->ring + ((index + i) & q->mask) * AQ_PACKET_SIZE;
    uint32_t size = ksizes(&e->s)[i];
    if (!same_packet(p, packet_at(&e->s, i)) ||
        (size && memcmp(((const hsa_kernel_dispatch_packet_t *)(const void *)p)->kernarg_address, ka, size)))
      return 0;
    ka += size;
  }
  return 1;
}

int aq_cuda_graph_traced(const cuda_queue_t *cq) { return cq->graphs && cq->graphs->traced; }

uint32_t aq_cuda_graph_replay(cuda_queue_t *cq, uint64_t index, const char **what, const char **label) {
  cuda_graphs_t *g = cq->graphs;
  if (!g || g->n || atomic_load(&cq->agent->faulted)) return 0; /* mid-stretch, or the GPU needs a reset */
  const uint8_t *first = cq->queue->ring + (index & cq->queue->mask) * AQ_PACKET_SIZE;
  for (int i = 0; i < ENTRIES; ++i) {
    entry_t *e = &g->entries[i];
    if (e->state != READY || !same_packet(first, packet_at(&e->s, 0)) || !matches(cq, e, index)) continue;
    if (aq_cu.cuGraphLaunch(e->exec, cq->stream) != CUDA_SUCCESS) {
      /* Launched one by one instead, each packet then reports what failed. */
      aq_cuda_checked(aq_cu.cuGraphExecDestroy(e->exec), "cuGraphExecDestroy", cq->agent->agent->info.name);
      e->exec = NULL;
      e->state = UNGRAPHABLE;
      return 0;
    }
    e->used = ++g->clock;
    atomic_fetch_add_explicit(&cq->queue->graphed, e->s.n, memory_order_relaxed);
    *what = e->what;
    *label = e->label;
    return e->s.n;
  }
  return 0;
}
