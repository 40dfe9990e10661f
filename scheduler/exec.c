/* Execs: an instantiated graph. Instantiation plans the graph, gives each
 * tensor memory on its agent's node, fills every kernarg once and lowers the
 * tasks to one prebuilt packet stream per agent queue. A run resets the
 * tasks' signals and copies the streams into the queues: no allocation, no
 * lock, one doorbell per queue. */
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/settings.h"
#include "runtime/signal.h"
#include "runtime/trace.h"
#include "runtime/wake.h"
#include "scheduler/calibrate.h"
#include "scheduler/exec_internal.h"
#include "scheduler/live.h"
#include "scheduler/ranks.h"

/* AQ_EXEC_EXACT_MATMUL, or AQ_MATMUL_PRECISION=exact: FFMA products on GPUs. */
static aq_status_t matmul_precision(aq_exec_t *e) {
  e->exact_matmul = (e->flags & AQ_EXEC_EXACT_MATMUL) || aq_setting_u64(AQ_SET_MATMUL_PRECISION) == AQ_PRECISION_EXACT;
  return AQ_OK;
}

/* The dependency edges, for the trace's flows and critical path, and the
 * host and stream tasks' names. */
static void trace_edges(aq_exec_t *e) {
  if (!aq_trace_on()) return;
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
  const char **names = calloc(e->graph->ntasks ? e->graph->ntasks : 1, sizeof(*names));
  if (!names) return;
  for (uint32_t t = 0; t < e->graph->ntasks; ++t)
    if (e->graph->tasks[t].kind != TASK_KERNEL) names[t] = e->graph->tasks[t].name;
  aq_trace_task_names(e->serial, names, e->graph->ntasks);
  free(names);
}

/* A graph over several GPUs of this process: its replicated form. */
static aq_status_t expand_ranks(aq_exec_t *e) {
  e->local_ranks = aq_graph_local_ranks(e->source);
  e->rank_tensors = e->source->ntensors - 1;
  if (e->local_ranks == 1) return AQ_OK;
  AQ_RETURN_IF_ERROR(aq_graph_expand_ranks(e->source, &e->user_graph));
  e->graph = e->user_graph;
  return AQ_OK;
}

