/* Hello, Aquila: the smallest program that uses the runtime's core. It finds
 * the agents, makes a queue on each, has every agent say hello through an
 * agent-dispatch packet, and lets a barrier-AND packet on the first queue wait
 * for all of them before the last word. */
#include <stdio.h>

#include "aquila/aquila.h"
#include "tools/common/cli.h"

#define CHECK(expr)                                                               \
  do {                                                                            \
    aq_status_t s_ = (expr);                                                      \
    if (s_ != AQ_OK) {                                                            \
      fprintf(stderr, "%s failed: %s: %s\n", #expr, aq_status_string(s_), aq_last_error()); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

static aq_status_t say(void *ret, uint64_t agent_index, uint64_t name, uint64_t unused) {
  (void)ret, (void)unused;
  printf("hello from agent %llu (%s)\n", (unsigned long long)agent_index, (const char *)(uintptr_t)name);
  return AQ_OK;
}

static hsa_agent_dispatch_packet_t host_call(aq_host_call_fn_t fn, uint64_t a1, uint64_t a2, aq_signal_t done) {
  hsa_agent_dispatch_packet_t p = {0};
  p.header = aq_packet_header(HSA_PACKET_TYPE_AGENT_DISPATCH, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  p.type = AQ_AGENT_DISPATCH_HOST_CALL;
  p.arg[0] = (uint64_t)(uintptr_t)fn;
  p.arg[1] = a1;
  p.arg[2] = a2;
  p.completion_signal.handle = done.handle;
  return p;
}

int main(int argc, char **argv) {
  cli_t c = {.program = "hello", .about = "Every CPU agent says hello through an agent-dispatch packet; a barrier-AND\n"
                                          "packet waits for all of them."};
  cli_parse(&c, argc, argv);
  CHECK(aq_init(NULL));
  aq_agent_t agents[64];
  size_t n;
  CHECK(aq_agents(agents, 64, &n));
  aq_queue_t queues[64];
  aq_agent_info_t info[64];
  aq_signal_t said;
  size_t cpus = 0;
  for (size_t i = 0; i < n && i < 64; ++i) {
    CHECK(aq_agent_get_info(agents[i], &info[i]));
    if (info[i].kind == AQ_AGENT_KIND_CPU) cpus++;
  }
  CHECK(aq_signal_create((aq_signal_value_t)cpus, &said));
  for (size_t i = 0, k = 0; i < n && i < 64; ++i) {
    if (info[i].kind != AQ_AGENT_KIND_CPU) continue; /* host calls are for CPU agents */
    CHECK(aq_queue_create(agents[i], NULL, &queues[k]));
    hsa_agent_dispatch_packet_t p = host_call(say, i, (uint64_t)(uintptr_t)info[i].name, said);
    CHECK(aq_queue_submit(queues[k++], &p, AQ_TIMEOUT_INFINITE, NULL));
  }
  /* The first queue waits for every hello, then finishes the program's words. */
  aq_signal_t all_done;
  CHECK(aq_signal_create(1, &all_done));
  hsa_barrier_and_packet_t b = {0};
  b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_AND, 0, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  b.dep_signal[0].handle = said.handle;
  b.completion_signal.handle = all_done.handle;
  CHECK(aq_queue_submit(queues[0], &b, AQ_TIMEOUT_INFINITE, NULL));
  CHECK(aq_signal_wait(all_done, AQ_SIGNAL_EQ, 0, 10ull * 1000000000ull, NULL));
  printf("all %zu CPU agents said hello; %zu agents in all\n", cpus, n);
  for (size_t k = 0; k < cpus; ++k) CHECK(aq_queue_destroy(queues[k]));
  aq_signal_destroy(said);
  aq_signal_destroy(all_done);
  return aq_shut_down() == AQ_OK ? 0 : 1;
}
