/* A CPU code object's ELF structure and kernel table, read from the file
 * before it is dlopen'ed: dlopen runs the object's constructors before a
 * foreign object could be rejected, and trusts its dynamic section (a
 * corrupt one crashed inside the loader). Nothing here follows a pointer of
 * the file without checking that it lands inside the file. */
#include <elf.h>
#include <stdio.h>
#include <string.h>

#include "aquila/kernel.h"
#include "runtime/drivers/cpu_elf.h"
#include "runtime/status.h"

#if defined(__x86_64__)
#define RELOC_RELATIVE R_X86_64_RELATIVE
#define RELOC_ABS64 R_X86_64_64
#elif defined(__aarch64__)
#define RELOC_RELATIVE R_AARCH64_RELATIVE
#define RELOC_ABS64 R_AARCH64_ABS64
#endif

enum { MAX_KERNELS = 1 << 16, MAX_SEGMENTS = 64 };

typedef struct image {
  const char *path;
  const uint8_t *b;
  size_t size;
  Elf64_Phdr load[MAX_SEGMENTS];
  unsigned nload;
  uint64_t strtab, strsz, symtab, nsyms, rela, relasz, jmprel, pltrelsz;
} image_t;

static aq_status_t bad(const image_t *im, const char *what) {
  return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: corrupt: %s", im->path, what);
}

/* The file offset of [vaddr, vaddr + len), if the file holds all of it. */
static int file_range(const image_t *im, uint64_t vaddr, uint64_t len, uint64_t *off) {
  for (unsigned i = 0; i < im->nload; ++i) {
    const Elf64_Phdr *p = &im->load[i];
    if (vaddr < p->p_vaddr || vaddr - p->p_vaddr > p->p_filesz || len > p->p_filesz - (vaddr - p->p_vaddr)) continue;
    *off = p->p_offset + (vaddr - p->p_vaddr);
    return 1;
  }
  return 0;
}

/* Whether vaddr lies in a loaded segment (executable ones only, if exec). */
static int mapped(const image_t *im, uint64_t vaddr, int exec) {
  for (unsigned i = 0; i < im->nload; ++i) {
    const Elf64_Phdr *p = &im->load[i];
    if (vaddr >= p->p_vaddr && vaddr - p->p_vaddr < p->p_memsz && (!exec || (p->p_flags & PF_X))) return 1;
  }
  return 0;
}

/* Whether [vaddr, vaddr + len) lies in one loaded segment's memory. */
static int memory_range(const image_t *im, uint64_t vaddr, uint64_t len) {
  for (unsigned i = 0; i < im->nload; ++i) {
    const Elf64_Phdr *p = &im->load[i];
    if (vaddr >= p->p_vaddr && vaddr - p->p_vaddr <= p->p_memsz && len <= p->p_memsz - (vaddr - p->p_vaddr))
      return 1;
  }
  return 0;
}

static uint64_t u64_at(const image_t *im, uint64_t off) {
  uint64_t v;
  memcpy(&v, im->b + off, sizeof(v));
  return v;
}

/* A NUL-terminated string at vaddr, inside the file. */
static const char *string_at(const image_t *im, uint64_t vaddr) {
  uint64_t off;
  if (!file_range(im, vaddr, 1, &off)) return NULL;
  const char *s = (const char *)im->b + off;
  return memchr(s, '\0', im->size - off) ? s : NULL;
}

static aq_status_t read_segments(image_t *im, const Elf64_Ehdr *eh, Elf64_Phdr *dyn) {
  int have_dyn = 0;
  for (unsigned i = 0; i < eh->e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, im->b + eh->e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type == PT_LOAD) {
      if (im->nload == MAX_SEGMENTS) return bad(im, "too many loadable segments");
      if (ph.p_filesz > ph.p_memsz || ph.p_vaddr + ph.p_memsz < ph.p_vaddr)
        return bad(im, "a loadable segment's sizes are inconsistent");
      im->load[im->nload++] = ph;
    } else if (ph.p_type == PT_DYNAMIC) {
      if (ph.p_offset > im->size || ph.p_filesz > im->size - ph.p_offset || ph.p_filesz % sizeof(Elf64_Dyn))
        return bad(im, "the dynamic segment lies outside the file");
      *dyn = ph;
      have_dyn = 1;
    }
  }
  if (!im->nload) return bad(im, "no loadable segment");
  if (!have_dyn) return bad(im, "no dynamic section (not a shared object)");
  return AQ_OK;
}

