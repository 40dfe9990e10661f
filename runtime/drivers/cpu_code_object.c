/* CPU code objects: ELF shared objects exporting an aq_code_object_table_t.
 * Every kernel gets a handle, which is the kernel_object its dispatch packets
 * carry, so a packet naming an unloaded kernel is caught, not called. */
#include <dlfcn.h>
#include <sched.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/code_object.h"
#include "runtime/drivers/cpu.h"
#include "runtime/drivers/cpu_elf.h"
#include "runtime/handle.h"
#include "runtime/status.h"

#if defined(__x86_64__)
#define NATIVE_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define NATIVE_MACHINE EM_AARCH64
#endif

typedef struct cpu_module {
  void *dl;
  const aq_code_object_table_t *table;
  const aq_op_table_t *ops; /* NULL: the object does not describe its kernels */
  cpu_kernel_t *kernels;
} cpu_module_t;

static aq_handle_table_t kernels;

void aq_cpu_code_objects_init(void) { aq_handle_table_init(&kernels, "kernel"); }
void aq_cpu_code_objects_deinit(void) { aq_handle_table_deinit(&kernels); }

const cpu_kernel_t *aq_cpu_kernel_lookup(uint64_t kernel_object) {
  return aq_handle_get(&kernels, kernel_object);
}

const char *aq_cpu_co_busy(void *module) {
  cpu_module_t *m = module;
  for (uint32_t i = 0; i < m->table->kernel_count; ++i)
    if (aq_cpu_kernel_running(m->kernels[i].handle)) return m->kernels[i].desc->name;
  return NULL;
}

int aq_cpu_co_recognizes(const void *bytes, size_t size) {
  /* Any ELF but the GPUs' own (cubins and hsacos belong to their drivers):
   * a CPU ELF for another architecture is refused here, with a reason. */
  if (size < SELFMAG || memcmp(bytes, ELFMAG, SELFMAG)) return 0;
  if (size < 20) return 1;
  uint16_t machine = (uint16_t)(((const uint8_t *)bytes)[18] | ((const uint8_t *)bytes)[19] << 8);
  return machine != EM_AMDGPU && machine != 190 /* EM_CUDA */;
}

static aq_status_t check_table(const char *path, const aq_code_object_table_t *t) {
  if (t->magic != AQ_CODE_OBJECT_MAGIC)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: %s has a bad magic number 0x%08x", path,
                    AQ_CODE_OBJECT_SYMBOL, t->magic);
  if (t->version != AQ_CODE_OBJECT_VERSION)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: code-object ABI version %u; this runtime loads version %u",
                    path, t->version, AQ_CODE_OBJECT_VERSION);
  if (t->isa != AQ_ISA_NATIVE)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: kernels built for ISA %u; this machine is ISA %u", path,
                    t->isa, AQ_ISA_NATIVE);
  if (t->kernel_count == 0 || !t->kernels)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: the kernel table is empty", path);
  for (uint32_t i = 0; i < t->kernel_count; ++i) {
    const aq_kernel_desc_t *k = &t->kernels[i];
    if (!k->name || !k->name[0] || !k->fn)
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel %u has no name or no function", path, i);
    if (k->kernarg_align & (k->kernarg_align - 1))
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel '%s': kernarg alignment %u is not a power of two",
                      path, k->name, k->kernarg_align);
    for (uint32_t j = 0; j < i; ++j)
      if (!strcmp(t->kernels[j].name, k->name))
        return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel '%s' is defined twice", path, k->name);
  }
  return AQ_OK;
}

static const aq_kernel_desc_t *kernel_named(const aq_code_object_table_t *t, const char *name) {
  for (uint32_t i = 0; name && i < t->kernel_count; ++i)
    if (!strcmp(t->kernels[i].name, name)) return &t->kernels[i];
  return NULL;
}

/* A field the scheduler writes lies inside its kernel's kernarg. */
static aq_status_t check_field(const char *path, const char *kernel, const char *field, uint32_t off,
                               uint32_t size) {
  if (off == AQ_OP_FIELD_NONE || ((uint64_t)off + 4 <= size && !(off & 3))) return AQ_OK;
  return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: op '%s': %s offset %u does not fit its %u bytes of kernargs",
                  path, kernel, field, off, size);
}

static aq_status_t check_op(const char *path, const aq_code_object_table_t *t, const aq_op_desc_t *o) {
  const aq_kernel_desc_t *k = kernel_named(t, o->kernel);
  if (!k)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: the op table describes '%s', which the kernel table lacks",
                    path, o->kernel ? o->kernel : "(null)");
  if ((o->flags & AQ_OP_OPTIMIZER) && o->lr_offset == AQ_OP_FIELD_NONE)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: optimizer op '%s' has no learning-rate offset", path, o->kernel);
  if ((o->flags & AQ_OP_MATMUL) && o->precision_offset == AQ_OP_FIELD_NONE)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: matmul op '%s' has no precision offset", path, o->kernel);
  AQ_RETURN_IF_ERROR(check_field(path, o->kernel, "learning-rate", o->lr_offset, k->kernarg_size));
  return check_field(path, o->kernel, "precision", o->precision_offset, k->kernarg_size);
}

