/* The rocr driver: AMD GPUs through the real HSA runtime (libhsa-runtime64.so.1,
 * loaded at run time). One agent per GPU agent ROCr reports; its queues are
 * hardware AQL queues (rocr_queue.c), its regions ROCr's memory pools
 * (rocr_memory.c), its code objects hsaco executables (rocr_code_object.c).
 *
 * NEVER RUN ON AMD HARDWARE. No machine we have has an AMD GPU or /dev/kfd,
 * so hsa_init fails everywhere we test and only that path has run: the
 * driver reports the error (aq-info shows it) and offers no agents. What the
 * tests do exercise for real is the pure part (rocr_packet.c: packet
 * forwarding into a ring, the in-flight signal table, hsaco kernel
 * descriptors) on CPU memory. Everything past a successful hsa_init (agent
 * discovery, pools, hardware queues, async signal handlers, executables,
 * SVM) is written against ROCm's headers and has never executed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/drivers/rocr.h"
#include "runtime/memory.h"
#include "runtime/status.h"

rocr_host_t aq_rocr_host;
rocr_agent_t *aq_rocr_agents[AQ_AGENTS_MAX];
uint32_t aq_rocr_agent_count;
static int initialized;
static char unavailable[256];

const char *aq_rocr_unavailable_reason(void) { return unavailable; }

static aq_status_t unavailable_error(const char *fmt, const char *detail) {
  snprintf(unavailable, sizeof(unavailable), fmt, detail);
  return aq_error(AQ_ERROR_UNAVAILABLE, "%s", unavailable);
}

/* The NUMA node nearest the GPU, from its PCI address. */
static int numa_of(hsa_agent_t g) {
  uint32_t bdf = 0, domain = 0;
  aq_rocr.hsa_agent_get_info(g, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_BDFID, &bdf);
  aq_rocr.hsa_agent_get_info(g, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_DOMAIN, &domain);
  return aq_topology_pci_numa_node(domain, bdf >> 8, (bdf >> 3) & 0x1f, bdf & 7);
}

static aq_status_t add_agent(hsa_agent_t g) {
  rocr_agent_t *a = calloc(1, sizeof(*a));
  if (!a) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a GPU agent");
  a->hsa = g;
  uint32_t cus = 0, queue_max = 0, queues = 0, wg = 0;
  aq_rocr.hsa_agent_get_info(g, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus);
  aq_rocr.hsa_agent_get_info(g, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &queue_max);
  aq_rocr.hsa_agent_get_info(g, HSA_AGENT_INFO_QUEUES_MAX, &queues);
  aq_rocr.hsa_agent_get_info(g, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, &wg);
  aq_agent_info_t info = {.kind = AQ_AGENT_KIND_GPU, .numa_node = numa_of(g), .compute_units = cus,
                          .queue_max_size = queue_max, .queues_max = queues, .workgroup_max_size = wg,
                          .features = AQ_FEATURE_KERNEL_DISPATCH, .usable = 1};
  snprintf(info.name, sizeof(info.name), "rocr%u", aq_rocr_agent_count);
  snprintf(info.driver, sizeof(info.driver), "rocr");
  char isa[64] = "", product[64] = ""; /* ROCr writes up to 64 bytes */
  aq_rocr.hsa_agent_get_info(g, HSA_AGENT_INFO_NAME, isa);
  aq_rocr.hsa_agent_get_info(g, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product);
  snprintf(info.isa, sizeof(info.isa), "%s", isa);
  snprintf(info.device, sizeof(info.device), "%s", product);
  aq_status_t s = aq_agent_register(&aq_driver_rocr, &info, a, &a->agent);
  if (s != AQ_OK) {
    free(a);
    return s;
  }
  aq_rocr_agents[aq_rocr_agent_count++] = a;
  return AQ_OK;
}

static hsa_status_t collect(hsa_agent_t g, void *data) {
  (void)data;
  hsa_device_type_t type;
  if (aq_rocr.hsa_agent_get_info(g, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (type == HSA_DEVICE_TYPE_CPU && !aq_rocr_host.cpu.handle) aq_rocr_host.cpu = g;
  if (type == HSA_DEVICE_TYPE_GPU && aq_rocr_host.gpu_count < AQ_AGENTS_MAX) aq_rocr_host.gpus[aq_rocr_host.gpu_count++] = g;
  return HSA_STATUS_SUCCESS;
}

static aq_status_t rocr_start(void) {
  char why[256];
  unavailable[0] = '\0';
  if (aq_rocr_api_load(why, sizeof(why))) return unavailable_error("%s", why);
  hsa_status_t s = aq_rocr.hsa_init();
  if (s != HSA_STATUS_SUCCESS) {
    int kfd = access("/dev/kfd", R_OK | W_OK) == 0;
    snprintf(why, sizeof(why), "%s%s", kfd ? "" : "no /dev/kfd (no AMD GPU driver here): ", aq_rocr_error(s));
    return unavailable_error("hsa_init failed, %s", why);
  }
  initialized = 1;
  memset(&aq_rocr_host, 0, sizeof(aq_rocr_host));
  aq_rocr.hsa_iterate_agents(collect, NULL);
  if (!aq_rocr_host.gpu_count) return unavailable_error("%s", "the HSA runtime started and found no GPU agent");
  aq_status_t st = AQ_OK;
  for (uint32_t i = 0; st == AQ_OK && i < aq_rocr_host.gpu_count; ++i) st = add_agent(aq_rocr_host.gpus[i]);
  for (uint32_t i = 0; st == AQ_OK && i < aq_rocr_agent_count; ++i) st = aq_rocr_memory_regions(aq_rocr_agents[i]);
  return st;
}

static void rocr_stop(void) {
  for (uint32_t i = 0; i < aq_rocr_agent_count; ++i) free(aq_rocr_agents[i]);
  aq_rocr_agent_count = 0;
  if (initialized) aq_rocr.hsa_shut_down();
  initialized = 0;
}

const aq_driver_t aq_driver_rocr = {
    .name = "rocr",
    .start = rocr_start,
    .stop = rocr_stop,
    .queue_attach = aq_rocr_queue_attach,
    .queue_detach = aq_rocr_queue_detach,
    .region_allocate = aq_rocr_alloc,
    .region_free = aq_rocr_free,
    .copy = aq_rocr_copy,
    .co_recognizes = aq_rocr_co_recognizes,
    .co_load = aq_rocr_co_load,
    .co_unload = aq_rocr_co_unload,
    .co_kernel_at = aq_rocr_co_kernel_at,
    .prefetch = aq_rocr_prefetch,
    .advise = aq_rocr_advise,
};
