/* The rocr driver: AMD GPUs through the real HSA runtime
 * (libhsa-runtime64.so.1, loaded at run time). It starts the runtime and
 * looks for GPU agents; where hsa_init fails (no /dev/kfd: every machine
 * here) it says why, and aq-info shows it.
 *
 * What it does not do yet: drive the GPUs it finds (hardware queues from
 * hsa_queue_create take the scheduler's packets unchanged; memory pools; hsaco
 * executables). With no AMD GPU to run on, that part would be untested code,
 * so a machine that has one is told so plainly instead. */
#include <dlfcn.h>
#include <hsa/hsa.h>
#include <stdio.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/status.h"

static void *lib;
static hsa_status_t (*p_shut_down)(void);

static hsa_status_t count_gpu(hsa_agent_t agent, void *data) {
  hsa_status_t (*get_info)(hsa_agent_t, hsa_agent_info_t, void *) = ((void **)data)[0];
  hsa_device_type_t type;
  if (get_info(agent, HSA_AGENT_INFO_DEVICE, &type) == HSA_STATUS_SUCCESS && type == HSA_DEVICE_TYPE_GPU)
    ++*(int *)((void **)data)[1];
  return HSA_STATUS_SUCCESS;
}

static aq_status_t rocr_start(void) {
  lib = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return aq_error(AQ_ERROR_UNAVAILABLE, "no HSA runtime: %s", dlerror());
  hsa_status_t (*init)(void) = (hsa_status_t(*)(void))dlsym(lib, "hsa_init");
  hsa_status_t (*status_string)(hsa_status_t, const char **) =
      (hsa_status_t(*)(hsa_status_t, const char **))dlsym(lib, "hsa_status_string");
  hsa_status_t (*iterate)(hsa_status_t (*)(hsa_agent_t, void *), void *) =
      (hsa_status_t(*)(hsa_status_t (*)(hsa_agent_t, void *), void *))dlsym(lib, "hsa_iterate_agents");
  void *get_info = dlsym(lib, "hsa_agent_get_info");
  p_shut_down = (hsa_status_t(*)(void))dlsym(lib, "hsa_shut_down");
  if (!init || !iterate || !get_info || !p_shut_down)
    return aq_error(AQ_ERROR_UNAVAILABLE, "libhsa-runtime64.so.1 lacks the HSA core API");
  hsa_status_t s = init();
  if (s != HSA_STATUS_SUCCESS) {
    const char *why = NULL;
    if (status_string) status_string(s, &why);
    p_shut_down = NULL;
    return aq_error(AQ_ERROR_UNAVAILABLE, "hsa_init failed (0x%x: %s); no /dev/kfd?", s, why ? why : "unknown");
  }
  int gpus = 0;
  void *data[2] = {get_info, &gpus};
  iterate(count_gpu, data);
  if (!gpus) return aq_error(AQ_ERROR_UNAVAILABLE, "the HSA runtime started and found no GPU agent");
  return aq_error(AQ_ERROR_UNAVAILABLE,
                  "the HSA runtime found %d AMD GPU%s; this build does not drive AMD GPUs yet", gpus,
                  gpus > 1 ? "s" : "");
}

static void rocr_stop(void) {
  if (p_shut_down) p_shut_down();
  p_shut_down = NULL;
  if (lib) dlclose(lib);
  lib = NULL;
}

/* An hsaco (AMDGPU ELF, as make builds kernels-amdgcn.hsaco) is known for
 * what it is, so loading one says why it cannot run here. */
static int rocr_co_recognizes(const void *bytes, size_t size) {
  const uint8_t *b = bytes;
  return size >= 20 && !memcmp(b, "\177ELF", 4) && b[18] == 224; /* EM_AMDGPU */
}

static aq_status_t rocr_co_load(const char *path, const void *bytes, size_t size, void **out_module,
                                aq_code_object_info_t *info) {
  (void)bytes, (void)size, (void)out_module, (void)info;
  return aq_error(AQ_ERROR_UNAVAILABLE, "%s: an AMD GPU code object (hsaco), and no ROCr agent here", path);
}

const aq_driver_t aq_driver_rocr = {
    .name = "rocr",
    .start = rocr_start,
    .stop = rocr_stop,
    .co_recognizes = rocr_co_recognizes,
    .co_load = rocr_co_load,
};
