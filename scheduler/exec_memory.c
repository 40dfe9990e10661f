/* An exec's memory: one arena per agent for its tensors (buffers shared by
 * lifetime, memplan.h), pinned host arenas for tensors both kinds reach,
 * managed arenas under AQ_MEMORY=unified, and one kernarg arena per agent. */
#include <stdlib.h>
#include <string.h>

#include "runtime/memory.h"
#include "runtime/settings.h"
#include "scheduler/exec_internal.h"
#include "scheduler/memplan.h"

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

/* Zeroes memory the host may not be able to touch (a GPU's); nothing to do
 * where the region's allocations start zeroed (fresh pages: writing them
 * would only fault them all in now). */
static aq_status_t zero(void *p, size_t n) {
  aq_region_t r;
  aq_region_info_t info;
  if (aq_memory_lookup(p, &r, NULL, NULL) == AQ_OK && aq_region_get_info(r, &info) == AQ_OK &&
      (info.flags & (AQ_REGION_HOST_ACCESSIBLE | AQ_REGION_ZEROED))) {
    if (!(info.flags & AQ_REGION_ZEROED)) memset(p, 0, n);
    return AQ_OK;
  }
  void *z = calloc(1, n);
  if (!z) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to zero %zu bytes", n);
  aq_status_t s = aq_memory_copy(p, z, n);
  free(z);
  return s;
}

aq_status_t aq_exec_memory_hint(aq_status_t s) { /* a GPU without prefetch and advice still runs, by faults */
  return s == AQ_ERROR_UNAVAILABLE ? AQ_OK : s;
}

/* Unified memory: the GPU that runs the arena's tasks is its pages'
 * preferred home, and they move there now (zeroing just pulled them to the
 * host), not by faults during the first run. */
static aq_status_t settle_managed(aq_exec_t *e, uint32_t a, size_t size) {
  e->managed_size[a] = size;
  AQ_RETURN_IF_ERROR(
      aq_exec_memory_hint(aq_memory_advise(e->arenas[a], size, AQ_ADVICE_PREFERRED_LOCATION, e->agents[a])));
  return aq_exec_memory_hint(aq_memory_prefetch(e->arenas[a], size, e->agents[a], (aq_signal_t){0}));
}

/* Whether agent a's kernels reach GPU agent b's device memory in place (a
 * CPU never does; another GPU over peer access). */
static int device_reaches(const aq_exec_t *e, uint32_t a, uint32_t b) {
  aq_region_t r;
  int yes = 0;
  if (e->agent_kind[a] != AQ_AGENT_KIND_GPU) return 0;
  return region_of(e->agents[b], AQ_REGION_DEVICE, &r) == AQ_OK &&
         aq_region_reachable(e->agents[a], r, &yes) == AQ_OK && yes;
}

/* Every tensor lives on the node of the agent that touches it first, in
 * one arena per agent (one allocation, not one per tensor: instantiation
 * stays cheap), zeroed so optimizer state starts at zero. */
