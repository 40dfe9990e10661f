/* aq_init / aq_shut_down, the configuration in force, and the agent registry. */
#include "runtime/runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/code_object.h"
#include "runtime/driver.h"
#include "runtime/handle.h"
#include "runtime/memory.h"
#include "runtime/queue.h"
#include "runtime/signal.h"
#include "runtime/status.h"

_Atomic int aq_runtime_refs;

#include "runtime/trace.h"

static pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
static aq_runtime_config_t config;
static hwloc_topology_t topology;
static aq_handle_table_t agents_table;
static aq_agent_impl_t *agents[AQ_AGENTS_MAX];
static uint32_t agent_count;
static char driver_messages[8][256];
static int driver_started[8];

const aq_runtime_config_t *aq_runtime_config(void) { return &config; }
hwloc_topology_t aq_topology(void) { return topology; }
uint32_t aq_agent_count(void) { return agent_count; }
aq_agent_impl_t *aq_agent_at(uint32_t index) { return index < agent_count ? agents[index] : NULL; }

/* Where each setting came from, in the order of the table below. */
enum { SET_SPIN, SET_GPU_SPIN, SET_SIGNALS, SET_WORKERS, SET_CPU_AGENTS, SET_AGENTS, SET_SCHED, SET_MEMORY_LIMIT,
       SET_SHUTDOWN, SET_COUNT };
static const char *setting_source[SET_COUNT];

/* The first numeric setting whose environment value is not a number
 * (validate_options refuses it by name instead of reading "abc" as 0). */
static const char *bad_number;

static uint64_t pick_u64(int id, const char *env, uint64_t option, uint64_t fallback) {
  const char *v = getenv(env);
  setting_source[id] = option ? "options" : v && *v ? "environment" : "default";
  if (option || !v || !*v) return option ? option : fallback;
  char *end;
  uint64_t n = strtoull(v, &end, 0);
  if (*end || *v == '-') {
    if (!bad_number) bad_number = env;
    return fallback;
  }
  return n;
}

static void pick_str(int id, const char *env, const char *option, const char *fallback, char *dst,
                     size_t size) {
  const char *v = getenv(env);
  setting_source[id] = option ? "options" : v && *v ? "environment" : "default";
  snprintf(dst, size, "%s", option ? option : v && *v ? v : fallback);
}

static void configure(const aq_init_options_t *o) {
  aq_init_options_t none = {0};
  if (!o) o = &none;
  bad_number = NULL;
  /* 200 us: a CPU worker idle between a GPU training step's loaders (one
   * step every 143 us on an H100) catches the next ones without a futex
   * wake; at 20 us they started 18-35 us into the step, and the one that
   * copies the batch could decide when the next step began (H100 MLP step,
   * medians of 6: 144.5 -> 142.5 us, spread 143.0-147.1 -> 142.2-144.3; the
   * 16-core CPU step alike). */
  config.spin_ns = pick_u64(SET_SPIN, "AQ_SPIN_US", o->spin_us, 200) * 1000ull;
  config.gpu_spin_ns = pick_u64(SET_GPU_SPIN, "AQ_GPU_SPIN_US", o->gpu_spin_us, 200) * 1000ull;
  config.max_signals = (uint32_t)pick_u64(SET_SIGNALS, "AQ_MAX_SIGNALS", o->max_signals, 65536);
  config.cpu_workers = (uint32_t)pick_u64(SET_WORKERS, "AQ_CPU_WORKERS", o->cpu_workers, 0);
  pick_str(SET_CPU_AGENTS, "AQ_CPU_AGENTS", o->cpu_agents, "numa", config.cpu_agents,
           sizeof(config.cpu_agents));
  pick_str(SET_AGENTS, "AQ_AGENTS", o->drivers, "all", config.drivers, sizeof(config.drivers));
  pick_str(SET_SCHED, "AQ_SCHED", NULL, "heft", config.sched, sizeof(config.sched));
  pick_str(SET_MEMORY_LIMIT, "AQ_MEMORY_LIMIT", o->memory_limit, "", config.memory_limit,
           sizeof(config.memory_limit));
  config.shutdown_timeout_ns =
      pick_u64(SET_SHUTDOWN, "AQ_SHUTDOWN_TIMEOUT_MS", o->shutdown_timeout_ms, 5000) * 1000000ull;
}

