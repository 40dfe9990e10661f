/* Execs: an instantiated graph. Instantiation plans the graph, gives each
 * tensor memory on its agent's node, fills every kernarg once and lowers the
 * tasks to one prebuilt packet stream per agent queue. A run resets the
 * tasks' signals and copies the streams into the queues: no allocation, no
 * lock, one doorbell per queue. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "aquila/ops_gpu.h"
#include "runtime/memory.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "runtime/status.h"
#include "runtime/trace.h"
#include "runtime/wake.h"
#include "scheduler/calibrate.h"
#include "scheduler/fuse.h"
#include "scheduler/linkcal.h"
#include "scheduler/memplan.h"
#include "scheduler/perfmodel.h"
#include "scheduler/plan.h"
#include "scheduler/replica.h"

enum { EXEC_AGENTS_MAX = 64, EXEC_LANES_MAX = 256, LANES_PER_AGENT_MAX = 16, PKT = 64 };

typedef struct stream {
  aq_queue_t queue;
  aq_signal_t done; /* the lane's last packet: 1 while a run is in it */
  uint8_t *ring;
  uint32_t size;
  uint8_t *packets; /* npackets * 64 bytes, headers included */
  uint32_t npackets, cap;
  /* The same stream with each CPU task between two time stamps (host
   * calls): what a profiled run copies in instead. */
  uint8_t *prof;
  uint32_t nprof;
} stream_t;

struct aq_exec {
  aq_graph_t *graph;
  plan_t plan;
  aq_code_object_t ops; /* the op library */
  uint32_t nagents;
  aq_agent_t agents[EXEC_AGENTS_MAX];
  char agent_names[EXEC_AGENTS_MAX][AQ_NAME_MAX];
  int32_t agent_node[EXEC_AGENTS_MAX];
  uint8_t agent_kind[EXEC_AGENTS_MAX];
  uint32_t agent_workers[EXEC_AGENTS_MAX]; /* a CPU agent's workers (its lanes share them); 0: a GPU */
  uint32_t nlanes;
  uint32_t lane_agent[EXEC_LANES_MAX];
  stream_t streams[EXEC_LANES_MAX]; /* one queue per lane */
  void **buffers;      /* per tensor id: carved from its agent's arena */
  void **kernargs;     /* per task: carved from its agent's kernarg arena */
  void *arenas[EXEC_AGENTS_MAX], *pinned_arenas[EXEC_AGENTS_MAX], *kernarg_arenas[EXEC_AGENTS_MAX];
  size_t kernarg_used[EXEC_AGENTS_MAX];
  size_t managed_size[EXEC_AGENTS_MAX]; /* a GPU arena in managed memory (AQ_MEMORY=unified): its size */
  aq_signal_t *signals;/* per task */
  uint8_t *watched;    /* per task: another lane waits for its signal */
  uint32_t queues_used, barriers, packets;
  uint8_t lane_kind[EXEC_LANES_MAX]; /* aq_agent_kind_t of the lane's agent */
  aq_code_object_t gpu_ops;          /* the CUDA op library, when a GPU agent exists */
  uint64_t runs, run_started_ns;
  uint64_t last_run_ns; /* the last run's start to its wait's end (spin_on_gpu_lanes) */
  uint32_t serial; /* this exec's number, in trace tags */
  /* The last kernel lowering looked up: graphs repeat a few kernels. */
  aq_kernel_info_t last_kernel;
  uint64_t last_kernel_co;
  uint32_t last_kernel_agent;
  char last_kernel_name[64];
  _Atomic int in_flight;
  size_t bytes;
  aq_sched_policy_t policy;
  uint32_t flags;                      /* AQ_EXEC_* */
  int exact_matmul;                    /* AQ_EXEC_EXACT_MATMUL or AQ_MATMUL_PRECISION=exact */
  /* With replicas, graph is the exec's own (the user's tasks and the
   * copies); user_graph is the one it was made from. */
  aq_graph_t *user_graph;
  replica_out_t replicas;
  char agent_arch[EXEC_AGENTS_MAX][PERF_ARCH_MAX]; /* performance models' key */
  uint32_t *reused_by;                 /* per tensor: a later tensor given its buffer */
  uint8_t *given;                      /* per tensor: the user gave it data (inputs) */
  uint32_t *first_reader;              /* per tensor: the task reading an input first, or UINT32_MAX */
  uint32_t unbound;                    /* inputs a task reads that were never given data */
  uint64_t *stamps;                    /* per task: start and end of a profiled run */
  uint32_t profile_left;               /* runs still to profile (models short of samples) */
  int profiled;                        /* the run in flight is profiled */
  int warm_up;                         /* the next run is not profiled (calibrate.c) */
  aq_profile_sink_t gpu_sink;          /* GPU lanes' kernel times into stamps (runtime/profile.h) */
  /* lowering's scratch: per lane, the last producer a task waits for */
  uint32_t lane_last_pred[EXEC_LANES_MAX], lane_stamp[EXEC_LANES_MAX], lane_touched[EXEC_LANES_MAX];
  uint32_t *covered; /* nlanes x nlanes: see other_lane_producers */
  uint32_t join_lane; /* its done signal is the whole run's */
  fusion_t fusion;    /* products run in their consumers' kernels (fuse.h) */
};

static aq_status_t pick_agents(aq_exec_t *e) {
  aq_agent_t all[EXEC_AGENTS_MAX];
  size_t n;
  AQ_RETURN_IF_ERROR(aq_agents(all, EXEC_AGENTS_MAX, &n));
  for (size_t i = 0; i < n && i < EXEC_AGENTS_MAX; ++i) {
    aq_agent_info_t info;
    AQ_RETURN_IF_ERROR(aq_agent_get_info(all[i], &info));
    if (!info.usable) continue;
    e->agents[e->nagents] = all[i];
    snprintf(e->agent_names[e->nagents], AQ_NAME_MAX, "%s", info.name);
    e->agent_node[e->nagents] = info.numa_node;
    e->agent_kind[e->nagents] = (uint8_t)info.kind;
    e->agent_workers[e->nagents] = info.kind == AQ_AGENT_KIND_CPU ? (info.compute_units ? info.compute_units : 1) : 0;
    snprintf(e->agent_arch[e->nagents], PERF_ARCH_MAX, "%s/%s/%u", info.driver, info.isa[0] ? info.isa : "any",
             info.compute_units);
    /* A lane per CPU worker: independent tasks run side by side. A GPU
     * gets one in-order stream. */
    uint32_t lanes = info.kind == AQ_AGENT_KIND_GPU ? 1 : info.compute_units ? info.compute_units : 1;
    if (lanes > LANES_PER_AGENT_MAX) lanes = LANES_PER_AGENT_MAX;
    for (uint32_t k = 0; k < lanes && e->nlanes < EXEC_LANES_MAX; ++k) {
      e->lane_kind[e->nlanes] = (uint8_t)info.kind;
      e->lane_agent[e->nlanes++] = e->nagents;
    }
    e->nagents++;
  }
  return AQ_OK;
}

static aq_status_t region_of(aq_agent_t agent, uint32_t flag, aq_region_t *out) {
  aq_region_t r[8];
  size_t n;
  AQ_RETURN_IF_ERROR(aq_agent_regions(agent, r, 8, &n));
  for (size_t i = 0; i < n && i < 8; ++i) {
    aq_region_info_t info;
    AQ_RETURN_IF_ERROR(aq_region_get_info(r[i], &info));
    if (info.flags & flag) {
      *out = r[i];
      return AQ_OK;
    }
  }
  return aq_error(AQ_ERROR_NOT_FOUND, "agent has no region with flag 0x%x", flag);
}

/* Zeroes memory the host may not be able to touch (a GPU's). */
static aq_status_t zero(void *p, size_t n) {
  aq_region_t r;
  aq_region_info_t info;
  if (aq_memory_lookup(p, &r, NULL, NULL) == AQ_OK && aq_region_get_info(r, &info) == AQ_OK &&
      (info.flags & AQ_REGION_HOST_ACCESSIBLE)) {
    memset(p, 0, n);
    return AQ_OK;
  }
  void *z = calloc(1, n);
  if (!z) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to zero %zu bytes", n);
  aq_status_t s = aq_memory_copy(p, z, n);
  free(z);
  return s;
}

/* Unified memory: the GPU that runs the arena's tasks is its pages'
 * preferred home, and they move there now (zeroing just pulled them to the
 * host), not by faults during the first run. */
static aq_status_t hint(aq_status_t s) { /* a GPU without prefetch and advice still runs, by faults */
  return s == AQ_ERROR_UNAVAILABLE ? AQ_OK : s;
}

static aq_status_t settle_managed(aq_exec_t *e, uint32_t a, size_t size) {
  e->managed_size[a] = size;
  AQ_RETURN_IF_ERROR(hint(aq_memory_advise(e->arenas[a], size, AQ_ADVICE_PREFERRED_LOCATION, e->agents[a])));
  return hint(aq_memory_prefetch(e->arenas[a], size, e->agents[a], (aq_signal_t){0}));
}

/* The GPU agent whose managed arena holds ptr, or UINT32_MAX. */
static uint32_t managed_owner(const aq_exec_t *e, const void *ptr) {
  for (uint32_t a = 0; a < e->nagents; ++a) {
    const uint8_t *base = e->arenas[a];
    if (e->managed_size[a] && (const uint8_t *)ptr >= base && (const uint8_t *)ptr < base + e->managed_size[a])
      return a;
  }
  return UINT32_MAX;
}

/* Before the host touches a managed tensor (aq_exec_read / _write), its
 * pages come to the host in one transfer rather than a fault per page; after
 * a write they go back to the GPU that reads them, before the run needs them. */
static aq_status_t prefetch_for(aq_exec_t *e, const void *ptr, size_t size, int to_gpu) {
  uint32_t a = managed_owner(e, ptr);
  if (a == UINT32_MAX) return AQ_OK;
  uint32_t host = 0;
  while (host < e->nagents && e->agent_kind[host] != AQ_AGENT_KIND_CPU) ++host;
  if (!to_gpu && host == e->nagents) return AQ_OK;
  return hint(aq_memory_prefetch(ptr, size, e->agents[to_gpu ? a : host], (aq_signal_t){0}));
}

