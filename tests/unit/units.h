/* What the suites that drive the scheduler's pure parts directly share
 * (memplan.c, fuse_pairs.c; this program links the static library, whose
 * internal symbols are reachable). Graphs are built by hand or through the
 * public API, and planned by aq_plan_build on lanes of one CPU agent, as an
 * exec would. */
#ifndef AQ_TESTS_UNIT_UNITS_H_
#define AQ_TESTS_UNIT_UNITS_H_

#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"
#include "scheduler/plan.h"

enum { UNITS_LANES_MAX = 8 };

/* g planned with the eager policy on nlanes lanes of one CPU agent. */
static inline aq_status_t units_plan(aq_graph_t *g, uint32_t nlanes, plan_t *p) {
  uint32_t lane_agent[UNITS_LANES_MAX] = {0};
  uint8_t lane_kind[UNITS_LANES_MAX];
  int32_t node = 0;
  memset(lane_kind, AQ_AGENT_KIND_CPU, sizeof(lane_kind));
  uint8_t *eligible = malloc(g->ntasks ? g->ntasks : 1);
  cr_assert(eligible && nlanes <= UNITS_LANES_MAX);
  memset(eligible, 1u << AQ_AGENT_KIND_CPU, g->ntasks);
  plan_lanes_t lanes = {.nlanes = nlanes, .nagents = 1, .lane_agent = lane_agent, .lane_kind = lane_kind,
                        .agent_node = &node, .eligible = eligible};
  aq_status_t s = aq_plan_build(p, g, AQ_SCHED_EAGER, &lanes);
  free(eligible);
  return s;
}

#endif
