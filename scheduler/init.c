/* Initial values of tensors (aq_tensor_init): recorded in the graph, drawn
 * on the host from a seeded generator and written into each exec when it is
 * instantiated, so every agent starts from the same values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "scheduler/graph_internal.h"

AQ_API aq_status_t aq_tensor_init(aq_graph_t *g, aq_tensor_t tensor, const aq_initializer_t *o) {
  if (!g || !o) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: graph and options are required");
  tensor_t *t = aq_graph_tensor(g, tensor);
  if (!t) return aq_error(AQ_ERROR_INVALID_HANDLE, "aq_tensor_init: tensor %u is not in this graph", tensor.id);
  if (t->dtype != AQ_DTYPE_F32)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: '%s' is not an f32 tensor", t->name);
  if (t->role != AQ_ROLE_PARAMETER && t->role != AQ_ROLE_CONSTANT && t->role != AQ_ROLE_STATE)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "aq_tensor_init: '%s' is not a parameter, constant or state tensor (inputs and activations get "
                    "their values from the user and the tasks)",
                    t->name);
  if (o->kind < AQ_INIT_CONSTANT || o->kind > AQ_INIT_KAIMING_NORMAL)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: '%s': unknown kind %d", t->name, o->kind);
  if (o->kind == AQ_INIT_UNIFORM && !(o->low < o->high))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: '%s': uniform needs low < high (%g, %g)", t->name,
                    o->low, o->high);
  if (o->kind == AQ_INIT_NORMAL && !(o->stddev >= 0.0f))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: '%s': stddev %g is negative", t->name, o->stddev);
  if (!isfinite(o->value) || !isfinite(o->low) || !isfinite(o->high) || !isfinite(o->mean) || !isfinite(o->stddev) ||
      !isfinite(o->gain) || o->gain < 0.0f)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_tensor_init: '%s': values must be finite (and gain >= 0)", t->name);
  t->init = *o;
  return AQ_OK;
}

/* splitmix64: a stream from the seed alone, the same on every machine. */
static uint64_t next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double unit(uint64_t *state) { return (double)(next(state) >> 11) * 0x1.0p-53; } /* [0, 1) */

static void fans(const tensor_t *t, double *in, double *out) {
  double field = 1;
  for (uint32_t i = 2; i < t->rank; ++i) field *= (double)t->dims[i];
  if (t->rank >= 4) *in = (double)t->dims[1] * field, *out = (double)t->dims[0] * field;
  else if (t->rank >= 2) *in = (double)t->dims[0], *out = (double)t->dims[1];
  else *in = *out = t->rank ? (double)t->dims[0] : 1;
}

static void draw(const tensor_t *t, float *x, size_t n) {
  const aq_initializer_t *o = &t->init;
  double fan_in, fan_out, lo = o->low, hi = o->high, mean = o->mean, sd = o->stddev;
  fans(t, &fan_in, &fan_out);
  double xavier = o->gain > 0 ? o->gain : 1.0, kaiming = o->gain > 0 ? o->gain : sqrt(2.0);
  if (o->kind == AQ_INIT_XAVIER_UNIFORM) hi = xavier * sqrt(6.0 / (fan_in + fan_out)), lo = -hi;
  if (o->kind == AQ_INIT_KAIMING_UNIFORM) hi = kaiming * sqrt(3.0 / fan_in), lo = -hi;
  if (o->kind == AQ_INIT_XAVIER_NORMAL) mean = 0, sd = xavier * sqrt(2.0 / (fan_in + fan_out));
  if (o->kind == AQ_INIT_KAIMING_NORMAL) mean = 0, sd = kaiming / sqrt(fan_in);
  uint64_t state = o->seed;
  int normal = o->kind == AQ_INIT_NORMAL || o->kind == AQ_INIT_XAVIER_NORMAL || o->kind == AQ_INIT_KAIMING_NORMAL;
  for (size_t i = 0; i < n; ++i) {
    if (o->kind == AQ_INIT_CONSTANT) x[i] = o->value;
    else if (!normal) x[i] = (float)(lo + (hi - lo) * unit(&state));
    else { /* Box-Muller; 1 - u keeps the logarithm's argument in (0, 1] */
      double r = sqrt(-2.0 * log(1.0 - unit(&state))), th = 2.0 * M_PI * unit(&state);
      x[i] = (float)(mean + sd * r * cos(th));
    }
  }
}

aq_status_t aq_graph_write_initial_values(aq_exec_t *e, const aq_graph_t *g) {
  for (uint32_t id = 1; id < g->ntensors; ++id) {
    const tensor_t *t = &g->tensors[id];
    if (!t->init.kind) continue;
    float *x = malloc(t->bytes);
    if (!x) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for the initial values of '%s'", t->name);
    draw(t, x, t->bytes / sizeof(float));
    aq_status_t s = aq_exec_write(e, (aq_tensor_t){id}, x, t->bytes);
    free(x);
    if (s != AQ_OK) {
      char why[512];
      snprintf(why, sizeof(why), "%s", aq_last_error());
      return aq_error(s, "initial values of '%s': %s", t->name, why);
    }
  }
  return AQ_OK;
}

aq_status_t aq_graph_check_parameters(const aq_graph_t *g, const uint8_t *given) {
  for (uint32_t k = 0; k < g->ntasks; ++k) {
    const task_t *task = &g->tasks[k];
    for (uint32_t r = 0; r < task->nreads; ++r) {
      uint32_t x = task->reads[r];
      if (x < g->ntensors && g->tensors[x].role == AQ_ROLE_PARAMETER && !given[x])
        return aq_error(AQ_ERROR_INVALID_GRAPH,
                        "parameter '%s' was never written nor initialised, and task '%s' reads it: give it an "
                        "initialiser (aq_tensor_init) or aq_exec_write it before the first run",
                        g->tensors[x].name, task->name);
    }
  }
  return AQ_OK;
}
