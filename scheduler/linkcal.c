/* Link costs measured once per process (see linkcal.h). */
#include "scheduler/linkcal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "runtime/wake.h"

enum { PINGS = 31, COPIES = 3, SMALL = 4096, LARGE = 8 << 20, CACHE_MAX = 32, BARRIERS = 32, BARRIER_RUNS = 9 };
static const uint64_t PING_TIMEOUT_NS = 1000000000ull;

typedef struct link {
  char key[2 * (128 + 64) + 4];
  double lat_ns, ns_per_byte; /* < 0: could not be measured */
  double barrier_ns;          /* a lane of one CPU agent: a barrier packet's own cost; < 0: not measured */
} link_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static link_t cache[CACHE_MAX];
static uint32_t ncache;

static double median(double *v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j] < v[j - 1]; --j) {
      double t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
  return n ? v[n / 2] : -1;
}

/* ---- latency: a ping between queues ------------------------------------- */

static aq_status_t stamp(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a1, (void)a2, (void)a3;
  *(volatile uint64_t *)user = aq_now_ns();
  return AQ_OK;
}

static aq_status_t submit_stamp(aq_queue_t q, uint64_t *slot, aq_signal_t done) {
  hsa_agent_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.type = AQ_AGENT_DISPATCH_HOST_CALL;
  p.return_address = slot;
  p.arg[0] = (uint64_t)(uintptr_t)stamp;
  p.completion_signal.handle = done.handle;
  return aq_queue_submit(q, &p, PING_TIMEOUT_NS, NULL);
}

static aq_status_t submit_wait(aq_queue_t q, aq_signal_t dep, aq_signal_t done) {
  hsa_barrier_and_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  b.dep_signal[0].handle = dep.handle;
  b.completion_signal.handle = done.handle;
  return aq_queue_submit(q, &b, PING_TIMEOUT_NS, NULL);
}

/* A measurement's queues, signals and the slots its stamps write. On the
 * heap: a packet that outlives its timeout (workers held past
 * PING_TIMEOUT_NS by a long dispatch, a loaded machine) still runs, and
 * writes its stamp and completes its signal after the measurement gave up. */
typedef struct probe {
  aq_queue_t q[4];
  aq_signal_t sig[4];
  uint64_t t0, t1;
  struct probe *next; /* on the list of those left to their packets */
} probe_t;

static probe_t *left; /* under lock */

/* Its queues and signals, then itself; no packet may be left in a queue. */
static void probe_free(probe_t *p) {
  for (int i = 0; p && i < 4; ++i) {
    if (p->q[i].handle) aq_queue_destroy(p->q[i]);
    if (p->sig[i].handle) aq_signal_destroy(p->sig[i]);
  }
  free(p);
}

/* A probe of queues on agents on[0..nq) and ns signals of value 0, or NULL. */
static probe_t *probe_new(const aq_agent_t *on, int nq, int ns) {
  probe_t *p = calloc(1, sizeof(*p));
  aq_queue_options_t qo = {.size = 64};
  aq_status_t s = p ? AQ_OK : AQ_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < nq && s == AQ_OK; ++i) s = aq_queue_create(on[i], &qo, &p->q[i]);
  for (int i = 0; i < ns && s == AQ_OK; ++i) s = aq_signal_create(0, &p->sig[i]);
  if (s == AQ_OK) return p;
  probe_free(p);
  return NULL;
}

/* Releases the barriers still waiting on its signals and lets its queues
 * drain; then frees it, or, where a queue still holds packets, leaves it
 * (queues, signals, slots: a few hundred bytes) to them, on a list. */
static void probe_end(probe_t *p) {
  if (!p) return;
  int drained = 1;
  for (int i = 0; i < 4; ++i)
    if (p->sig[i].handle) aq_signal_store(p->sig[i], 0);
  for (int i = 0; i < 4; ++i)
    if (p->q[i].handle && aq_queue_wait_idle(p->q[i], PING_TIMEOUT_NS) != AQ_OK) drained = 0;
  if (drained) probe_free(p);
  else p->next = left, left = p;
}

/* One ping (q: from, to, back; sig: s1, s2, done): from stamps and signals;
 * to waits (and on a CPU stamps); a GPU's wait is waited for by back (a
 * CPU queue), which stamps. The waiters go in first. */
