/* The plan's dependency inference (scheduler/plan.c) on its own: the
 * RAW, WAR and WAW edges it finds, each once and in the order the tasks
 * touched the tensor, and edges added after planning (fusion's), which must
 * not disturb any other task's list (they share one pool). */
#include "scheduler/plan.h"

#include "units.h"

static aq_tensor_t vec(aq_graph_t *g, const char *name, aq_tensor_role_t role) {
  aq_tensor_t t;
  AQ_ASSERT_OK(aq_tensor_create(g, name, AQ_DTYPE_F32, role, 1, (int64_t[]){4}, &t));
  return t;
}

/* A task reading r (0: none) and writing w. */
static uint32_t op(aq_graph_t *g, aq_tensor_t r1, aq_tensor_t r2, aq_tensor_t w) {
  aq_kernel_task_t k = {.name = "k", .kernel = "aq_noop", .shape = {{1, 1, 1}, {1, 1, 1}}, .write_count = 1, .agent = -1};
  if (r1.id) k.reads[k.read_count] = r1, k.read_offsets[k.read_count++] = UINT32_MAX;
  if (r2.id) k.reads[k.read_count] = r2, k.read_offsets[k.read_count++] = UINT32_MAX;
  k.writes[0] = w, k.write_offsets[0] = UINT32_MAX;
  aq_task_t t;
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, &t));
  return t.id - 1;
}

static void assert_preds(const plan_t *p, uint32_t t, const uint32_t *want, uint32_t n) {
  cr_assert_eq(p->tasks[t].npreds, n, "task %u has %u predecessors, not %u", t, p->tasks[t].npreds, n);
  for (uint32_t j = 0; j < n; ++j)
    cr_assert_eq(p->tasks[t].preds[j], want[j], "task %u: predecessor %u is %u, not %u", t, j, p->tasks[t].preds[j],
                 want[j]);
}

Test(plan, edges_are_inferred_once_each_in_touch_order) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t in = vec(g, "in", AQ_ROLE_INPUT), a = vec(g, "a", AQ_ROLE_ACTIVATION), b = vec(g, "b", AQ_ROLE_ACTIVATION);
  aq_tensor_t c = vec(g, "c", AQ_ROLE_ACTIVATION), none = {0};
  uint32_t t0 = op(g, in, none, a);     /* writes a */
  uint32_t t1 = op(g, a, none, b);      /* RAW on t0 */
  uint32_t t2 = op(g, a, a, c);         /* RAW on t0, once though read twice */
  uint32_t t3 = op(g, b, c, a);         /* RAW t1, t2; WAW t0; WAR t1, t2 (already there) */
  plan_t p;
  AQ_ASSERT_OK(units_plan(g, 2, &p));
  assert_preds(&p, t0, NULL, 0);
  assert_preds(&p, t1, (uint32_t[]){t0}, 1);
  assert_preds(&p, t2, (uint32_t[]){t0}, 1);
  assert_preds(&p, t3, (uint32_t[]){t1, t2, t0}, 3);
  aq_plan_free(&p);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(plan, an_edge_appended_later_leaves_the_other_lists_whole) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t in = vec(g, "in", AQ_ROLE_INPUT), none = {0}, x[6];
  for (int i = 0; i < 6; ++i) x[i] = vec(g, NULL, AQ_ROLE_ACTIVATION);
  op(g, in, none, x[0]);
  op(g, in, none, x[1]);
  for (int i = 2; i < 6; ++i) op(g, x[i - 2], x[i - 1], x[i]); /* each after the two before it */
  plan_t p;
  AQ_ASSERT_OK(units_plan(g, 2, &p));
  /* task 2's list sits right before task 3's in the pool: growing it must
   * move it out, not run into its neighbour */
  for (uint32_t q = 0; q < 2; ++q) AQ_ASSERT_OK(aq_plan_append_pred(&p.tasks[2], q == 0 ? 1 : 0));
  AQ_ASSERT_OK(aq_plan_append_pred(&p.tasks[2], 1));
  cr_assert_eq(p.tasks[2].npreds, 5);
  for (uint32_t t = 3; t < 6; ++t) assert_preds(&p, t, (uint32_t[]){t - 2, t - 1}, 2);
  aq_plan_free(&p);
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
