/* The cuda driver's private state: one agent per NVIDIA GPU, a packet
 * processor thread per queue feeding a CUDA stream, kernels of loaded
 * cubins/fatbins. */
#ifndef AQ_RUNTIME_DRIVERS_CUDA_H_
#define AQ_RUNTIME_DRIVERS_CUDA_H_

#include <pthread.h>
#include <stdatomic.h>

#include "aquila/code_object.h"
#include "runtime/processor.h"
#include "runtime/drivers/cuda_api.h"
#include "runtime/profile.h"
#include "runtime/queue.h"
#include "runtime/trace.h"

typedef struct cuda_agent {
  aq_agent_impl_t *agent;
  CUdevice device;
  CUcontext context;
  _Atomic int faulted; /* a sticky error: the agent needs a reset */
  int concurrent_managed; /* prefetch and advice work on this GPU */
  uint32_t index;         /* among the driver's agents */
  /* Bit b: this GPU's kernels reach GPU b's device memory (peer access,
   * enabled at start where the GPUs have it: NVLink, or PCIe P2P). */
  uint64_t peers;
  /* Copy streams, apart from the kernel queues: [0] to the GPU, [1] from it.
   * The mutex keeps each copy's waits, copy and completion write together. */
  CUstream copy_streams[2];
  pthread_mutex_t copy_mutex;
} cuda_agent_t;

/* A kernel as one agent runs it; its handle is the packet's kernel_object. */
typedef struct cuda_kernel {
  uint64_t handle;
  CUfunction function;
  cuda_agent_t *agent;
  const char *name;
  uint32_t kernarg_size;
  /* The dynamic shared memory (group segment) the function may launch with
   * past CUDA's default 48 KB, once a packet asked for it. */
  _Atomic uint32_t group_limit;
} cuda_kernel_t;

cuda_kernel_t *aq_cuda_kernel_lookup(uint64_t kernel_object);

/* A completion written by the stream but not yet seen: if the GPU faults,
 * the stream never writes it, and the processor fails it instead. */
typedef struct cuda_pending {
  aq_signal_slot_t *slot;
  int64_t next;
  uint32_t host_sets; /* the slot's host_sets when next was computed */
  const char *what;
} cuda_pending_t;

enum { CUDA_PENDING_MAX = 1024 };

/* A traced kernel in flight: events around it on the stream, and the
 * record to complete once the GPU has timed it. */
typedef struct cuda_timed {
  CUevent start, end;
  aq_trace_event_t ev;
  aq_profile_sink_t sink; /* the queue's profile sink when it was launched */
  int anchored;           /* a reference event was on the stream before it */
} cuda_timed_t;

enum { CUDA_TIMED_MAX = 256 };

/* GPU times on the host clock: a reference event whose host time is known
 * anchors cuEventElapsedTime. The ring is the processor thread's alone;
 * others ask for a flush (aq_trace_stop) through flush_req. */
typedef struct cuda_timing {
  cuda_timed_t ring[CUDA_TIMED_MAX];
  uint32_t head, count, created;
  CUevent ref;
  uint64_t ref_ns;
  uint64_t last_end_ns; /* the last timed kernel's end (host clock): unanchored ones start after it */
  _Atomic uint64_t flush_req, flush_ack;
  /* Profiling (runtime/profile.h): every kernel is timed while fn is set. */
  _Atomic(aq_profile_fn) profile_fn;
  void *_Atomic profile_user;
  /* The gate (aq_cuda_timing_begin): the stream waits for the host to write
   * gate_seq here. NULL: no gate, timed kernels include their launch. */
  volatile uint64_t *gate;
  CUdeviceptr gate_dev;
  uint64_t gate_seq;
  int gate_closed;
} cuda_timing_t;

typedef struct cuda_queue {
  aq_queue_impl_t *queue;
  cuda_pending_t pending[CUDA_PENDING_MAX];
  uint32_t pending_head, pending_count;
  /* The stream's last work writes no completion (a graph's last kernel
   * whose signal nobody watches): only asking the stream tells when it is
   * done. */
  int tail_untracked;
  cuda_agent_t *agent;
  CUstream stream;
  aq_processor_t proc; /* the thread feeding the stream */
  cuda_timing_t timing;
  struct cuda_queue *next_traced; /* the agent's queues, for trace flushes */
  struct cuda_graphs *graphs;     /* repeating stretches as CUDA graphs; NULL: off */
  struct cuda_events *events;     /* the events it records for another stream of the GPU */
} cuda_queue_t;

/* The queue's kernels are being profiled: the processor times each one
 * (cuda_timing.c) and launches it alone, as when tracing. */
static inline int cuda_profiling(struct cuda_queue *cq) {
  return atomic_load_explicit(&cq->timing.profile_fn, memory_order_relaxed) != NULL;
}

/* The device address of a signal's value (the pool is registered). */
CUdeviceptr aq_cuda_signal_address(const aq_signal_slot_t *slot);

void *aq_cuda_queue_main(void *arg);

/* cuda_events.c: after s's completion write (under host_sets `sets`) went
 * on cq's stream, records s's event there if another stream of the GPU
 * waits for s. */