/* Every tensor lives on the node of the agent that touches it first, in
 * one arena per agent (one allocation, not one per tensor: instantiation
 * stays cheap), zeroed so optimizer state starts at zero. */
static aq_status_t plan_memory(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  uint32_t *home = malloc(g->ntensors * sizeof(uint32_t));
  size_t *offset = malloc(g->ntensors * sizeof(size_t)), total[EXEC_AGENTS_MAX] = {0};
  e->buffers = calloc(g->ntensors, sizeof(void *));
  aq_status_t s = home && offset && e->buffers ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t i = 0; s == AQ_OK && i < g->ntensors; ++i) home[i] = UINT32_MAX;
  /* A tensor a GPU touches lives in that GPU's managed memory (the CPU can
   * reach it too); otherwise on the node of the first CPU agent to touch it. */
  for (int pass = 0; s == AQ_OK && pass < 2; ++pass)
    for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
      uint32_t t = e->plan.order[k], a = e->lane_agent[e->plan.tasks[t].lane];
      if ((e->agent_kind[a] == AQ_AGENT_KIND_GPU) != (pass == 0)) continue;
      const task_t *task = &g->tasks[t];
      for (uint32_t r = 0; r < task->nreads; ++r)
        if (home[task->reads[r]] == UINT32_MAX) home[task->reads[r]] = a;
      for (uint32_t w = 0; w < task->nwrites; ++w)
        if (home[task->writes[w]] == UINT32_MAX) home[task->writes[w]] = a;
    }
  /* A GPU tensor that a CPU task touches too (a batch loader, a CPU op in a
   * mixed placement) goes to pinned host memory, which both reach in place:
   * device memory is out of the CPU's reach, and managed memory would migrate
   * its pages back and forth every run. */
  uint8_t *pinned = calloc(g->ntensors, 1);
  if (!pinned) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  /* (Not in unified memory: there prefetch tasks move the pages, replica.c.) */
  for (uint32_t t = 0; s == AQ_OK && !e->replicas.prefetch && t < g->ntasks; ++t) {
    uint32_t a = e->lane_agent[e->plan.tasks[t].lane];
    if (e->agent_kind[a] != AQ_AGENT_KIND_CPU) continue;
    for (uint32_t w = 0; w < g->tasks[t].nwrites; ++w) {
      uint32_t x = g->tasks[t].writes[w];
      if (home[x] != UINT32_MAX && e->agent_kind[home[x]] == AQ_AGENT_KIND_GPU) pinned[x] = 1;
    }
    for (uint32_t r = 0; r < g->tasks[t].nreads; ++r) {
      uint32_t x = g->tasks[t].reads[r];
      if (home[x] != UINT32_MAX && e->agent_kind[home[x]] == AQ_AGENT_KIND_GPU) pinned[x] = 1;
    }
  }
  /* A small GPU result no task reads (a loss) is there for the host, which
   * reads it after every run: from pinned memory that is a load, from
   * device memory a synchronous copy (about 10 us a step). */
  uint8_t *read = calloc(g->ntensors, 1);
  if (!read && s == AQ_OK) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t)
    for (uint32_t r = 0; r < g->tasks[t].nreads; ++r) read[g->tasks[t].reads[r]] = 1;
  for (uint32_t x = 0; s == AQ_OK && !e->replicas.prefetch && x < g->ntensors; ++x)
    if (!read[x] && home[x] != UINT32_MAX && e->agent_kind[home[x]] == AQ_AGENT_KIND_GPU &&
        g->tensors[x].bytes <= 4096)
      pinned[x] = 1;
  free(read);
  /* Offsets in each arena (an agent's own, and its pinned host one):
   * activations share buffers by lifetime unless the options say not. */
  size_t ptotal[EXEC_AGENTS_MAX] = {0};
  uint32_t *domain = malloc(g->ntensors * sizeof(uint32_t));
  uint8_t *reusable = calloc(g->ntensors, 1);
  const char *reuse_env = getenv("AQ_MEMORY_REUSE");
  int no_reuse = (e->flags & AQ_EXEC_NO_MEMORY_REUSE) || (reuse_env && !strcmp(reuse_env, "0"));
  if (s == AQ_OK && (!domain || !reusable)) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t i = 0; s == AQ_OK && i < g->ntensors; ++i) {
    if (home[i] == UINT32_MAX) home[i] = 0;
    domain[i] = 2 * home[i] + (pinned[i] ? 1 : 0);
    reusable[i] = i && !no_reuse && g->tensors[i].role == AQ_ROLE_ACTIVATION;
  }
  memplan_t mp;
  if (s == AQ_OK) s = memplan_build(&mp, g, &e->plan, domain, 2 * e->nagents, reusable);
  if (s == AQ_OK) {
    for (uint32_t i = 1; i < g->ntensors; ++i) offset[i] = mp.offset[i];
    for (uint32_t a = 0; a < e->nagents; ++a) total[a] = mp.total[2 * a], ptotal[a] = mp.total[2 * a + 1];
    e->reused_by = mp.reused_by;
    mp.reused_by = NULL;
    memplan_free(&mp);
  }
  free(domain), free(reusable);
  for (uint32_t a = 0; s == AQ_OK && a < e->nagents; ++a) {
    if (!ptotal[a]) continue;
    aq_region_t region;
    s = region_of(e->agents[a], AQ_REGION_FINE_GRAINED, &region);
    if (s == AQ_OK) s = aq_memory_allocate(region, ptotal[a], &e->pinned_arenas[a]);
    if (s == AQ_OK) memset(e->pinned_arenas[a], 0, ptotal[a]);
    e->bytes += ptotal[a];
  }
  for (uint32_t a = 0; s == AQ_OK && a < e->nagents; ++a) {
    if (!total[a]) continue;
    aq_region_t region;
    /* On a GPU: device memory, or managed memory under AQ_MEMORY=unified
     * (host-accessible, but every host touch migrates pages back and forth).
     * The host reaches device memory through aq_exec_read / aq_exec_write. */
    const char *mem = getenv("AQ_MEMORY");
    uint32_t flag = e->agent_kind[a] != AQ_AGENT_KIND_GPU       ? AQ_REGION_COARSE_GRAINED
                    : mem && !strcmp(mem, "unified")            ? AQ_REGION_MANAGED
                                                                 : AQ_REGION_DEVICE;
    s = region_of(e->agents[a], flag, &region);
    if (s == AQ_OK) s = aq_memory_allocate(region, total[a], &e->arenas[a]);
    if (s == AQ_OK) s = zero(e->arenas[a], total[a]);
    if (s == AQ_OK && flag == AQ_REGION_MANAGED) s = settle_managed(e, a, total[a]);
    e->bytes += total[a];
  }
  for (uint32_t i = 1; s == AQ_OK && i < g->ntensors; ++i)
    e->buffers[i] = (uint8_t *)(pinned[i] ? e->pinned_arenas : e->arenas)[home[i]] + offset[i];
  free(home), free(offset), free(pinned);
  return s;
}

/* The bytes of task t's kernarg: a fused consumer's is the fused kernel's,
 * an absorbed product has none. */
static size_t kernarg_bytes(const aq_exec_t *e, uint32_t t) {
  if (e->graph->tasks[t].kind != TASK_KERNEL || e->fusion.absorbed[t]) return 0;
  uint32_t product = e->fusion.product[t];
  return product != UINT32_MAX ? fuse_kernarg_size(e->graph, product) : e->graph->tasks[t].kernarg_size;
}

/* One kernarg arena per agent, sized for the tasks placed on it. */
static aq_status_t plan_kernargs(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  size_t total[EXEC_AGENTS_MAX] = {0};
  for (uint32_t t = 0; t < g->ntasks; ++t)
    total[e->lane_agent[e->plan.tasks[t].lane]] += (kernarg_bytes(e, t) + 63) & ~(size_t)63;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    if (!total[a]) continue;
    aq_region_t region;
    AQ_RETURN_IF_ERROR(region_of(e->agents[a], AQ_REGION_KERNARG, &region));
    AQ_RETURN_IF_ERROR(aq_memory_allocate(region, total[a], &e->kernarg_arenas[a]));
  }
  return AQ_OK;
}

static aq_status_t push(stream_t *st, const void *packet) {
  if (st->npackets == st->cap) {
    uint32_t cap = st->cap ? 2 * st->cap : 64;
    uint8_t *n = realloc(st->packets, (size_t)cap * PKT);
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for packets");
    st->packets = n;
    st->cap = cap;
  }
  memcpy(st->packets + (size_t)st->npackets++ * PKT, packet, PKT);
  return AQ_OK;
}

