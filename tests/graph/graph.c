/* Task graphs: an MLP's forward, backward and SGD through real agents,
 * checked against finite differences; multi-agent lowering; every graph
 * error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <stdatomic.h>

#include "../runtime/common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(graph, .init = setup, .fini = teardown);

typedef struct mlp {
  aq_graph_t *g;
  aq_tensor_t x, y, w1, b1, w2, b2, loss;
} mlp_t;

enum { B = 13, IN = 9, H = 17, OUT = 5 };

static void build_mlp(mlp_t *m, int with_sgd);

static void build_mlp_adam(mlp_t *m) {
  build_mlp(m, 0);
  aq_tensor_t params[4] = {m->w1, m->b1, m->w2, m->b2};
  aq_adam_options_t o = {.lr = 0.05f, .decoupled = 1, .weight_decay = 0.01f};
  for (int i = 0; i < 4; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(m->g, params[i], &gr));
    AQ_ASSERT_OK(aq_op_adam(m->g, params[i], gr, &o));
  }
  aq_adam_options_t bad = {.lr = 0.01f, .beta1 = 1.5f};
  aq_tensor_t gr;
  AQ_ASSERT_OK(aq_graph_gradient(m->g, m->w1, &gr));
  cr_assert_eq(aq_op_adam(m->g, m->w1, gr, &bad), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_op_adam(m->g, m->x, gr, &o), AQ_ERROR_INVALID_ARGUMENT, "x is not a parameter");
}

static void build_mlp(mlp_t *m, int with_sgd) {
  AQ_ASSERT_OK(aq_graph_create(NULL, &m->g));
  aq_graph_t *g = m->g;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &m->x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &m->y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &m->w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "b1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){H}, &m->b1));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){OUT, H}, &m->w2));
  AQ_ASSERT_OK(aq_tensor_create(g, "b2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){OUT}, &m->b2));
  aq_tensor_t h, logits;
  AQ_ASSERT_OK(aq_op_matmul(g, m->x, m->w1, m->b1, 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(g, h, m->w2, m->b2, 0, 1, AQ_ACTIVATION_NONE, &logits)); /* w2 stored transposed */
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, m->y, &m->loss));
  AQ_ASSERT_OK(aq_graph_backward(g, m->loss));
  if (with_sgd) {
    aq_tensor_t params[4] = {m->w1, m->b1, m->w2, m->b2};
    aq_sgd_options_t o = {.lr = 0.5f, .momentum = 0.9f};
    for (int i = 0; i < 4; ++i) {
      aq_tensor_t gr;
      AQ_ASSERT_OK(aq_graph_gradient(g, params[i], &gr));
      AQ_ASSERT_OK(aq_op_sgd(g, params[i], gr, &o));
    }
  }
}

static void fill(float *v, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
  }
}

static float run_loss(aq_exec_t *e, mlp_t *m) {
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  float loss;
  AQ_ASSERT_OK(aq_exec_read(e, m->loss, &loss, sizeof(loss)));
  return loss;
}

static void load_inputs(aq_exec_t *e, mlp_t *m, float *w1, float *b1, float *w2, float *b2) {
  float x[B * IN];
  int32_t y[B];
  fill(x, B * IN, 1, 1.0f);
  for (int i = 0; i < B; ++i) y[i] = (i * 3) % OUT;
  AQ_ASSERT_OK(aq_exec_write(e, m->x, x, sizeof(x)));
  AQ_ASSERT_OK(aq_exec_write(e, m->y, y, sizeof(y)));
  AQ_ASSERT_OK(aq_exec_write(e, m->w1, w1, IN * H * 4));
  AQ_ASSERT_OK(aq_exec_write(e, m->b1, b1, H * 4));
  AQ_ASSERT_OK(aq_exec_write(e, m->w2, w2, OUT * H * 4));
  AQ_ASSERT_OK(aq_exec_write(e, m->b2, b2, OUT * 4));
}

