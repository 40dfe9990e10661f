/* What a dependency edge between two agents costs, measured once per
 * process for heft's transfer estimates (instead of round figures).
 *
 * An edge costs a latency (the consumer's queue sees the producer's signal:
 * a barrier packet and a wake-up, or a GPU stream waiting on host memory and
 * the host seeing a GPU's write) plus the bytes at the link's bandwidth:
 *   - latency: a ping between queues of the two agents, the median of 31:
 *     a host call stamps the time and completes a signal that a
 *     barrier-AND on the other queue waits for; on a CPU the time after it
 *     is stamped by a host call; a GPU's barrier is waited for by a CPU
 *     queue again, and half the round trip counts for both directions.
 *     Between two lanes of one CPU agent this is heft's lane hop.
 *     Between two GPUs: a chain CPU -> GPU a -> GPU b -> CPU of barriers,
 *     less its two CPU hops (one GPU's completion seen by the other's
 *     stream).
 *   - a barrier's own cost on a CPU lane: a worker processing a barrier-AND
 *     packet whose signal is already done (stamps around 32 of them, less
 *     stamps around none), which a lane pays for each barrier packet its
 *     tasks' producers on other lanes put in it, however soon they finished.
 *   - bandwidth: copies of a few MiB, less a small copy's time: between two
 *     CPU agents' node memory (memcpy), between a GPU's pinned host memory
 *     and its device memory (the driver's copy), each way, and between two
 *     GPUs' device memory (peer to peer over NVLink or PCIe where they can).
 * Results are kept per pair of agent architectures (and whether they are
 * one agent; between two GPUs per pair of GPUs, which may be linked
 * differently), so a process measures each kind of link once. A pair that
 * cannot be measured (no such region, a queue refused) keeps heft's round
 * figures (LINK_*_NS below). */
#ifndef AQ_SCHEDULER_LINKCAL_H_
#define AQ_SCHEDULER_LINKCAL_H_

#include <stdint.h>

#include "aquila/runtime.h"

/* The round figures: a lane hop; a CPU lane's barrier packet; a NUMA hop +
 * 8 GB/s; CPU<->GPU 10 us + 12 GB/s. */
#define LINK_HOP_NS 1000.0
#define LINK_BARRIER_NS 300.0
#define LINK_NUMA_NS 2000.0
#define LINK_NUMA_NS_PER_BYTE (1.0 / 8.0)
#define LINK_PCIE_NS 10000.0
#define LINK_PCIE_NS_PER_BYTE (1.0 / 12.0)

typedef struct link_agent {
  aq_agent_t agent;
  uint8_t kind;    /* aq_agent_kind_t */
  const char *arch; /* the performance models' "driver/isa/units" */
} link_agent_t;

/* Fills lat_ns[a * n + b] and ns_per_byte[a * n + b] for every ordered
 * pair (a == b: a lane hop, no bytes), barrier_ns[a] (0 for a GPU, whose
 * barriers are stream waits) and *measured (pairs measured, not round
 * figures). Never fails: what cannot be measured is estimated. */
void aq_link_calibrate(const link_agent_t *agents, uint32_t n, double *lat_ns, double *ns_per_byte, double *barrier_ns,
                       uint32_t *measured);

#endif
