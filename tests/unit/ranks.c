/* In-process data parallelism's expansion (scheduler/ranks.c) on its own:
 * a training graph over a communicator of two GPUs of this process, made
 * by hand with CPU agents in the GPUs' places (no NCCL is loaded: its graph
 * ops are made, never run), expanded into one part per local rank. */
#include <pthread.h>
#include <stdio.h>

#include "kernels/comm/call.h"
#include "runtime/comm.h"
#include "runtime/queue.h"
#include "scheduler/exec_internal.h"
#include "scheduler/ranks.h"
#include "units.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(ranks, .init = setup, .fini = teardown);

static aq_comm_t *fake_gpus_comm(uint32_t agent0, uint32_t agent1) {
  aq_comm_t *c = calloc(1, sizeof(*c));
  cr_assert(c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->keep_lock, NULL);
  c->size = c->local_ranks = c->ngpus = 2, c->gpu_agent[0] = agent0, c->gpu_agent[1] = agent1;
  return c;
}

/* aq_comm_destroy leaves NCCL only where there is some. */
static void destroy_fake(aq_comm_t *c) {
  c->ngpus = 0;
  AQ_ASSERT_OK(aq_comm_destroy(c));
}

static uint32_t cpu_agent_index(void) {
  aq_agent_info_t info;
  AQ_ASSERT_OK(aq_agent_get_info(first_cpu_agent(), &info));
  return info.index;
}

static aq_status_t no_op_host(void *user, uint64_t a, uint64_t b, uint64_t c) {
  (void)user, (void)a, (void)b, (void)c;
  return AQ_OK;
}

/* A one-layer classifier through its backward pass: inputs x (rows x
 * cols) and their labels, a parameter w (cols x 2), the loss. */
typedef struct classifier {
  aq_tensor_t in, labels, w, loss;
} classifier_t;

static aq_graph_t *classifier(int64_t rows, int64_t cols, classifier_t *c) {
  aq_graph_t *g;
  aq_tensor_t logits;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){rows, cols}, &c->in));
  AQ_ASSERT_OK(aq_tensor_create(g, "labels", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){rows}, &c->labels));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){cols, 2}, &c->w));
  AQ_ASSERT_OK(aq_op_matmul(g, c->in, c->w, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, c->labels, &c->loss));
  AQ_ASSERT_OK(aq_graph_backward(g, c->loss));
  return g;
}

/* The graph of a communicator of several GPUs of this process is rank 0's
 * part; expanded, each local rank has a copy of every tensor and task on
 * its own GPU, edges and gradients within its own part, and a host task
 * runs once (touching no tensor: one that does is refused by name). */
Test(ranks, each_rank_gets_a_copy_on_its_gpu) {
  uint32_t cpu = cpu_agent_index();
  aq_comm_t *c = fake_gpus_comm(cpu, cpu + 1), *other = fake_gpus_comm(cpu, cpu);
  aq_graph_t *x;
  classifier_t m;
  aq_graph_t *g = classifier(3, 5, &m);
  aq_tensor_t in = m.in, w = m.w, loss = m.loss, grad;
  AQ_ASSERT_OK(aq_graph_data_parallel(g, c, NULL));
  AQ_ASSERT_OK(aq_graph_gradient(g, w, &grad));
  AQ_ASSERT_OK(aq_op_sgd(g, w, grad, &(aq_sgd_options_t){.lr = 0.1f}));
  AQ_ASSERT_FAILS(aq_op_allreduce(g, other, in, AQ_REDUCE_SUM), AQ_ERROR_INVALID_ARGUMENT, "another communicator");
  aq_task_t loader;
  AQ_ASSERT_OK(aq_graph_add_host(g, &(aq_host_task_t){.name = "loader", .fn = no_op_host, .agent = -1}, &loader));
  cr_assert_eq(aq_graph_local_ranks(g), 2);
  AQ_ASSERT_OK(aq_graph_expand_ranks(g, &x));
  uint32_t per = g->ntensors - 1, K = g->ntasks;
  cr_assert_eq(x->ntensors, 2 * per + 1);
  cr_assert_eq(x->ntasks, 2 * K - 1, "%u tasks from %u (the host task once)", x->ntasks, K);
  cr_assert_str_eq(x->tensors[w.id + per].name, "w@r1");
  cr_assert_eq(x->tensors[w.id + per].grad, grad.id + per, "rank 1's w has rank 0's gradient");
  uint32_t streams = 0;
  for (uint32_t t = 0; t < K - 1; ++t) {
    const task_t *a = &g->tasks[t], *b = &x->tasks[K + t];
    cr_assert_eq(x->tasks[t].agent, (int32_t)cpu, "rank 0's '%s' is not on its GPU", a->name);
    cr_assert_eq(b->agent, (int32_t)cpu + 1, "rank 1's '%s' is not on its GPU", b->name);
    cr_assert(!strncmp(b->name, a->name, strlen(a->name)) && strstr(b->name, "@r1"), "'%s' from '%s'", b->name, a->name);
    for (uint32_t r = 0; r < a->nreads; ++r) cr_assert_eq(b->reads[r], a->reads[r] + per);
    for (uint32_t e = 0; e < a->nafter_all; ++e) cr_assert_eq(b->after_all[e], a->after_all[e] + K);
    if (a->kind == TASK_STREAM) {
      aq_tensor_call_args_t ka, kb;
      memcpy(&ka, a->kernarg, sizeof(ka)), memcpy(&kb, b->kernarg, sizeof(kb));
      cr_assert_neq(ka.user, kb.user, "'%s' shares its collective's state with rank 0", b->name);
      ++streams;
    }
  }
  cr_assert_eq(streams, 2, "a broadcast and a bucket per rank");
  aq_graph_destroy(x);
  /* A host task that reads a tensor knows only rank 0's. */
  aq_task_t reader;
  aq_host_task_t h = {.name = "peek", .fn = no_op_host, .agent = -1, .reads = {loss}, .read_count = 1};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, &reader));
  AQ_ASSERT_FAILS(aq_graph_expand_ranks(g, &x), AQ_ERROR_INVALID_GRAPH, "host task 'peek'");
  aq_exec_t *e;
  AQ_ASSERT_FAILS(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH, "host task 'peek'");
  aq_graph_destroy(g);
  destroy_fake(other);
  destroy_fake(c);
}


