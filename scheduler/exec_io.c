/* The host's access to an exec's tensors: aq_exec_read / _write /
 * _tensor_data / _bind, the inputs that must be given data before the first
 * run, and managed pages brought to the host around an access. */
#include <stdlib.h>
#include <string.h>

#include "runtime/memory.h"
#include "scheduler/exec_internal.h"

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
  return aq_exec_memory_hint(aq_memory_prefetch(ptr, size, e->agents[to_gpu ? a : host], (aq_signal_t){0}));
}

/* Inputs and constants some task reads before any task of the run writes
 * them: the user must give them data before the first run. */
aq_status_t aq_exec_find_inputs(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  e->given = calloc(g->ntensors, 1);
  e->first_reader = malloc(g->ntensors * sizeof(uint32_t));
  uint8_t *written = calloc(g->ntensors, 1);
  aq_status_t s = e->given && e->first_reader && written ? AQ_OK
                                                         : aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  int inputs = 0; /* a graph without inputs or constants has its tasks walked for none */
  for (uint32_t x = 0; s == AQ_OK && x < g->ntensors; ++x) {
    e->first_reader[x] = UINT32_MAX;
    inputs |= g->tensors[x].role == AQ_ROLE_INPUT || g->tensors[x].role == AQ_ROLE_CONSTANT;
  }
  for (uint32_t k = 0; s == AQ_OK && inputs && k < e->plan.ntasks; ++k) {
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
  tensor_t *t = aq_graph_tensor(e->user_graph, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "%s: tensor %u is not in this exec's graph", what, tensor.id);
  if (size != t->bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s: tensor '%s' holds %zu bytes, not %zu", what, t->name, t->bytes,
                    size);
  if (!aq_exec_finished(e)) return aq_error(AQ_ERROR_BUSY, "%s: a run is in flight; wait for it first", what);
  AQ_RETURN_IF_ERROR(check_not_reused(e, tensor.id, what));
  *out = e->buffers[tensor.id];
  return AQ_OK;
}

static aq_status_t write_one(aq_exec_t *e, aq_tensor_t tensor, const void *src, size_t size) {
  void *dst;
  AQ_RETURN_IF_ERROR(tensor_io(e, tensor, size, "aq_exec_write", &dst));
  AQ_RETURN_IF_ERROR(prefetch_for(e, dst, size, 0));
  AQ_RETURN_IF_ERROR(aq_memory_copy(dst, src, size));
  mark_given(e, tensor.id);
  return prefetch_for(e, dst, size, 1);
}

/* Replicated per local rank (ranks.h), a parameter or a state tensor is
 * every rank's: the ranks train one model. */
AQ_API aq_status_t aq_exec_write(aq_exec_t *e, aq_tensor_t tensor, const void *src, size_t size) {
  if (!src) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_write: src is NULL");
  AQ_RETURN_IF_ERROR(write_one(e, tensor, src, size));
  aq_tensor_role_t role = e->user_graph->tensors[tensor.id].role;
  if (tensor.id > e->rank_tensors || (role != AQ_ROLE_PARAMETER && role != AQ_ROLE_STATE)) return AQ_OK;
  for (uint32_t k = 1; k < e->local_ranks; ++k)
    AQ_RETURN_IF_ERROR(write_one(e, (aq_tensor_t){tensor.id + k * e->rank_tensors}, src, size));
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_local_tensor(aq_exec_t *e, aq_tensor_t tensor, uint32_t rank, aq_tensor_t *out) {
  if (!e || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_local_tensor: exec and out are required");
  if (!tensor.id || tensor.id > e->rank_tensors)
    return aq_error(AQ_ERROR_INVALID_HANDLE, "aq_exec_local_tensor: tensor %u is not one of the graph's", tensor.id);
  if (rank >= e->local_ranks)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_local_tensor: local rank %u, but the exec has %u", rank,
                    e->local_ranks);
  out->id = tensor.id + rank * e->rank_tensors;
  return AQ_OK;
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
  tensor_t *t = aq_graph_tensor(e->user_graph, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "tensor %u is not in this exec's graph", tensor.id);
  AQ_RETURN_IF_ERROR(check_not_reused(e, tensor.id, "aq_exec_tensor_data"));
  *out = e->buffers[tensor.id];
  mark_given(e, tensor.id); /* the caller fills it in place */
  return AQ_OK;
}

/* Whether a kernel of agent reaches [data, data + size) in place
 * (aq_memory_reachable: another GPU's memory too, over peer access). */
static int agent_reaches(aq_agent_t agent, const void *data, size_t size) {
  int yes = 0;
  return aq_memory_reachable(agent, data, size, &yes) == AQ_OK && yes;
}

AQ_API aq_status_t aq_exec_bind(aq_exec_t *e, aq_tensor_t tensor, void *data, size_t size) {
  if (!e || !data) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: exec and data are required");
  tensor_t *x = aq_graph_tensor(e->user_graph, tensor);
  if (!x) return aq_error(AQ_ERROR_INVALID_HANDLE, "aq_exec_bind: tensor %u is not in this exec's graph", tensor.id);
  if (x->role != AQ_ROLE_INPUT && x->role != AQ_ROLE_CONSTANT)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: '%s' is not an input or a constant", x->name);
  if (size != x->bytes)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: tensor '%s' holds %zu bytes, not %zu", x->name,
                    x->bytes, size);
  if ((uintptr_t)data % 16)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_bind: data for '%s' is not 16-byte aligned", x->name);
  if (!aq_exec_finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_bind: a run is in flight; wait for it first");
  aq_graph_t *g = e->graph;
  /* Check every task first, so a refusal changes nothing. */
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    int uses = 0;
    for (uint32_t r = 0; r < task->nreads; ++r) uses |= task->reads[r] == tensor.id;
    for (uint32_t w = 0; w < task->nwrites; ++w) uses |= task->writes[w] == tensor.id;
    uint32_t lane = e->plan.tasks[t].lane, agent = e->lane_agent[lane];
    if (!uses || task->kind != TASK_KERNEL || agent_reaches(e->agents[agent], data, size))
      continue;
    return e->lane_kind[lane] == AQ_AGENT_KIND_CPU
               ? aq_error(AQ_ERROR_INVALID_ARGUMENT,
                          "aq_exec_bind: task '%s' reads '%s' on CPU agent %s, and the data is in a GPU's device "
                          "memory; bind host memory (pinned or managed will do), or use aq_exec_write",
                          task->name, x->name, e->agent_names[agent])
               : aq_error(AQ_ERROR_INVALID_ARGUMENT,
                          "aq_exec_bind: task '%s' reads '%s' on GPU agent %s, which reaches only memory allocated "
                          "from its regions (device, pinned or managed) or, over peer access, another GPU's; "
                          "allocate there, or use aq_exec_write",
                          task->name, x->name, e->agent_names[agent]);
  }
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    /* A fused product's operands sit in its consumer's kernarg at the same
     * offsets (the fused args start with the product's); the consumer's own
     * tensors (a weight, its state, gradients) are never inputs. */
    /* (an update group's member has its entry in the lead's: kernargs[t]) */
    uint8_t *ka = e->fusion.absorbed[t] && e->fusion.lead[t] == UINT32_MAX
                      ? e->kernargs[aq_fuse_consumer_of(&e->fusion, task)]
                      : e->kernargs[t];
    if (task->kind == TASK_HOST || !ka || e->fusion.product[t] != UINT32_MAX) continue;
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
