/* The CPU driver's private state: agents of worker threads that drain AQL
 * queues, the kernels of loaded CPU code objects, and the CPU regions. */
#ifndef AQ_RUNTIME_DRIVERS_CPU_H_
#define AQ_RUNTIME_DRIVERS_CPU_H_

#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "aquila/code_object.h"
#include "aquila/kernel.h"
#include "runtime/queue.h"
#include "runtime/runtime.h"

enum { CPU_QUEUES_MAX = 64 };

/* A loaded kernel; its handle is the packet's kernel_object. */
typedef struct cpu_kernel {
  const aq_kernel_desc_t *desc;
  uint64_t handle;
} cpu_kernel_t;

/* The loaded kernel behind a handle, or NULL. A worker that runs it holds
 * it by its hazard (cpu_worker_t.running_kernel), set before the lookup. */
const cpu_kernel_t *aq_cpu_kernel_lookup(uint64_t kernel_object);

/* A kernel dispatch in flight: its work-groups are shared out among the
 * agent's workers through next/done. */
typedef struct cpu_dispatch {
  const cpu_kernel_t *kernel;
  const void *kernarg;
  uint64_t packet;                 /* its index in the queue, for fault messages */
  uint32_t dims;
  uint32_t workgroup[3], grid[3], groups[3];
  uint64_t total;
  _Atomic uint64_t next;
  _Atomic uint64_t done;
  _Atomic uint32_t fault;
  _Atomic uint32_t helpers;
  _Alignas(64) unsigned char shared[AQ_DISPATCH_SHARED_BYTES]; /* the groups' dispatch_shared */
} cpu_dispatch_t;

typedef struct cpu_queue {
  aq_queue_impl_t *queue;
  _Atomic int owner;               /* a worker is draining (or holds) it */
  _Atomic int detaching;           /* its queue is being destroyed */
  _Atomic uint32_t refs;           /* workers looking at it */
  _Atomic(cpu_dispatch_t *) active;/* a dispatch others may help with */
  _Atomic(const char *) running;   /* the kernel running now, for aq_shut_down */
  _Atomic uint64_t running_packet;
  cpu_dispatch_t dispatch;
  struct cpu_queue *next_free;
} cpu_queue_t;

struct cpu_agent;

/* Aligned to a cache line: each worker writes its own fields all the time. */
typedef struct __attribute__((aligned(64))) cpu_worker {
  struct cpu_agent *agent;
  uint32_t index;
  hwloc_cpuset_t cpuset;
  pthread_t thread;
  void *scratch;
  size_t scratch_size;
  /* The queue this worker drained last, kept (owned, referenced) while it
   * stays busy or for the spin time after: producers to it wake nobody and
   * no other worker contends for it. */
  cpu_queue_t *held;
  uint64_t held_idle_since;
  int ran_shared; /* ran work-groups of a dispatch split over workers since it last slept */
  /* The kernel this worker runs now (its handle; 0: none): a hazard that
   * unloading its code object waits out (aq_cpu_kernel_running), in place
   * of a count on the kernel's handle that every worker running the kernel
   * would update. */
  _Atomic uint64_t running_kernel;
} cpu_worker_t;

typedef struct cpu_agent {
  aq_agent_impl_t *agent;
  hwloc_cpuset_t cpuset;
  int numa_node;
  int bind;                        /* topology is this system: pin threads */
  uint32_t worker_count;
  cpu_worker_t *workers;
  /* Workers past the first `watchers` sleep here, not on the agent's
   * doorbell: only a dispatch split over more workers than that wakes them
   * (cpu_worker.c). */
  uint32_t watchers;
  aq_wake_t reserve;
  _Atomic int running;
  pthread_mutex_t queue_mutex;
  _Atomic(cpu_queue_t *) queues[CPU_QUEUES_MAX];
  _Atomic uint32_t queue_slots;    /* high-water mark of used slots */
  /* Detached queue states are kept for reuse until the agent stops, so a
   * worker holding a stale pointer reads a valid (if idle) state. */
  cpu_queue_t *free_queues;
} cpu_agent_t;

void *aq_cpu_worker_main(void *arg);
/* Whether a worker of some CPU agent runs kernel `handle` now. */
int aq_cpu_kernel_running(uint64_t handle);
/* Runs the packet at the queue's read index; returns 0 if there was none
 * ready (empty, or a barrier still waiting). */
int aq_cpu_process_packet(cpu_queue_t *cq, cpu_worker_t *w);
/* Helps with a dispatch another worker started. */
int aq_cpu_help_dispatch(cpu_queue_t *cq, cpu_worker_t *w);
/* Whether the queue has a packet ready to run. */
int aq_cpu_queue_ready(cpu_queue_t *cq);

aq_status_t aq_cpu_regions_register(cpu_agent_t *a);
aq_status_t aq_cpu_region_allocate(aq_region_impl_t *region, size_t size, void **out_ptr);
void aq_cpu_region_free(aq_region_impl_t *region, void *ptr, size_t size);

void aq_cpu_code_objects_init(void);
void aq_cpu_code_objects_deinit(void);
int aq_cpu_co_recognizes(const void *bytes, size_t size);
aq_status_t aq_cpu_co_load(const char *path, const void *bytes, size_t size, void **out_module,
                        aq_code_object_info_t *info);
void aq_cpu_co_unload(void *module);
const aq_op_table_t *aq_cpu_co_op_table(void *module);
const char *aq_cpu_co_busy(void *module);
aq_status_t aq_cpu_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent,
                             aq_kernel_info_t *out);

#endif /* AQ_RUNTIME_DRIVERS_CPU_H_ */
