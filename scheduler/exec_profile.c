/* Profiled runs: CPU lanes' tasks between time-stamp host calls, GPU
 * lanes' kernels timed by their driver, and each task's time into its
 * performance model afterwards. */
#include <stdlib.h>
#include <string.h>

#include "runtime/wake.h"
#include "scheduler/exec_internal.h"

/* A profiled run's time stamps: a host call that notes the time. */
static aq_status_t stamp_call(void *user, uint64_t slot, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  ((uint64_t *)user)[slot] = aq_now_ns();
  return AQ_OK;
}

/* The lane's stream with each task packet between two stamps (barrier bit
 * set: the end stamp waits for the task). CPU lanes only: a GPU queue runs
 * no host calls. */
aq_status_t aq_exec_profile_stream(aq_exec_t *e, stream_t *st) {
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
      s.header = exec_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 1);
      s.type = AQ_AGENT_DISPATCH_HOST_CALL;
      s.return_address = e->stamps;
      s.arg[0] = (uint64_t)(uintptr_t)stamp_call;
      s.arg[1] = 2ull * (t - 1) + (k == 2);
      memcpy(st->prof + (size_t)st->nprof++ * PKT, &s, PKT);
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

/* After a profiled run: each task's time into its model (copies between
 * replicas on the host are not kernels: left out). */
void aq_exec_profile_record(aq_exec_t *e) {
  for (uint32_t t = 0; t < e->plan.ntasks; ++t) {
    uint32_t lane = e->plan.tasks[t].lane, a = e->lane_agent[lane];
    aq_host_call_fn_t fn = e->graph->tasks[t].fn;
    if (fn == aq_exec_replica_copy || fn == aq_exec_replica_prefetch) continue;
    if (e->fusion.product[t] != UINT32_MAX) continue; /* two ops' time: neither model's sample */
    uint64_t t0 = e->stamps[2 * t], t1 = e->stamps[2 * t + 1];
    if (!t0 || t1 < t0) continue;
    perf_key_t k;
    double bytes;
    aq_exec_task_key(e, t, a, &k, &bytes);
    aq_perf_record(&k, bytes, (double)(t1 - t0));
  }
}