/* "2G", "512M", "4096": bytes, or 0 if it is no size. */
static uint64_t parse_size(const char *s, size_t len) {
  if (!len || len > 24 || s[0] < '0' || s[0] > '9') return 0;
  char buf[32];
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10, end++; break;
    case 'M': case 'm': shift = 20, end++; break;
    case 'G': case 'g': shift = 30, end++; break;
    case 'T': case 't': shift = 40, end++; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v == 0 || v > (UINT64_MAX >> shift)) return 0;
  return (uint64_t)v << shift;
}

/* The budget AQ_MEMORY_LIMIT gives agent `name` (0: none); with name NULL,
 * whether the whole setting is well formed (1) or not (0). */
static uint64_t memory_limit_of(const char *name, int *well_formed) {
  uint64_t all = 0, mine = 0;
  *well_formed = 1;
  for (const char *p = config.memory_limit; *p;) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    uint64_t v = eq ? parse_size(eq + 1, len - (size_t)(eq + 1 - p)) : parse_size(p, len);
    if (!v || (eq && eq == p)) *well_formed = 0;
    else if (!eq) all = v;
    else if (name && strlen(name) == (size_t)(eq - p) && !memcmp(p, name, (size_t)(eq - p))) mine = v;
    p += len + (p[len] == ',');
  }
  return mine ? mine : all;
}

AQ_API aq_status_t aq_settings(aq_setting_t *out, size_t capacity, size_t *count) {
  if (!count) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_settings: count is NULL");
  if (capacity && !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_settings: settings is NULL with capacity %zu", capacity);
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  aq_setting_t all[SET_COUNT] = {
      {"AQ_SPIN_US", "", NULL, "how long a waiter spins before it sleeps (us)"},
      {"AQ_GPU_SPIN_US", "", NULL, "how long a GPU queue's processor polls after its last work (us)"},
      {"AQ_MAX_SIGNALS", "", NULL, "signals the process may hold at once"},
      {"AQ_CPU_WORKERS", "", NULL, "most worker threads per CPU agent (0: one per core)"},
      {"AQ_CPU_AGENTS", "", NULL, "how cores group into CPU agents: numa, package, machine, N"},
      {"AQ_AGENTS", "", NULL, "drivers to start: all, or a list of cpu,cuda,rocr"},
      {"AQ_SCHED", "", NULL, "graphs' placement: heft (measured costs), eager, round-robin, pinned, locality"},
      {"AQ_MEMORY_LIMIT", "", NULL, "memory budgets: a size for every agent, or agent=size,... (K, M, G, T)"},
      {"AQ_SHUTDOWN_TIMEOUT_MS", "", NULL, "how long aq_shut_down waits for running packets (ms)"},
  };
  snprintf(all[SET_SPIN].value, 64, "%llu", (unsigned long long)(config.spin_ns / 1000));
  snprintf(all[SET_GPU_SPIN].value, 64, "%llu", (unsigned long long)(config.gpu_spin_ns / 1000));
  snprintf(all[SET_SIGNALS].value, 64, "%u", config.max_signals);
  snprintf(all[SET_WORKERS].value, 64, "%u", config.cpu_workers);
  snprintf(all[SET_CPU_AGENTS].value, 64, "%s", config.cpu_agents);
  snprintf(all[SET_AGENTS].value, 64, "%s", config.drivers);
  snprintf(all[SET_SCHED].value, 64, "%s", config.sched);
  snprintf(all[SET_MEMORY_LIMIT].value, 64, "%s", config.memory_limit[0] ? config.memory_limit : "none");
  snprintf(all[SET_SHUTDOWN].value, 64, "%llu", (unsigned long long)(config.shutdown_timeout_ns / 1000000));
  for (size_t i = 0; i < SET_COUNT && i < capacity; ++i) {
    out[i] = all[i];
    out[i].source = setting_source[i];
  }
  *count = SET_COUNT;
  return AQ_OK;
}

static int driver_wanted(const char *name) {
  if (!strcmp(config.drivers, "all")) return 1;
  size_t n = strlen(name);
  for (const char *p = config.drivers; (p = strstr(p, name)); p += n)
    if ((p == config.drivers || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static aq_status_t validate_options(const aq_init_options_t *o) {
  if (bad_number)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s='%s': expected a whole number", bad_number, getenv(bad_number));
  if (config.max_signals < 16 || config.max_signals > (1u << 24))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "max_signals %u: must be in [16, 16777216]",
                    config.max_signals);
  const char *c = config.cpu_agents;
  if (strcmp(c, "numa") && strcmp(c, "package") && strcmp(c, "machine") &&
      (strspn(c, "0123456789") != strlen(c) || atoi(c) <= 0))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "cpu_agents '%s' (AQ_CPU_AGENTS): expected numa, package, machine or a count",
                    c);
  static const char *const policies[] = {AQ_SCHED_NAMES};
  int known = 0;
  for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); ++i) known |= !strcmp(config.sched, policies[i]);
  if (!known)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "AQ_SCHED='%s': expected heft (the default), eager, round-robin, pinned or locality", config.sched);
  int well_formed;
  memory_limit_of(NULL, &well_formed);
  if (!well_formed)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT,
                    "memory_limit '%s' (AQ_MEMORY_LIMIT): expected a size (2G, 512M, 4096) or agent=size,... "
                    "such as cpu0=2G,cuda0=40G",
                    config.memory_limit);
  if (config.shutdown_timeout_ns == 0)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "AQ_SHUTDOWN_TIMEOUT_MS must be at least 1");
  (void)o;
  return AQ_OK;
}