static aq_status_t check_fusion(const char *path, const aq_code_object_table_t *t, const aq_op_fusion_t *f) {
  const aq_kernel_desc_t *p = kernel_named(t, f->product), *c = kernel_named(t, f->consumer);
  const aq_kernel_desc_t *z = kernel_named(t, f->fused);
  if (!p || !c || !z || !f->accepts || !f->merge)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: a fusion of '%s' into '%s' names a kernel the table lacks or has no accepts/merge", path,
                    f->product ? f->product : "(null)", f->consumer ? f->consumer : "(null)");
  if (f->kernarg_size < p->kernarg_size || (uint64_t)f->consumer_slot + sizeof(void *) > c->kernarg_size)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: fusion '%s': %u kernarg bytes cannot start with the product's %u, or slot %u lies outside "
                    "'%s''s kernargs", path, f->fused, f->kernarg_size, p->kernarg_size, f->consumer_slot, f->consumer);
  if (f->flags & ~(uint32_t)(AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS | AQ_OP_FUSE_ON_CPUS)) /* a newer library's promise */
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: fusion '%s' has flags 0x%x this runtime does not know", path,
                    f->fused, f->flags);
  return check_field(path, f->fused, "learning-rate", f->lr_offset, f->kernarg_size);
}

/* The optional op description: what the scheduler will trust of it. */
static aq_status_t check_ops(const char *path, const aq_code_object_table_t *t, const aq_op_table_t *o) {
  if (o->magic != AQ_OP_TABLE_MAGIC)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: %s has a bad magic number 0x%08x", path, AQ_OP_TABLE_SYMBOL,
                    o->magic);
  if (o->version != AQ_OP_TABLE_VERSION)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: op table version %u; this runtime reads version %u", path, o->version,
                    AQ_OP_TABLE_VERSION);
  if ((o->op_count && !o->ops) || (o->fusion_count && !o->fusions) || (o->build_count && !o->builds))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: the op table counts entries it does not point at", path);
  for (uint32_t i = 0; i < o->op_count; ++i) AQ_RETURN_IF_ERROR(check_op(path, t, &o->ops[i]));
  for (uint32_t i = 0; i < o->fusion_count; ++i) AQ_RETURN_IF_ERROR(check_fusion(path, t, &o->fusions[i]));
  for (uint32_t i = 0; i < o->build_count; ++i)
    if (!o->builds[i].code_object || !o->builds[i].code_object[0])
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: op table build %u names no code object", path, i);
  return AQ_OK;
}

aq_status_t aq_cpu_co_load(const char *path, const void *bytes, size_t size, void **out_module,
                        aq_code_object_info_t *info) {
  AQ_RETURN_IF_ERROR(aq_elf_check(path, bytes, size, NATIVE_MACHINE));
  /* Read from the file first: dlopen runs the object's constructors. */
  AQ_RETURN_IF_ERROR(aq_cpu_elf_check(path, bytes, size));
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: cannot be loaded: %s", path, dlerror());
  const aq_code_object_table_t *t = dlsym(dl, AQ_CODE_OBJECT_SYMBOL);
  aq_status_t s = t ? check_table(path, t)
                    : aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                               "%s: exports no '%s': not an Aquila code object", path, AQ_CODE_OBJECT_SYMBOL);
  const aq_op_table_t *ops = s == AQ_OK ? dlsym(dl, AQ_OP_TABLE_SYMBOL) : NULL;
  if (ops) s = check_ops(path, t, ops);
  cpu_module_t *m = NULL;
  if (s == AQ_OK && !(m = calloc(1, sizeof(*m))))
    s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a code object");
  if (s == AQ_OK && !(m->kernels = calloc(t->kernel_count, sizeof(*m->kernels))))
    s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a code object");
  for (uint32_t i = 0; s == AQ_OK && i < t->kernel_count; ++i) {
    m->kernels[i].desc = &t->kernels[i];
    s = aq_handle_alloc(&kernels, &m->kernels[i], &m->kernels[i].handle);
  }
  if (s != AQ_OK) {
    if (m) {
      m->dl = dl;
      m->table = t;
      aq_cpu_co_unload(m);
    } else {
      dlclose(dl);
    }
    return s;
  }
  m->dl = dl;
  m->table = t;
  m->ops = ops;
  snprintf(info->format, sizeof(info->format), "cpu-elf");
  snprintf(info->producer, sizeof(info->producer), "%s", t->producer ? t->producer : "");
  info->kernel_count = t->kernel_count;
  *out_module = m;
  return AQ_OK;
}

const aq_op_table_t *aq_cpu_co_op_table(void *module) { return ((cpu_module_t *)module)->ops; }

void aq_cpu_co_unload(void *module) {
  cpu_module_t *m = module;
  if (m->kernels)
    for (uint32_t i = 0; i < m->table->kernel_count; ++i)
      if (m->kernels[i].handle) {
        aq_handle_release(&kernels, m->kernels[i].handle);
        while (aq_cpu_kernel_running(m->kernels[i].handle)) sched_yield(); /* a dispatch that began before */
      }
  free(m->kernels);
  dlclose(m->dl);
  free(m);
}

aq_status_t aq_cpu_co_kernel_at(void *module, uint32_t index, aq_agent_impl_t *agent,
                             aq_kernel_info_t *out) {
  (void)agent;
  cpu_module_t *m = module;
  const cpu_kernel_t *k = &m->kernels[index];
  *out = (aq_kernel_info_t){.name = k->desc->name,
                            .kernel_object = k->handle,
                            .kernarg_size = k->desc->kernarg_size,
                            .kernarg_alignment = k->desc->kernarg_align ? k->desc->kernarg_align : 8,
                            .group_segment_size = k->desc->group_segment_size};
  return AQ_OK;
}