static void check_gradients(aq_sched_policy_t policy) {
  mlp_t m;
  build_mlp(&m, 0);
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = policy};
  AQ_ASSERT_OK(aq_graph_instantiate(m.g, &o, &e));
  float w1[IN * H], b1[H], w2[OUT * H], b2[OUT];
  fill(w1, IN * H, 2, 0.5f), fill(b1, H, 3, 0.1f), fill(w2, OUT * H, 4, 0.5f), fill(b2, OUT, 5, 0.1f);
  load_inputs(e, &m, w1, b1, w2, b2);
  run_loss(e, &m);
  struct { aq_tensor_t p; float *v; int n; } ps[4] = {{m.w1, w1, IN * H}, {m.b1, b1, H}, {m.w2, w2, OUT * H}, {m.b2, b2, OUT}};
  float grads[4][IN * H > OUT * H ? IN * H : OUT * H];
  for (int i = 0; i < 4; ++i) {
    aq_tensor_t gr;
    AQ_ASSERT_OK(aq_graph_gradient(m.g, ps[i].p, &gr));
    AQ_ASSERT_OK(aq_exec_read(e, gr, grads[i], (size_t)ps[i].n * 4));
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < ps[i].n; j += 7) {
      float keep = ps[i].v[j], h = 2e-3f;
      ps[i].v[j] = keep + h;
      AQ_ASSERT_OK(aq_exec_write(e, ps[i].p, ps[i].v, (size_t)ps[i].n * 4));
      float up = run_loss(e, &m);
      ps[i].v[j] = keep - h;
      AQ_ASSERT_OK(aq_exec_write(e, ps[i].p, ps[i].v, (size_t)ps[i].n * 4));
      float down = run_loss(e, &m);
      ps[i].v[j] = keep;
      AQ_ASSERT_OK(aq_exec_write(e, ps[i].p, ps[i].v, (size_t)ps[i].n * 4));
      float fd = (up - down) / (2 * h);
      cr_assert(fabsf(fd - grads[i][j]) < 3e-3f + 0.03f * fabsf(fd), "param %d[%d]: backward %g, finite difference %g",
                i, j, grads[i][j], fd);
    }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(m.g));
}

Test(graph, mlp_backward_matches_finite_differences) { check_gradients(AQ_SCHED_EAGER); }

Test(graph, training_lowers_the_loss) {
  mlp_t m;
  build_mlp(&m, 1);
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(m.g, NULL, &e));
  float w1[IN * H], b1[H], w2[OUT * H], b2[OUT];
  fill(w1, IN * H, 2, 0.5f), fill(b1, H, 3, 0.1f), fill(w2, OUT * H, 4, 0.5f), fill(b2, OUT, 5, 0.1f);
  load_inputs(e, &m, w1, b1, w2, b2);
  float first = run_loss(e, &m), last = first;
  for (int i = 0; i < 60; ++i) last = run_loss(e, &m);
  cr_assert(last < 0.2f * first, "loss %g -> %g after 60 steps", first, last);
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  cr_assert_eq(info.runs, 61);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(m.g));
}

Test(graph_numa, four_agents_lower_to_barriers_and_agree) {
  setenv("HWLOC_SYNTHETIC", "numa:4 core:1 pu:1", 1);
  AQ_ASSERT_OK(aq_init(NULL));
  check_gradients(AQ_SCHED_ROUND_ROBIN);
  mlp_t m;
  build_mlp(&m, 1);
  aq_exec_t *e;
  /* Kernels on the four CPU agents only (a GPU, where there is one, would
   * be a fifth). */
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  AQ_ASSERT_OK(aq_graph_instantiate(m.g, &o, &e));
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(e, &info));
  cr_assert_eq(info.agents_used, 4);
  cr_assert_gt(info.barriers, 0, "round-robin over 4 agents crosses queues");
  AQ_ASSERT_OK(aq_exec_write_dot(e, "/tmp/aq-graph-test.dot"));
  FILE *f = fopen("/tmp/aq-graph-test.dot", "r");
  char buf[4096] = "";
  cr_assert(f && fread(buf, 1, sizeof(buf) - 1, f) > 0);
  fclose(f);
  unlink("/tmp/aq-graph-test.dot");
  cr_assert(strstr(buf, "digraph") && strstr(buf, "barrier-AND") && strstr(buf, "cpu3"), "%s", buf);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(m.g));
  aq_shut_down();
}

static aq_status_t count_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  *(int *)user += (int)a1;
  return AQ_OK;
}

