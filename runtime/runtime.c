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
#include "runtime/settings.h"
#include "runtime/signal.h"
#include "runtime/status.h"

_Atomic int aq_runtime_refs;
static _Atomic uint64_t epoch;

uint64_t aq_runtime_epoch(void) { return atomic_load_explicit(&epoch, memory_order_acquire); }

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

/* The settings the runtime's modules read through aq_runtime_config(). */
static void configure(void) {
  config.spin_ns = aq_setting_u64(AQ_SET_SPIN_US) * 1000ull;
  config.gpu_spin_ns = aq_setting_u64(AQ_SET_GPU_SPIN_US) * 1000ull;
  config.max_signals = (uint32_t)aq_setting_u64(AQ_SET_MAX_SIGNALS);
  config.cpu_workers = (uint32_t)aq_setting_u64(AQ_SET_CPU_WORKERS);
  config.cpu_watchers = (uint32_t)aq_setting_u64(AQ_SET_CPU_WATCHERS);
  config.cpu_lanes = (uint32_t)aq_setting_u64(AQ_SET_CPU_LANES);
  snprintf(config.cpu_agents, sizeof(config.cpu_agents), "%s", aq_setting_text(AQ_SET_CPU_AGENTS));
  snprintf(config.drivers, sizeof(config.drivers), "%s", aq_setting_text(AQ_SET_AGENTS));
  snprintf(config.sched, sizeof(config.sched), "%s", aq_setting_text(AQ_SET_SCHED));
  config.shutdown_timeout_ns = aq_setting_u64(AQ_SET_SHUTDOWN_TIMEOUT_MS) * 1000000ull;
}

static int driver_wanted(const char *name) {
  if (!strcmp(config.drivers, "all")) return 1;
  size_t n = strlen(name);
  for (const char *p = config.drivers; (p = strstr(p, name)); p += n)
    if ((p == config.drivers || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
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
  aq_topology_check_binding(topology);
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
  aq_status_t s = aq_settings_load(options);
  if (s == AQ_OK) configure(), s = load_topology();
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
  atomic_fetch_add(&epoch, 1);
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
  a->memory_budget = aq_settings_memory_limit(a->info.name);
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