static live_set_t live_execs = LIVE_SET_INIT; /* destroying one twice is an error, not a double free */

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
  if (!e || !aq_live_add(&live_execs, e)) {
    free(e);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  }
  uint64_t t0 = aq_trace_on() ? aq_now_ns() : 0;
  e->graph = e->user_graph = e->source = g;
  static _Atomic uint32_t serials;
  e->serial = atomic_fetch_add(&serials, 1) & 0xfff;
  atomic_fetch_add(&g->execs, 1);
  aq_status_t s = expand_ranks(e);
  if (s == AQ_OK) s = aq_exec_pick_agents(e);
  if (s == AQ_OK) s = aq_op_library_ops(&e->lib);
  if (s == AQ_OK) s = aq_op_library(AQ_OP_LIBRARY_CPU, &e->ops);
  if (s == AQ_OK) s = aq_exec_load_gpu_ops(e);
  e->kinds = options ? options->kernel_agent_kinds : 0;
  uint8_t *eligible = s == AQ_OK ? aq_exec_eligibility(e, e->kinds) : NULL;
  if (s == AQ_OK && !eligible) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to plan");
  e->policy = aq_exec_policy_from(options);
  e->flags = options ? options->flags : 0;
  if (s == AQ_OK) s = matmul_precision(e);
  double *costs = NULL, *links = NULL;
  /* Tuned first: calibration, and every run, then times the builds kept. */
  if (s == AQ_OK) s = aq_exec_tune(e, eligible);
  if (s == AQ_OK && e->policy == AQ_SCHED_HEFT) s = aq_exec_heft_costs(e, eligible, &costs);
  if (s == AQ_OK && e->policy == AQ_SCHED_HEFT) s = aq_exec_heft_links(e, &links);
  if (s == AQ_OK && e->flags & AQ_EXEC_PROFILE) e->profile_left = UINT32_MAX;
  plan_lanes_t lanes = {e->nlanes, e->nagents,  e->lane_agent, e->lane_kind,
                        e->agent_node, eligible, costs,         links,
                        links ? links + (size_t)e->nagents * e->nagents : NULL, e->agent_workers,
                        links ? links + 2 * (size_t)e->nagents * e->nagents : NULL};
  uint64_t t_place = t0 ? aq_now_ns() : 0;
  if (s == AQ_OK) s = aq_plan_build(&e->plan, e->user_graph, e->policy, &lanes);
  if (s == AQ_OK) s = aq_exec_replicate(e, eligible);
  if (s == AQ_OK) s = aq_exec_fuse(e);
  /* NCCL collectives go on a lane (a stream) of their own, so a bucket's
   * all-reduce runs beside the backward kernels still to come; the two
   * lanes of a GPU order each other with CUDA events (cuda_events.c).
   * AQ_COMM_STREAM=0 keeps them on the kernels' stream. */
  if (s == AQ_OK && aq_setting_u64(AQ_SET_COMM_STREAM)) s = aq_exec_collective_lanes(e);
  if (s == AQ_OK) s = aq_exec_group_updates(e);
  uint64_t t_memory = t0 ? aq_now_ns() : 0;
  free(eligible), free(costs), free(links);
  if (s == AQ_OK && e->profile_left && !(e->stamps = calloc(exec_stamp_slots(e), sizeof(uint64_t))))
    s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an exec");
  if (s == AQ_OK) s = aq_exec_find_inputs(e);
  if (s == AQ_OK) s = aq_exec_plan_memory(e);
  uint64_t t_lower = t0 ? aq_now_ns() : 0;
  if (s == AQ_OK && (s = aq_exec_lower(e, options ? options->queue_size : 0)) != AQ_OK) aq_error_annotate(s, "lower");
  if (s == AQ_OK) s = aq_graph_write_initial_values(e, e->user_graph);
  if (s != AQ_OK) {
    aq_error_saved_t first;
    aq_error_save(&first);
    aq_exec_destroy(e);
    aq_error_restore(s, &first);
    return aq_error_annotate(s, "instantiate");
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

int aq_exec_finished(aq_exec_t *e) {
  if (!e->in_flight) return 1;
  for (uint32_t a = 0; a < e->nlanes; ++a) {
    aq_signal_value_t v = 0;
    if (e->streams[a].done.handle && (aq_signal_load(e->streams[a].done, &v) != AQ_OK || v != 0)) return 0;
  }
  return 1;
}

AQ_API aq_status_t aq_exec_destroy(aq_exec_t *e) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_destroy: exec is NULL");
  if (!aq_live_remove(&live_execs, e))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_destroy: %p is not a live exec (destroyed twice?)", (void *)e);
  if (!aq_exec_finished(e)) {
    aq_live_add(&live_execs, e); /* it was there a moment ago: its slot is free */
    return aq_error(AQ_ERROR_BUSY, "the exec's run is still in flight; wait for it first");
  }
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a) {
    if (e->streams[a].queue.handle) aq_queue_destroy(e->streams[a].queue);
    free(e->streams[a].packets);
  }
  aq_graph_t *g = e->graph;
  if (e->signals) aq_signal_destroy_many(e->signals, g->ntasks);
  for (uint32_t a = 0; a < EXEC_AGENTS_MAX; ++a) {
    if (e->arenas[a]) aq_memory_free(e->arenas[a]);
    if (e->pinned_arenas[a]) aq_memory_free(e->pinned_arenas[a]);
    if (e->kernarg_arenas[a]) aq_memory_free(e->kernarg_arenas[a]);
  }
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a)
    if (e->streams[a].done.handle) aq_signal_destroy(e->streams[a].done);
  free(e->lr_offset);
  free(e->kernargs), free(e->signals), free(e->buffers), free(e->watched);
  free(e->reused_by), free(e->given), free(e->first_reader), free(e->stamps), free(e->covered);
  for (uint32_t a = 0; a < EXEC_LANES_MAX; ++a) free(e->streams[a].prof);
  if (e->runs && (e->policy == AQ_SCHED_HEFT || e->flags & AQ_EXEC_PROFILE)) aq_perf_save();
  aq_plan_free(&e->plan);
  aq_fusion_free(&e->fusion);
  aq_replica_free(&e->replicas);
  if (e->user_graph != e->source) aq_graph_destroy(e->user_graph);
  atomic_fetch_sub(&e->source->execs, 1);
  free(e);
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_run(aq_exec_t *e) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_run: exec is NULL");
  if (!aq_exec_finished(e))
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
  /* Of two threads running the exec at once, one gets BUSY; the claim
   * comes first, so nothing below is read by two threads at once. */
  int seen = atomic_load(&e->in_flight);
  if (seen < 0 || !aq_exec_finished(e) || !atomic_compare_exchange_strong(&e->in_flight, &seen, -1))
    return aq_error(AQ_ERROR_BUSY, "the exec is being started by another thread, or still runs");
  aq_status_t s = e->runs == 0 ? aq_graph_check_parameters(e->user_graph, e->given) : AQ_OK;
  for (uint32_t t = 0; s == AQ_OK && t < g->ntasks; ++t) s = aq_signal_store(e->signals[t], 1);
  for (uint32_t a = 0; s == AQ_OK && a < e->nlanes; ++a)
    if (e->streams[a].done.handle) s = aq_signal_store(e->streams[a].done, 1);
  atomic_store(&e->in_flight, s == AQ_OK);
  if (s != AQ_OK) return s;
  e->runs++;
  e->profiled = e->profile_left > 0 && e->stamps && !e->warm_up;
  e->warm_up = 0;
  if (e->profiled) memset(e->stamps, 0, exec_stamp_slots(e) * sizeof(uint64_t));
  if (e->profiled) aq_exec_profile_gpu_lanes(e, 1);
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