/* Every address the dynamic loader will follow must land in the file. */
static aq_status_t read_dynamic(image_t *im, const Elf64_Phdr *dyn) {
  size_t n = dyn->p_filesz / sizeof(Elf64_Dyn);
  uint64_t needed[64], nneeded = 0, hash = 0, init_array = 0, init_sz = 0, fini_array = 0, fini_sz = 0;
  int ended = 0;
  for (size_t i = 0; i < n && !ended; ++i) {
    Elf64_Dyn d;
    memcpy(&d, im->b + dyn->p_offset + i * sizeof(d), sizeof(d));
    uint64_t v = d.d_un.d_val;
    switch (d.d_tag) {
      case DT_NULL: ended = 1; break;
      case DT_STRTAB: im->strtab = v; break;
      case DT_STRSZ: im->strsz = v; break;
      case DT_SYMTAB: im->symtab = v; break;
      case DT_SYMENT: if (v != sizeof(Elf64_Sym)) return bad(im, "DT_SYMENT is not the size of a symbol"); break;
      case DT_RELA: im->rela = v; break;
      case DT_RELASZ: im->relasz = v; break;
      case DT_RELAENT: if (v != sizeof(Elf64_Rela)) return bad(im, "DT_RELAENT is not the size of a relocation"); break;
      case DT_JMPREL: im->jmprel = v; break;
      case DT_PLTRELSZ: im->pltrelsz = v; break;
      case DT_HASH: hash = v; break;
      case DT_INIT_ARRAY: init_array = v; break;
      case DT_INIT_ARRAYSZ: init_sz = v; break;
      case DT_FINI_ARRAY: fini_array = v; break;
      case DT_FINI_ARRAYSZ: fini_sz = v; break;
      case DT_INIT: case DT_FINI:
        if (!mapped(im, v, 1)) return bad(im, "DT_INIT or DT_FINI points outside the code");
        break;
      case DT_NEEDED: case DT_SONAME: case DT_RPATH: case DT_RUNPATH:
        if (nneeded == 64) return bad(im, "more than 64 DT_NEEDED, DT_SONAME and path entries");
        needed[nneeded++] = v;
        break;
      default: break;
    }
  }
  uint64_t off;
  if (!ended) return bad(im, "the dynamic section has no DT_NULL end");
  if (!im->strtab || !im->symtab) return bad(im, "the dynamic section names no string or symbol table");
  if (!file_range(im, im->strtab, im->strsz, &off) || !im->strsz || im->b[off + im->strsz - 1])
    return bad(im, "the dynamic string table lies outside the file");
  for (uint64_t i = 0; i < nneeded; ++i)
    if (needed[i] >= im->strsz) return bad(im, "a DT_NEEDED name lies outside the string table");
  if ((im->rela || im->relasz) && (im->relasz % sizeof(Elf64_Rela) || !file_range(im, im->rela, im->relasz, &off)))
    return bad(im, "the relocation table (DT_RELA) lies outside the file");
  if ((im->jmprel || im->pltrelsz) &&
      (im->pltrelsz % sizeof(Elf64_Rela) || !file_range(im, im->jmprel, im->pltrelsz, &off)))
    return bad(im, "the PLT relocations (DT_JMPREL) lie outside the file");
  if ((init_array || init_sz) && (init_sz % 8 || !mapped(im, init_array, 0) || !mapped(im, init_array + init_sz - !!init_sz, 0)))
    return bad(im, "DT_INIT_ARRAY lies outside the object");
  if ((fini_array || fini_sz) && (fini_sz % 8 || !mapped(im, fini_array, 0) || !mapped(im, fini_array + fini_sz - !!fini_sz, 0)))
    return bad(im, "DT_FINI_ARRAY lies outside the object");
  if (hash) {
    if (!file_range(im, hash, 8, &off)) return bad(im, "DT_HASH lies outside the file");
    im->nsyms = u64_at(im, off) >> 32; /* nchain: the number of symbols */
  }
  return AQ_OK;
}

/* Without DT_HASH (GNU-hash-only objects), the section headers count the
 * dynamic symbols. */
static aq_status_t count_symbols(image_t *im, const Elf64_Ehdr *eh) {
  if (!im->nsyms && eh->e_shnum && eh->e_shentsize == sizeof(Elf64_Shdr)) {
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      Elf64_Shdr sh;
      memcpy(&sh, im->b + eh->e_shoff + i * sizeof(sh), sizeof(sh));
      if (sh.sh_type == SHT_DYNSYM && sh.sh_entsize == sizeof(Elf64_Sym)) im->nsyms = sh.sh_size / sizeof(Elf64_Sym);
    }
  }
  uint64_t off;
  if (!im->nsyms) return bad(im, "cannot count its dynamic symbols (no DT_HASH, no .dynsym section)");
  if (im->nsyms > im->size / sizeof(Elf64_Sym) || !file_range(im, im->symtab, im->nsyms * sizeof(Elf64_Sym), &off))
    return bad(im, "the dynamic symbol table lies outside the file");
  return AQ_OK;
}

static int find_symbol(const image_t *im, const char *name, Elf64_Sym *out) {
  uint64_t symoff = 0, stroff = 0;
  file_range(im, im->symtab, im->nsyms * sizeof(Elf64_Sym), &symoff);
  file_range(im, im->strtab, im->strsz, &stroff);
  for (uint64_t i = 1; i < im->nsyms; ++i) {
    Elf64_Sym s;
    memcpy(&s, im->b + symoff + i * sizeof(s), sizeof(s));
    if (s.st_name < im->strsz && s.st_shndx != SHN_UNDEF && !strcmp((const char *)im->b + stroff + s.st_name, name)) {
      *out = s;
      return 1;
    }
  }
  return 0;
}

