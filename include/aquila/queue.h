/* AQL queues: rings of 64-byte packets in the formats of <hsa/hsa.h>.
 *
 * Submitting is the HSA protocol: reserve slots by advancing the write index,
 * fill each packet's body, store its first 32 bits (header and setup) last
 * with release semantics, then ring the doorbell. aq_queue_submit() does all
 * of it for one packet; the split calls let a producer batch. Any number of
 * threads may produce into one queue. A full queue makes a producer wait, up
 * to its timeout and then AQ_ERROR_TIMEOUT with nothing reserved; nothing is
 * ever overwritten or dropped.
 *
 * Packet types: kernel dispatch, agent dispatch, barrier-AND and barrier-OR.
 * The header's barrier bit makes a packet wait for every earlier packet of its
 * queue; acquire and release fence scopes order memory as the HSA spec says.
 * The read index advances as packets complete.
 *
 * CPU agents take one agent-dispatch type, AQ_AGENT_DISPATCH_HOST_CALL: arg[0]
 * holds an aq_host_call_fn_t, which is called with return_address and
 * arg[1..3]; a non-AQ_OK return fails the packet like a kernel fault.
 * GPU agents (cuda) take AQ_AGENT_DISPATCH_STREAM_CALL: arg[0] holds an
 * aq_stream_call_fn_t, called by the queue's packet processor with the
 * packet and the queue's stream (a CUstream), in packet order, so that work
 * it puts on the stream (a NCCL collective) is ordered by the queue's
 * barrier packets like a kernel; the completion follows it on the stream.
 */
#ifndef AQUILA_QUEUE_H_
#define AQUILA_QUEUE_H_

#include <hsa/hsa.h>
#include <stdint.h>

#include "aquila/runtime.h"
#include "aquila/signal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aq_queue { uint64_t handle; } aq_queue_t;

/* aq_queue_options_t.flags. AQ_QUEUE_HIGH_PRIORITY: where the agent can,
 * it serves this queue's work ahead of its other queues' (a GPU: the
 * stream's greatest priority, so a NCCL collective's blocks get SMs as
 * soon as any free, not after the kernels queued beside it); an agent
 * that cannot (a CPU's workers) runs the queue as any other. */
enum { AQ_QUEUE_HIGH_PRIORITY = 1u << 0 };

typedef struct aq_queue_options {
  uint32_t size;      /* packets, a power of two; 0 = 4096 */
  uint32_t flags;     /* AQ_QUEUE_*; 0 for none */
} aq_queue_options_t;

typedef struct aq_queue_info {
  aq_agent_t agent;
  uint32_t size;
  uint32_t id;
  void *base_address;          /* the ring: size * 64 bytes */
  aq_signal_t doorbell;        /* store the last written index to ring it */
  uint64_t read_index;
  uint64_t write_index;
  uint64_t packets_completed;
  aq_status_t error;           /* the last packet failure seen, AQ_OK if none */
  /* GPU queues: packets that ran as part of a CUDA graph, launched once for
   * a stretch of kernel dispatches that repeats (AQ_CUDA_GRAPHS). */
  uint64_t packets_in_graphs;
} aq_queue_info_t;

#define AQ_AGENT_DISPATCH_HOST_CALL 0x8000u

typedef aq_status_t (*aq_host_call_fn_t)(void *return_address, uint64_t arg1,
                                         uint64_t arg2, uint64_t arg3);

#define AQ_AGENT_DISPATCH_STREAM_CALL 0x8001u

typedef aq_status_t (*aq_stream_call_fn_t)(const hsa_agent_dispatch_packet_t *packet, void *stream);

aq_status_t aq_queue_create(aq_agent_t agent, const aq_queue_options_t *options,
                            aq_queue_t *out_queue);
/* Fails with AQ_ERROR_BUSY while packets are still in flight. */
aq_status_t aq_queue_destroy(aq_queue_t queue);
aq_status_t aq_queue_get_info(aq_queue_t queue, aq_queue_info_t *info);

/* Reserves count consecutive slots, waiting up to timeout_ns for room. */
aq_status_t aq_queue_reserve(aq_queue_t queue, uint32_t count, uint64_t timeout_ns,
                             uint64_t *out_first_index);
/* The address of the slot for a reserved index. */
aq_status_t aq_queue_slot(aq_queue_t queue, uint64_t index, void **out_packet);
/* Stores header | setup << 16 with release semantics: the packet is live. */
aq_status_t aq_queue_publish(aq_queue_t queue, uint64_t index, uint16_t header,
                             uint16_t setup);
/* Rings the doorbell for packets up to and including index. */
aq_status_t aq_queue_ring(aq_queue_t queue, uint64_t index);
/* Reserve + copy the 64-byte packet + publish its header last + ring. */
aq_status_t aq_queue_submit(aq_queue_t queue, const void *packet, uint64_t timeout_ns,
                            uint64_t *out_index);
/* Waits until every packet written so far has completed. */
aq_status_t aq_queue_wait_idle(aq_queue_t queue, uint64_t timeout_ns);

/* Builds a packet header from its fields (type, barrier bit, fence scopes). */
static inline uint16_t aq_packet_header(hsa_packet_type_t type, int barrier,
                                        hsa_fence_scope_t acquire,
                                        hsa_fence_scope_t release) {
  return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) |
                    ((barrier ? 1 : 0) << HSA_PACKET_HEADER_BARRIER) |
                    (acquire << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (release << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

#ifdef __cplusplus
}
#endif
#endif /* AQUILA_QUEUE_H_ */
