/* user_kernels: your own CPU code object (kernels/my_kernels.c), loaded,
 * dispatched with AQL kernel-dispatch packets on two queues, and ordered
 * with barrier-AND and barrier-OR packets:
 *
 *   queue 0:  fill x = 0, 1, 2, ...                       -> x_ready
 *   queue 1:  fill y = 1                                  -> y_ready
 *   queue 0:  barrier-AND (y_ready)  then  saxpy y = 2x + y  -> summed
 *   queue 1:  barrier-OR (summed, never)  then  scale y *= 0.5  -> done
 *
 * so y[i] ends as i + 0.5. A barrier-AND waits for all of its signals, a
 * barrier-OR for any one (the "never" signal never comes). */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "aquila/aquila.h"
#include "kernels/my_kernels.h"
#include "tools/common/cli.h"

#define CHECK(expr)                                                                          \
  do {                                                                                       \
    aq_status_t s_ = (expr);                                                                 \
    if (s_ != AQ_OK) {                                                                       \
      fprintf(stderr, "user_kernels: %s: %s: %s\n", #expr, aq_status_string(s_), aq_last_error()); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

enum { WORKGROUP = 256 };

static void dispatch(aq_queue_t q, const aq_kernel_info_t *k, void *args, uint32_t n, aq_signal_t done) {
  hsa_kernel_dispatch_packet_t p = {0};
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 1; /* one grid dimension */
  p.workgroup_size_x = WORKGROUP, p.workgroup_size_y = p.workgroup_size_z = 1;
  p.grid_size_x = n, p.grid_size_y = p.grid_size_z = 1;
  p.kernel_object = k->kernel_object;
  p.kernarg_address = args; /* read when the packet runs: keep it alive until then */
  p.completion_signal.handle = done.handle;
  CHECK(aq_queue_submit(q, &p, AQ_TIMEOUT_INFINITE, NULL));
}

/* A barrier-AND (all of deps) or barrier-OR (any of deps) packet: the
 * queue's later packets wait for it. */
static void barrier(aq_queue_t q, hsa_packet_type_t type, const aq_signal_t *deps, int ndeps) {
  hsa_barrier_and_packet_t b = {0}; /* the OR packet has the same layout */
  b.header = aq_packet_header(type, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  for (int i = 0; i < ndeps && i < 5; ++i) b.dep_signal[i].handle = deps[i].handle;
  CHECK(aq_queue_submit(q, &b, AQ_TIMEOUT_INFINITE, NULL));
}

/* my-kernels.so beside this program, unless --code-object says where. */
static void default_path(char *out, size_t size) {
  char exe[PATH_MAX] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = '\0';
  snprintf(out, size, "%s/my-kernels.so", n > 0 ? dirname(exe) : ".");
}

int main(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"code-object", 0, CLI_TEXT, "FILE", "the code object (default: my-kernels.so beside this program)", 0, 0},
      {"n", 0, CLI_INT, "N", "elements (default 100000)", 1, 1 << 26},
  };
  cli_t c = {.program = "user_kernels", .options = options, .count = 2,
             .about = "Loads a code object of your own, dispatches its kernels on two queues and orders them\n"
                      "with barrier-AND and barrier-OR packets; checks the result."};
  cli_parse(&c, argc, argv);
  char path[PATH_MAX + 32];
  default_path(path, sizeof(path));
  const char *file = cli_text(&c, "code-object", path);
  uint32_t n = (uint32_t)cli_int(&c, "n", 100000);

  CHECK(aq_init(NULL));
  aq_agent_t cpu;
  size_t count;
  CHECK(aq_agents(&cpu, 1, &count)); /* the first agent is a CPU agent */
  aq_code_object_t co;
  CHECK(aq_code_object_load(file, &co));
  aq_kernel_info_t fill, saxpy, scale;
  CHECK(aq_code_object_find_kernel(co, "my_fill", cpu, &fill));
  CHECK(aq_code_object_find_kernel(co, "my_saxpy", cpu, &saxpy));
  CHECK(aq_code_object_find_kernel(co, "my_scale", cpu, &scale));
  aq_queue_t q0, q1;
  CHECK(aq_queue_create(cpu, NULL, &q0));
  CHECK(aq_queue_create(cpu, NULL, &q1));
  aq_signal_t x_ready, y_ready, summed, never, done;
  CHECK(aq_signal_create(1, &x_ready));
  CHECK(aq_signal_create(1, &y_ready));
  CHECK(aq_signal_create(1, &summed));
  CHECK(aq_signal_create(1, &never));
  CHECK(aq_signal_create(1, &done));

  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  if (!x || !y) return fprintf(stderr, "user_kernels: no memory for %u floats\n", n), 1;
  my_fill_args_t fx = {x, 0.0f, 1.0f}, fy = {y, 1.0f, 0.0f};
  my_saxpy_args_t sx = {x, y, 2.0f};
  my_scale_args_t sc = {y, 0.5f};
  dispatch(q0, &fill, &fx, n, x_ready);
  dispatch(q1, &fill, &fy, n, y_ready);
  barrier(q0, HSA_PACKET_TYPE_BARRIER_AND, &y_ready, 1);
  dispatch(q0, &saxpy, &sx, n, summed);
  barrier(q1, HSA_PACKET_TYPE_BARRIER_OR, (aq_signal_t[]){summed, never}, 2);
  dispatch(q1, &scale, &sc, n, done);
  CHECK(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 30ull * 1000000000ull, NULL));

  uint32_t wrong = 0;
  for (uint32_t i = 0; i < n; ++i) wrong += y[i] != (float)i + 0.5f;
  printf("user_kernels: %u elements through fill, saxpy and scale on 2 queues: %s\n", n,
         wrong ? "WRONG" : "y[i] = i + 0.5 for every i");
  aq_signal_t all[] = {x_ready, y_ready, summed, never, done};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) aq_signal_destroy(all[i]);
  CHECK(aq_queue_destroy(q0));
  CHECK(aq_queue_destroy(q1));
  CHECK(aq_code_object_unload(co));
  free(x), free(y);
  CHECK(aq_shut_down());
  return wrong ? 1 : 0;
}
