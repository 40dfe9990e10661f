/* Placement's wiring for an exec: the agents it may use, which of them
 * can run each task, the policy, heft's cost and link matrices (with the
 * calibration of models short of samples) and epilogue fusion on the
 * placed graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/code_object.h"
#include "runtime/runtime.h"
#include "runtime/settings.h"
#include "scheduler/calibrate.h"
#include "scheduler/exec_internal.h"
#include "scheduler/linkcal.h"

#define STREAM_CALL_NS 10000.0
#define STREAM_CALL_NS_PER_BYTE 0.01

/* An agent's lanes: a CPU agent one per worker (independent tasks run side
 * by side), at most AQ_CPU_LANES; a GPU one in-order stream. Each usable
 * agent after it keeps a lane of EXEC_LANES_MAX. */
static uint32_t lanes_for(const aq_agent_info_t *info, uint32_t used, uint32_t agents_after) {
  uint32_t lanes = info->kind == AQ_AGENT_KIND_GPU ? 1 : info->compute_units ? info->compute_units : 1;
  uint32_t cap = aq_runtime_config()->cpu_lanes ? aq_runtime_config()->cpu_lanes : 1;
  if (info->kind != AQ_AGENT_KIND_GPU && lanes > cap) lanes = cap;
  uint32_t room = EXEC_LANES_MAX > used + agents_after ? EXEC_LANES_MAX - used - agents_after : 1;
  return lanes < room ? lanes : room;
}

aq_status_t aq_exec_pick_agents(aq_exec_t *e) {
  aq_agent_t all[EXEC_AGENTS_MAX];
  size_t n;
  uint32_t usable = 0;
  AQ_RETURN_IF_ERROR(aq_agents(all, EXEC_AGENTS_MAX, &n));
  if (n > EXEC_AGENTS_MAX) n = EXEC_AGENTS_MAX;
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_RETURN_IF_ERROR(aq_agent_get_info(all[i], &info));
    usable += info.usable != 0;
  }
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_RETURN_IF_ERROR(aq_agent_get_info(all[i], &info));
    if (!info.usable) continue;
    e->agents[e->nagents] = all[i];
    snprintf(e->agent_names[e->nagents], AQ_NAME_MAX, "%s", info.name);
    e->agent_node[e->nagents] = info.numa_node;
    e->agent_kind[e->nagents] = (uint8_t)info.kind;
    e->agent_workers[e->nagents] = info.kind == AQ_AGENT_KIND_CPU ? (info.compute_units ? info.compute_units : 1) : 0;
    aq_perf_arch(&info, e->agent_arch[e->nagents], PERF_ARCH_MAX);
    uint32_t lanes = lanes_for(&info, e->nlanes, usable - e->nagents - 1);
    for (uint32_t k = 0; k < lanes && e->nlanes < EXEC_LANES_MAX; ++k) {
      e->lane_kind[e->nlanes] = (uint8_t)info.kind;
      e->lane_agent[e->nlanes++] = e->nagents;
    }
    e->nagents++;
  }
  return AQ_OK;
}

/* The CUDA op library, if some agent is a GPU and the build has it. */
aq_status_t aq_exec_load_gpu_ops(aq_exec_t *e) {
  for (uint32_t a = 0; a < e->nagents; ++a)
    if (e->agent_kind[a] == AQ_AGENT_KIND_GPU) {
      if (aq_op_library(AQ_OP_LIBRARY_GPU, &e->gpu_ops) != AQ_OK) e->gpu_ops.handle = 0;
      break;
    }
  return AQ_OK;
}

static int has_kernel(aq_exec_t *e, aq_code_object_t co, const char *name, uint8_t kind) {
  /* Graphs repeat a few kernels many times: remember the last answer per
   * kind of agent (eligibility asks for each kind in turn). */
  static _Thread_local struct { uint64_t co; char name[64]; int yes, valid; } last[AQ_AGENT_KIND_GPU + 1];
  if (kind > AQ_AGENT_KIND_GPU) return 0;
  if (last[kind].valid && last[kind].co == co.handle && !strcmp(last[kind].name, name)) return last[kind].yes;
  int yes = 0;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    if (e->agent_kind[a] != kind) continue;
    aq_kernel_info_t k;
    yes = co.handle && aq_code_object_has_kernel(co, name, e->agents[a], &k);
    break;
  }
  last[kind].co = co.handle, last[kind].yes = yes, last[kind].valid = 1;
  snprintf(last[kind].name, sizeof(last[kind].name), "%s", name);
  return yes;
}

