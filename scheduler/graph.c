/* Graphs: tensors, tasks and explicit edges, as the user declares them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/graph_internal.h"
#include "scheduler/live.h"

static live_set_t live_graphs = LIVE_SET_INIT;

static int graph_remember(aq_graph_t *g) { return aq_live_add(&live_graphs, g); }
static int graph_forget(aq_graph_t *g) { return aq_live_remove(&live_graphs, g); }

AQ_API aq_status_t aq_graph_create(const aq_graph_options_t *options, aq_graph_t **out_graph) {
  if (!out_graph) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_create: out_graph is NULL");
  if (options && options->reserved)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_create: options.reserved must be 0");
  aq_graph_t *g = calloc(1, sizeof(*g));
  if (!g) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a graph");
  g->ntensors = 1; /* id 0 is "no tensor" */
  g->cap_tensors = 64;
  g->tensors = calloc(g->cap_tensors, sizeof(tensor_t));
  g->cap_tasks = 64;
  g->tasks = calloc(g->cap_tasks, sizeof(task_t));
  if (!g->tensors || !g->tasks || !graph_remember(g)) {
    free(g->tensors), free(g->tasks), free(g);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a graph");
  }
  *out_graph = g;
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_destroy(aq_graph_t *g) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_destroy: graph is NULL");
  if (!graph_forget(g))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_destroy: %p is not a live graph (destroyed twice?)",
                    (void *)g);
  int live = atomic_load(&g->execs);
  if (live && graph_remember(g))
    return aq_error(AQ_ERROR_BUSY, "graph still has %d exec%s; destroy them first", live, live > 1 ? "s" : "");
  for (uint32_t i = 0; i < g->ntasks; ++i) free(g->tasks[i].after_all), free(g->tasks[i].after_any);
  free(g->tensors), free(g->tasks), free(g->names), free(g);
  return AQ_OK;
}

tensor_t *aq_graph_tensor(aq_graph_t *g, aq_tensor_t t) {
  return t.id > 0 && t.id < g->ntensors ? &g->tensors[t.id] : NULL;
}

