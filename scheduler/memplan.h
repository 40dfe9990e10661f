/* Memory planning by lifetime: activations share buffers. A buffer an
 * activation A held is given to a later activation B of the same memory
 * domain only when every task touching A is an ancestor of B's first
 * writer: whatever lanes the tasks run on, A is dead before B is born, and
 * no false dependency is added. Pure graph work: testable without agents. */
#ifndef AQ_SCHEDULER_MEMPLAN_H_
#define AQ_SCHEDULER_MEMPLAN_H_

#include <stddef.h>

#include "scheduler/plan.h"

/* Activations smaller than this keep their own buffer: reusing them saves
 * nothing and their count would make planning cost more than it saves. */
enum { MEMPLAN_MIN_BYTES = 4096, MEMPLAN_ALIGN = 64 };

typedef struct memplan {
  size_t *offset;     /* per tensor id: offset in its domain's arena */
  size_t *total;      /* per domain: the arena's size */
  uint32_t *reused_by;/* per tensor id: a later tensor given its buffer, 0 if none */
  size_t saved;       /* bytes reuse saved */
} memplan_t;

/* domain[t]: the arena of tensor t (t >= 1), < ndomains. reusable[t]: may
 * share (an activation of this exec). Tensors that are never read after
 * their last write (a loss, an output the user reads) are never given
 * away. Fills mp (allocates its arrays; aq_memplan_free frees them). */
aq_status_t aq_memplan_build(memplan_t *mp, const aq_graph_t *g, const plan_t *p, const uint32_t *domain,
                          uint32_t ndomains, const uint8_t *reusable);
void aq_memplan_free(memplan_t *mp);

#endif
