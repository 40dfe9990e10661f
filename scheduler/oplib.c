/* The op library's description, indexed (oplib.h). */
#include "scheduler/oplib.h"

#include <string.h>

#include "aquila/runtime.h"
#include "runtime/status.h"

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

/* The entry for kernel, made if absent; NULL once the index is full. */
static oplib_entry_t *entry(oplib_t *lib, const char *kernel) {
  uint32_t i = hash(kernel) & (OPLIB_SLOTS - 1);
  for (; lib->slots[i]; i = (i + 1) & (OPLIB_SLOTS - 1))
    if (!strcmp(lib->entries[lib->slots[i] - 1].kernel, kernel)) return &lib->entries[lib->slots[i] - 1];
  if (lib->nentries == OPLIB_ENTRIES_MAX) return NULL;
  oplib_entry_t *e = &lib->entries[lib->nentries++];
  *e = (oplib_entry_t){.kernel = kernel};
  lib->slots[i] = (uint8_t)lib->nentries;
  return e;
}

static aq_status_t full(void) {
  return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "op library %s describes more than %d kernels", OPLIB_CODE_OBJECT,
                  OPLIB_ENTRIES_MAX);
}

static aq_status_t index_table(oplib_t *lib) {
  const aq_op_table_t *t = lib->table;
  if (t->fusion_count > 32)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "op library %s: %u fusions (at most 32)", OPLIB_CODE_OBJECT,
                    t->fusion_count);
  for (uint32_t i = 0; i < t->op_count; ++i) {
    oplib_entry_t *e = entry(lib, t->ops[i].kernel);
    if (!e) return full();
    e->op = &t->ops[i];
  }
  for (uint32_t r = 0; r < t->fusion_count; ++r) {
    oplib_entry_t *e = entry(lib, t->fusions[r].consumer);
    if (!e) return full();
    e->consumes |= 1u << r;
  }
  return AQ_OK;
}

aq_status_t aq_oplib_index(oplib_t *lib, aq_code_object_t co) {
  memset(lib, 0, sizeof(*lib));
  lib->co = co;
  if (aq_code_object_op_table(co, &lib->table) != AQ_OK) {
    lib->table = NULL; /* a library without a description: nothing to index */
    aq_error_clear();
    return AQ_OK;
  }
  aq_status_t s = index_table(lib);
  if (s != AQ_OK) memset(lib, 0, sizeof(*lib));
  return s;
}

const oplib_entry_t *aq_oplib_find(const oplib_t *lib, const char *kernel) {
  if (!lib->nentries) return NULL;
  for (uint32_t i = hash(kernel) & (OPLIB_SLOTS - 1); lib->slots[i]; i = (i + 1) & (OPLIB_SLOTS - 1))
    if (!strcmp(lib->entries[lib->slots[i] - 1].kernel, kernel)) return &lib->entries[lib->slots[i] - 1];
  return NULL;
}

uint32_t aq_oplib_lr_offset(const oplib_t *lib, const char *kernel) {
  const oplib_entry_t *e = aq_oplib_find(lib, kernel);
  return e && e->op && (e->op->flags & AQ_OP_OPTIMIZER) ? e->op->lr_offset : AQ_OP_FIELD_NONE;
}

uint32_t aq_oplib_precision_offset(const oplib_t *lib, const char *kernel) {
  const oplib_entry_t *e = aq_oplib_find(lib, kernel);
  return e && e->op && (e->op->flags & AQ_OP_MATMUL) ? e->op->precision_offset : AQ_OP_FIELD_NONE;
}

static const aq_op_build_t *build_for(const oplib_t *lib, uint32_t agent_kind) {
  for (uint32_t i = 0; lib->table && i < lib->table->build_count; ++i)
    if (lib->table->builds[i].agent_kind == agent_kind) return &lib->table->builds[i];
  return NULL;
}

const char *aq_oplib_build(const oplib_t *lib, uint32_t agent_kind) {
  if (agent_kind == AQ_AGENT_KIND_CPU) return OPLIB_CODE_OBJECT;
  const aq_op_build_t *b = build_for(lib, agent_kind);
  return b ? b->code_object : NULL;
}

const char *aq_oplib_launch_kernel(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  return b && b->kernel ? b->kernel(kernel, kernarg) : kernel;
}

aq_dispatch_shape_t aq_oplib_launch_shape(const oplib_t *lib, uint32_t agent_kind, const char *kernel,
                                          const void *kernarg, aq_dispatch_shape_t cpu) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  if (!b || !b->shape) return cpu;
  uint32_t grid[3], wg[3];
  for (int d = 0; d < 3; ++d) grid[d] = cpu.grid[d], wg[d] = cpu.workgroup[d];
  b->shape(kernel, kernarg, grid, wg);
  for (int d = 0; d < 3; ++d) cpu.grid[d] = grid[d], cpu.workgroup[d] = (uint16_t)wg[d];
  return cpu;
}

uint32_t aq_oplib_group_segment(const oplib_t *lib, uint32_t agent_kind, const char *build, const void *kernarg) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  return b && b->group_segment ? b->group_segment(build, kernarg) : 0;
}

uint32_t aq_oplib_builds(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg,
                         const char **names, uint32_t max) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  if (!max) return 0;
  uint32_t n = b && b->builds ? b->builds(kernel, kernarg, names, max) : 0;
  if (n) return n < max ? n : max;
  names[0] = aq_oplib_launch_kernel(lib, agent_kind, kernel, kernarg);
  return 1;
}

aq_dispatch_shape_t aq_oplib_build_shape(const oplib_t *lib, uint32_t agent_kind, const char *kernel,
                                         const char *build, const void *kernarg, aq_dispatch_shape_t cpu) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  if (!b || !b->build_shape) return aq_oplib_launch_shape(lib, agent_kind, kernel, kernarg, cpu);
  uint32_t grid[3], wg[3];
  for (int d = 0; d < 3; ++d) grid[d] = cpu.grid[d], wg[d] = cpu.workgroup[d];
  b->build_shape(kernel, build, kernarg, grid, wg);
  for (int d = 0; d < 3; ++d) cpu.grid[d] = grid[d], cpu.workgroup[d] = (uint16_t)wg[d];
  return cpu;
}

int aq_oplib_tune_key(const oplib_t *lib, uint32_t agent_kind, const char *kernel, const void *kernarg, char *buf,
                      size_t size) {
  const aq_op_build_t *b = build_for(lib, agent_kind);
  return b && b->tune_key && size && b->tune_key(kernel, kernarg, buf, size);
}