/* snprintf(dst, size, "%s", src) without printf's cost. */
static void copy_name(char *dst, size_t size, const char *src) {
  size_t n = strnlen(src, size - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

/* A tensor may hold at most 1 TiB: every size product below stays exact. */
#define TENSOR_BYTES_MAX ((uint64_t)1 << 40)

void aq_graph_fit(char *out, size_t room, const char *src) {
  size_t n = strlen(src);
  if (n <= room || room < 3) {
    n = n < room ? n : room;
    memcpy(out, src, n);
    out[n] = 0;
    return;
  }
  /* The longest prefix that fits beside "..", and a ')' for each '(' it leaves open. */
  for (size_t len = room - 2;; --len) {
    size_t open = 0;
    for (size_t i = 0; i < len; ++i) open += src[i] == '(' ? 1 : src[i] == ')' && open ? (size_t)-1 : 0;
    if (len + 2 + open <= room || len == 0) {
      memcpy(out, src, len);
      memcpy(out + len, "..", 2);
      memset(out + len + 2, ')', open);
      out[len + 2 + open] = 0;
      return;
    }
  }
}

void aq_graph_name(char *out, size_t size, const char *fn, const char *a, const char *b) {
  size_t fl = strlen(fn), room = size - 1 - fl - 2 - (b ? 1 : 0), la = strlen(a), lb = b ? strlen(b) : 0;
  size_t ra = !b ? room : la <= room / 2 ? la : lb <= room / 2 ? room - lb : room / 2;
  char *p = out + fl;
  memcpy(out, fn, fl);
  *p++ = '(';
  aq_graph_fit(p, ra, a);
  p += strlen(p);
  if (b) {
    *p++ = ',';
    aq_graph_fit(p, room - ra, b);
    p += strlen(p);
  }
  *p++ = ')';
  *p = 0;
}

/* The tensor-name index: open addressing, ids of g->tensors. */
static uint32_t *name_slot(aq_graph_t *g, const char *name) {
  uint32_t h = 2166136261u;
  for (const char *s = name; *s; ++s) h = (h ^ (unsigned char)*s) * 16777619u;
  for (uint32_t i = h & (g->names_cap - 1);; i = (i + 1) & (g->names_cap - 1))
    if (!g->names[i] || !strcmp(g->tensors[g->names[i]].name, name)) return &g->names[i];
}

static aq_status_t names_reserve(aq_graph_t *g) {
  if (2 * (g->ntensors + 1) <= g->names_cap) return AQ_OK;
  uint32_t cap = g->names_cap ? 2 * g->names_cap : 128, *old = g->names;
  g->names = calloc(cap, sizeof(uint32_t));
  if (!g->names) {
    g->names = old;
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for the graph's tensor names");
  }
  g->names_cap = cap;
  free(old);
  for (uint32_t id = 1; id < g->ntensors; ++id) *name_slot(g, g->tensors[id].name) = id;
  return AQ_OK;
}

static uint32_t tensor_named(aq_graph_t *g, const char *name) { return g->names_cap ? *name_slot(g, name) : 0; }

/* A generated name another tensor has gets "#k", k the graph's next
 * suffix: one counter for every name, so a graph of 10,000 relu(x) finds
 * each free name at once instead of trying #2, #3, ... in turn. */
static void make_unique(aq_graph_t *g, char *name, size_t size) {
  if (!tensor_named(g, name)) return;
  char base[48], suffix[16];
  snprintf(base, sizeof(base), "%s", name);
  do {
    int n = snprintf(suffix, sizeof(suffix), "#%u", ++g->name_suffix + 1);
    aq_graph_fit(name, size - 1 - (size_t)n, base);
    strcat(name, suffix);
  } while (tensor_named(g, name));
}

static size_t dtype_size(aq_dtype_t d) { return d == AQ_DTYPE_F32 || d == AQ_DTYPE_I32 ? 4 : 0; }

/* An exec sizes its per-tensor and per-task tables when it is made and
 * keeps using the graph's tasks: a tensor, task or edge added afterwards
 * would be read past those tables. */
static aq_status_t check_unfrozen(const aq_graph_t *g, const char *what, const char *name) {
  int live = atomic_load(&g->execs);
  if (!live) return AQ_OK;
  return aq_error(AQ_ERROR_BUSY, "%s '%s': the graph has %d live exec%s made from it; destroy %s first",
                  what, name ? name : "", live, live > 1 ? "s" : "", live > 1 ? "them" : "it");
}

aq_status_t aq_graph_new_tensor(aq_graph_t *g, const char *name, aq_dtype_t dtype, aq_tensor_role_t role,
                             uint32_t rank, const int64_t *dims, uint32_t *out_id) {
  AQ_RETURN_IF_ERROR(check_unfrozen(g, "tensor", name));
  if (!dtype_size(dtype)) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "tensor '%s': unknown dtype %d", name, dtype);
  if (role < AQ_ROLE_INPUT || role > AQ_ROLE_STATE)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "tensor '%s': unknown role %d", name, role);
  if (rank > AQ_MAX_RANK || (rank && !dims))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "tensor '%s': rank %u (at most %d, with dims)", name, rank,
                    AQ_MAX_RANK);
  /* The running product is bounded, not each dimension alone: three
   * dimensions of 2^30 each pass a per-dimension check and wrap to 0 bytes. */
  size_t bytes = dtype_size(dtype);
  for (uint32_t i = 0; i < rank; ++i) {
    if (dims[i] <= 0)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "tensor '%s': dimension %u is %lld", name, i, (long long)dims[i]);
    if ((uint64_t)dims[i] > TENSOR_BYTES_MAX / bytes)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                      "tensor '%s': dimension %u (%lld) makes it larger than %llu bytes", name, i,
                      (long long)dims[i], (unsigned long long)TENSOR_BYTES_MAX);
    bytes *= (size_t)dims[i];
  }
  AQ_RETURN_IF_ERROR(names_reserve(g));
  if (g->ntensors == g->cap_tensors) {
    tensor_t *n = realloc(g->tensors, 2 * g->cap_tensors * sizeof(*n));
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for tensor '%s'", name);
    g->tensors = n;
    g->cap_tensors *= 2;
  }
  tensor_t *t = &g->tensors[g->ntensors];
  memset(t, 0, sizeof(*t));
  copy_name(t->name, sizeof(t->name), name ? name : "");
  if (!t->name[0]) { /* "t<id>", without printf: graphs of 10^4 tensors are made in microseconds */
    char digits[12];
    int n = 0;
    for (uint32_t v = g->ntensors; v || !n; v /= 10) digits[n++] = (char)('0' + v % 10);
    t->name[0] = 't';
    for (int i = 0; i < n; ++i) t->name[1 + i] = digits[n - 1 - i];
    t->name[1 + n] = 0;
  }
  make_unique(g, t->name, sizeof(t->name));
  *name_slot(g, t->name) = g->ntensors;
  t->dtype = dtype;
  t->role = role;
  t->rank = rank;
  for (uint32_t i = 0; i < rank; ++i) t->dims[i] = dims[i];
  t->bytes = bytes;
  *out_id = g->ntensors++;
  return AQ_OK;
}