/* The kinds of agent this exec has (1 << kind). */
static uint32_t kinds_present(const aq_exec_t *e) {
  uint32_t m = 0;
  for (uint32_t a = 0; a < e->nagents; ++a) m |= 1u << e->agent_kind[a];
  return m;
}

/* Per task, the kinds of agent that may run it: host calls on CPUs; a
 * kernel wherever its code object has code and the options allow. */
uint8_t *aq_exec_eligibility(aq_exec_t *e, uint32_t kinds) {
  aq_graph_t *g = e->graph;
  uint8_t *m = calloc(g->ntasks ? g->ntasks : 1, 1);
  if (!m) return NULL;
  uint32_t present = kinds_present(e), last = UINT32_MAX; /* the last kernel task looked up */
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    if (task->kind == TASK_HOST || task->kind == TASK_STREAM) {
      /* whatever the options allow kernels: a stream call's work goes on
       * the stream of the GPU it is pinned to (a NCCL rank's) */
      m[t] = 1u << (task->kind == TASK_HOST ? AQ_AGENT_KIND_CPU : AQ_AGENT_KIND_GPU);
      continue;
    }
    /* A graph runs one kernel over long stretches of tasks: a task of the
     * last one's code object and kernel may run where it may, without a
     * lookup per kind of agent. */
    const task_t *like = last != UINT32_MAX ? &g->tasks[last] : NULL;
    if (like && like->code_object.handle == task->code_object.handle && !strcmp(like->kernel, task->kernel)) {
      m[t] = m[last];
      continue;
    }
    last = t;
    for (uint8_t kind = AQ_AGENT_KIND_CPU; kind <= AQ_AGENT_KIND_GPU; ++kind) {
      if ((kinds && !(kinds & (1u << kind))) || !(present & (1u << kind))) continue;
      aq_code_object_t co = task->code_object.handle ? task->code_object
                            : kind == AQ_AGENT_KIND_GPU ? e->gpu_ops
                                                        : e->ops;
      if (has_kernel(e, co, task->kernel, kind)) m[t] |= (uint8_t)(1u << kind);
    }
  }
  return m;
}

aq_sched_policy_t aq_exec_policy_from(const aq_exec_options_t *o) {
  if (o && o->policy) return o->policy;
  /* AQ_SCHED, checked at aq_init against settings.h's list, else heft. */
  const char *name = aq_runtime_config()->sched;
  static const struct { const char *name; aq_sched_policy_t policy; } by_name[] = {
      {"eager", AQ_SCHED_EAGER},     {"round-robin", AQ_SCHED_ROUND_ROBIN}, {"pinned", AQ_SCHED_PINNED},
      {"locality", AQ_SCHED_LOCALITY}, {"heft", AQ_SCHED_HEFT},
  };
  for (size_t i = 0; i < sizeof(by_name) / sizeof(by_name[0]); ++i)
    if (!strcmp(name, by_name[i].name)) return by_name[i].policy;
  return AQ_SCHED_HEFT;
}

/* The bytes of the tensors task t reads and writes. */
static uint64_t task_bytes(const aq_graph_t *g, const task_t *t) {
  uint64_t b = 0;
  for (uint32_t r = 0; r < t->nreads; ++r) b += g->tensors[t->reads[r]].bytes;
  for (uint32_t w = 0; w < t->nwrites; ++w) b += g->tensors[t->writes[w]].bytes;
  return b;
}

/* The model key of task t on agent a, and the bytes it touches. */
void aq_exec_task_key(aq_exec_t *e, uint32_t t, uint32_t a, perf_key_t *k, double *bytes) {
  const task_t *task = &e->graph->tasks[t];
  memset(k, 0, sizeof(*k));
  if (task->kind == TASK_HOST) snprintf(k->kernel, sizeof(k->kernel), "host:%s", task->name);
  else if (task->kind == TASK_STREAM) snprintf(k->kernel, sizeof(k->kernel), "stream:%s", task->kernel);
  else if (task->cost_key) snprintf(k->kernel, sizeof(k->kernel), "%s@%llx", task->kernel, (unsigned long long)task->cost_key);
  else snprintf(k->kernel, sizeof(k->kernel), "%s", task->kernel);
  for (char *c = k->kernel; *c; ++c)
    if (*c == ' ' || *c == '\t' || *c == '\n') *c = '_'; /* the file is whitespace-separated */
  snprintf(k->arch, sizeof(k->arch), "%s", e->agent_arch[a]);
  uint64_t items = 1, b = task_bytes(e->graph, task);
  for (int d = 0; d < 3; ++d) items *= task->shape.grid[d] ? task->shape.grid[d] : 1;
  k->shape_class = aq_perf_shape_class(items, b);
  *bytes = (double)b;
}