static uint16_t header(hsa_packet_type_t type, int barrier) {
  return aq_packet_header(type, barrier, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
}

static aq_status_t push_barrier(aq_exec_t *e, stream_t *st, hsa_packet_type_t type, const aq_signal_t *deps,
                                uint32_t n, aq_signal_t completion) {
  hsa_barrier_and_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = header(type, 1);
  for (uint32_t i = 0; i < n; ++i) b.dep_signal[i].handle = deps[i].handle;
  b.completion_signal.handle = completion.handle;
  e->barriers++;
  return push(st, &b);
}

/* Task t's kernarg as written at dst: the graph's, with the addresses of
 * its tensors filled in. */
static void fill_kernarg(const aq_exec_t *e, uint32_t t, uint8_t *dst) {
  const task_t *task = &e->graph->tasks[t];
  memcpy(dst, task->kernarg, task->kernarg_size);
  for (uint32_t r = 0; r < task->nreads; ++r)
    if (task->read_off[r] != UINT32_MAX) memcpy(dst + task->read_off[r], &e->buffers[task->reads[r]], sizeof(void *));
  for (uint32_t w = 0; w < task->nwrites; ++w)
    if (task->write_off[w] != UINT32_MAX)
      memcpy(dst + task->write_off[w], &e->buffers[task->writes[w]], sizeof(void *));
}

/* A fused consumer's kernarg: the product's and its own, merged. */
static void fill_fused_kernarg(const aq_exec_t *e, uint32_t t, uint8_t *dst) {
  uint8_t mine[TASK_KERNARG_MAX], product[TASK_KERNARG_MAX];
  fill_kernarg(e, t, mine);
  fill_kernarg(e, e->fusion.product[t], product);
  fuse_kernarg(e->graph, t, e->fusion.product[t], mine, product, dst);
}

static int is_matmul(const char *kernel) {
  return !strcmp(kernel, AQ_KERNEL_MATMUL) || !strcmp(kernel, AQ_KERNEL_MATMUL_FUSED);
}

/* The GPU build of a task's op: an exact exec's products take the FFMA
 * builds whatever precision their kernargs ask for. kernarg is the
 * product's own (a fused kernarg starts with it), which is all the picker
 * reads of either. */
static const char *gpu_kernel(const aq_exec_t *e, const char *base, const void *kernarg) {
  if (!e->exact_matmul || !is_matmul(base)) return aq_gpu_op_kernel(base, kernarg);
  aq_matmul_args_t mm;
  memcpy(&mm, kernarg, sizeof(mm));
  mm.precision = AQ_MATMUL_PRECISION_EXACT;
  return aq_gpu_op_kernel(base, &mm);
}

static aq_status_t kernel_packet(aq_exec_t *e, uint32_t t, int barrier, hsa_kernel_dispatch_packet_t *p) {
  aq_graph_t *g = e->graph;
  const task_t *task = &g->tasks[t];
  uint32_t a = e->lane_agent[e->plan.tasks[t].lane];
  int gpu = e->lane_kind[e->plan.tasks[t].lane] == AQ_AGENT_KIND_GPU;
  aq_code_object_t co = task->code_object.handle ? task->code_object : gpu ? e->gpu_ops : e->ops;
  uint32_t fused = e->fusion.product[t];
  /* A fused consumer dispatches as its product (kernel, grid), with both
   * kernargs. The op library's GPU build may have a variant per class of
   * shapes. */
  const task_t *body = fused != UINT32_MAX ? &g->tasks[fused] : task;
  const char *base = fused != UINT32_MAX ? fuse_kernel(g, fused) : task->kernel;
  const char *name = gpu && !task->code_object.handle ? gpu_kernel(e, base, body->kernarg) : base;
  aq_kernel_info_t k;
  if (!(e->last_kernel_co == co.handle && e->last_kernel_agent == a && !strcmp(e->last_kernel_name, name))) {
    e->last_kernel_co = 0;
    if (aq_code_object_find_kernel(co, name, e->agents[a], &e->last_kernel) != AQ_OK)
      return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' is placed on agent %s, which lacks kernel '%s': %s",
                      task->name, e->agent_names[a], name, aq_last_error());
    /* remembered only once found (the names are at most 63 characters) */
    e->last_kernel_co = co.handle, e->last_kernel_agent = a;
    snprintf(e->last_kernel_name, sizeof(e->last_kernel_name), "%s", name);
  }
  k = e->last_kernel;
  size_t bytes = kernarg_bytes(e, t);
  if (bytes < k.kernarg_size)
    return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': kernel '%s' takes %u bytes of kernargs, the task gives %zu",
                    task->name, name, k.kernarg_size, bytes);
  e->kernargs[t] = (uint8_t *)e->kernarg_arenas[a] + e->kernarg_used[a];
  e->kernarg_used[a] += (bytes + 63) & ~(size_t)63;
  uint8_t *ka = e->kernargs[t];
  if (fused != UINT32_MAX)
    fill_fused_kernarg(e, t, ka);
  else
    fill_kernarg(e, t, ka);
  if (gpu && e->exact_matmul && !task->code_object.handle && is_matmul(base))
    ((aq_matmul_args_t *)ka)->precision = AQ_MATMUL_PRECISION_EXACT;
  memset(p, 0, sizeof(*p));
  p->header = header(HSA_PACKET_TYPE_KERNEL_DISPATCH, barrier);
  p->setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  /* GPUs get each kernel's own launch shape (conv, pool and batch norm would
   * leave a GPU nearly idle under their CPU grids of one item per plane). */
  aq_dispatch_shape_t sh = gpu ? aq_gpu_op_shape(base, ka, body->shape) : body->shape;
  p->workgroup_size_x = sh.workgroup[0] ? sh.workgroup[0] : 1;
  p->workgroup_size_y = sh.workgroup[1] ? sh.workgroup[1] : 1;
  p->workgroup_size_z = sh.workgroup[2] ? sh.workgroup[2] : 1;
  p->grid_size_x = sh.grid[0] ? sh.grid[0] : 1;
  p->grid_size_y = sh.grid[1] ? sh.grid[1] : 1;
  p->grid_size_z = sh.grid[2] ? sh.grid[2] : 1;
  p->group_segment_size = gpu ? aq_gpu_op_group_segment(name, ka) : 0; /* staged tiles past 48 KB */
  p->kernel_object = k.kernel_object;
  p->kernarg_address = ka;
  p->reserved2 = ((uint64_t)e->serial << 20) | (t + 1); /* the run goes in at each run */
  /* A GPU writes a completion with a stream operation: only where another
   * lane waits for it (a fault still reaches the run through its lane's end). */
  p->completion_signal.handle = gpu && !e->watched[t] ? 0 : e->signals[t].handle;
  return AQ_OK;
}

/* The producers on other lanes that task t must wait for. Packets of one
 * queue complete in order (CPU queues, GPU streams), so of the producers on
 * another lane only the last one in that lane counts: a fan-in of n tasks
 * waits on one signal per lane, not n. *same_queue: a producer shares t's
 * lane (its packet then needs the barrier bit). */
static uint32_t other_lane_producers(aq_exec_t *e, uint32_t t, uint32_t *out, int *same_queue) {
  const plan_task_t *pt = &e->plan.tasks[t];
  uint32_t *last = e->lane_last_pred, n = 0;
  /* covered[mine * nlanes + other]: packets of lane `other` before this seq
   * are already waited for by an earlier barrier in my lane (which runs in
   * order): a wavefront waits once per lane hop, not once per edge. */
  uint32_t *covered = e->covered + (size_t)pt->lane * e->nlanes;
  *same_queue = 0;
  for (uint32_t j = 0; j < pt->npreds; ++j) {
    uint32_t q = pt->preds[j], lane = e->plan.tasks[q].lane;
    if (e->fusion.absorbed[q]) continue; /* runs in a consumer, which t already follows */
    if (lane == pt->lane) {
      *same_queue = 1;
    } else if (e->plan.tasks[q].seq < covered[lane]) {
      continue;
    } else if (e->lane_stamp[lane] != t + 1) {
      e->lane_stamp[lane] = t + 1;
      last[lane] = q;
      e->lane_touched[n++] = lane;
    } else if (e->plan.tasks[q].seq > e->plan.tasks[last[lane]].seq) {
      last[lane] = q;
    }
  }
  for (uint32_t j = 0; j < n; ++j) {
    out[j] = last[e->lane_touched[j]];
    covered[e->lane_touched[j]] = e->plan.tasks[out[j]].seq + 1;
  }
  /* stamps are per task id; a second call for the same task starts afresh */
  for (uint32_t j = 0; j < n; ++j) e->lane_stamp[e->lane_touched[j]] = 0;
  return n;
}

/* Packets for one task: barrier-AND packets over its producers on other
 * queues (five at a time: consecutive barriers in one queue AND together),
 * a barrier-OR for its after-any edge, then the task itself. */
static aq_status_t lower_task(aq_exec_t *e, uint32_t t) {
  aq_graph_t *g = e->graph;
  const task_t *task = &g->tasks[t];
  const plan_task_t *pt = &e->plan.tasks[t];
  stream_t *st = &e->streams[pt->lane];
  aq_signal_t deps[5], none = {0};
  uint32_t nd = 0, producers[EXEC_LANES_MAX];
  int same_queue = 0;
  uint32_t nprod = other_lane_producers(e, t, producers, &same_queue);
  for (uint32_t j = 0; j < nprod; ++j) {
    deps[nd++] = e->signals[producers[j]];
    if (nd == 5) {
      AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, deps, nd, none));
      nd = 0;
    }
  }
  if (nd) AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, deps, nd, none));
  if (task->nafter_any) {
    if (task->nafter_any > 5)
      return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s': an after-any edge of %u tasks (at most 5)", task->name,
                      task->nafter_any);
    for (uint32_t j = 0; j < task->nafter_any; ++j) deps[j] = e->signals[task->after_any[j]];
    AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_OR, deps, task->nafter_any, none));
  }
  if (task->kind == TASK_HOST) {
    hsa_agent_dispatch_packet_t p;
    memset(&p, 0, sizeof(p));
    p.header = header(HSA_PACKET_TYPE_AGENT_DISPATCH, same_queue);
    p.type = AQ_AGENT_DISPATCH_HOST_CALL;
    p.return_address = task->user;
    p.arg[0] = (uint64_t)(uintptr_t)task->fn;
    for (int i = 0; i < 3; ++i) p.arg[i + 1] = task->args[i];
    p.completion_signal.handle = e->signals[t].handle;
    p.reserved2 = ((uint64_t)e->serial << 20) | (t + 1);
    return push(st, &p);
  }
  hsa_kernel_dispatch_packet_t p;
  AQ_RETURN_IF_ERROR(kernel_packet(e, t, same_queue, &p));
  return push(st, &p);
}

/* A profiled run's time stamps: a host call that notes the time. */
static aq_status_t stamp_call(void *user, uint64_t slot, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  ((uint64_t *)user)[slot] = aq_now_ns();
  return AQ_OK;
}

/* The lane's stream with each task packet between two stamps (barrier bit
 * set: the end stamp waits for the task). CPU lanes only: a GPU queue runs
 * no host calls. */