AQ_API aq_status_t aq_tensor_create(aq_graph_t *g, const char *name, aq_dtype_t dtype, aq_tensor_role_t role,
                                    uint32_t rank, const int64_t *dims, aq_tensor_t *out) {
  if (!g || !out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_create: graph and out are required");
  char kept[sizeof(((tensor_t *)0)->name)];
  copy_name(kept, sizeof(kept), name ? name : "");
  uint32_t taken = kept[0] ? tensor_named(g, kept) : 0;
  if (taken)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "tensor name '%s' is taken (tensor %u): names are unique within a graph",
                    kept, taken);
  return aq_graph_new_tensor(g, name, dtype, role, rank, dims, &out->id);
}

AQ_API aq_status_t aq_tensor_get_info(aq_graph_t *g, aq_tensor_t tensor, aq_tensor_info_t *info) {
  if (!g || !info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_get_info: graph and info are required");
  tensor_t *t = aq_graph_tensor(g, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "tensor %u is not in this graph", tensor.id);
  *info = (aq_tensor_info_t){t->name, t->dtype, t->role, t->rank, {0}, t->bytes};
  memcpy(info->dims, t->dims, sizeof(info->dims));
  return AQ_OK;
}

aq_status_t aq_graph_new_task(aq_graph_t *g, const task_t *t, uint32_t *out_id) {
  AQ_RETURN_IF_ERROR(check_unfrozen(g, "task", t->name));
  if (g->ntasks == g->cap_tasks) {
    task_t *n = realloc(g->tasks, 2 * g->cap_tasks * sizeof(*n));
    if (!n) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for task '%s'", t->name);
    g->tasks = n;
    g->cap_tasks *= 2;
  }
  g->tasks[g->ntasks] = *t;
  /* In an ordered group every task follows the one added before it. */
  if (g->group == 2 && g->ntasks > g->group_first) {
    task_t *n = &g->tasks[g->ntasks];
    uint32_t *e = malloc((n->nafter_all + 1) * sizeof(uint32_t));
    if (!e) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for task '%s'", t->name);
    if (n->nafter_all) memcpy(e, n->after_all, n->nafter_all * sizeof(uint32_t));
    e[n->nafter_all++] = g->ntasks - 1;
    n->after_all = e;
  }
  *out_id = ++g->ntasks;
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_group_begin(aq_graph_t *g, int ordered) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_group_begin: graph is NULL");
  if (g->group) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_group_begin: a group is already open (groups do not nest)");
  g->group = ordered ? 2 : 1;
  g->group_first = g->ntasks;
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_group_end(aq_graph_t *g, aq_task_t *out_first, uint32_t *out_count) {
  if (!g) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_group_end: graph is NULL");
  if (!g->group) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_group_end: no group is open");
  g->group = 0;
  if (out_first) out_first->id = g->group_first + 1;
  if (out_count) *out_count = g->ntasks - g->group_first;
  return AQ_OK;
}

static aq_status_t check_tensors(aq_graph_t *g, const char *task, const aq_tensor_t *ts, uint32_t n,
                                 const char *what) {
  if (n > AQ_TASK_MAX_TENSORS)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "task '%s': %u tensors %s (at most %d)", task, n, what,
                    AQ_TASK_MAX_TENSORS);
  for (uint32_t i = 0; i < n; ++i)
    if (!aq_graph_tensor(g, ts[i]))
      return aq_error(AQ_ERROR_INVALID_HANDLE, "task '%s': tensor %u it %s is not in this graph", task, ts[i].id,
                      what);
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_add_kernel(aq_graph_t *g, const aq_kernel_task_t *k, aq_task_t *out) {
  if (!g || !k || !k->kernel)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_add_kernel: graph, task and task->kernel are required");
  const char *name = k->name ? k->name : k->kernel;
  if (k->kernarg_size > TASK_KERNARG_MAX || (k->kernarg_size && !k->kernarg))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "task '%s': kernarg of %u bytes (at most %d, and not NULL)", name,
                    k->kernarg_size, TASK_KERNARG_MAX);
  AQ_RETURN_IF_ERROR(check_tensors(g, name, k->reads, k->read_count, "reads"));
  AQ_RETURN_IF_ERROR(check_tensors(g, name, k->writes, k->write_count, "writes"));
  task_t t = {.kind = TASK_KERNEL, .code_object = k->code_object, .kernarg_size = k->kernarg_size,
              .shape = k->shape, .nreads = k->read_count, .nwrites = k->write_count, .agent = k->agent,
              .cost_key = k->cost_key, .op = OP_OTHER};
  copy_name(t.name, sizeof(t.name), name);
  copy_name(t.kernel, sizeof(t.kernel), k->kernel);
  if (k->kernarg_size) memcpy(t.kernarg, k->kernarg, k->kernarg_size);
  for (uint32_t i = 0; i < k->read_count; ++i) {
    t.reads[i] = k->reads[i].id;
    t.read_off[i] = k->read_offsets[i];
  }
  for (uint32_t i = 0; i < k->write_count; ++i) {
    t.writes[i] = k->writes[i].id;
    t.write_off[i] = k->write_offsets[i];
  }
  for (uint32_t i = 0; i < t.nreads; ++i)
    if (t.read_off[i] != UINT32_MAX && (uint64_t)t.read_off[i] + 8 > t.kernarg_size)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "task '%s': read offset %u lies outside its %u-byte kernarg", name,
                      t.read_off[i], t.kernarg_size);
  for (uint32_t i = 0; i < t.nwrites; ++i)
    if (t.write_off[i] != UINT32_MAX && (uint64_t)t.write_off[i] + 8 > t.kernarg_size)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "task '%s': write offset %u lies outside its %u-byte kernarg",
                      name, t.write_off[i], t.kernarg_size);
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_new_task(g, &t, &id));
  if (out) out->id = id;
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_add_host(aq_graph_t *g, const aq_host_task_t *h, aq_task_t *out) {
  if (!g || !h || !h->fn)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_add_host: graph, task and task->fn are required");
  const char *name = h->name ? h->name : "host";
  AQ_RETURN_IF_ERROR(check_tensors(g, name, h->reads, h->read_count, "reads"));
  AQ_RETURN_IF_ERROR(check_tensors(g, name, h->writes, h->write_count, "writes"));
  task_t t = {.kind = TASK_HOST, .fn = h->fn, .user = h->user, .nreads = h->read_count,
              .nwrites = h->write_count, .agent = h->agent, .op = OP_OTHER};
  copy_name(t.name, sizeof(t.name), name);
  memcpy(t.args, h->args, sizeof(t.args));
  for (uint32_t i = 0; i < h->read_count; ++i) t.reads[i] = h->reads[i].id, t.read_off[i] = UINT32_MAX;
  for (uint32_t i = 0; i < h->write_count; ++i) t.writes[i] = h->writes[i].id, t.write_off[i] = UINT32_MAX;
  uint32_t id;
  AQ_RETURN_IF_ERROR(aq_graph_new_task(g, &t, &id));
  if (out) out->id = id;
  return AQ_OK;
}