/* Task t's estimate on agent a (ns): its model's, or a rough guess from the
 * work-groups for a kernel never measured; *samples: what the model rests on. */
double aq_exec_cost_of(aq_exec_t *e, uint32_t t, uint32_t a, uint32_t *samples) {
  const task_t *task = &e->graph->tasks[t];
  double groups = aq_plan_task_groups(task);
  int gpu = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  perf_key_t k;
  double bytes;
  aq_exec_task_key(e, t, a, &k, &bytes);
  /* A stream call's guess: a NCCL collective between NVLinked GPUs, a
   * launch plus the bytes at tens of GB/s (the tensors are counted twice,
   * read and written). */
  double guess = task->kind == TASK_HOST     ? 1000
                 : task->kind == TASK_STREAM ? STREAM_CALL_NS + bytes * STREAM_CALL_NS_PER_BYTE
                 : gpu                       ? 5000 + 20 * groups
                                             : 1000 * groups;
  return aq_perf_estimate(&k, bytes, guess, samples);
}

/* Graphs repeat a few kernels over a few shapes: heft's cost matrix looks
 * each (task kind, kernel or host-call name, cost key, agent, grid,
 * bytes) up once, not once a task (a model key is three formatted strings
 * and a lock). */
enum { COST_MEMO = 64 };
typedef struct cost_memo {
  const task_t *like; /* a task it was computed for; NULL: empty */
  uint32_t agent, samples;
  uint64_t bytes;
  double ns;
} cost_memo_t;

static int same_cost(const task_t *x, const task_t *y) {
  return x == y || (x->kind == y->kind && x->cost_key == y->cost_key && !memcmp(&x->shape, &y->shape, sizeof(x->shape)) &&
                    !strcmp(x->kind == TASK_HOST ? x->name : x->kernel, y->kind == TASK_HOST ? y->name : y->kernel));
}

/* What the memo needs of a task, computed once a task (not once an agent
 * and pass): its tensors' bytes and a hash of its name with them, and
 * whether the task before it has the same cost (as_prev: the same bytes
 * and same_cost; graphs repeat a kernel over long stretches of tasks). */
typedef struct task_sig {
  uint64_t bytes, hash;
  int as_prev;
} task_sig_t;

static task_sig_t *task_sigs(const aq_graph_t *g) {
  task_sig_t *s = malloc((g->ntasks ? g->ntasks : 1) * sizeof(*s));
  for (uint32_t t = 0; s && t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    uint64_t b = task_bytes(g, task), h = (b ^ task->cost_key) * 0x9e3779b97f4a7c15ull;
    if (t && s[t - 1].bytes == b && same_cost(&g->tasks[t - 1], task)) {
      s[t] = (task_sig_t){b, s[t - 1].hash, 1};
      continue;
    }
    for (const char *c = task->kind == TASK_HOST ? task->name : task->kernel; *c; ++c) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    s[t] = (task_sig_t){b, h, 0};
  }
  return s;
}

/* *fresh: not found, looked up now. */
static double memo_cost(aq_exec_t *e, cost_memo_t *memo, const task_sig_t *sig, uint32_t t, uint32_t a,
                        uint32_t *samples, int *fresh) {
  const task_t *task = &e->graph->tasks[t];
  uint64_t h = sig->hash ^ a;
  cost_memo_t *m = &memo[(h ^ h >> 29) % COST_MEMO];
  *fresh = !(m->like && m->agent == a && m->bytes == sig->bytes && same_cost(m->like, task));
  if (!*fresh) {
    *samples = m->samples;
    return m->ns;
  }
  *m = (cost_memo_t){task, a, 0, sig->bytes, 0};
  m->ns = aq_exec_cost_of(e, t, a, &m->samples);
  *samples = m->samples;
  return m->ns;
}

/* Op-library kernels short of samples on an agent that may run them are
 * measured there first, one task per model (calibrate.h); a failure leaves
 * the guesses. */