void aq_exec_warm_up_next(aq_exec_t *e) { e->warm_up = 1; }

void aq_exec_profile_from(aq_exec_t *e, uint32_t first) { e->profile_from = first; }

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
    for (uint32_t n = 1; aq_signal_load(e->streams[a].done, &v) == AQ_OK && v != 0; ++n) {
      if (aq_now_ns() >= until) return;
      aq_cpu_relax();
      if (!(n & 255)) sched_yield(); /* a thread the scheduler put on our core (a queue's processor) runs */
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
    aq_exec_profile_gpu_lanes(e, 0);
    aq_exec_profile_record(e);
    if (e->profile_left != UINT32_MAX) e->profile_left--;
    if (!e->profile_left || e->runs % 16 == 0) aq_perf_save(); /* a cache: a failure to write is not the run's */
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
      snprintf(msg, sizeof(msg), "task '%s' failed: %s%s", e->graph->tasks[t].name, aq_last_error(),
               aq_graph_fault_meaning(&e->graph->tasks[t], aq_last_error()));
      first = err;
    }
    aq_signal_get_error(e->signals[t], 1, &err);
  }
  return first == AQ_OK ? AQ_OK : aq_error(first, "%s", msg);
}

AQ_API aq_status_t aq_exec_get_info(aq_exec_t *e, aq_exec_info_t *info) {
  if (!e || !info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_get_info: exec and info are required");
  uint8_t used[EXEC_AGENTS_MAX] = {0};
  uint32_t agents_used = 0;
  for (uint32_t a = 0; a < e->nlanes; ++a)
    if (e->streams[a].npackets && !used[e->lane_agent[a]]++) agents_used++;
  *info = (aq_exec_info_t){.tasks = e->graph->ntasks, .packets = e->packets, .barriers = e->barriers,
                           .agents_used = agents_used, .queues = e->queues_used, .runs = e->runs, .bytes = e->bytes,
                           .local_ranks = e->local_ranks};
  return AQ_OK;
}

/* The learning rate of a user's kernel, from its code object's own
 * description, if it ships one that names the kernel an optimizer. */
static uint32_t user_lr_offset(const task_t *task) {
  const aq_op_table_t *t;
  if (aq_code_object_op_table(task->code_object, &t) != AQ_OK) return aq_error_clear(), AQ_OP_FIELD_NONE;
  for (uint32_t i = 0; i < t->op_count; ++i)
    if (!strcmp(t->ops[i].kernel, task->kernel))
      return t->ops[i].flags & AQ_OP_OPTIMIZER ? t->ops[i].lr_offset : AQ_OP_FIELD_NONE;
  return AQ_OP_FIELD_NONE;
}

/* Per task, where its learning rate sits in its kernarg, as the op
 * libraries describe their optimizers: looked up once per exec. */
static aq_status_t lr_offsets(aq_exec_t *e) {
  aq_graph_t *g = e->graph;
  if (!(e->lr_offset = malloc((g->ntasks ? g->ntasks : 1) * sizeof(uint32_t))))
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "aq_exec_set_learning_rate: no memory");
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    const task_t *task = &g->tasks[t];
    size_t fused = e->fusion.product[t] != UINT32_MAX ? aq_fuse_lr_offset(&e->fusion, t) : SIZE_MAX;
    e->lr_offset[t] = task->kind != TASK_KERNEL          ? AQ_OP_FIELD_NONE
                      : e->fusion.product[t] != UINT32_MAX ? (fused == SIZE_MAX ? AQ_OP_FIELD_NONE : (uint32_t)fused)
                      : task->code_object.handle           ? user_lr_offset(task)
                                                           : aq_oplib_lr_offset(e->lib, task->kernel);
  }
  return AQ_OK;
}

AQ_API aq_status_t aq_exec_set_learning_rate(aq_exec_t *e, float lr) {
  if (!e) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_set_learning_rate: exec is NULL");
  if (!(lr > 0.0f) || !isfinite(lr))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_set_learning_rate: lr %g is not a finite number > 0", (double)lr);
  if (!aq_exec_finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_set_learning_rate: a run is in flight; wait for it first");
  if (!e->lr_offset) AQ_RETURN_IF_ERROR(lr_offsets(e));
  aq_graph_t *g = e->graph;
  uint32_t found = 0;
  /* The live kernargs: a GPU's packet processor reads them at each launch
   * (a CUDA graph that captured the old ones sees them differ and is made
   * again), a CPU worker at each dispatch. */
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    if (e->lr_offset[t] == AQ_OP_FIELD_NONE || !e->kernargs[t]) continue;
    memcpy((uint8_t *)e->kernargs[t] + e->lr_offset[t], &lr, sizeof(lr));
    ++found;
  }
  return found ? AQ_OK : aq_error(AQ_ERROR_NOT_FOUND, "aq_exec_set_learning_rate: the exec has no optimizer task");
}