AQ_API aq_status_t aq_graph_add_edge(aq_graph_t *g, aq_task_t task, aq_edge_kind_t kind, const aq_task_t *after,
                                     uint32_t count) {
  if (!g || (count && !after))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_add_edge: graph and after are required");
  if (task.id == 0 || task.id > g->ntasks) return aq_error(AQ_ERROR_INVALID_HANDLE, "task %u is not in this graph", task.id);
  if (kind != AQ_EDGE_AFTER_ALL && kind != AQ_EDGE_AFTER_ANY)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_graph_add_edge: unknown edge kind %d", kind);
  task_t *t = &g->tasks[task.id - 1];
  AQ_RETURN_IF_ERROR(check_unfrozen(g, "edge to task", t->name));
  for (uint32_t i = 0; i < count; ++i) {
    if (after[i].id == 0 || after[i].id > g->ntasks)
      return aq_error(AQ_ERROR_INVALID_HANDLE, "task '%s': edge to task %u, which is not in this graph", t->name,
                      after[i].id);
    if (after[i].id == task.id)
      return aq_error(AQ_ERROR_INVALID_GRAPH, "task '%s' cannot run after itself", t->name);
  }
  uint32_t **list = kind == AQ_EDGE_AFTER_ALL ? &t->after_all : &t->after_any;
  uint32_t *n = kind == AQ_EDGE_AFTER_ALL ? &t->nafter_all : &t->nafter_any;
  uint32_t *grown = realloc(*list, (*n + count) * sizeof(uint32_t));
  if (!grown && *n + count) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for edges");
  *list = grown;
  for (uint32_t i = 0; i < count; ++i) (*list)[(*n)++] = after[i].id - 1;
  return AQ_OK;
}