static aq_status_t failing_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  return AQ_ERROR_IO;
}

Test(graph, adamw_training_lowers_the_loss) {
  mlp_t m;
  build_mlp_adam(&m);
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(m.g, NULL, &e));
  float w1[IN * H], b1[H], w2[OUT * H], b2[OUT];
  fill(w1, IN * H, 2, 0.5f), fill(b1, H, 3, 0.1f), fill(w2, OUT * H, 4, 0.5f), fill(b2, OUT, 5, 0.1f);
  load_inputs(e, &m, w1, b1, w2, b2);
  float first = run_loss(e, &m), last = first;
  for (int i = 0; i < 60; ++i) last = run_loss(e, &m);
  cr_assert(last < 0.2f * first, "loss %g -> %g after 60 Adam steps", first, last);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(m.g));
}

Test(graph, gradients_through_gelu_tanh_sigmoid_and_dropout) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w1, w2, h, a1, a2, a3, a4, logits, loss, gw1;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w1", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){IN, H}, &w1));
  AQ_ASSERT_OK(aq_tensor_create(g, "w2", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){H, OUT}, &w2));
  AQ_ASSERT_OK(aq_op_matmul(g, x, w1, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &h));
  AQ_ASSERT_OK(aq_op_gelu(g, h, &a1));
  AQ_ASSERT_OK(aq_op_tanh(g, a1, &a2));
  AQ_ASSERT_OK(aq_op_sigmoid(g, a2, &a3));
  AQ_ASSERT_OK(aq_op_dropout(g, a3, 0.25f, 42, &a4));
  cr_assert_eq(aq_op_dropout(g, a3, 1.0f, 42, &a4), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_op_dropout(g, a3, 0.25f, 42, &a4));
  AQ_ASSERT_OK(aq_op_matmul(g, a4, w2, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  AQ_ASSERT_OK(aq_graph_gradient(g, w1, &gw1));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float xs[B * IN], w1s[IN * H], w2s[H * OUT], grad[IN * H];
  int32_t ys[B];
  fill(xs, B * IN, 1, 1.0f), fill(w1s, IN * H, 2, 0.5f), fill(w2s, H * OUT, 3, 0.5f);
  for (int i = 0; i < B; ++i) ys[i] = (i * 3) % OUT;
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
  AQ_ASSERT_OK(aq_exec_write(e, w2, w2s, sizeof(w2s)));
  mlp_t m = {.g = g, .loss = loss};
  run_loss(e, &m);
  AQ_ASSERT_OK(aq_exec_read(e, gw1, grad, sizeof(grad)));
  for (int j = 0; j < IN * H; j += 11) {
    float keep = w1s[j], hh = 2e-3f;
    w1s[j] = keep + hh;
    AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
    float up = run_loss(e, &m);
    w1s[j] = keep - hh;
    AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
    float down = run_loss(e, &m);
    w1s[j] = keep;
    AQ_ASSERT_OK(aq_exec_write(e, w1, w1s, sizeof(w1s)));
    float fd = (up - down) / (2 * hh);
    cr_assert(fabsf(fd - grad[j]) < 2e-3f + 0.03f * fabsf(fd), "w1[%d]: backward %g, finite difference %g", j, grad[j],
              fd);
  }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(graph, gradients_through_conv_batch_norm_pool_and_reshape) {
  enum { NB = 3, CI = 2, HW = 6, K = 3, CLS = 4 };
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, w, cb, gam, bet, rm, rv, wf, c1, bn, r1, p1, flat, logits, loss;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 4, (int64_t[]){NB, CI, HW, HW}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){NB}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 4, (int64_t[]){K, CI, 3, 3}, &w));
  AQ_ASSERT_OK(aq_tensor_create(g, "cb", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){K}, &cb));
  AQ_ASSERT_OK(aq_tensor_create(g, "gamma", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){K}, &gam));
  AQ_ASSERT_OK(aq_tensor_create(g, "beta", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){K}, &bet));
  AQ_ASSERT_OK(aq_tensor_create(g, "rmean", AQ_DTYPE_F32, AQ_ROLE_STATE, 1, (int64_t[]){K}, &rm));
  AQ_ASSERT_OK(aq_tensor_create(g, "rvar", AQ_DTYPE_F32, AQ_ROLE_STATE, 1, (int64_t[]){K}, &rv));
  AQ_ASSERT_OK(aq_tensor_create(g, "wf", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){K * 3 * 3, CLS}, &wf));
  aq_conv2d_options_t co = {.pad_h = 1, .pad_w = 1};
  AQ_ASSERT_OK(aq_op_conv2d(g, x, w, cb, &co, &c1));
  aq_batch_norm_options_t bo = {.training = 1};
  AQ_ASSERT_OK(aq_op_batch_norm(g, c1, gam, bet, rm, rv, &bo, &bn));
  AQ_ASSERT_OK(aq_op_relu(g, bn, &r1));
  aq_pool_options_t po = {.kernel_h = 2, .kernel_w = 2};
  AQ_ASSERT_OK(aq_op_max_pool2d(g, r1, &po, &p1));
  AQ_ASSERT_OK(aq_op_reshape(g, p1, 2, (int64_t[]){NB, K * 3 * 3}, &flat));
  AQ_ASSERT_OK(aq_op_matmul(g, flat, wf, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  cr_assert_eq(aq_op_reshape(g, p1, 2, (int64_t[]){NB, 5}, &flat), AQ_ERROR_INVALID_ARGUMENT, "sizes must match");
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t gw, gg;
  AQ_ASSERT_OK(aq_graph_gradient(g, w, &gw));
  AQ_ASSERT_OK(aq_graph_gradient(g, gam, &gg));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float xs[NB * CI * HW * HW], ws[K * CI * 9], cbs[K], gs[K] = {1.0f, 0.8f, 1.2f}, bs[K] = {0.1f, -0.1f, 0.0f};
  float wfs[K * 9 * CLS], gws[K * CI * 9], ggs[K];
  int32_t ys[NB] = {0, 2, 3};
  fill(xs, sizeof(xs) / 4, 1, 1.0f), fill(ws, sizeof(ws) / 4, 2, 0.5f), fill(cbs, K, 3, 0.1f), fill(wfs, sizeof(wfs) / 4, 4, 0.5f);
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(xs)));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, w, ws, sizeof(ws)));
  AQ_ASSERT_OK(aq_exec_write(e, cb, cbs, sizeof(cbs)));
  AQ_ASSERT_OK(aq_exec_write(e, gam, gs, sizeof(gs)));
  AQ_ASSERT_OK(aq_exec_write(e, bet, bs, sizeof(bs)));
  AQ_ASSERT_OK(aq_exec_write(e, wf, wfs, sizeof(wfs)));
  mlp_t m = {.g = g, .loss = loss};
  run_loss(e, &m);
  AQ_ASSERT_OK(aq_exec_read(e, gw, gws, sizeof(gws)));
  AQ_ASSERT_OK(aq_exec_read(e, gg, ggs, sizeof(ggs)));
  struct { aq_tensor_t t; float *v; int n; float *grad; } ps[2] = {{w, ws, K * CI * 9, gws}, {gam, gs, K, ggs}};
  for (int p = 0; p < 2; ++p)
    for (int j = 0; j < ps[p].n; j += p ? 1 : 5) {
      float keep = ps[p].v[j], hh = 2e-3f;
      ps[p].v[j] = keep + hh;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      float up = run_loss(e, &m);
      ps[p].v[j] = keep - hh;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      float down = run_loss(e, &m);
      ps[p].v[j] = keep;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      float fd = (up - down) / (2 * hh);
      cr_assert(fabsf(fd - ps[p].grad[j]) < 3e-3f + 0.05f * fabsf(fd), "%s[%d]: backward %g, finite difference %g",
                p ? "gamma" : "w", j, ps[p].grad[j], fd);
    }
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