static void calibrate_missing(aq_exec_t *e, const uint8_t *eligible, uint64_t skip, cost_memo_t *memo,
                              const task_sig_t *sigs) {
  aq_graph_t *g = e->graph;
  uint32_t *pick = malloc((g->ntasks ? g->ntasks : 1) * sizeof(uint32_t));
  perf_key_t *keys = malloc((g->ntasks ? g->ntasks : 1) * sizeof(perf_key_t));
  for (uint32_t a = 0; pick && keys && a < e->nagents; ++a) {
    if ((skip >> a) & 1) continue;
    uint32_t n = 0, samples;
    for (uint32_t t = 0; t < g->ntasks; ++t) {
      if (!(eligible[t] & (1u << e->agent_kind[a])) || !aq_perf_calibratable(g, t)) continue;
      int fresh;
      memo_cost(e, memo, &sigs[t], t, a, &samples, &fresh);
      if (!fresh || samples >= PERF_MIN_SAMPLES) continue; /* a task like it was seen */
      double bytes;
      aq_exec_task_key(e, t, a, &keys[n], &bytes);
      int seen = 0;
      for (uint32_t i = 0; i < n && !seen; ++i)
        seen = keys[i].shape_class == keys[n].shape_class && !strcmp(keys[i].kernel, keys[n].kernel);
      if (!seen) pick[n++] = t;
    }
    if (n) aq_perf_calibrate(g, pick, n, a);
  }
  free(pick), free(keys);
  memset(memo, 0, COST_MEMO * sizeof(*memo)); /* the models have changed */
}

/* The GPU agents that stream calls are pinned to (a NCCL communicator's
 * ranks in this process), as a mask of exec agents; 0 if none. */
static uint64_t rank_gpus(const aq_exec_t *e) {
  uint64_t m = 0;
  for (uint32_t t = 0; t < e->graph->ntasks; ++t) {
    const task_t *task = &e->graph->tasks[t];
    if (task->kind == TASK_STREAM && task->agent >= 0 && (uint32_t)task->agent < e->nagents) m |= 1ull << task->agent;
  }
  return m;
}

/* heft's cost matrix (task x agent, ns; -1 where it cannot run) into c;
 * whether some op-library kernel there is short of samples (calibrate.h). */
static int fill_costs(aq_exec_t *e, const uint8_t *eligible, uint64_t others, cost_memo_t *memo, const task_sig_t *sigs,
                      double *c) {
  aq_graph_t *g = e->graph;
  uint32_t short_of_samples = 0, samples[EXEC_AGENTS_MAX] = {0}; /* the task before's, per agent */
  int calibrate = 0;
  for (uint32_t t = 0; t < g->ntasks; ++t)
    for (uint32_t a = 0; a < e->nagents; ++a) {
      double *ct = &c[(size_t)t * e->nagents + a];
      uint32_t n = 0;
      int fresh = 0;
      /* A task costing what the one before it does, with its agent kinds,
       * would find that one's entry for each agent in the memo (one task's
       * agents have slots apart): its cost and samples, and no miss. */
      if (sigs[t].as_prev && eligible[t] == eligible[t - 1]) {
        *ct = ct[-(ptrdiff_t)e->nagents];
        n = samples[a];
      } else {
        *ct = eligible[t] & (1u << e->agent_kind[a]) && !((others >> a) & 1)
                  ? memo_cost(e, memo, &sigs[t], t, a, &n, &fresh)
                  : -1;
        samples[a] = n;
      }
      if (*ct < 0 || n >= PERF_MIN_SAMPLES) continue;
      short_of_samples++;
      calibrate |= fresh && aq_perf_calibratable(g, t);
    }
  e->profile_left = short_of_samples ? PERF_MIN_SAMPLES : 0; /* (AQ_EXEC_PROFILE is set after) */
  return calibrate;
}

/* heft's cost matrix. Tasks whose models are still short of samples (host
 * tasks, users' kernels, a calibration that failed) make the exec profile
 * its first runs. A graph with NCCL collectives runs its GPU kernels on its
 * ranks' GPUs only: the process's other GPUs are other ranks' (mpirun
 * starts one process a GPU, and each sees them all). The matrix is made
 * once, and again only where op-library kernels had to be calibrated
 * first (a process's first graph of them): one pass of the memo a task and
 * agent, not two. */