aq_status_t aq_exec_plan_memory(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  uint32_t *home = malloc(g->ntensors * sizeof(uint32_t));
  size_t *offset = malloc(g->ntensors * sizeof(size_t)), total[EXEC_AGENTS_MAX] = {0};
  e->buffers = calloc(g->ntensors, sizeof(void *));
  aq_status_t s = home && offset && e->buffers ? AQ_OK : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t i = 0; s == AQ_OK && i < g->ntensors; ++i) home[i] = UINT32_MAX;
  int gpus = 0; /* without a GPU agent, the passes below for GPU tensors would walk every task to find none */
  for (uint32_t a = 0; a < e->nagents; ++a) gpus |= e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  /* A tensor a GPU touches lives in that GPU's managed memory (the CPU can
   * reach it too); otherwise on the node of the first CPU agent to touch it. */
  for (int pass = gpus ? 0 : 1; s == AQ_OK && pass < 2; ++pass)
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
   * mixed placement), or a task on a GPU that cannot reach the first GPU's
   * device memory (no peer access), goes to pinned host memory, which all
   * reach in place: device memory is out of the CPU's reach, and managed
   * memory would migrate its pages back and forth every run. */
  uint8_t *pinned = calloc(g->ntensors, 1);
  if (!pinned) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  /* (Not in unified memory: there prefetch tasks move the pages, replica.c.) */
  for (uint32_t t = 0; s == AQ_OK && gpus && !e->replicas.prefetch && t < g->ntasks; ++t) {
    uint32_t a = e->lane_agent[e->plan.tasks[t].lane];
    const task_t *task = &g->tasks[t];
    for (uint32_t j = 0; j < task->nreads + task->nwrites; ++j) {
      uint32_t x = j < task->nreads ? task->reads[j] : task->writes[j - task->nreads];
      if (home[x] != UINT32_MAX && home[x] != a && e->agent_kind[home[x]] == AQ_AGENT_KIND_GPU &&
          !device_reaches(e, a, home[x]))
        pinned[x] = 1;
    }
  }
  /* A small GPU result no task reads (a loss) is there for the host, which
   * reads it after every run: from pinned memory that is a load, from
   * device memory a synchronous copy (about 10 us a step). */
  uint8_t *read = calloc(g->ntensors, 1);
  if (!read && s == AQ_OK) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t t = 0; s == AQ_OK && gpus && t < g->ntasks; ++t)
    for (uint32_t r = 0; r < g->tasks[t].nreads; ++r) read[g->tasks[t].reads[r]] = 1;
  for (uint32_t x = 0; s == AQ_OK && gpus && !e->replicas.prefetch && x < g->ntensors; ++x)
    if (!read[x] && home[x] != UINT32_MAX && e->agent_kind[home[x]] == AQ_AGENT_KIND_GPU &&
        g->tensors[x].bytes <= 4096)
      pinned[x] = 1;
  free(read);
  /* Offsets in each arena (an agent's own, and its pinned host one):
   * activations share buffers by lifetime unless the options say not. */
  size_t ptotal[EXEC_AGENTS_MAX] = {0};
  uint32_t *domain = malloc(g->ntensors * sizeof(uint32_t));
  uint8_t *reusable = calloc(g->ntensors, 1);
  int no_reuse = (e->flags & AQ_EXEC_NO_MEMORY_REUSE) || !aq_setting_u64(AQ_SET_MEMORY_REUSE);
  if (s == AQ_OK && (!domain || !reusable)) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan tensors");
  for (uint32_t i = 0; s == AQ_OK && i < g->ntensors; ++i) {
    if (home[i] == UINT32_MAX) home[i] = 0;
    domain[i] = 2 * home[i] + (pinned[i] ? 1 : 0);
    reusable[i] = i && !no_reuse && g->tensors[i].role == AQ_ROLE_ACTIVATION;
  }
  memplan_t mp;
  if (s == AQ_OK) s = aq_memplan_build(&mp, g, &e->plan, domain, 2 * e->nagents, reusable);
  if (s == AQ_OK) {
    for (uint32_t i = 1; i < g->ntensors; ++i) offset[i] = mp.offset[i];
    for (uint32_t a = 0; a < e->nagents; ++a) total[a] = mp.total[2 * a], ptotal[a] = mp.total[2 * a + 1];
    e->reused_by = mp.reused_by;
    mp.reused_by = NULL;
    aq_memplan_free(&mp);
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
    uint32_t flag = e->agent_kind[a] != AQ_AGENT_KIND_GPU                ? AQ_REGION_COARSE_GRAINED
                    : aq_setting_u64(AQ_SET_MEMORY) == AQ_MEMORY_UNIFIED ? AQ_REGION_MANAGED
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
 * an absorbed product has none, a stream call its own (lower.c). */
size_t aq_exec_kernarg_bytes(const aq_exec_t *e, uint32_t t) {
  if (e->graph->tasks[t].kind == TASK_STREAM) return e->graph->tasks[t].kernarg_size;
  if (e->graph->tasks[t].kind != TASK_KERNEL || e->fusion.absorbed[t]) return 0;
  if (e->fusion.lead[t] == t) return sizeof(aq_sgd_multi_args_t);
  uint32_t product = e->fusion.product[t];
  return product != UINT32_MAX ? aq_fuse_kernarg_size(&e->fusion, t) : e->graph->tasks[t].kernarg_size;
}

/* One kernarg arena per agent, sized for the tasks placed on it. */
aq_status_t aq_exec_plan_kernargs(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  size_t total[EXEC_AGENTS_MAX] = {0};
  for (uint32_t t = 0; t < g->ntasks; ++t)
    total[e->lane_agent[e->plan.tasks[t].lane]] += (aq_exec_kernarg_bytes(e, t) + 63) & ~(size_t)63;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    if (!total[a]) continue;
    aq_region_t region;
    AQ_RETURN_IF_ERROR(region_of(e->agents[a], AQ_REGION_KERNARG, &region));
    AQ_RETURN_IF_ERROR(aq_memory_allocate(region, total[a], &e->kernarg_arenas[a]));
  }
  return AQ_OK;
}
