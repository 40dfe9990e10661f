/* Profiled runs: CPU lanes' tasks between time-stamp host calls, GPU
 * lanes' kernels timed by their driver, and each task's time into its
 * performance model afterwards. */
#include <stdlib.h>
#include <string.h>

#include "runtime/wake.h"
#include "scheduler/exec_internal.h"

/* A task's time is never modelled below this: its dispatch alone costs
 * more, and a noisy empty pair must not make a task look free. */
#define PROFILE_LEAST_NS 20.0

/* A profiled run's time stamps: a host call that notes the time. */
static aq_status_t stamp_call(void *user, uint64_t slot, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  ((uint64_t *)user)[slot] = aq_now_ns();
  return AQ_OK;
}

static void stamp_packet(aq_exec_t *e, uint64_t slot, int barrier, uint8_t *out) {
  hsa_agent_dispatch_packet_t s;
  memset(&s, 0, sizeof(s));
  s.header = exec_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, barrier);
  s.type = AQ_AGENT_DISPATCH_HOST_CALL;
  s.return_address = e->stamps;
  s.arg[0] = (uint64_t)(uintptr_t)stamp_call;
  s.arg[1] = slot;
  memcpy(out, &s, PKT);
}

/* Where lane c's empty pairs of stamps go, after the tasks'. */
static size_t empty_pair_slot(const aq_exec_t *e, uint32_t c, uint32_t k) {
  return 2 * ((size_t)e->graph->ntasks + (size_t)c * PROFILE_EMPTY_PAIRS + k);
}

/* The lane's stream with each task packet between two stamps (barrier bit
 * set: the end stamp waits for the task), after PROFILE_EMPTY_PAIRS pairs
 * with nothing between. CPU lanes only: a GPU queue runs no host calls. */
aq_status_t aq_exec_profile_stream(aq_exec_t *e, stream_t *st) {
  st->prof = malloc(((size_t)st->npackets * 3 + 2 * PROFILE_EMPTY_PAIRS) * PKT);
  if (!st->prof) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for packets");
  st->nprof = 0;
  uint32_t lane = (uint32_t)(st - e->streams);
  for (uint32_t k = 0; k < 2 * PROFILE_EMPTY_PAIRS; ++k)
    stamp_packet(e, empty_pair_slot(e, lane, k / 2) + k % 2, k % 2, st->prof + (size_t)st->nprof++ * PKT);
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
      stamp_packet(e, 2ull * (t - 1) + (k == 2), 1, st->prof + (size_t)st->nprof++ * PKT);
    }
  }
  return AQ_OK;
}

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
void aq_exec_profile_gpu_lanes(aq_exec_t *e, int on) {
  e->gpu_sink = (aq_profile_sink_t){gpu_stamp, e};
  for (uint32_t c = 0, flushed = on; c < e->nlanes; ++c) {
    if (e->lane_kind[c] != AQ_AGENT_KIND_GPU || !e->streams[c].npackets) continue;
    if (!flushed++) aq_profile_flush(); /* the run's times, before the sink goes */
    aq_queue_profile(e->streams[c].queue, on ? &e->gpu_sink : NULL);
  }
}

/* What lane c's pair of stamps costs by itself in this run (the least of
 * its empty pairs), or 0 (a GPU lane, or none seen). */
static double empty_pair_ns(const aq_exec_t *e, uint32_t c) {
  double least = 0;
  for (uint32_t k = 0; e->lane_kind[c] == AQ_AGENT_KIND_CPU && k < PROFILE_EMPTY_PAIRS; ++k) {
    uint64_t t0 = e->stamps[empty_pair_slot(e, c, k)], t1 = e->stamps[empty_pair_slot(e, c, k) + 1];
    if (t0 && t1 >= t0 && (least == 0 || (double)(t1 - t0) < least)) least = (double)(t1 - t0);
  }
  return least;
}

/* After a profiled run: each task's time into its model, less what its
 * stamps cost (copies between replicas on the host are not kernels: left
 * out). A tiny task's model was several times its run otherwise, which
 * made spreading such tasks over lanes look cheaper than it is. */
void aq_exec_profile_record(aq_exec_t *e) {
  double pair_ns[EXEC_LANES_MAX];
  for (uint32_t c = 0; c < e->nlanes; ++c) pair_ns[c] = empty_pair_ns(e, c);
  for (uint32_t t = e->profile_from; t < e->plan.ntasks; ++t) {
    uint32_t lane = e->plan.tasks[t].lane, a = e->lane_agent[lane];
    aq_host_call_fn_t fn = e->graph->tasks[t].fn;
    if (fn == aq_exec_replica_copy || fn == aq_exec_replica_prefetch) continue;
    if (e->fusion.product[t] != UINT32_MAX || e->fusion.lead[t] != UINT32_MAX) continue; /* several ops' time */
    uint64_t t0 = e->stamps[2 * t], t1 = e->stamps[2 * t + 1];
    if (!t0 || t1 < t0) continue;
    perf_key_t k;
    double bytes;
    aq_exec_task_key(e, t, a, &k, &bytes);
    double ns = (double)(t1 - t0) - pair_ns[lane];
    aq_perf_record(&k, bytes, ns > PROFILE_LEAST_NS ? ns : PROFILE_LEAST_NS);
  }
}