static aq_status_t profile_stream(aq_exec_t *e, stream_t *st) {
  st->prof = malloc((size_t)st->npackets * 3 * PKT);
  if (!st->prof) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for packets");
  st->nprof = 0;
  for (uint32_t i = 0; i < st->npackets; ++i) {
    const uint8_t *p = st->packets + (size_t)i * PKT;
    uint16_t type = p[0];
    uint64_t tag;
    memcpy(&tag, p + 48, sizeof(tag));
    uint32_t t = (uint32_t)(tag & 0xfffff);
    int task = (type == HSA_PACKET_TYPE_KERNEL_DISPATCH || type == HSA_PACKET_TYPE_AGENT_DISPATCH) && t;
    for (int k = 0; k < 3; ++k) {
      if (!task && k != 1) continue;
      if (k == 1) {
        memcpy(st->prof + (size_t)st->nprof++ * PKT, p, PKT);
        continue;
      }
      hsa_agent_dispatch_packet_t s;
      memset(&s, 0, sizeof(s));
      s.header = header(HSA_PACKET_TYPE_AGENT_DISPATCH, 1);
      s.type = AQ_AGENT_DISPATCH_HOST_CALL;
      s.return_address = e->stamps;
      s.arg[0] = (uint64_t)(uintptr_t)stamp_call;
      s.arg[1] = 2ull * (t - 1) + (k == 2);
      memcpy(st->prof + (size_t)st->nprof++ * PKT, &s, PKT);
    }
  }
  return AQ_OK;
}

static aq_status_t lower(aq_exec_t *e, uint32_t queue_size) {
  aq_graph_t *g = e->graph;
  e->kernargs = calloc(g->ntasks, sizeof(void *));
  e->signals = calloc(g->ntasks, sizeof(aq_signal_t));
  if (!e->kernargs || !e->signals) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  AQ_RETURN_IF_ERROR(plan_kernargs(e));
  e->watched = calloc(g->ntasks, 1);
  if (!e->watched) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  /* watched: a producer another lane waits for, or an after-any edge
   * points at (a GPU writes only those completion signals). */
  e->covered = calloc((size_t)e->nlanes * e->nlanes, sizeof(uint32_t));
  if (!e->covered) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to lower the graph");
  /* The same walk as lowering's (plan order), to know the watched ones
   * before any packet is written. */
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k], producers[EXEC_LANES_MAX];
    if (e->fusion.absorbed[t]) continue;
    int same;
    uint32_t n = other_lane_producers(e, t, producers, &same);
    for (uint32_t j = 0; j < n; ++j) e->watched[producers[j]] = 1;
    for (uint32_t j = 0; j < g->tasks[t].nafter_any; ++j) e->watched[g->tasks[t].after_any[j]] = 1;
  }
  memset(e->covered, 0, (size_t)e->nlanes * e->nlanes * sizeof(uint32_t));
  for (uint32_t t = 0; t < g->ntasks; ++t) AQ_RETURN_IF_ERROR(aq_signal_create(0, &e->signals[t]));
  for (uint32_t k = 0; k < e->plan.ntasks; ++k)
    if (!e->fusion.absorbed[e->plan.order[k]]) AQ_RETURN_IF_ERROR(lower_task(e, e->plan.order[k]));
  aq_signal_t none = {0};
  /* One lane ends with barriers over every other lane's end: its done
   * signal is the run's (aq_exec_completion_signal). The lane of the plan's
   * last task, whose work likely ends last: then the run's end takes no hop
   * through another lane's thread (a GPU's end went through a CPU worker's
   * barrier and cost a training step a wake-up, 20-30 us). */
  e->join_lane = UINT32_MAX;
  for (uint32_t k = e->plan.ntasks; k-- > 0 && e->join_lane == UINT32_MAX;) {
    uint32_t t = e->plan.order[k];
    if (!e->fusion.absorbed[t] && e->streams[e->plan.tasks[t].lane].npackets) e->join_lane = e->plan.tasks[t].lane;
  }
  for (uint32_t a = 0; a < e->nlanes; ++a)
    if (e->streams[a].npackets) AQ_RETURN_IF_ERROR(aq_signal_create(0, &e->streams[a].done));
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    stream_t *st = &e->streams[a];
    if (!st->npackets) continue;
    if (a == e->join_lane) {
      aq_signal_t deps[5];
      uint32_t nd = 0;
      for (uint32_t b = 0; b < e->nlanes; ++b) {
        if (!e->streams[b].npackets || b == a) continue;
        deps[nd++] = e->streams[b].done;
        if (nd == 5) {
          AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, deps, nd, none));
          e->barriers--; /* bookkeeping, not an edge */
          nd = 0;
        }
      }
      if (nd) {
        AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, deps, nd, none));
        e->barriers--;
      }
    }
    /* The end of the stream: a barrier (bit set) that marks the lane done. */
    AQ_RETURN_IF_ERROR(push_barrier(e, st, HSA_PACKET_TYPE_BARRIER_AND, &none, 0, st->done));
    e->barriers--; /* bookkeeping, not an edge */
    e->packets += st->npackets;
    if (e->stamps && e->lane_kind[a] == AQ_AGENT_KIND_CPU) AQ_RETURN_IF_ERROR(profile_stream(e, st));
    uint32_t need = st->nprof > st->npackets ? st->nprof : st->npackets;
    uint32_t size = queue_size ? queue_size : 64;
    while (size < need) size *= 2;
    aq_queue_options_t qo = {.size = size};
    aq_status_t s = aq_queue_create(e->agents[e->lane_agent[a]], &qo, &st->queue);
    if (s != AQ_OK) return s;
    aq_queue_info_t info;
    AQ_RETURN_IF_ERROR(aq_queue_get_info(st->queue, &info));
    if (info.size < need)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "queue_size %u cannot hold the %u packets of one run on %s",
                      info.size, need, e->agent_names[e->lane_agent[a]]);
    st->ring = info.base_address;
    st->size = info.size;
    e->queues_used++;
  }
  return AQ_OK;
}

/* The CUDA op library, if some agent is a GPU and the build has it. */
static aq_status_t load_gpu_ops(aq_exec_t *e) {
  for (uint32_t a = 0; a < e->nagents; ++a)
    if (e->agent_kind[a] == AQ_AGENT_KIND_GPU) {
      if (aq_code_object_load("kernels-cuda.fatbin", &e->gpu_ops) != AQ_OK) e->gpu_ops.handle = 0;
      break;
    }
  return AQ_OK;
}

static int has_kernel(aq_exec_t *e, aq_code_object_t co, const char *name, uint8_t kind) {
  /* Graphs repeat a few kernels many times: remember the last answer. */
  static _Thread_local struct { uint64_t co; uint8_t kind; char name[64]; int yes; } last;
  if (last.co == co.handle && last.kind == kind && !strcmp(last.name, name)) return last.yes;
  int yes = 0;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    if (e->agent_kind[a] != kind) continue;
    aq_kernel_info_t k;
    yes = co.handle && aq_code_object_find_kernel(co, name, e->agents[a], &k) == AQ_OK;
    break;
  }
  last.co = co.handle, last.kind = kind, last.yes = yes;
  snprintf(last.name, sizeof(last.name), "%s", name);
  return yes;
}

/* Per task, the kinds of agent that may run it: host calls on CPUs; a
 * kernel wherever its code object has code and the options allow. */
static uint8_t *eligibility(aq_exec_t *e, uint32_t kinds) {
  aq_graph_t *g = e->graph;
  uint8_t *m = calloc(g->ntasks ? g->ntasks : 1, 1);
  if (!m) return NULL;
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    if (task->kind == TASK_HOST) {
      m[t] = 1u << AQ_AGENT_KIND_CPU;
      continue;
    }
    for (uint8_t kind = AQ_AGENT_KIND_CPU; kind <= AQ_AGENT_KIND_GPU; ++kind) {
      if (kinds && !(kinds & (1u << kind))) continue;
      aq_code_object_t co = task->code_object.handle ? task->code_object
                            : kind == AQ_AGENT_KIND_GPU ? e->gpu_ops
                                                        : e->ops;
      if (has_kernel(e, co, task->kernel, kind)) m[t] |= (uint8_t)(1u << kind);
    }
  }
  return m;
}

static aq_sched_policy_t policy_from(const aq_exec_options_t *o) {
  if (o && o->policy) return o->policy;
  const char *env = getenv("AQ_SCHED");
  if (!env) return AQ_SCHED_EAGER;
  if (!strcmp(env, "round-robin") || !strcmp(env, "rr")) return AQ_SCHED_ROUND_ROBIN;
  if (!strcmp(env, "pinned")) return AQ_SCHED_PINNED;
  if (!strcmp(env, "locality") || !strcmp(env, "numa")) return AQ_SCHED_LOCALITY;
  if (!strcmp(env, "heft")) return AQ_SCHED_HEFT;
  return AQ_SCHED_EAGER;
}

/* The model key of task t on agent a, and the bytes it touches. */
static void task_key(aq_exec_t *e, uint32_t t, uint32_t a, perf_key_t *k, double *bytes) {
  const task_t *task = &e->graph->tasks[t];
  memset(k, 0, sizeof(*k));
  if (task->kind == TASK_HOST) snprintf(k->kernel, sizeof(k->kernel), "host:%s", task->name);
  else snprintf(k->kernel, sizeof(k->kernel), "%s", task->kernel);
  for (char *c = k->kernel; *c; ++c)
    if (*c == ' ' || *c == '\t' || *c == '\n') *c = '_'; /* the file is whitespace-separated */
  snprintf(k->arch, sizeof(k->arch), "%s", e->agent_arch[a]);
  uint64_t items = 1, b = 0;
  for (int d = 0; d < 3; ++d) items *= task->shape.grid[d] ? task->shape.grid[d] : 1;
  for (uint32_t r = 0; r < task->nreads; ++r) b += e->graph->tensors[task->reads[r]].bytes;
  for (uint32_t w = 0; w < task->nwrites; ++w) b += e->graph->tensors[task->writes[w]].bytes;
  k->shape_class = perf_shape_class(items, b);
  *bytes = (double)b;
}

/* Task t's estimate on agent a (ns): its model's, or a rough guess from the
 * work-groups for a kernel never measured; *samples: what the model rests on. */
