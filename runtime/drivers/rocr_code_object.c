/* rocr code objects: hsaco files (AMDGPU ELF) as ROCr executables, one per
 * file, loaded for every AMD GPU. The kernel list and order come from the
 * file's own kernel descriptors (aq_rocr_hsaco_kernels), the per-GPU values
 * (kernel_object, segment sizes) from ROCr's symbols. kernel_object is the
 * real one, so dispatch packets need no translation; the forwarder finds a
 * kernel's kernarg size by it. Never run on AMD hardware past the
 * no-agent error (rocr_agent.c says why). */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/code_object.h"
#include "runtime/drivers/rocr.h"
#include "runtime/status.h"

typedef struct rocr_module {
  void *bytes;                /* ROCr's reader reads it until destroyed */
  hsa_code_object_reader_t reader;
  hsa_executable_t exec;
  uint32_t count;
  rocr_kd_t *kds;             /* count, in file order */
  rocr_kernel_t *kernels;     /* aq_rocr_agent_count * count */
  struct rocr_module *next;
} rocr_module_t;

static pthread_rwlock_t modules_lock = PTHREAD_RWLOCK_INITIALIZER;
static rocr_module_t *modules;

/* A linear walk: code objects hold tens of kernels, not thousands. */
const rocr_kernel_t *aq_rocr_kernel_lookup(uint64_t kernel_object) {
  const rocr_kernel_t *found = NULL;
  pthread_rwlock_rdlock(&modules_lock);
  for (rocr_module_t *m = modules; m && !found; m = m->next)
    for (uint32_t i = 0; i < aq_rocr_agent_count * m->count; ++i)
      if (m->kernels[i].kernel_object == kernel_object) found = &m->kernels[i];
  pthread_rwlock_unlock(&modules_lock);
  return found;
}

int aq_rocr_co_recognizes(const void *bytes, size_t size) {
  const uint8_t *b = bytes;
  return size >= 20 && !memcmp(b, ELFMAG, SELFMAG) && b[18] == EM_AMDGPU;
}

typedef struct symbol_walk {
  rocr_module_t *m;
  uint32_t agent;
} symbol_walk_t;

static hsa_status_t on_symbol(hsa_executable_t exec, hsa_agent_t agent, hsa_executable_symbol_t sym, void *data) {
  (void)exec, (void)agent;
  symbol_walk_t *w = data;
  hsa_symbol_kind_t kind = HSA_SYMBOL_KIND_VARIABLE;
  uint32_t len = 0;
  char name[sizeof(w->m->kds[0].name) + 4] = "";
  aq_rocr.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, &kind);
  aq_rocr.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH, &len);
  if (kind != HSA_SYMBOL_KIND_KERNEL || len >= sizeof(name)) return HSA_STATUS_SUCCESS;
  aq_rocr.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_NAME, name); /* not terminated */
  name[len] = '\0';
  if (len > 3 && !strcmp(name + len - 3, ".kd")) name[len - 3] = '\0'; /* v3+ names it name.kd */
  for (uint32_t i = 0; i < w->m->count; ++i) {
    if (strcmp(w->m->kds[i].name, name)) continue;
    rocr_kernel_t *k = &w->m->kernels[w->agent * w->m->count + i];
    k->name = w->m->kds[i].name;
    k->agent = aq_rocr_agents[w->agent];
#define GET(info, field) aq_rocr.hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_##info, &k->field)
    GET(OBJECT, kernel_object), GET(KERNARG_SEGMENT_SIZE, kernarg_size);
    GET(KERNARG_SEGMENT_ALIGNMENT, kernarg_alignment), GET(GROUP_SEGMENT_SIZE, group_size);
    GET(PRIVATE_SEGMENT_SIZE, private_size);
#undef GET
  }
  return HSA_STATUS_SUCCESS;
}