/* Batch norm on channels of many values runs in slices (two tasks a pass,
 * several work-groups a channel): its gradients still match finite
 * differences, and every slice normalises with the channel's statistics. */
Test(graph, batch_norm_in_slices_has_the_right_gradients) {
  enum { NB = 8, C = 2, HW = 40, CLS = 3, F = C * HW * HW };
  cr_assert_gt(aq_batch_norm_slices(NB, C, HW * HW), 4, "the case needs several slices a channel");
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t x, y, gam, bet, rm, rv, wf, bn, flat, logits, loss;
  AQ_ASSERT_OK(aq_tensor_create(g, "x", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 4, (int64_t[]){NB, C, HW, HW}, &x));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){NB}, &y));
  AQ_ASSERT_OK(aq_tensor_create(g, "gamma", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){C}, &gam));
  AQ_ASSERT_OK(aq_tensor_create(g, "beta", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){C}, &bet));
  AQ_ASSERT_OK(aq_tensor_create(g, "rmean", AQ_DTYPE_F32, AQ_ROLE_STATE, 1, (int64_t[]){C}, &rm));
  AQ_ASSERT_OK(aq_tensor_create(g, "rvar", AQ_DTYPE_F32, AQ_ROLE_STATE, 1, (int64_t[]){C}, &rv));
  AQ_ASSERT_OK(aq_tensor_create(g, "wf", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 2, (int64_t[]){F, CLS}, &wf));
  aq_batch_norm_options_t bo = {.training = 1};
  AQ_ASSERT_OK(aq_op_batch_norm(g, x, gam, bet, rm, rv, &bo, &bn));
  AQ_ASSERT_OK(aq_op_reshape(g, bn, 2, (int64_t[]){NB, F}, &flat));
  AQ_ASSERT_OK(aq_op_matmul(g, flat, wf, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(g, logits, y, &loss));
  AQ_ASSERT_OK(aq_graph_backward(g, loss));
  aq_tensor_t gx, gg, gb;
  AQ_ASSERT_OK(aq_graph_gradient(g, x, &gx));
  AQ_ASSERT_OK(aq_graph_gradient(g, gam, &gg));
  AQ_ASSERT_OK(aq_graph_gradient(g, bet, &gb));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float *xs = malloc(sizeof(float) * NB * F), *wfs = malloc(sizeof(float) * F * CLS), *gxs = malloc(sizeof(float) * NB * F);
  float gs[C] = {1.0f, 0.7f}, bs[C] = {0.1f, -0.2f}, ggs[C], gbs[C], rms[C] = {0, 0}, rvs[C] = {1, 1};
  int32_t ys[NB] = {0, 2, 1, 1, 0, 2, 2, 1};
  fill(xs, (size_t)NB * F, 5, 2.0f), fill(wfs, (size_t)F * CLS, 6, 0.05f);
  for (int i = 0; i < NB * F; ++i) xs[i] += 1.5f; /* a mean away from 0 */
  AQ_ASSERT_OK(aq_exec_write(e, x, xs, sizeof(float) * NB * F));
  AQ_ASSERT_OK(aq_exec_write(e, y, ys, sizeof(ys)));
  AQ_ASSERT_OK(aq_exec_write(e, gam, gs, sizeof(gs)));
  AQ_ASSERT_OK(aq_exec_write(e, bet, bs, sizeof(bs)));
  AQ_ASSERT_OK(aq_exec_write(e, rm, rms, sizeof(rms)));
  AQ_ASSERT_OK(aq_exec_write(e, rv, rvs, sizeof(rvs)));
  AQ_ASSERT_OK(aq_exec_write(e, wf, wfs, sizeof(float) * F * CLS));
  mlp_t m = {.g = g, .loss = loss};
  run_loss(e, &m);
  AQ_ASSERT_OK(aq_exec_read(e, gx, gxs, sizeof(float) * NB * F));
  AQ_ASSERT_OK(aq_exec_read(e, gg, ggs, sizeof(ggs)));
  AQ_ASSERT_OK(aq_exec_read(e, gb, gbs, sizeof(gbs)));
  /* the running mean moved by momentum towards each channel's mean */
  AQ_ASSERT_OK(aq_exec_read(e, rm, rms, sizeof(rms)));
  for (int ch = 0; ch < C; ++ch) {
    double s = 0;
    for (int n = 0; n < NB; ++n)
      for (int i = 0; i < HW * HW; ++i) s += xs[(n * C + ch) * HW * HW + i];
    cr_assert(fabs(rms[ch] - 0.1 * s / (NB * HW * HW)) < 1e-5, "running mean[%d] %g, want %g", ch, rms[ch],
              0.1 * s / (NB * HW * HW));
  }
  struct { aq_tensor_t t; float *v; int n, step; float *grad; const char *name; } ps[3] = {
      {x, xs, NB * F, 997, gxs, "x"}, {gam, gs, C, 1, ggs, "gamma"}, {bet, bs, C, 1, gbs, "beta"}};
  for (int p = 0; p < 3; ++p)
    for (int j = 0; j < ps[p].n; j += ps[p].step) {
      float keep = ps[p].v[j], hh = p ? 2e-3f : 5e-2f;
      ps[p].v[j] = keep + hh;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      double up = run_loss(e, &m);
      ps[p].v[j] = keep - hh;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      double down = run_loss(e, &m);
      ps[p].v[j] = keep;
      AQ_ASSERT_OK(aq_exec_write(e, ps[p].t, ps[p].v, (size_t)ps[p].n * 4));
      double fd = (up - down) / (2 * hh);
      cr_assert(fabs(fd - ps[p].grad[j]) < 2e-4 + 0.05 * fabs(fd), "%s[%d]: backward %g, finite difference %g",
                ps[p].name, j, ps[p].grad[j], fd);
    }
  free(xs), free(wfs), free(gxs);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(graph, host_tasks_and_explicit_edges) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  int counter = 0;
  aq_host_task_t h = {.name = "count", .fn = count_call, .user = &counter, .args = {5}, .agent = -1};
  aq_task_t t1, t2, t3;
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, &t1));
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, &t2));
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, &t3));
  AQ_ASSERT_OK(aq_graph_add_edge(g, t3, AQ_EDGE_AFTER_ALL, (aq_task_t[]){t1, t2}, 2));
  AQ_ASSERT_OK(aq_graph_add_edge(g, t2, AQ_EDGE_AFTER_ANY, (aq_task_t[]){t1}, 1));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  for (int i = 0; i < 3; ++i) {
    AQ_ASSERT_OK(aq_exec_run(e));
    AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  }
  cr_assert_eq(counter, 45);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  /* A cycle through explicit edges is refused, naming a task on it. */
  AQ_ASSERT_OK(aq_graph_add_edge(g, t1, AQ_EDGE_AFTER_ALL, &t3, 1));
  cr_assert_eq(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "cycle through task 'count'"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

typedef struct { _Atomic int seq; int order[8]; } order_log_t;
static aq_status_t log_order(void *user, uint64_t tag, uint64_t a2, uint64_t a3) {
  (void)a2, (void)a3;
  order_log_t *l = user;
  usleep(tag % 2 ? 3000 : 0); /* odd tags are slow: unordered work would overtake them */
  l->order[atomic_fetch_add(&l->seq, 1)] = (int)tag;
  return AQ_OK;
}

Test(graph, ordered_groups_run_in_order_and_groups_hand_back_their_tasks) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  order_log_t log = {0};
  cr_assert_eq(aq_graph_group_end(g, NULL, NULL), AQ_ERROR_INVALID_ARGUMENT, "no group open");
  AQ_ASSERT_OK(aq_graph_group_begin(g, 1));
  cr_assert_eq(aq_graph_group_begin(g, 0), AQ_ERROR_INVALID_ARGUMENT, "groups do not nest");
  for (int i = 0; i < 6; ++i) {
    aq_host_task_t h = {.name = "step", .fn = log_order, .user = &log, .args = {(uint64_t)i}, .agent = -1};
    AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  }
  aq_task_t first;
  uint32_t count;
  AQ_ASSERT_OK(aq_graph_group_end(g, &first, &count));
  cr_assert_eq(count, 6);
  aq_host_task_t last = {.name = "after", .fn = log_order, .user = &log, .args = {6}, .agent = -1};
  aq_task_t after;
  AQ_ASSERT_OK(aq_graph_add_host(g, &last, &after));
  aq_task_t all[6];
  for (uint32_t i = 0; i < count; ++i) all[i].id = first.id + i;
  AQ_ASSERT_OK(aq_graph_add_edge(g, after, AQ_EDGE_AFTER_ALL, all, count));
  aq_exec_t *e;
  aq_exec_options_t o = {.policy = AQ_SCHED_ROUND_ROBIN}; /* spread over lanes: only the group orders them */
  AQ_ASSERT_OK(aq_graph_instantiate(g, &o, &e));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  for (int i = 0; i < 7; ++i) cr_assert_eq(log.order[i], i, "position %d ran task %d", i, log.order[i]);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

Test(graph, a_failing_task_fails_the_run_and_names_itself) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_host_task_t h = {.name = "loader", .fn = failing_call, .agent = -1};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_wait(e, 10 * SEC), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "task 'loader' failed"), "%s", aq_last_error());
  /* The exec is still usable. */
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_wait(e, 10 * SEC), AQ_ERROR_IO);
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}