static double cost_of(aq_exec_t *e, uint32_t t, uint32_t a, uint32_t *samples) {
  const task_t *task = &e->graph->tasks[t];
  double groups = 1;
  for (int d = 0; d < 3; ++d) {
    uint32_t wg = task->shape.workgroup[d] ? task->shape.workgroup[d] : 1;
    uint32_t gr = task->shape.grid[d] ? task->shape.grid[d] : 1;
    groups *= (gr + wg - 1) / wg;
  }
  int gpu = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  double guess = task->kind == TASK_HOST ? 1000 : gpu ? 5000 + 20 * groups : 1000 * groups;
  perf_key_t k;
  double bytes;
  task_key(e, t, a, &k, &bytes);
  return perf_estimate(&k, bytes, guess, samples);
}

/* Op-library kernels short of samples on an agent that may run them are
 * measured there first, one task per model (calibrate.h); a failure leaves
 * the guesses. */
static void calibrate_missing(aq_exec_t *e, const uint8_t *eligible) {
  aq_graph_t *g = e->graph;
  uint32_t *pick = malloc((g->ntasks ? g->ntasks : 1) * sizeof(uint32_t));
  perf_key_t *keys = malloc((g->ntasks ? g->ntasks : 1) * sizeof(perf_key_t));
  for (uint32_t a = 0; pick && keys && a < e->nagents; ++a) {
    uint32_t n = 0, samples;
    for (uint32_t t = 0; t < g->ntasks; ++t) {
      if (!(eligible[t] & (1u << e->agent_kind[a])) || !perf_calibratable(g, t)) continue;
      double bytes;
      task_key(e, t, a, &keys[n], &bytes);
      perf_estimate(&keys[n], bytes, 0, &samples);
      int seen = 0;
      for (uint32_t i = 0; i < n && !seen; ++i)
        seen = keys[i].shape_class == keys[n].shape_class && !strcmp(keys[i].kernel, keys[n].kernel);
      if (samples < PERF_MIN_SAMPLES && !seen) pick[n++] = t;
    }
    if (n) perf_calibrate(g, pick, n, a);
  }
  free(pick), free(keys);
}

/* heft's cost matrix (task x agent, ns; -1 where it cannot run). Tasks
 * whose models are still short of samples (host tasks, users' kernels, a
 * calibration that failed) make the exec profile its first runs. */
static aq_status_t heft_costs(aq_exec_t *e, const uint8_t *eligible, double **out) {
  aq_graph_t *g = e->graph;
  calibrate_missing(e, eligible);
  double *c = malloc((size_t)g->ntasks * e->nagents * sizeof(double));
  if (!c) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  uint32_t short_of_samples = 0;
  for (uint32_t t = 0; t < g->ntasks; ++t)
    for (uint32_t a = 0; a < e->nagents; ++a) {
      double *ct = &c[(size_t)t * e->nagents + a];
      uint32_t n = 0;
      *ct = eligible[t] & (1u << e->agent_kind[a]) ? cost_of(e, t, a, &n) : -1;
      if (*ct >= 0 && n < PERF_MIN_SAMPLES) short_of_samples++;
    }
  if (short_of_samples) e->profile_left = PERF_MIN_SAMPLES;
  *out = c;
  return AQ_OK;
}

/* heft's link costs (agent x agent latency, then ns per byte), measured
 * once per process (linkcal.h). */
static aq_status_t heft_links(aq_exec_t *e, double **out) {
  link_agent_t la[EXEC_AGENTS_MAX];
  for (uint32_t a = 0; a < e->nagents; ++a) la[a] = (link_agent_t){e->agents[a], e->agent_kind[a], e->agent_arch[a]};
  size_t nn = (size_t)e->nagents * e->nagents;
  if (!(*out = malloc(2 * (nn ? nn : 1) * sizeof(double))))
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  uint32_t measured;
  link_calibrate(la, e->nagents, *out, *out + nn, &measured);
  return AQ_OK;
}

static aq_status_t replica_copy(void *user, uint64_t dst, uint64_t src, uint64_t bytes);
static aq_status_t replica_prefetch(void *user, uint64_t x, uint64_t agent, uint64_t bytes);

/* A GPU kernel's time from its driver (runtime/profile.h), by its tag. */
static void gpu_stamp(void *user, uint64_t tag, uint64_t start_ns, uint64_t end_ns) {
  aq_exec_t *e = user;
  uint32_t t = (uint32_t)(tag & 0xfffff) - 1;
  if (((tag >> 20) & 0xfff) != e->serial || t >= e->graph->ntasks) return;
  e->stamps[2 * t] = start_ns, e->stamps[2 * t + 1] = end_ns;
}

/* Profiled runs time GPU lanes' kernels on the GPU (CPU lanes have stamp
 * packets); off again once the times are in. A GPU that cannot time them
 * goes unmeasured, its estimates stay guesses. */
static void profile_gpu_lanes(aq_exec_t *e, int on) {
  e->gpu_sink = (aq_profile_sink_t){gpu_stamp, e};
  for (uint32_t c = 0, flushed = on; c < e->nlanes; ++c) {
    if (e->lane_kind[c] != AQ_AGENT_KIND_GPU || !e->streams[c].npackets) continue;
    if (!flushed++) aq_profile_flush(); /* the run's times, before the sink goes */
    aq_queue_profile(e->streams[c].queue, on ? &e->gpu_sink : NULL);
  }
}

/* After a profiled run: each task's time into its model (copies between
 * replicas on the host are not kernels: left out). */
static void profile_record(aq_exec_t *e) {
  for (uint32_t t = 0; t < e->plan.ntasks; ++t) {
    uint32_t lane = e->plan.tasks[t].lane, a = e->lane_agent[lane];
    aq_host_call_fn_t fn = e->graph->tasks[t].fn;
    if (fn == replica_copy || fn == replica_prefetch) continue;
    if (e->fusion.product[t] != UINT32_MAX) continue; /* two ops' time: neither model's sample */
    uint64_t t0 = e->stamps[2 * t], t1 = e->stamps[2 * t + 1];
    if (!t0 || t1 < t0) continue;
    perf_key_t k;
    double bytes;
    task_key(e, t, a, &k, &bytes);
    perf_record(&k, bytes, (double)(t1 - t0));
  }
}

/* A copy task between two replicas run on the host (CPU memory, or a size
 * the GPU's aq_copy does not take: the driver copies device memory). The
 * addresses are looked up at run time: aq_exec_bind may move a tensor. */
static aq_status_t replica_copy(void *user, uint64_t dst, uint64_t src, uint64_t bytes) {
  aq_exec_t *e = user;
  return aq_memory_copy(e->buffers[dst], e->buffers[src], bytes);
}

/* A prefetch task (AQ_MEMORY=unified): a managed tensor's pages to agent. */
static aq_status_t replica_prefetch(void *user, uint64_t x, uint64_t agent, uint64_t bytes) {
  aq_exec_t *e = user;
  return hint(aq_memory_prefetch(e->buffers[x], bytes, e->agents[agent], (aq_signal_t){0}));
}

/* AQ_EXEC_EXACT_MATMUL, or AQ_MATMUL_PRECISION=exact: FFMA products on GPUs. */
static aq_status_t matmul_precision(aq_exec_t *e) {
  const char *env = getenv("AQ_MATMUL_PRECISION");
  if (env && strcmp(env, "default") && strcmp(env, "exact"))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "AQ_MATMUL_PRECISION=%s: expected default (3xTF32 on tensor-core GPUs) or exact (FFMA)", env);
  e->exact_matmul = (e->flags & AQ_EXEC_EXACT_MATMUL) || (env && !strcmp(env, "exact"));
  return AQ_OK;
}

/* Epilogue fusion on the placed graph (fuse.h): on GPU agents, where each
 * fused pair is one launch and one pass over C fewer; on CPU agents only
 * with AQ_FUSION=1 (there, the MLP step measured no faster: the consumer's
 * extra arrays cost the GEMM about what the pass it saves did). Off with
 * AQ_EXEC_NO_FUSION or AQ_FUSION=0. */
static aq_status_t fuse(aq_exec_t *e) {
  const char *env = getenv("AQ_FUSION");
  if (env && strcmp(env, "0") && strcmp(env, "1"))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "AQ_FUSION=%s: expected 0 (no fusion) or 1 (on CPU agents too)", env);
  int off = (e->flags & AQ_EXEC_NO_FUSION) || (env && !strcmp(env, "0")), cpu = env && !strcmp(env, "1");
  uint8_t fuses[EXEC_AGENTS_MAX];
  for (uint32_t a = 0; a < e->nagents; ++a) {
    int gpu = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
    aq_code_object_t co = gpu ? e->gpu_ops : e->ops;
    int on = (gpu || cpu) && co.handle;
    fuses[a] = (on && has_kernel(e, co, AQ_KERNEL_MATMUL_FUSED, e->agent_kind[a]) ? FUSE_MATMUL_RELU_MASK | FUSE_MATMUL_SGD
                                                                                   : 0) |
               (on && has_kernel(e, co, AQ_KERNEL_SUM_ROWS_SGD, e->agent_kind[a]) ? FUSE_SUM_ROWS_SGD : 0);
  }
  fuse_in_t in = {e->graph, e->nlanes, e->lane_agent, fuses, off};
  return fuse_plan(&in, &e->plan, &e->fusion);
}

/* Rebuilds the placed graph with replicas and copies, or prefetches
 * (replica.c), then plans it again with every task pinned where it was placed. */