static aq_status_t load_topology(void) {
  if (hwloc_topology_init(&topology))
    return aq_error(AQ_ERROR_INTERNAL, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topology)) {
    hwloc_topology_destroy(topology);
    topology = NULL;
    return aq_error(AQ_ERROR_UNAVAILABLE,
                    "hwloc could not load the topology (check HWLOC_SYNTHETIC / HWLOC_XMLFILE)");
  }
  return AQ_OK;
}

static void teardown(void) {
  aq_queue_module_release_all();
  /* Code objects and live allocations go back to their drivers while the
   * drivers (a GPU's context) and agents still exist. */
  aq_code_object_module_deinit();
  aq_memory_module_deinit();
  for (int i = (int)aq_driver_count - 1; i >= 0; --i)
    if (driver_started[i] && aq_drivers[i]->stop) aq_drivers[i]->stop();
  for (uint32_t i = 0; i < agent_count; ++i) free(agents[i]);
  agent_count = 0;
  aq_queue_module_deinit();
  aq_handle_table_deinit(&agents_table);
  aq_signal_pool_deinit();
  if (topology) hwloc_topology_destroy(topology);
  topology = NULL;
  memset(driver_started, 0, sizeof(driver_started));
}

AQ_API aq_status_t aq_init(const aq_init_options_t *options) {
  pthread_mutex_lock(&init_mutex);
  if (atomic_load(&aq_runtime_refs) > 0) {
    atomic_fetch_add(&aq_runtime_refs, 1);
    pthread_mutex_unlock(&init_mutex);
    return AQ_OK;
  }
  configure(options);
  aq_status_t s = validate_options(options);
  if (s == AQ_OK) s = load_topology();
  if (s == AQ_OK) s = aq_signal_pool_init(config.max_signals);
  if (s != AQ_OK) {
    if (topology) hwloc_topology_destroy(topology);
    topology = NULL;
    pthread_mutex_unlock(&init_mutex);
    return s;
  }
  aq_handle_table_init(&agents_table, "agent");
  aq_queue_module_init();
  aq_memory_module_init();
  aq_code_object_module_init();
  /* Signals and queues need the runtime to look ready while drivers start. */
  atomic_store(&aq_runtime_refs, 1);
  for (unsigned i = 0; i < aq_driver_count; ++i) {
    const aq_driver_t *d = aq_drivers[i];
    if (!driver_wanted(d->name)) {
      snprintf(driver_messages[i], sizeof(driver_messages[i]), "not started: AQ_AGENTS=%s",
               config.drivers);
      continue;
    }
    aq_status_t ds = d->start();
    driver_started[i] = 1;
    if (ds == AQ_OK) {
      driver_messages[i][0] = '\0';
    } else {
      snprintf(driver_messages[i], sizeof(driver_messages[i]), "%s", aq_last_error());
      if (d == &aq_driver_cpu) s = ds; /* no CPU agents is not an ordinary case */
    }
  }
  if (s != AQ_OK) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", aq_last_error());
    atomic_store(&aq_runtime_refs, 0);
    teardown();
    pthread_mutex_unlock(&init_mutex);
    return aq_error(s, "%s", msg);
  }
  aq_trace_init_from_env();
  pthread_mutex_unlock(&init_mutex);
  return AQ_OK;
}