/* The expanded step runs: with no collective between them (the graph's
 * communicator set by hand), each rank trains on its own inputs from the
 * parameters every rank was written, as a graph of its own would. */
Test(ranks, each_rank_trains_on_its_own_inputs) {
  uint32_t cpu = cpu_agent_index();
  aq_comm_t *c = fake_gpus_comm(cpu, cpu);
  classifier_t m;
  aq_graph_t *g = classifier(4, 3, &m);
  aq_tensor_t in = m.in, labels = m.labels, w = m.w, grad, w1, in1, labels1;
  AQ_ASSERT_OK(aq_graph_gradient(g, w, &grad));
  AQ_ASSERT_OK(aq_op_sgd(g, w, grad, &(aq_sgd_options_t){.lr = 0.5f}));
  g->ranks_comm = c;
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  cr_assert_eq(info.local_ranks, 2);
  cr_assert_eq(info.tasks, 2 * g->ntasks, "%u tasks for two ranks of %u", info.tasks, g->ntasks);
  AQ_ASSERT_OK(aq_exec_local_tensor(e, w, 1, &w1));
  AQ_ASSERT_OK(aq_exec_local_tensor(e, in, 1, &in1));
  AQ_ASSERT_OK(aq_exec_local_tensor(e, labels, 1, &labels1));
  AQ_ASSERT_FAILS(aq_exec_local_tensor(e, w, 2, &w1), AQ_ERROR_INVALID_ARGUMENT, "local rank 2");
  AQ_ASSERT_FAILS(aq_exec_local_tensor(e, w1, 1, &w1), AQ_ERROR_INVALID_HANDLE, "not one of the graph's");
  AQ_ASSERT_OK(aq_exec_local_tensor(e, w, 1, &w1));
  float w0[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, x0[12], x1[12], a[6], b[6];
  int32_t y0[4] = {0, 1, 1, 0}, y1[4] = {1, 1, 0, 0};
  for (int i = 0; i < 12; ++i) x0[i] = 0.1f * (float)i, x1[i] = 1.0f - 0.05f * (float)i;
  AQ_ASSERT_OK(aq_exec_write(e, w, w0, sizeof(w0))); /* every rank's */
  AQ_ASSERT_OK(aq_exec_write(e, in, x0, sizeof(x0)));
  AQ_ASSERT_OK(aq_exec_write(e, labels, y0, sizeof(y0)));
  AQ_ASSERT_OK(aq_exec_write(e, in1, x1, sizeof(x1)));
  AQ_ASSERT_OK(aq_exec_write(e, labels1, y1, sizeof(y1)));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_read(e, w, a, sizeof(a)));
  AQ_ASSERT_OK(aq_exec_read(e, w1, b, sizeof(b)));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* The same step alone, on rank 1's inputs, then on rank 0's: on the CPU
   * agent the ranks ran on (a GPU's products round differently). */
  g->ranks_comm = NULL;
  float r[6];
  aq_exec_options_t cpu_only = {.kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  for (int k = 0; k < 2; ++k) {
    AQ_ASSERT_OK(aq_graph_instantiate(g, &cpu_only, &e));
    AQ_ASSERT_OK(aq_exec_write(e, w, w0, sizeof(w0)));
    AQ_ASSERT_OK(aq_exec_write(e, in, k ? x0 : x1, sizeof(x0)));
    AQ_ASSERT_OK(aq_exec_write(e, labels, k ? y0 : y1, sizeof(y0)));
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
    AQ_ASSERT_OK(aq_exec_read(e, w, r, sizeof(r)));
    AQ_ASSERT_OK(aq_exec_destroy(e));
    cr_assert(!memcmp(r, k ? a : b, sizeof(r)), "rank %d's step differs from the graph's alone", 1 - k);
  }
  cr_assert(memcmp(a, b, sizeof(a)), "both ranks trained alike on different inputs");
  aq_graph_destroy(g);
  destroy_fake(c);
}

/* A hand-made exec of g whose one agent poses as a GPU: one lane, each
 * kernel estimated at kernel_ns but task `beside` at beside_ns; then
 * AQ_COMM_STREAM's pass. */
static aq_exec_t *collective_lanes_of(aq_graph_t *g, uint32_t beside, double kernel_ns, double beside_ns) {
  aq_exec_t *e = calloc(1, sizeof(*e));
  cr_assert(e);
  e->graph = g;
  AQ_ASSERT_OK(units_plan(g, 1, &e->plan));
  for (uint32_t t = 0; t < g->ntasks; ++t)
    e->plan.tasks[t].cost_ns = g->tasks[t].kind != TASK_KERNEL ? 50000 : t == beside ? beside_ns : kernel_ns;
  e->nagents = 1, e->agent_kind[0] = AQ_AGENT_KIND_GPU;
  e->nlanes = 1, e->lane_agent[0] = 0, e->lane_kind[0] = AQ_AGENT_KIND_GPU;
  AQ_ASSERT_OK(aq_exec_collective_lanes(e));
  return e;
}

/* AQ_COMM_STREAM's lanes: a graph's collective moves to a second lane of
 * its GPU where kernels that neither lead to it nor follow it have more
 * work than the second stream's event waits cost, the kernels stay, and
 * the two lanes are ones whose barriers mark each other as the same GPU's
 * (ordered by events, never by a stream memory wait, which is an order
 * CUDA cannot see: runtime/queue.h). With too little beside it, it stays
 * on the kernels' lane. */
Test(ranks, a_collective_lane_is_marked_as_its_gpus_other_stream) {
  uint32_t cpu = cpu_agent_index();
  aq_comm_t *c = fake_gpus_comm(cpu, cpu + 1);
  aq_graph_t *g;
  aq_tensor_t x, y, z, zz;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){8}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "z", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){8}, &z));
  AQ_ASSERT_OK(aq_op_relu(g, x, &y));
  AQ_ASSERT_OK(aq_op_allreduce(g, c, y, AQ_REDUCE_SUM));
  AQ_ASSERT_OK(aq_op_relu(g, z, &zz)); /* beside the all-reduce */
  uint32_t beside = g->ntasks - 1;
  aq_exec_t *e = collective_lanes_of(g, beside, 1000, 1000);
  cr_assert_eq(e->nlanes, 1, "a collective with 1 us of work beside it got a stream of its own");
  for (uint32_t t = 0; t < g->ntasks; ++t) cr_assert_eq(e->plan.tasks[t].lane, 0, "'%s' left the lane", g->tasks[t].name);
  aq_plan_free(&e->plan);
  free(e);
  e = collective_lanes_of(g, beside, 1000, 100000);
  cr_assert_eq(e->nlanes, 2, "the collectives' lane was not added");
  cr_assert(e->lane_agent[1] == 0 && e->lane_kind[1] == AQ_AGENT_KIND_GPU);
  uint32_t streams = 0;
  for (uint32_t t = 0; t < g->ntasks; ++t) {
    int stream = g->tasks[t].kind == TASK_STREAM;
    streams += stream;
    cr_assert_eq(e->plan.tasks[t].lane, stream ? 1u : 0u, "'%s' is on lane %u", g->tasks[t].name,
                 e->plan.tasks[t].lane);
  }
  cr_assert_geq(streams, 1, "no collective in the graph");
  cr_assert(aq_exec_same_gpu_lanes(e, 0, 1) && aq_exec_same_gpu_lanes(e, 1, 0));
  cr_assert(!aq_exec_same_gpu_lanes(e, 1, 1), "a lane is not another lane of its GPU");
  /* A second GPU's lane, and a CPU's, wait as before: on the stream, or on the host anyway. */
  e->nlanes = 4, e->lane_agent[2] = 1, e->lane_kind[2] = AQ_AGENT_KIND_GPU;
  e->lane_agent[3] = 0, e->lane_kind[3] = AQ_AGENT_KIND_CPU;
  cr_assert(!aq_exec_same_gpu_lanes(e, 0, 2) && !aq_exec_same_gpu_lanes(e, 3, 0));
  hsa_barrier_and_packet_t b = {.reserved1 = 1u << 2};
  cr_assert(aq_barrier_same_gpu_dep(&b, 2) && !aq_barrier_same_gpu_dep(&b, 0) && !aq_barrier_same_gpu_dep(&b, 1));
  aq_plan_free(&e->plan);
  free(e);
  aq_graph_destroy(g);
  destroy_fake(c);
}