aq_status_t aq_exec_heft_costs(aq_exec_t *e, const uint8_t *eligible, double **out) {
  aq_graph_t *g = e->graph;
  uint64_t ranks = rank_gpus(e), others = 0;
  for (uint32_t a = 0; ranks && a < e->nagents; ++a)
    if (e->agent_kind[a] == AQ_AGENT_KIND_GPU && !((ranks >> a) & 1)) others |= 1ull << a;
  cost_memo_t memo[COST_MEMO];
  memset(memo, 0, sizeof(memo));
  task_sig_t *sigs = task_sigs(g);
  double *c = sigs ? malloc((size_t)g->ntasks * e->nagents * sizeof(double)) : NULL;
  if (!c) {
    free(sigs);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  }
  if (fill_costs(e, eligible, others, memo, sigs, c)) {
    memset(memo, 0, sizeof(memo)); /* calibrate_missing finds the models it measures by their misses */
    calibrate_missing(e, eligible, others, memo, sigs);
    fill_costs(e, eligible, others, memo, sigs, c);
  }
  free(sigs);
  *out = c;
  return AQ_OK;
}

/* heft's link costs (agent x agent latency, then ns per byte, then each
 * agent's barrier packet), measured once per process (linkcal.h). */
aq_status_t aq_exec_heft_links(aq_exec_t *e, double **out) {
  link_agent_t la[EXEC_AGENTS_MAX];
  for (uint32_t a = 0; a < e->nagents; ++a) la[a] = (link_agent_t){e->agents[a], e->agent_kind[a], e->agent_arch[a]};
  size_t nn = (size_t)e->nagents * e->nagents;
  if (!(*out = malloc((2 * nn + e->nagents + 1) * sizeof(double))))
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  uint32_t measured;
  aq_link_calibrate(la, e->nagents, *out, *out + nn, *out + 2 * nn, &measured);
  return AQ_OK;
}

/* The op code object agent a fuses with, or a null handle, and whether it
 * runs every rule (*all) or only those flagged AQ_OP_FUSE_ON_CPUS: every
 * rule on GPU agents, where each fused pair is one launch and one pass
 * fewer; on CPU agents the flagged ones (elementwise consumers), and every
 * rule only with AQ_FUSION=1 (there the MLP step measured no faster: a
 * GEMM's epilogue reading the consumer's arrays costs about what the pass
 * it saves did). None with AQ_EXEC_NO_FUSION or AQ_FUSION=0. */
static aq_code_object_t fusing_ops(const aq_exec_t *e, uint32_t a, int *all) {
  uint64_t fusion = aq_setting_u64(AQ_SET_FUSION);
  int gpu = e->agent_kind[a] == AQ_AGENT_KIND_GPU;
  *all = gpu || fusion == AQ_FUSION_ON;
  if ((e->flags & AQ_EXEC_NO_FUSION) || fusion == AQ_FUSION_OFF) return (aq_code_object_t){0};
  return gpu ? e->gpu_ops : e->ops;
}

/* Epilogue fusion on the placed graph (fuse.h), where fusing_ops says. */
aq_status_t aq_exec_fuse(aq_exec_t *e) {
  uint64_t fusion = aq_setting_u64(AQ_SET_FUSION);
  int off = (e->flags & AQ_EXEC_NO_FUSION) || fusion == AQ_FUSION_OFF, all;
  uint32_t fuses[EXEC_AGENTS_MAX];
  const aq_op_table_t *lib = e->lib->table;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    aq_code_object_t co = fusing_ops(e, a, &all);
    fuses[a] = 0;
    for (uint32_t r = 0; co.handle && lib && r < lib->fusion_count; ++r)
      if ((all || (lib->fusions[r].flags & AQ_OP_FUSE_ON_CPUS)) &&
          has_kernel(e, co, lib->fusions[r].fused, e->agent_kind[a]))
        fuses[a] |= 1u << r;
  }
  fuse_in_t in = {e->graph, e->nlanes, e->lane_agent, e->lib, fuses, off};
  return aq_fuse_plan(&in, &e->plan, &e->fusion);
}

/* Where every fusion rule runs, so do update groups, on agents whose code
 * object has the multi-update kernel. */
aq_status_t aq_exec_group_updates(aq_exec_t *e) {
  uint8_t groups[EXEC_AGENTS_MAX];
  int all;
  for (uint32_t a = 0; a < e->nagents; ++a) {
    aq_code_object_t co = fusing_ops(e, a, &all);
    groups[a] = co.handle && all && has_kernel(e, co, AQ_KERNEL_SGD_MULTI, e->agent_kind[a]);
  }
  group_in_t in = {e->graph, e->nlanes, e->lane_agent, groups};
  return aq_fuse_groups(&in, &e->plan, &e->fusion);
}