static aq_status_t ping_once(probe_t *p, int gpu, double *ns) {
  aq_queue_t from = p->q[0], to = p->q[1], back = p->q[2];
  aq_signal_t s1 = p->sig[0], s2 = p->sig[1], done = p->sig[2], none = {0};
  aq_status_t s = AQ_OK;
  if (s == AQ_OK) s = aq_signal_store(s1, 1);
  if (s == AQ_OK) s = aq_signal_store(s2, 1);
  if (s == AQ_OK) s = aq_signal_store(done, 1);
  if (s == AQ_OK) s = submit_wait(to, s1, gpu ? s2 : none);
  if (s == AQ_OK) s = gpu ? submit_wait(back, s2, none) : AQ_OK;
  if (s == AQ_OK) s = submit_stamp(gpu ? back : to, &p->t1, done);
  if (s == AQ_OK) s = submit_stamp(from, &p->t0, s1);
  if (s == AQ_OK) s = aq_signal_wait(done, AQ_SIGNAL_EQ, 0, PING_TIMEOUT_NS, NULL);
  if (s == AQ_OK) *ns = (double)(p->t1 - p->t0) / (gpu ? 2 : 1);
  return s;
}

/* Median one-way latency from CPU agent a to agent b, or -1. */
static double ping(aq_agent_t a, aq_agent_t b, int b_gpu) {
  probe_t *p = probe_new((aq_agent_t[]){a, b, a}, b_gpu ? 3 : 2, 3);
  double v[PINGS];
  int n = 0;
  aq_status_t s = p ? AQ_OK : AQ_ERROR_OUT_OF_MEMORY;
  for (int i = 0; s == AQ_OK && i < PINGS + 2; ++i) {
    double ns = 0;
    s = ping_once(p, b_gpu, &ns);
    if (s == AQ_OK && i >= 2) v[n++] = ns; /* the first ones wake threads up */
  }
  probe_end(p);
  return s == AQ_OK ? median(v, n) : -1;
}

/* Median time of a chain CPU -> GPU a -> GPU b -> CPU (cpu stamps and
 * signals, each GPU's barrier waits for the one before and completes the
 * next, a second CPU queue waits for the last and stamps), or -1: the GPU
 * hop is what is left when the two CPU hops are taken off. */
static double ping_chain(aq_agent_t cpu, aq_agent_t a, aq_agent_t b) {
  probe_t *p = probe_new((aq_agent_t[]){cpu, a, b, cpu}, 4, 4);
  double v[PINGS];
  int n = 0;
  aq_status_t s = p ? AQ_OK : AQ_ERROR_OUT_OF_MEMORY;
  for (int r = 0; s == AQ_OK && r < PINGS + 2; ++r) {
    for (int i = 0; i < 4 && s == AQ_OK; ++i) s = aq_signal_store(p->sig[i], 1);
    for (int i = 1; i < 3 && s == AQ_OK; ++i) s = submit_wait(p->q[i], p->sig[i - 1], p->sig[i]);
    if (s == AQ_OK) s = submit_wait(p->q[3], p->sig[2], (aq_signal_t){0});
    if (s == AQ_OK) s = submit_stamp(p->q[3], &p->t1, p->sig[3]);
    if (s == AQ_OK) s = submit_stamp(p->q[0], &p->t0, p->sig[0]);
    if (s == AQ_OK) s = aq_signal_wait(p->sig[3], AQ_SIGNAL_EQ, 0, PING_TIMEOUT_NS, NULL);
    if (s == AQ_OK && r >= 2) v[n++] = (double)(p->t1 - p->t0);
  }
  probe_end(p);
  return s == AQ_OK ? median(v, n) : -1;
}

/* ---- a barrier packet's own cost on a CPU lane ------------------------------ */

/* Stamps around `barriers` barrier-AND packets on a signal already done
 * (q[0]; sig: ready, done). */
static aq_status_t stamped_barriers(probe_t *p, int barriers, double *ns) {
  aq_status_t s = aq_signal_store(p->sig[1], 2);
  if (s == AQ_OK) s = submit_stamp(p->q[0], &p->t0, p->sig[1]);
  for (int i = 0; s == AQ_OK && i < barriers; ++i) s = submit_wait(p->q[0], p->sig[0], (aq_signal_t){0});
  if (s == AQ_OK) s = submit_stamp(p->q[0], &p->t1, p->sig[1]);
  if (s == AQ_OK) s = aq_signal_wait(p->sig[1], AQ_SIGNAL_EQ, 0, PING_TIMEOUT_NS, NULL);
  if (s == AQ_OK) *ns = (double)(p->t1 - p->t0);
  return s;
}

/* The median extra time of BARRIERS barrier packets between two stamps,
 * per packet, or -1. */