/* Running packets end before the agents go, within the shutdown timeout:
 * a kernel that never ends makes aq_shut_down fail (the runtime stays up,
 * and a later call may succeed) instead of waiting for ever. */
static aq_status_t wait_until_idle(void) {
  char what[256];
  uint64_t t0 = aq_now_ns();
  for (unsigned i = 0; i < aq_driver_count; ++i) {
    if (!driver_started[i] || !aq_drivers[i]->running) continue;
    while (aq_drivers[i]->running(what, sizeof(what))) {
      if (aq_now_ns() - t0 > config.shutdown_timeout_ns)
        return aq_error(AQ_ERROR_BUSY,
                        "aq_shut_down: %s is still running after %llu ms (AQ_SHUTDOWN_TIMEOUT_MS); the runtime "
                        "stays up",
                        what, (unsigned long long)(config.shutdown_timeout_ns / 1000000));
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
  return AQ_OK;
}

AQ_API aq_status_t aq_shut_down(void) {
  pthread_mutex_lock(&init_mutex);
  if (atomic_load(&aq_runtime_refs) == 0) {
    pthread_mutex_unlock(&init_mutex);
    return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_shut_down without a matching aq_init");
  }
  if (atomic_load(&aq_runtime_refs) == 1) {
    aq_status_t s = wait_until_idle();
    if (s != AQ_OK) {
      pthread_mutex_unlock(&init_mutex);
      return s;
    }
    aq_trace_shutdown();
    teardown();
    aq_trace_release();
  }
  atomic_fetch_sub(&aq_runtime_refs, 1);
  pthread_mutex_unlock(&init_mutex);
  return AQ_OK;
}

aq_status_t aq_agent_register(const aq_driver_t *driver, const aq_agent_info_t *info,
                              void *driver_data, aq_agent_impl_t **out_agent) {
  if (agent_count == AQ_AGENTS_MAX)
    return aq_error(AQ_ERROR_OUT_OF_RESOURCES, "more than %d agents", AQ_AGENTS_MAX);
  aq_agent_impl_t *a = calloc(1, sizeof(*a));
  if (!a) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for an agent");
  a->info = *info;
  a->info.index = agent_count;
  a->driver = driver;
  a->driver_data = driver_data;
  int well_formed;
  a->memory_budget = memory_limit_of(a->info.name, &well_formed);
  aq_status_t s = aq_handle_alloc(&agents_table, a, &a->handle);
  if (s != AQ_OK) {
    free(a);
    return s;
  }
  agents[agent_count++] = a;
  *out_agent = a;
  return AQ_OK;
}

aq_status_t aq_agent_resolve(aq_agent_t agent, aq_agent_impl_t **out_agent) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  return aq_handle_resolve(&agents_table, agent.handle, (void **)out_agent);
}

AQ_API aq_status_t aq_agents(aq_agent_t *out_agents, size_t capacity, size_t *count) {
  if (!count) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_agents: count is NULL");
  if (capacity && !out_agents)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_agents: agents is NULL with capacity %zu", capacity);
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  for (uint32_t i = 0; i < agent_count && i < capacity; ++i) out_agents[i].handle = agents[i]->handle;
  *count = agent_count;
  return AQ_OK;
}

AQ_API aq_status_t aq_agent_get_info(aq_agent_t agent, aq_agent_info_t *info) {
  aq_agent_impl_t *a;
  if (!info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_agent_get_info: info is NULL");
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  *info = a->info;
  return AQ_OK;
}

AQ_API aq_status_t aq_driver_status(const char *driver, const char **message) {
  if (!driver || !message)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_driver_status: driver and message are required");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  for (unsigned i = 0; i < aq_driver_count; ++i)
    if (!strcmp(aq_drivers[i]->name, driver)) {
      *message = driver_messages[i];
      return AQ_OK;
    }
  return aq_error(AQ_ERROR_NOT_FOUND, "no driver called '%s'", driver);
}