/* The value a pointer at vaddr holds once the loader has relocated it
 * (the object's own base is 0 here); 0 for none. */
static uint64_t pointer_at(const image_t *im, uint64_t vaddr) {
  uint64_t off;
  if (im->relasz && file_range(im, im->rela, im->relasz, &off))
    for (uint64_t i = 0; i < im->relasz / sizeof(Elf64_Rela); ++i) {
      Elf64_Rela r;
      memcpy(&r, im->b + off + i * sizeof(r), sizeof(r));
      if (r.r_offset != vaddr) continue;
      if (ELF64_R_TYPE(r.r_info) == RELOC_RELATIVE) return (uint64_t)r.r_addend;
      if (ELF64_R_TYPE(r.r_info) == RELOC_ABS64) {
        uint64_t symoff;
        uint64_t sym = ELF64_R_SYM(r.r_info);
        if (sym >= im->nsyms || !file_range(im, im->symtab, im->nsyms * sizeof(Elf64_Sym), &symoff)) return 0;
        Elf64_Sym s;
        memcpy(&s, im->b + symoff + sym * sizeof(s), sizeof(s));
        return s.st_shndx == SHN_UNDEF ? 0 : s.st_value + (uint64_t)r.r_addend;
      }
      return 0;
    }
  return file_range(im, vaddr, 8, &off) ? u64_at(im, off) : 0;
}

static aq_status_t check_kernels(const image_t *im, uint64_t table, uint32_t count) {
  uint64_t kernels = pointer_at(im, table + offsetof(aq_code_object_table_t, kernels)), off;
  uint64_t bytes = (uint64_t)count * sizeof(aq_kernel_desc_t);
  if (!file_range(im, kernels, bytes, &off)) {
    /* A table in zeroed memory (.bss) that a constructor fills, as the op
     * library's is: its bounds are all the file can vouch for; the
     * descriptors are checked once loaded. */
    if (kernels && memory_range(im, kernels, bytes)) return AQ_OK;
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: the kernel table (%u entries) lies outside the object",
                    im->path, count);
  }
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t k = kernels + (uint64_t)i * sizeof(aq_kernel_desc_t);
    aq_kernel_desc_t d;
    memcpy(&d, im->b + off + (uint64_t)i * sizeof(d), sizeof(d));
    const char *name = string_at(im, pointer_at(im, k + offsetof(aq_kernel_desc_t, name)));
    if (!name || !name[0])
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel %u has no name inside the file", im->path, i);
    if (!mapped(im, pointer_at(im, k + offsetof(aq_kernel_desc_t, fn)), 1))
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel '%.64s': its function is not in the object's code",
                      im->path, name);
    if (d.kernarg_align & (d.kernarg_align - 1))
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: kernel '%.64s': kernarg alignment %u is not a power of two",
                      im->path, name, d.kernarg_align);
  }
  return AQ_OK;
}

aq_status_t aq_cpu_elf_check(const char *path, const void *bytes, size_t size) {
  image_t im = {.path = path, .b = bytes, .size = size};
  Elf64_Ehdr eh;
  memcpy(&eh, bytes, sizeof(eh)); /* aq_elf_check has checked the header and where its tables lie */
  Elf64_Phdr dyn = {0};
  AQ_RETURN_IF_ERROR(read_segments(&im, &eh, &dyn));
  AQ_RETURN_IF_ERROR(read_dynamic(&im, &dyn));
  AQ_RETURN_IF_ERROR(count_symbols(&im, &eh));
  Elf64_Sym sym;
  uint64_t off;
  if (!find_symbol(&im, AQ_CODE_OBJECT_SYMBOL, &sym))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: exports no '%s': not an Aquila code object", path,
                    AQ_CODE_OBJECT_SYMBOL);
  if (sym.st_size < sizeof(aq_code_object_table_t) || !file_range(&im, sym.st_value, sizeof(aq_code_object_table_t), &off))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: %s lies outside the file or is too small", path,
                    AQ_CODE_OBJECT_SYMBOL);
  aq_code_object_table_t t;
  memcpy(&t, im.b + off, sizeof(t));
  if (t.magic != AQ_CODE_OBJECT_MAGIC)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: %s has a bad magic number 0x%08x", path,
                    AQ_CODE_OBJECT_SYMBOL, t.magic);
  if (t.version != AQ_CODE_OBJECT_VERSION)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: code-object ABI version %u; this runtime loads version %u", path,
                    t.version, AQ_CODE_OBJECT_VERSION);
  if (t.isa != AQ_ISA_NATIVE)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: kernels built for ISA %u; this machine is ISA %u", path, t.isa,
                    AQ_ISA_NATIVE);
  if (t.kernel_count == 0 || t.kernel_count > MAX_KERNELS)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: the kernel table says it has %u kernels (1 to %d)", path,
                    t.kernel_count, MAX_KERNELS);
  return check_kernels(&im, sym.st_value, t.kernel_count);
}