void aq_cuda_event_record(cuda_queue_t *cq, aq_signal_slot_t *s, uint32_t sets);
/* s is done, or its event is recorded for this run: a stream may be
 * ordered after it. */
int aq_cuda_event_ready(const aq_signal_slot_t *s);
/* Orders cq's stream after s's recorded event (nothing if s is done). */
CUresult aq_cuda_event_wait(cuda_queue_t *cq, const aq_signal_slot_t *s);
void aq_cuda_events_release(cuda_queue_t *cq);
/* Launches one kernel dispatch packet on cq->stream; a fault id, 0 if launched. */
uint32_t aq_cuda_dispatch(cuda_queue_t *cq, const hsa_kernel_dispatch_packet_t *p);
/* A dispatch packet's blocks and block size for cuLaunchKernel; non-zero,
 * with why, where CUDA could not launch it (a zero size, more blocks than
 * 2^31 - 1 along x or 65535 along y or z). */
int aq_cuda_launch_shape(const hsa_kernel_dispatch_packet_t *p, uint32_t blocks[3], uint32_t wg[3], char *why,
                         size_t room);

/* cuda_graph.c: stretches of kernel dispatches that repeat, replayed as CUDA
 * graphs. init reads AQ_CUDA_GRAPHS (a bad value is an error); the processor
 * thread calls replay where a kernel packet is next (how many packets one
 * graph launch took, 0: launch it yourself; what names it in faults, label
 * in traces) and observe after each packet it
 * processed otherwise (the kernel it launched, NULL for anything else). */
typedef struct cuda_graphs cuda_graphs_t;
aq_status_t aq_cuda_graph_init(cuda_queue_t *cq);
uint32_t aq_cuda_graph_replay(cuda_queue_t *cq, uint64_t index, const char **what, const char **label);
/* AQ_CUDA_GRAPHS=traced: graphs replay in traced runs too, one slice each. */
int aq_cuda_graph_traced(const cuda_queue_t *cq);
void aq_cuda_graph_observe(cuda_queue_t *cq, const hsa_kernel_dispatch_packet_t *p);
void aq_cuda_graph_release(cuda_queue_t *cq);

/* cuda_timing.c: the processor thread brackets a traced kernel with
 * aq_cuda_timing_begin/end; aq_cuda_timing_resolve records those the GPU has
 * finished (all of them, waiting, when block is set) and answers flushes. */
/* With gate set and the stream idle, the kernel's start event sits behind
 * a gate that aq_cuda_timing_open opens once the kernel is launched (or its
 * launch failed): the start event then times the kernel, not its launch. */
cuda_timed_t *aq_cuda_timing_begin(struct cuda_queue *cq, int gate);
/* Takes the stream's time reference if it is idle and due for one (begin
 * does too): a stream that is never idle at a timed launch, as one whose
 * every collective follows an event wait, anchors at its barriers. */
void aq_cuda_timing_anchor(struct cuda_queue *cq);
void aq_cuda_timing_open(struct cuda_queue *cq);
void aq_cuda_timing_end(struct cuda_queue *cq, cuda_timed_t *t, const aq_trace_event_t *ev);
int aq_cuda_timing_resolve(struct cuda_queue *cq, int block);
int aq_cuda_timing_owed(const struct cuda_queue *cq);
void aq_cuda_timing_track(struct cuda_queue *cq);
void aq_cuda_timing_release(struct cuda_queue *cq);
/* From any thread: every queue records what it has timed (bounded wait). */
void aq_cuda_timing_flush_all(void);
/* cuda_profile.c: a queue's profile sink (runtime/profile.h). */
aq_status_t aq_cuda_queue_profile(aq_queue_impl_t *queue, const aq_profile_sink_t *sink);

/* aquila/unified.h on CUDA memory, and aq_memory_copy (cuda_memory.c). */
aq_status_t aq_cuda_copy_streams_create(cuda_agent_t *a);
void aq_cuda_copy_streams_destroy(cuda_agent_t *a, const char *name);
aq_status_t aq_cuda_copy(aq_region_impl_t *region, void *dst, const void *src, size_t size);
aq_status_t aq_cuda_copy_async(aq_region_impl_t *region, void *dst, const void *src, size_t size,
                            aq_signal_slot_t *const *deps, uint32_t num_deps, aq_signal_slot_t *completion);
aq_status_t aq_cuda_prefetch(aq_region_impl_t *region, const void *ptr, size_t size, aq_agent_impl_t *dest,
                          aq_signal_slot_t *completion);
aq_status_t aq_cuda_advise(aq_region_impl_t *region, const void *ptr, size_t size, int advice,
                        aq_agent_impl_t *agent);

/* Makes the agent's context current on this thread. */
aq_status_t aq_cuda_bind(cuda_agent_t *a);
uint32_t aq_cuda_agent_count(void);
cuda_agent_t *aq_cuda_agent_at(uint32_t index);

int aq_cuda_co_recognizes(const void *bytes, size_t size);
aq_status_t aq_cuda_co_load(const char *path, const void *bytes, size_t size, void **out_module,
                         aq_code_object_info_t *info);
void aq_cuda_co_unload(void *module);
aq_status_t aq_cuda_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent, aq_kernel_info_t *out);
void aq_cuda_code_objects_init(void);
void aq_cuda_code_objects_deinit(void);

#endif