static double barrier_cost(aq_agent_t cpu) {
  probe_t *p = probe_new(&cpu, 1, 2);
  aq_status_t s = p ? AQ_OK : AQ_ERROR_OUT_OF_MEMORY;
  double with[BARRIER_RUNS], without[BARRIER_RUNS];
  for (int i = 0; s == AQ_OK && i < BARRIER_RUNS + 2; ++i) { /* the first ones wake the worker */
    double w = 0, wo = 0;
    s = stamped_barriers(p, BARRIERS, &w);
    if (s == AQ_OK) s = stamped_barriers(p, 0, &wo);
    if (s == AQ_OK && i >= 2) with[i - 2] = w, without[i - 2] = wo;
  }
  probe_end(p);
  if (s != AQ_OK) return -1;
  double per = (median(with, BARRIER_RUNS) - median(without, BARRIER_RUNS)) / BARRIERS;
  return per > 0 ? per : -1;
}

/* ---- bandwidth: copies ---------------------------------------------------- */

static void *alloc_in(aq_agent_t agent, uint32_t flag, size_t size) {
  aq_region_t r[8];
  size_t n = 0;
  if (aq_agent_regions(agent, r, 8, &n) != AQ_OK) return NULL;
  for (size_t i = 0; i < n && i < 8; ++i) {
    aq_region_info_t info;
    void *p = NULL;
    if (aq_region_get_info(r[i], &info) == AQ_OK && (info.flags & flag) && aq_memory_allocate(r[i], size, &p) == AQ_OK)
      return p;
  }
  return NULL;
}

static double copy_ns(void *dst, const void *src, size_t size, int reps) {
  double v[COPIES > 9 ? COPIES : 9];
  for (int i = 0; i < reps; ++i) {
    uint64_t t0 = aq_now_ns();
    if (aq_memory_copy(dst, src, size) != AQ_OK) return -1;
    v[i] = (double)(aq_now_ns() - t0);
  }
  return median(v, reps);
}

/* ns per byte from src to dst (each LARGE bytes), or -1. */
static double per_byte(void *dst, void *src) {
  if (!dst || !src) return -1;
  copy_ns(dst, src, LARGE, 1); /* first touch: pages in */
  double small = copy_ns(dst, src, SMALL, 9), large = copy_ns(dst, src, LARGE, COPIES);
  if (small < 0 || large <= small) return -1;
  return (large - small) / (LARGE - SMALL);
}

/* ---- pairs ---------------------------------------------------------------- */

static const link_t *lookup(const link_agent_t *a, const link_agent_t *b);

/* Between two GPUs: the edge is one GPU's completion seen by the other's
 * stream (the chain less its two CPU hops), the bytes a copy between their
 * device memories (over NVLink or PCIe, peer to peer where they have it). */
static void measure_gpus(const link_agent_t *cpu, const link_agent_t *a, const link_agent_t *b, link_t *out) {
  const link_t *in = lookup(cpu, a), *back = lookup(b, cpu);
  double chain = ping_chain(cpu->agent, a->agent, b->agent);
  if (chain >= 0 && in && back && in->lat_ns >= 0 && back->lat_ns >= 0)
    out->lat_ns = fmax(chain - in->lat_ns - back->lat_ns, LINK_HOP_NS);
  void *src = alloc_in(a->agent, AQ_REGION_DEVICE, LARGE), *dst = alloc_in(b->agent, AQ_REGION_DEVICE, LARGE);
  out->ns_per_byte = per_byte(dst, src);
  if (src) aq_memory_free(src);
  if (dst) aq_memory_free(dst);
}