static aq_status_t replicate(aq_exec_t *e, const uint8_t *eligible) {
  uint8_t gpu[EXEC_AGENTS_MAX], gpus, prefetch;
  for (uint32_t a = 0; a < e->nagents; ++a) gpu[a] = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  if (!replica_wanted(e->flags & AQ_EXEC_REPLICATE, gpu, e->nagents, &gpus, &prefetch)) return AQ_OK;
  replica_in_t in = {e->user_graph, &e->plan, e->lane_agent, e->nagents, gpu, e->agent_names, replica_copy, e,
                     gpus, prefetch, replica_prefetch};
  AQ_RETURN_IF_ERROR(replica_build(&in, &e->replicas));
  aq_graph_t *c = e->replicas.graph;
  uint8_t *elig = malloc(c->ntasks ? c->ntasks : 1);
  if (!elig) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan replicas");
  for (uint32_t t = 0; t < c->ntasks; ++t) {
    uint32_t o = e->replicas.origin[t];
    elig[t] = o ? eligible[o - 1] : (uint8_t)(1u << e->agent_kind[c->tasks[t].agent]);
  }
  /* The placement's estimates stay with the tasks (DOT shows them). */
  plan_t placed = e->plan;
  memset(&e->plan, 0, sizeof(e->plan));
  plan_lanes_t lanes = {e->nlanes, e->nagents, e->lane_agent, e->lane_kind, e->agent_node, elig, NULL, NULL, NULL, NULL};
  aq_status_t s = plan_build(&e->plan, c, AQ_SCHED_EAGER, &lanes);
  e->plan.heft_ns = placed.heft_ns, e->plan.heft_mixed_ns = placed.heft_mixed_ns;
  e->plan.heft_single_ns = placed.heft_single_ns, e->plan.heft_single_agent = placed.heft_single_agent;
  for (uint32_t t = 0; s == AQ_OK && t < c->ntasks; ++t) {
    uint32_t o = e->replicas.origin[t];
    if (o) e->plan.tasks[t].finish = placed.tasks[o - 1].finish, e->plan.tasks[t].cost_ns = placed.tasks[o - 1].cost_ns;
  }
  plan_free(&placed);
  free(elig);
  if (s == AQ_OK) e->graph = c;
  return s;
}

/* Inputs and constants some task reads before any task of the run writes
 * them: the user must give them data before the first run. */
static aq_status_t find_inputs(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  e->given = calloc(g->ntensors, 1);
  e->first_reader = malloc(g->ntensors * sizeof(uint32_t));
  uint8_t *written = calloc(g->ntensors, 1);
  aq_status_t s = e->given && e->first_reader && written ? AQ_OK
                                                         : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  for (uint32_t x = 0; s == AQ_OK && x < g->ntensors; ++x) e->first_reader[x] = UINT32_MAX;
  for (uint32_t k = 0; s == AQ_OK && k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k];
    const task_t *task = &g->tasks[t];
    for (uint32_t r = 0; r < task->nreads; ++r) {
      uint32_t x = task->reads[r];
      aq_tensor_role_t role = g->tensors[x].role;
      if (!written[x] && (role == AQ_ROLE_INPUT || role == AQ_ROLE_CONSTANT) && e->first_reader[x] == UINT32_MAX) {
        e->first_reader[x] = t;
        e->unbound++;
      }
    }
    for (uint32_t w = 0; w < task->nwrites; ++w) written[task->writes[w]] = 1;
  }
  free(written);
  return s;
}

static void mark_given(aq_exec_t *e, uint32_t x) {
  if (e->given[x]) return;
  e->given[x] = 1;
  if (e->first_reader[x] != UINT32_MAX) e->unbound--;
}

/* The dependency edges, for the trace's flows and critical path. */
static void trace_edges(aq_exec_t *e) {
  uint32_t n = 0;
  for (uint32_t t = 0; t < e->plan.ntasks; ++t) n += e->plan.tasks[t].npreds;
  uint32_t (*edges)[2] = malloc((n ? n : 1) * sizeof(*edges)), k = 0;
  if (!edges) return;
  /* an absorbed product runs no packet of its own: its consumer has its edges */
  for (uint32_t t = 0; t < e->plan.ntasks; ++t)
    for (uint32_t j = 0; j < e->plan.tasks[t].npreds; ++j)
      if (!e->fusion.absorbed[t] && !e->fusion.absorbed[e->plan.tasks[t].preds[j]])
        edges[k][0] = t, edges[k++][1] = e->plan.tasks[t].preds[j];
  aq_trace_edges(e->serial, (const uint32_t(*)[2])edges, k);
  free(edges);
}

AQ_API aq_status_t aq_graph_instantiate(aq_graph_t *g, const aq_exec_options_t *options, aq_exec_t **out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_instantiate: graph and out are required");
  if (options && (options->policy < 0 || options->policy > AQ_SCHED_HEFT))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_instantiate: unknown policy %d", options->policy);
  if (options && options->flags & ~(AQ_EXEC_NO_MEMORY_REUSE | AQ_EXEC_PROFILE | AQ_EXEC_REPLICATE | AQ_EXEC_NO_FUSION |
                                    AQ_EXEC_EXACT_MATMUL))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_instantiate: unknown flags 0x%x", options->flags);
  if (options && options->queue_size & (options->queue_size - 1))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "queue_size %u is not a power of two", options->queue_size);
  aq_exec_t *e = calloc(1, sizeof(*e));
  if (!e) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  uint64_t t0 = aq_trace_on() ? aq_now_ns() : 0;
  e->graph = e->user_graph = g;
  static _Atomic uint32_t serials;
  e->serial = atomic_fetch_add(&serials, 1) & 0xfff;
  atomic_fetch_add(&g->execs, 1);
  aq_status_t s = pick_agents(e);
  if (s == AQ_OK) s = aq_code_object_load("kernels-cpu.so", &e->ops);
  if (s == AQ_OK) s = load_gpu_ops(e);
  uint8_t *eligible = s == AQ_OK ? eligibility(e, options ? options->kernel_agent_kinds : 0) : NULL;
  if (s == AQ_OK && !eligible) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  e->policy = policy_from(options);
  e->flags = options ? options->flags : 0;
  if (s == AQ_OK) s = matmul_precision(e);
  double *costs = NULL, *links = NULL;
  if (s == AQ_OK && e->policy == AQ_SCHED_HEFT) s = heft_costs(e, eligible, &costs);
  if (s == AQ_OK && e->policy == AQ_SCHED_HEFT) s = heft_links(e, &links);
  if (s == AQ_OK && e->flags & AQ_EXEC_PROFILE) e->profile_left = UINT32_MAX;
  plan_lanes_t lanes = {e->nlanes, e->nagents,  e->lane_agent, e->lane_kind,
                        e->agent_node, eligible, costs,         links,
                        links ? links + (size_t)e->nagents * e->nagents : NULL, e->agent_workers};
  uint64_t t_place = t0 ? aq_now_ns() : 0;
  if (s == AQ_OK) s = plan_build(&e->plan, g, e->policy, &lanes);
  if (s == AQ_OK) s = replicate(e, eligible);
  if (s == AQ_OK) s = fuse(e);
  uint64_t t_memory = t0 ? aq_now_ns() : 0;
  free(eligible), free(costs), free(links);
  if (s == AQ_OK && e->profile_left && !(e->stamps = calloc(2 * (size_t)e->graph->ntasks, sizeof(uint64_t))))
    s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  if (s == AQ_OK) s = find_inputs(e);
  if (s == AQ_OK) s = plan_memory(e);
  uint64_t t_lower = t0 ? aq_now_ns() : 0;
  if (s == AQ_OK) s = lower(e, options ? options->queue_size : 0);
  if (s != AQ_OK) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", aq_last_error());
    aq_exec_destroy(e);
    return aq_error(s, "%s", msg);
  }
  if (t0) {
    aq_trace_event_t ev = {.name = "instantiate", .category = "runtime", .ready_ns = t0, .start_ns = t0,
                           .end_ns = aq_now_ns(), .queue = UINT32_MAX};
    aq_trace_record(&ev);
    aq_trace_span("place", t_place, t_memory, 0);
    aq_trace_span("plan memory", t_memory, t_lower, 0);
    aq_trace_span("lower", t_lower, ev.end_ns, 0);
    trace_edges(e);
  }
  *out = e;
  return AQ_OK;
}

static int finished(aq_exec_t *e) {
  if (!e->in_flight) return 1;
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    aq_signal_value_t v = 0;
    if (e->streams[a].done.handle && (aq_signal_load(e->streams[a].done, &v) != AQ_OK || v != 0)) return 0;
  }
  return 1;
}