static aq_status_t build(const char *path, rocr_module_t *m, size_t size) {
  hsa_profile_t profile = HSA_PROFILE_BASE;
  aq_rocr.hsa_agent_get_info(aq_rocr_agents[0]->hsa, HSA_AGENT_INFO_PROFILE, &profile);
  hsa_status_t s = aq_rocr.hsa_code_object_reader_create_from_memory(m->bytes, size, &m->reader);
  if (s == HSA_STATUS_SUCCESS)
    s = aq_rocr.hsa_executable_create_alt(profile, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &m->exec);
  if (s != HSA_STATUS_SUCCESS) return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: %s", path, aq_rocr_error(s));
  for (uint32_t a = 0; a < aq_rocr_agent_count; ++a) {
    s = aq_rocr.hsa_executable_load_agent_code_object(m->exec, aq_rocr_agents[a]->hsa, m->reader, NULL, NULL);
    if (s != HSA_STATUS_SUCCESS)
      return aq_error(AQ_ERROR_INCOMPATIBLE, "%s has no code for %s (%s): %s", path, aq_rocr_agents[a]->agent->info.isa,
                      aq_rocr_agents[a]->agent->info.device, aq_rocr_error(s));
  }
  s = aq_rocr.hsa_executable_freeze(m->exec, NULL);
  if (s != HSA_STATUS_SUCCESS) return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: freeze: %s", path, aq_rocr_error(s));
  for (uint32_t a = 0; a < aq_rocr_agent_count; ++a) {
    symbol_walk_t w = {m, a};
    aq_rocr.hsa_executable_iterate_agent_symbols(m->exec, aq_rocr_agents[a]->hsa, on_symbol, &w);
    for (uint32_t i = 0; i < m->count; ++i)
      if (!m->kernels[a * m->count + i].kernel_object)
        return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: ROCr loaded no kernel '%s' for %s", path, m->kds[i].name,
                        aq_rocr_agents[a]->agent->info.name);
  }
  return AQ_OK;
}

aq_status_t aq_rocr_co_load(const char *path, const void *bytes, size_t size, void **out, aq_code_object_info_t *info) {
  if (!aq_rocr_agent_count)
    return aq_error(AQ_ERROR_UNAVAILABLE, "%s: an AMD GPU code object (hsaco), and no ROCr agent here (rocr: %s)", path,
                    *aq_rocr_unavailable_reason() ? aq_rocr_unavailable_reason() : "not started");
  AQ_RETURN_IF_ERROR(aq_elf_check(path, bytes, size, EM_AMDGPU));
  int n = aq_rocr_hsaco_kernels(bytes, size, NULL, 0);
  if (n < 0) return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: corrupt symbol table or kernel descriptor", path);
  rocr_module_t *m = calloc(1, sizeof(*m));
  if (m) {
    m->count = (uint32_t)n;
    m->bytes = malloc(size);
    m->kds = calloc(n ? (size_t)n : 1, sizeof(*m->kds));
    m->kernels = calloc(aq_rocr_agent_count * (n ? (size_t)n : 1), sizeof(*m->kernels));
  }
  if (!m || !m->bytes || !m->kds || !m->kernels) {
    if (m) aq_rocr_co_unload(m);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for code object %s", path);
  }
  memcpy(m->bytes, bytes, size);
  aq_rocr_hsaco_kernels(bytes, size, m->kds, n);
  aq_status_t s = build(path, m, size);
  if (s != AQ_OK) {
    aq_rocr_co_unload(m);
    return s;
  }
  pthread_rwlock_wrlock(&modules_lock);
  m->next = modules;
  modules = m;
  pthread_rwlock_unlock(&modules_lock);
  snprintf(info->format, sizeof(info->format), "amdgcn-hsaco");
  snprintf(info->producer, sizeof(info->producer), "ROCr executable");
  info->kernel_count = m->count;
  *out = m;
  return AQ_OK;
}

void aq_rocr_co_unload(void *module) {
  rocr_module_t *m = module;
  pthread_rwlock_wrlock(&modules_lock);
  for (rocr_module_t **p = &modules; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  pthread_rwlock_unlock(&modules_lock);
  if (m->exec.handle) aq_rocr.hsa_executable_destroy(m->exec);
  if (m->reader.handle) aq_rocr.hsa_code_object_reader_destroy(m->reader);
  free(m->bytes);
  free(m->kds);
  free(m->kernels);
  free(m);
}

aq_status_t aq_rocr_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent, aq_kernel_info_t *out) {
  rocr_module_t *m = module;
  uint32_t a = 0;
  while (a < aq_rocr_agent_count && aq_rocr_agents[a] != agent->driver_data) ++a;
  if (a == aq_rocr_agent_count) return aq_error(AQ_ERROR_INVALID_HANDLE, "not a ROCr agent");
  const rocr_kernel_t *k = &m->kernels[a * m->count + index];
  *out = (aq_kernel_info_t){.name = m->kds[index].name, .kernel_object = k->kernel_object,
                            .kernarg_size = k->kernarg_size, .kernarg_alignment = k->kernarg_alignment,
                            .group_segment_size = k->group_size};
  return AQ_OK;
}