static void measure(const link_agent_t *a, const link_agent_t *b, link_t *out, const link_agent_t *cpu) {
  int same = a->agent.handle == b->agent.handle, a_gpu = a->kind == AQ_AGENT_KIND_GPU,
      b_gpu = b->kind == AQ_AGENT_KIND_GPU;
  out->lat_ns = out->ns_per_byte = out->barrier_ns = -1;
  if (a_gpu && b_gpu) {
    if (cpu && !same) measure_gpus(cpu, a, b, out);
    return;
  }
  const link_agent_t *c = a_gpu ? b : a, *g = a_gpu ? a : b; /* the CPU side, the other side */
  if (a_gpu) { /* a ping is a round trip: GPU to CPU is the same as CPU to GPU */
    const link_t *r = lookup(b, a);
    out->lat_ns = r ? r->lat_ns : -1;
  } else {
    out->lat_ns = ping(c->agent, same ? c->agent : g->agent, !same && b_gpu);
  }
  if (same) {
    out->ns_per_byte = 0;
    out->barrier_ns = barrier_cost(c->agent);
    return;
  }
  void *src, *dst;
  if (!a_gpu && !b_gpu) {
    src = alloc_in(a->agent, AQ_REGION_COARSE_GRAINED, LARGE),
    dst = alloc_in(b->agent, AQ_REGION_COARSE_GRAINED, LARGE);
  } else {
    /* The host side of a GPU's data is its pinned memory (the exec's too). */
    void *host = alloc_in(g->agent, AQ_REGION_FINE_GRAINED, LARGE), *dev = alloc_in(g->agent, AQ_REGION_DEVICE, LARGE);
    src = a_gpu ? dev : host, dst = a_gpu ? host : dev;
  }
  out->ns_per_byte = per_byte(dst, src);
  if (src) aq_memory_free(src);
  if (dst) aq_memory_free(dst);
}

/* The CPU agent that GPU pairs are measured through (aq_link_calibrate). */
static const link_agent_t *via_cpu;

/* A pair's costs, measured the first time. Keyed by the agents' models, but
 * between two GPUs by their names too: GPUs of one model may be linked
 * differently (NVLink between some pairs, PCIe between others). */
static const link_t *lookup(const link_agent_t *a, const link_agent_t *b) {
  char key[sizeof(cache[0].key)], na[AQ_NAME_MAX] = "", nb[AQ_NAME_MAX] = "";
  aq_agent_info_t ia, ib;
  if (a->kind == AQ_AGENT_KIND_GPU && b->kind == AQ_AGENT_KIND_GPU && aq_agent_get_info(a->agent, &ia) == AQ_OK &&
      aq_agent_get_info(b->agent, &ib) == AQ_OK)
    snprintf(na, sizeof(na), "@%s", ia.name), snprintf(nb, sizeof(nb), "@%s", ib.name);
  snprintf(key, sizeof(key), "%s%s>%s%s%s", a->arch, na, b->arch, nb, a->agent.handle == b->agent.handle ? "=" : "");
  for (uint32_t i = 0; i < ncache; ++i)
    if (!strcmp(cache[i].key, key)) return &cache[i];
  link_t l;
  snprintf(l.key, sizeof(l.key), "%s", key);
  measure(a, b, &l, via_cpu);
  if (ncache == CACHE_MAX) return NULL;
  cache[ncache] = l;
  return &cache[ncache++];
}

static void round_figures(uint8_t ka, uint8_t kb, int same, double *lat, double *pb) {
  if (same)
    *lat = LINK_HOP_NS, *pb = 0;
  else if (ka == AQ_AGENT_KIND_CPU && kb == AQ_AGENT_KIND_CPU)
    *lat = LINK_NUMA_NS, *pb = LINK_NUMA_NS_PER_BYTE;
  else
    *lat = LINK_PCIE_NS, *pb = LINK_PCIE_NS_PER_BYTE;
}

void aq_link_calibrate(const link_agent_t *agents, uint32_t n, double *lat_ns, double *ns_per_byte, double *barrier_ns,
                       uint32_t *measured) {
  const link_agent_t *cpu = NULL;
  for (uint32_t a = 0; a < n && !cpu; ++a)
    if (agents[a].kind == AQ_AGENT_KIND_CPU) cpu = &agents[a];
  *measured = 0;
  pthread_mutex_lock(&lock);
  via_cpu = cpu;
  for (uint32_t a = 0; a < n; ++a)
    for (uint32_t b = 0; b < n; ++b) {
      const link_agent_t *x = &agents[a], *y = &agents[b];
      double *lat = &lat_ns[a * n + b], *pb = &ns_per_byte[a * n + b];
      round_figures(x->kind, y->kind, a == b, lat, pb);
      if (a == b) barrier_ns[a] = x->kind == AQ_AGENT_KIND_CPU ? LINK_BARRIER_NS : 0;
      if (!cpu || (a == b && x->kind != AQ_AGENT_KIND_CPU)) continue; /* a GPU has one lane */
      const link_t *l = lookup(x, y);
      if (l && l->lat_ns >= 0) *lat = l->lat_ns, ++*measured;
      if (l && l->ns_per_byte >= 0) *pb = l->ns_per_byte;
      if (l && a == b && l->barrier_ns >= 0) barrier_ns[a] = l->barrier_ns;
    }
  pthread_mutex_unlock(&lock);
}
