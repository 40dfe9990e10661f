/* The rocr driver's pure parts (rocr_packet.h): packet forwarding, the
 * in-flight table, hsaco kernel descriptors. */
#include "runtime/drivers/rocr_packet.h"

#include <elf.h>
#include <string.h>

void aq_rocr_packet_forward(const void *src, void *dst, const rocr_patch_t *patch) {
  uint32_t word = __atomic_load_n((const uint32_t *)src, __ATOMIC_ACQUIRE);
  union {
    uint8_t bytes[64];
    hsa_kernel_dispatch_packet_t dispatch;
    hsa_barrier_and_packet_t barrier; /* barrier-OR has the same layout */
  } u;
  memcpy(u.bytes, src, sizeof(u));
  hsa_packet_type_t type = (hsa_packet_type_t)((word >> HSA_PACKET_HEADER_TYPE) & 0xff);
  if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
    hsa_kernel_dispatch_packet_t *p = &u.dispatch;
    if (patch->kernarg) p->kernarg_address = patch->kernarg;
    /* The packet may ask for more than the kernel's fixed needs, never less:
     * the GPU sizes scratch and LDS from these fields alone. */
    if (p->group_segment_size < patch->min_group) p->group_segment_size = patch->min_group;
    if (p->private_segment_size < patch->min_private) p->private_segment_size = patch->min_private;
  } else if (type == HSA_PACKET_TYPE_BARRIER_AND || type == HSA_PACKET_TYPE_BARRIER_OR) {
    for (int i = 0; i < 5; ++i) u.barrier.dep_signal[i].handle = patch->deps[i];
  }
  /* completion_signal is the last 8 bytes of every packet format. */
  memcpy(u.bytes + 56, &patch->completion, 8);
  memcpy((uint8_t *)dst + 4, u.bytes + 4, sizeof(u) - 4);
  __atomic_store_n((uint32_t *)dst, word, __ATOMIC_RELEASE);
}

int aq_rocr_inflight_acquire(rocr_inflight_table_t *t, uint64_t aq_signal) {
  for (uint32_t n = 0; n < t->count; ++n) {
    uint32_t i = (t->next + n) % t->count;
    rocr_inflight_t *e = &t->e[i];
    if (atomic_load_explicit(&e->state, memory_order_acquire) != ROCR_FREE || atomic_load(&e->holds)) continue;
    e->aq_signal = aq_signal;
    e->what = NULL;
    for (int k = 0; k < 5; ++k) e->held[k] = -1;
    atomic_store_explicit(&e->state, ROCR_BUSY, memory_order_release);
    t->next = (i + 1) % t->count;
    return (int)i;
  }
  return -1;
}

int aq_rocr_inflight_find(rocr_inflight_table_t *t, uint64_t aq_signal) {
  int found = -1;
  for (uint32_t i = 0; i < t->count; ++i) {
    if (t->e[i].aq_signal != aq_signal || atomic_load(&t->e[i].state) != ROCR_BUSY) continue;
    if (found >= 0) return -1;
    found = (int)i;
  }
  return found;
}

void aq_rocr_inflight_hold(rocr_inflight_table_t *t, int b, int dep) {
  for (int k = 0; k < 5; ++k)
    if (t->e[b].held[k] < 0) {
      t->e[b].held[k] = (int16_t)dep;
      atomic_fetch_add(&t->e[dep].holds, 1);
      return;
    }
}

int aq_rocr_inflight_claim(rocr_inflight_table_t *t, int i) {
  uint32_t busy = ROCR_BUSY;
  return atomic_compare_exchange_strong(&t->e[i].state, &busy, ROCR_DONE);
}

void aq_rocr_inflight_release(rocr_inflight_table_t *t, int i) {
  rocr_inflight_t *e = &t->e[i];
  for (int k = 0; k < 5; ++k)
    if (e->held[k] >= 0) atomic_fetch_sub(&t->e[e->held[k]].holds, 1);
  atomic_store_explicit(&e->state, ROCR_FREE, memory_order_release);
}

uint32_t aq_rocr_inflight_busy(rocr_inflight_table_t *t) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < t->count; ++i) n += atomic_load(&t->e[i].state) != ROCR_FREE;
  return n;
}

/* Section header i into *out, if the file holds it and its contents. */
static int section(const uint8_t *b, size_t size, const Elf64_Ehdr *eh, uint32_t i, Elf64_Shdr *out) {
  if (i >= eh->e_shnum || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
      (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size - eh->e_shoff)
    return 0;
  memcpy(out, b + eh->e_shoff + (size_t)i * sizeof(Elf64_Shdr), sizeof(*out));
  return out->sh_type == SHT_NOBITS || (out->sh_offset <= size && out->sh_size <= size - out->sh_offset);
}

/* Headers and symbols are copied out, never read in place: the bytes need
 * no alignment and are not read through another type. */
int aq_rocr_hsaco_kernels(const void *bytes, size_t size, rocr_kd_t *out, int capacity) {
  const uint8_t *b = bytes;
  Elf64_Ehdr eh;
  Elf64_Shdr symtab = {0}, strtab, in;
  if (size < sizeof(eh) || memcmp(b, ELFMAG, SELFMAG) || b[EI_CLASS] != ELFCLASS64) return -1;
  memcpy(&eh, b, sizeof(eh));
  for (uint32_t i = 0; i < eh.e_shnum; ++i) {
    if (!section(b, size, &eh, i, &in)) return -1;
    if (in.sh_type == SHT_SYMTAB || (in.sh_type == SHT_DYNSYM && symtab.sh_type != SHT_SYMTAB)) symtab = in;
  }
  if (!symtab.sh_type) return 0;
  if (!section(b, size, &eh, symtab.sh_link, &strtab) || strtab.sh_type == SHT_NOBITS ||
      symtab.sh_entsize != sizeof(Elf64_Sym))
    return -1;
  const char *names = (const char *)b + strtab.sh_offset;
  int n = 0;
  for (uint64_t k = 0; k < symtab.sh_size / sizeof(Elf64_Sym); ++k) {
    Elf64_Sym sym;
    memcpy(&sym, b + symtab.sh_offset + k * sizeof(sym), sizeof(sym));
    if (sym.st_name >= strtab.sh_size || ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_size != 64) continue;
    const char *name = names + sym.st_name;
    size_t len = strnlen(name, strtab.sh_size - sym.st_name);
    if (len < 4 || len == strtab.sh_size - sym.st_name || strcmp(name + len - 3, ".kd")) continue;
    /* The descriptor's bytes: its section's file offset plus its address
     * within the section. */
    if (!section(b, size, &eh, sym.st_shndx, &in) || in.sh_type == SHT_NOBITS || sym.st_value < in.sh_addr ||
        sym.st_value - in.sh_addr > in.sh_size || in.sh_size - (sym.st_value - in.sh_addr) < 64)
      return -1;
    const uint8_t *kd = b + in.sh_offset + (sym.st_value - in.sh_addr);
    if (n < capacity) {
      rocr_kd_t *o = &out[n];
      size_t keep = len - 3 < sizeof(o->name) - 1 ? len - 3 : sizeof(o->name) - 1;
      memcpy(o->name, name, keep);
      o->name[keep] = '\0';
      memcpy(&o->group_size, kd + 0, 4);
      memcpy(&o->private_size, kd + 4, 4);
      memcpy(&o->kernarg_size, kd + 8, 4);
    }
    ++n;
  }
  return n;
}