/* What a collective's own stream costs: the two event waits between it
 * and the kernels' stream. Measured on 2 H100s, the one all-reduce of a
 * data-parallel step (nothing beside it to run) took 14 us a step longer
 * on a stream of its own. */
#define COMM_LANE_HOPS_NS 20000.0

/* The estimated work of the kernels on stream task c's agent that neither
 * lead to c nor follow from it: what runs beside c if it has a stream of
 * its own. mark: ntasks bytes of scratch. */
static double work_beside(const aq_exec_t *e, uint32_t c, uint8_t *mark) {
  const plan_t *p = &e->plan;
  enum { BEFORE = 1, AFTER = 2 };
  memset(mark, 0, p->ntasks);
  mark[c] = BEFORE | AFTER;
  for (uint32_t k = p->ntasks; k-- > 0;) { /* c's predecessors, transitively */
    uint32_t i = p->order[k];
    if (!(mark[i] & BEFORE)) continue;
    for (uint32_t j = 0; j < aq_plan_waits(p, e->graph, i); ++j) mark[aq_plan_wait(p, e->graph, i, j)] |= BEFORE;
  }
  for (uint32_t k = 0; k < p->ntasks; ++k) { /* and its successors */
    uint32_t i = p->order[k];
    for (uint32_t j = 0; j < aq_plan_waits(p, e->graph, i); ++j) mark[i] |= mark[aq_plan_wait(p, e->graph, i, j)] & AFTER;
  }
  double ns = 0;
  uint32_t a = e->lane_agent[p->tasks[c].lane];
  for (uint32_t i = 0; i < p->ntasks; ++i)
    if (!mark[i] && e->graph->tasks[i].kind == TASK_KERNEL && e->lane_agent[p->tasks[i].lane] == a)
      ns += p->tasks[i].cost_ns;
  return ns;
}

/* AQ_COMM_STREAM (on by default). Stream calls (NCCL collectives) move to
 * a lane of their own on their GPU, after placement: a second queue, so a
 * second stream, on which a bucket's all-reduce runs beside the backward
 * kernels still to come, as DDP's communication stream does, where the
 * kernels' one stream would hold them back until it ended. Only where
 * there is such work beside it, more than the stream costs: the one
 * all-reduce of a step waits for the whole backward pass, and the update
 * waits for it. Barrier packets order the two lanes as they do any two;
 * their GPU's processors turn them into event waits
 * (runtime/drivers/cuda_events.c). Kernels never go there. Its queue is
 * served first (AQ_QUEUE_HIGH_PRIORITY), so that a collective's blocks are
 * dispatched ahead of the kernels queued beside it, as DDP's NCCL
 * stream's are: a collective one GPU starts late holds back every GPU. */
aq_status_t aq_exec_collective_lanes(aq_exec_t *e) {
  uint32_t lane_of[EXEC_AGENTS_MAX], moved = 0;
  uint8_t *mark = malloc(e->plan.ntasks ? e->plan.ntasks : 1);
  if (!mark) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to place the graph");
  for (uint32_t a = 0; a < e->nagents; ++a) lane_of[a] = UINT32_MAX;
  for (uint32_t t = 0; t < e->plan.ntasks; ++t) {
    if (e->graph->tasks[t].kind != TASK_STREAM || work_beside(e, t, mark) < COMM_LANE_HOPS_NS) continue;
    uint32_t a = e->lane_agent[e->plan.tasks[t].lane];
    if (lane_of[a] == UINT32_MAX) {
      if (e->nlanes == EXEC_LANES_MAX) continue; /* it stays with the kernels: ordered all the same */
      lane_of[a] = e->nlanes;
      e->lane_kind[e->nlanes] = e->agent_kind[a];
      e->lane_queue_flags[e->nlanes] = AQ_QUEUE_HIGH_PRIORITY;
      e->lane_agent[e->nlanes++] = a;
    }
    e->plan.tasks[t].lane = lane_of[a];
    moved++;
  }
  free(mark);
  /* The kernels' lanes no longer wait for the collectives in their midst:
   * their order is worked out again (sequence.c). */
  return moved ? aq_plan_sequence(&e->plan, e->graph, e->nlanes) : AQ_OK;
}