AQ_API aq_status_t aq_exec_destroy(aq_exec_t *e) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_destroy: exec is NULL");
  if (!finished(e)) return aq_error(AQ_ERROR_BUSY, "the exec's run is still in flight; wait for it first");
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a) {
    if (e->streams[a].queue.handle) aq_queue_destroy(e->streams[a].queue);
    free(e->streams[a].packets);
  }
  aq_graph_t *g = e->graph;
  for (uint32_t t = 0; t < g->ntasks; ++t)
    if (e->signals && e->signals[t].handle) aq_signal_destroy(e->signals[t]);
  for (uint32_t a = 0; a < EXEC_AGENTS_MAX; ++a) {
    if (e->arenas[a]) aq_memory_free(e->arenas[a]);
    if (e->pinned_arenas[a]) aq_memory_free(e->pinned_arenas[a]);
    if (e->kernarg_arenas[a]) aq_memory_free(e->kernarg_arenas[a]);
  }
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a)
    if (e->streams[a].done.handle) aq_signal_destroy(e->streams[a].done);
  if (e->gpu_ops.handle) aq_code_object_unload(e->gpu_ops);
  if (e->ops.handle) aq_code_object_unload(e->ops);
  free(e->kernargs), free(e->signals), free(e->buffers), free(e->watched);
  free(e->reused_by), free(e->given), free(e->first_reader), free(e->stamps), free(e->covered);
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a) free(e->streams[a].prof);
  if (e->runs && (e->policy == AQ_SCHED_HEFT || e->flags & AQ_EXEC_PROFILE)) perf_save();
  plan_free(&e->plan);
  fusion_free(&e->fusion);
  replica_free(&e->replicas);
  atomic_fetch_sub(&e->user_graph->execs, 1);
  free(e);
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_run(aq_exec_t *e) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_run: exec is NULL");
  if (!finished(e))
    return aq_error(AQ_ERROR_BUSY, "the exec's previous run is still in flight; wait for it first");
  aq_graph_t *g = e->graph;
  if (e->unbound) {
    for (uint32_t x = 1; x < g->ntensors; ++x)
      if (e->first_reader[x] != UINT32_MAX && !e->given[x])
        return aq_error(AQ_ERROR_INVALID_GRAPH,
                        "input '%s' was never given data, and task '%s' reads it: aq_exec_write or aq_exec_bind it "
                        "before the first run",
                        g->tensors[x].name, g->tasks[e->first_reader[x]].name);
  }
  int seen = atomic_load(&e->in_flight); /* -1 while starting: of two threads running it at once, one gets BUSY */
  if (seen < 0 || !finished(e) || !atomic_compare_exchange_strong(&e->in_flight, &seen, -1))
    return aq_error(AQ_ERROR_BUSY, "the exec is being started by another thread, or still runs");
  for (uint32_t t = 0; t < g->ntasks; ++t) AQ_RETURN_IF_ERROR(aq_signal_store(e->signals[t], 1));
  for (uint32_t a = 0; a < e->nlanes; ++a)
    if (e->streams[a].done.handle) AQ_RETURN_IF_ERROR(aq_signal_store(e->streams[a].done, 1));
  atomic_store(&e->in_flight, 1);
  e->runs++;
  e->profiled = e->profile_left > 0 && e->stamps && !e->warm_up;
  e->warm_up = 0;
  if (e->profiled) memset(e->stamps, 0, 2 * (size_t)g->ntasks * sizeof(uint64_t));
  if (e->profiled) profile_gpu_lanes(e, 1);
  int tracing = aq_trace_on();
  e->run_started_ns = aq_now_ns();
  /* GPU lanes first: their packet processors need a core to launch, and
   * once the CPU lanes run, every core may be a busy worker (a mixed run's
   * long pole is usually its GPU work, which then starts late). */
  for (uint32_t k = 0; k < 2 * e->nlanes; ++k) {
    uint32_t a = k % e->nlanes;
    if ((k < e->nlanes) != (e->lane_kind[a] != AQ_AGENT_KIND_CPU)) continue;
    stream_t *st = &e->streams[a];
    if (!st->npackets) continue;
    uint64_t first;
    const uint8_t *packets = e->profiled && st->prof ? st->prof : st->packets;
    uint32_t npackets = e->profiled && st->prof ? st->nprof : st->npackets;
    AQ_RETURN_IF_ERROR(aq_queue_reserve(st->queue, npackets, AQ_TIMEOUT_INFINITE, &first));
    for (uint32_t i = 0; i < npackets; ++i) {
      uint8_t *slot = st->ring + ((first + i) & (st->size - 1)) * PKT;
      const uint8_t *p = packets + (size_t)i * PKT;
      memcpy(slot + 4, p + 4, PKT - 4);
      if (tracing && *(const uint64_t *)(p + 48)) *(uint64_t *)(slot + 48) |= e->runs << 32;
      uint32_t word;
      memcpy(&word, p, 4);
      __atomic_store_n((uint32_t *)slot, word, __ATOMIC_RELEASE);
    }
    AQ_RETURN_IF_ERROR(aq_queue_ring(st->queue, first + npackets - 1));
  }
  return AQ_OK;
}

void exec_warm_up_next(aq_exec_t *e) { e->warm_up = 1; }

AQ_API aq_status_t aq_exec_completion_signal(aq_exec_t *e, aq_signal_t *out) {
  if (!e || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_completion_signal: exec and out are required");
  if (e->join_lane == UINT32_MAX) return aq_error(AQ_ERROR_INTERNAL, "the exec has no packets");
  *out = e->streams[e->join_lane].done;
  return AQ_OK;
}

/* A run as short as a GPU training step (about 200 us) would end while its
 * waiter sleeps, and a futex wake-up on the H100 machine's virtual CPUs cost
 * the step 5 us. So once the CPU lanes are done (their workers need the
 * cores more than the waiter does), the waiter looks at the GPU lanes
 * without sleeping until the time the last run took, and a quarter more,
 * has passed; runs over EXEC_SPIN_MAX_NS wait as every waiter does
 * (AQ_SPIN_US, then sleep), and so does every run under AQ_SPIN_US=0. */
enum { EXEC_SPIN_MAX_NS = 1000000 };

static void spin_on_gpu_lanes(const aq_exec_t *e, uint64_t timeout_ns) {
  if (!e->last_run_ns || e->last_run_ns > EXEC_SPIN_MAX_NS || !aq_runtime_config()->spin_ns) return;
  uint64_t until = e->run_started_ns + e->last_run_ns + e->last_run_ns / 4, now = aq_now_ns();
  if (timeout_ns < until - now) until = now + timeout_ns; /* the caller's timeout bounds it (0: a poll) */
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    if (!e->streams[a].done.handle || e->lane_kind[a] == AQ_AGENT_KIND_CPU) continue;
    aq_signal_value_t v = 1;
    while (aq_signal_load(e->streams[a].done, &v) == AQ_OK && v != 0) {
      if (aq_now_ns() >= until) return;
      aq_cpu_relax();
    }
  }
}

AQ_API aq_status_t aq_exec_wait(aq_exec_t *e, uint64_t timeout_ns) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_wait: exec is NULL");
  if (!e->in_flight) return AQ_OK;
  for (int gpu = 0; gpu < 2; ++gpu) {
    if (gpu) spin_on_gpu_lanes(e, timeout_ns);
    for (uint32_t a = 0; a < e->nlanes; ++a)
      if (e->streams[a].done.handle && (e->lane_kind[a] != AQ_AGENT_KIND_CPU) == gpu)
        AQ_RETURN_IF_ERROR(aq_signal_wait(e->streams[a].done, AQ_SIGNAL_EQ, 0, timeout_ns, NULL));
  }
  e->last_run_ns = aq_now_ns() - e->run_started_ns;
  e->in_flight = 0;
  if (e->profiled) {
    e->profiled = 0;
    profile_gpu_lanes(e, 0);
    profile_record(e);
    if (e->profile_left != UINT32_MAX) e->profile_left--;
    if (!e->profile_left || e->runs % 16 == 0) perf_save(); /* a cache: a failure to write is not the run's */
  }
  /* Tagged with the run, so the trace gives its packets this dispatch time. */
  if (e->run_started_ns && aq_trace_on())
    aq_trace_span("graph run", e->run_started_ns, aq_now_ns(), (uint64_t)e->runs << 32 | (uint64_t)e->serial << 20);
  /* The first failed task (in topological order) is the one to report. */
  aq_status_t first = AQ_OK;
  char msg[512] = "";
  for (uint32_t k = 0; k < e->plan.ntasks; ++k) {
    uint32_t t = e->plan.order[k];
    aq_status_t err;
    AQ_RETURN_IF_ERROR(aq_signal_get_error(e->signals[t], 0, &err));
    if (err == AQ_OK) continue;
    if (first == AQ_OK) {
      aq_signal_wait(e->signals[t], AQ_SIGNAL_EQ, 0, 0, NULL); /* brings the fault's message */
      snprintf(msg, sizeof(msg), "task '%s' failed: %s", e->graph->tasks[t].name, aq_last_error());
      first = err;
    }
    aq_signal_get_error(e->signals[t], 1, &err);
  }
  return first == AQ_OK ? AQ_OK : aq_error(first, "%s", msg);
}

/* An activation whose buffer a later activation reuses holds that one's
 * data after a run: reading or writing it would mislead. */
static aq_status_t check_not_reused(aq_exec_t *e, uint32_t x, const char *what) {
  uint32_t fused = e->fusion.unstored ? e->fusion.unstored[x] : UINT32_MAX;
  if (fused != UINT32_MAX)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "%s: '%s' is never stored: task '%s' takes it in as it is computed (epilogue fusion); "
                    "instantiate with AQ_EXEC_NO_FUSION to keep it",
                    what, e->graph->tensors[x].name, e->graph->tasks[fused].name);
  if (!e->reused_by || !e->reused_by[x]) return AQ_OK;
  return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                  "%s: activation '%s' shares its buffer with '%s', written after it (activations share memory by "
                  "lifetime); instantiate with AQ_EXEC_NO_MEMORY_REUSE to keep it",
                  what, e->graph->tensors[x].name, e->graph->tensors[e->reused_by[x]].name);
}