static aq_status_t slow_call(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  usleep(50000);
  return AQ_OK;
}

Test(graph, bad_graphs_and_misuse_are_clear_errors) {
  aq_graph_t *g;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_tensor_t a, b, c, y, out;
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){4, 3}, &a));
  AQ_ASSERT_OK(aq_tensor_create(g, "b", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){5, 6}, &b));
  AQ_ASSERT_OK(aq_tensor_create(g, "c", AQ_DTYPE_F32, AQ_ROLE_ACTIVATION, 2, (int64_t[]){3, 2}, &c));
  AQ_ASSERT_OK(aq_tensor_create(g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &y));
  cr_assert_eq(aq_op_matmul(g, a, b, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &out), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "'a'") && strstr(aq_last_error(), "'b'"), "%s", aq_last_error());
  cr_assert_eq(aq_op_softmax_xent(g, a, a, &out), AQ_ERROR_INVALID_ARGUMENT, "labels must be i32");
  cr_assert_eq(aq_op_relu(g, (aq_tensor_t){999}, &out), AQ_ERROR_INVALID_HANDLE);
  cr_assert_eq(aq_tensor_create(g, "z", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){4, 0}, &out),
               AQ_ERROR_INVALID_ARGUMENT);
  /* c is read before anything writes it. */
  AQ_ASSERT_OK(aq_op_matmul(g, a, c, (aq_tensor_t){0}, 0, 0, AQ_ACTIVATION_NONE, &out));
  aq_exec_t *e;
  cr_assert_eq(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "reads tensor 'c' before any task writes it"), "%s", aq_last_error());
  cr_assert_eq(aq_graph_backward(g, out), AQ_ERROR_INVALID_GRAPH);
  AQ_ASSERT_OK(aq_graph_destroy(g));

  /* A live exec keeps its graph; runs never overlap; sizes must match. */
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "a", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){4, 3}, &a));
  AQ_ASSERT_OK(aq_op_relu(g, a, &out));
  aq_host_task_t h = {.name = "slow", .fn = slow_call, .agent = -1, .read_count = 1, .reads = {out}};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  cr_assert_eq(aq_graph_destroy(g), AQ_ERROR_BUSY);
  float buf[12] = {0};
  cr_assert_eq(aq_exec_write(e, a, buf, 8), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "holds 48 bytes, not 8"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_exec_write(e, a, buf, sizeof(buf)));
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_run(e), AQ_ERROR_BUSY);
  cr_assert_eq(aq_exec_write(e, a, buf, sizeof(buf)), AQ_ERROR_BUSY);
  cr_assert_eq(aq_exec_destroy(e), AQ_ERROR_BUSY);
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_run(e));
  AQ_ASSERT_OK(aq_exec_wait(e, 10 * SEC));
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));

  /* A pinned task on an agent that does not exist; a kernel no agent has. */
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  h = (aq_host_task_t){.name = "pinned", .fn = slow_call, .agent = 7};
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, NULL));
  cr_assert_eq(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "pinned to agent 7"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_graph_destroy(g));
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  aq_kernel_task_t k = {.name = "mystery", .kernel = "no_such_kernel", .agent = -1,
                        .shape = {{1, 1, 1}, {1, 1, 1}}};
  AQ_ASSERT_OK(aq_graph_add_kernel(g, &k, NULL));
  cr_assert_eq(aq_graph_instantiate(g, NULL, &e), AQ_ERROR_INVALID_GRAPH);
  cr_assert(strstr(aq_last_error(), "task 'mystery'") && strstr(aq_last_error(), "kernel 'no_such_kernel'"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