static aq_status_t tensor_io(aq_exec_t *e, aq_tensor_t tensor, size_t size, const char *what, void **out) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: exec is NULL", what);
  tensor_t *t = graph_tensor(e->user_graph, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: tensor %u is not in this exec's graph", what, tensor.id);
  if (size != t->bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: tensor '%s' holds %zu bytes, not %zu", what, t->name, t->bytes,
                    size);
  if (!finished(e)) return aq_error(AQ_ERROR_BUSY, "%s: a run is in flight; wait for it first", what);
  AQ_RETURN_IF_ERROR(check_not_reused(e, tensor.id, what));
  *out = e->buffers[tensor.id];
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_write(aq_exec_t *e, aq_tensor_t tensor, const void *src, size_t size) {
  void *dst;
  if (!src) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_write: src is NULL");
  AQ_RETURN_IF_ERROR(tensor_io(e, tensor, size, "aq_exec_write", &dst));
  AQ_RETURN_IF_ERROR(prefetch_for(e, dst, size, 0));
  AQ_RETURN_IF_ERROR(aq_memory_copy(dst, src, size));
  mark_given(e, tensor.id);
  return prefetch_for(e, dst, size, 1);
}

AQ_API aq_status_t aq_exec_read(aq_exec_t *e, aq_tensor_t tensor, void *dst, size_t size) {
  void *src;
  if (!dst) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_read: dst is NULL");
  AQ_RETURN_IF_ERROR(tensor_io(e, tensor, size, "aq_exec_read", &src));
  /* With replicas, an activation last written away from home is read there. */
  uint32_t f = e->replicas.final ? e->replicas.final[tensor.id] : tensor.id;
  if (f != tensor.id) {
    AQ_RETURN_IF_ERROR(check_not_reused(e, f, "aq_exec_read"));
    src = e->buffers[f];
  }
  AQ_RETURN_IF_ERROR(prefetch_for(e, src, size, 0));
  return aq_memory_copy(dst, src, size);
}

AQ_API aq_status_t aq_exec_tensor_data(aq_exec_t *e, aq_tensor_t tensor, void **out) {
  if (!e || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_tensor_data: exec and out are required");
  tensor_t *t = graph_tensor(e->user_graph, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "tensor %u is not in this exec's graph", tensor.id);
  AQ_RETURN_IF_ERROR(check_not_reused(e, tensor.id, "aq_exec_tensor_data"));
  *out = e->buffers[tensor.id];
  mark_given(e, tensor.id); /* the caller fills it in place */
  return AQ_OK;
}

/* Whether a kernel of an agent of kind reaches [data, data + size): a CPU
 * any host memory (anything but another agent's device memory), a GPU only
 * what was allocated from one of its regions. */
static int agent_reaches(aq_agent_t agent, uint8_t kind, const void *data, size_t size) {
  aq_region_impl_t *r;
  uintptr_t base;
  size_t bytes;
  if (!aq_memory_find(data, &r, &base, &bytes)) return kind == AQ_AGENT_KIND_CPU; /* not ours: host memory */
  if (kind == AQ_AGENT_KIND_CPU) return (r->info.flags & AQ_REGION_HOST_ACCESSIBLE) != 0;
  return r->info.agent.handle == agent.handle && (uintptr_t)data + size <= base + bytes;
}

AQ_API aq_status_t aq_exec_bind(aq_exec_t *e, aq_tensor_t tensor, void *data, size_t size) {
  if (!e || !data) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: exec and data are required");
  tensor_t *x = graph_tensor(e->user_graph, tensor);
  if (!x) return aq_error(AQ_ERROR_INVALID_HANDLE, "aq_exec_bind: tensor %u is not in this exec's graph", tensor.id);
  if (x->role != AQ_ROLE_INPUT && x->role != AQ_ROLE_CONSTANT)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: '%s' is not an input or a constant", x->name);
  if (size != x->bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: tensor '%s' holds %zu bytes, not %zu", x->name,
                    x->bytes, size);
  if ((uintptr_t)data % 16)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: data for '%s' is not 16-byte aligned", x->name);
  if (!finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_bind: a run is in flight; wait for it first");
  aq_graph_t *g = e->graph;
  /* Check every task first, so a refusal changes nothing. */
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    int uses = 0;
    for (uint32_t r = 0; r < task->nreads; ++r) uses |= task->reads[r] == tensor.id;
    for (uint32_t w = 0; w < task->nwrites; ++w) uses |= task->writes[w] == tensor.id;
    uint32_t lane = e->plan.tasks[t].lane, agent = e->lane_agent[lane];
    if (!uses || task->kind != TASK_KERNEL || agent_reaches(e->agents[agent], e->lane_kind[lane], data, size))
      continue;
    return e->lane_kind[lane] == AQ_AGENT_KIND_CPU
               ? aq_error(AQ_ERROR_INVALID_ARGUMENT,
                          "aq_exec_bind: task '%s' reads '%s' on CPU agent %s, and the data is in a GPU's device "
                          "memory; bind host memory (pinned or managed will do), or use aq_exec_write",
                          task->name, x->name, e->agent_names[agent])
               : aq_error(AQ_ERROR_INVALID_ARGUMENT,
                          "aq_exec_bind: task '%s' reads '%s' on GPU agent %s, which reaches only memory allocated "
                          "from its regions (device, pinned or managed); allocate there, or use aq_exec_write",
                          task->name, x->name, e->agent_names[agent]);
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    /* A fused product's operands sit in its consumer's kernarg at the same
     * offsets (the fused args start with the product's); the consumer's own
     * tensors (a weight, its state, gradients) are never inputs. */
    uint8_t *ka = e->fusion.absorbed[t] ? e->kernargs[e->fusion.unstored[task->writes[0]]] : e->kernargs[t];
    if (task->kind != TASK_KERNEL || !ka || e->fusion.product[t] != UINT32_MAX) continue;
    for (uint32_t r = 0; r < task->nreads; ++r)
      if (task->reads[r] == tensor.id && task->read_off[r] != UINT32_MAX)
        memcpy(ka + task->read_off[r], &data, sizeof(void *));
    for (uint32_t w = 0; w < task->nwrites; ++w)
      if (task->writes[w] == tensor.id && task->write_off[w] != UINT32_MAX)
        memcpy(ka + task->write_off[w], &data, sizeof(void *));
  }
  e->buffers[tensor.id] = data;
  mark_given(e, tensor.id);
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_get_info(aq_exec_t *e, aq_exec_info_t *info) {
  if (!e || !info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_get_info: exec and info are required");
  uint8_t used[EXEC_AGENTS_MAX] = {0};
  uint32_t agents_used = 0;
  for (uint32_t a = 0; a < e->nlanes; ++a)
    if (e->streams[a].npackets && !used[e->lane_agent[a]]++) agents_used++;
  *info = (aq_exec_info_t){.tasks = e->graph->ntasks, .packets = e->packets, .barriers = e->barriers,
                           .agents_used = agents_used, .queues = e->queues_used, .runs = e->runs, .bytes = e->bytes};
  return AQ_OK;
}

/* What a task runs, as DOT shows it: a fused pair is one kernel, the
 * consumer's; the product's node says where its work went. */
static const char *dot_kernel(const aq_exec_t *e, uint32_t t) {
  const task_t *task = &e->graph->tasks[t];
  if (task->kind == TASK_HOST) return "host call";
  if (e->fusion.product[t] != UINT32_MAX) return fuse_kernel(e->graph, e->fusion.product[t]);
  return e->fusion.absorbed[t] ? "fused into its consumer" : task->kernel;
}

AQ_API aq_status_t aq_exec_write_dot(aq_exec_t *e, const char *path) {
  if (!e || !path) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_write_dot: exec and path are required");
  FILE *f = fopen(path, "w");
  if (!f) return aq_error(AQ_ERROR_IO, "cannot write %s", path);
  aq_graph_t *g = e->graph;
  fprintf(f, "digraph aquila {\n  rankdir=TB; node [shape=box, fontname=\"sans-serif\", fontsize=10];\n");
  if (e->policy == AQ_SCHED_HEFT) { /* heft's estimates of the whole run: what it kept, and what it weighed */
    const plan_t *p = &e->plan;
    fprintf(f, "  labelloc=t; label=\"heft: makespan estimate %.1f us (over all agents %.1f us", p->heft_ns / 1e3,
            p->heft_mixed_ns / 1e3);
    if (p->heft_single_agent >= 0 && (uint32_t)p->heft_single_agent < e->nagents)
      fprintf(f, "; best single agent %.1f us on %s", p->heft_single_ns / 1e3, e->agent_names[p->heft_single_agent]);
    fprintf(f, ")\";\n");
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    const plan_task_t *pt = &e->plan.tasks[t];
    uint32_t a = e->lane_agent[pt->lane];
    int gpu = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
    const char *variant = task->kind == TASK_HOST ? "host" : task->code_object.handle ? "user code object"
                          : gpu                      ? "kernels-cuda.fatbin"
                                                     : "kernels-cpu.so";
    if (e->policy == AQ_SCHED_HEFT)
      fprintf(f, "  t%u [label=\"%s\\n%s [%s]\\non %s, lane %u\\nest. %.1f us, finish %.1f us\"];\n", t, task->name,
              dot_kernel(e, t), variant, e->agent_names[a], pt->lane,
              pt->cost_ns / 1e3, pt->finish / 1e3);
    else {
      /* Other policies place by a work-group count; the estimate shown is
       * still the performance model's, where there is one. */
      perf_key_t k;
      double bytes;
      uint32_t samples;
      task_key(e, t, a, &k, &bytes);
      double ns = perf_estimate(&k, bytes, -1, &samples);
      char est[48];
      if (samples) snprintf(est, sizeof(est), "est. %.1f us (%u samples)", ns / 1e3, samples);
      else snprintf(est, sizeof(est), "est. ? (no model yet)");
      fprintf(f, "  t%u [label=\"%s\\n%s [%s]\\non %s, lane %u\\n%s\"];\n", t, task->name,
              dot_kernel(e, t), variant, e->agent_names[a], pt->lane, est);
    }
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const plan_task_t *pt = &e->plan.tasks[t];
    for (uint32_t j = 0; j < pt->npreds; ++j)
      fprintf(f, "  t%u -> t%u%s;\n", pt->preds[j], t,
              e->plan.tasks[pt->preds[j]].lane != pt->lane ? " [style=dashed, label=\"barrier-AND\"]" : "");
    for (uint32_t j = 0; j < g->tasks[t].nafter_any; ++j)
      fprintf(f, "  t%u -> t%u [style=dotted, label=\"barrier-OR\"];\n", g->tasks[t].after_any[j], t);
  }
  fprintf(f, "}\n");
  return fclose(f) ? aq_error(AQ_ERROR_IO, "cannot write %s", path) : AQ_OK;
}

AQ_API aq_status_t aq_exec_set_learning_rate(aq_exec_t *e, float lr) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_set_learning_rate: exec is NULL");
  if (!(lr > 0.0f) || !isfinite(lr))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_set_learning_rate: lr %g is not a finite number > 0", (double)lr);
  if (!finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_set_learning_rate: a run is in flight; wait for it first");
  aq_graph_t *g = e->graph;
  uint32_t found = 0;
  /* The live kernargs: a GPU's packet processor reads them at each launch
   * (a CUDA graph that captured the old ones sees them differ and is made
   * again), a CPU worker at each dispatch. */
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    if (task->kind != TASK_KERNEL || task->code_object.handle || !e->kernargs[t]) continue;
    size_t off = e->fusion.product[t] != UINT32_MAX ? fuse_lr_offset(g, t, e->fusion.product[t])
                 : !strcmp(task->kernel, AQ_KERNEL_SGD) ? offsetof(aq_sgd_args_t, lr)
                 : !strcmp(task->kernel, AQ_KERNEL_ADAM) ? offsetof(aq_adam_args_t, lr)
                                                         : SIZE_MAX;
    if (off == SIZE_MAX) continue;
    memcpy((uint8_t *)e->kernargs[t] + off, &lr, sizeof(lr));
    ++found;
  }
  return found ? AQ_OK : aq_error(AQ_ERROR_NOT_FOUND, "aq_exec_set_learning_rate: the exec has no optimizer task");
}
