/* ELF checks shared by every ELF-based code-object format. dlopen would
 * reject most bad files too, but with messages that do not say whether the
 * file is truncated, foreign or corrupt, and some bad files crash it. */
#include <elf.h>
#include <string.h>

#include "runtime/code_object.h"
#include "runtime/status.h"

static const char *machine_name(unsigned m) {
  switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64";
    case EM_386: return "i386";
    case EM_ARM: return "ARM";
    case EM_RISCV: return "RISC-V";
    case EM_AMDGPU: return "AMDGPU";
    case EM_PPC64: return "PowerPC64";
    default: return "an unknown machine";
  }
}

aq_status_t aq_elf_check(const char *path, const void *bytes, size_t size,
                         unsigned expected_machine) {
  const unsigned char *b = bytes;
  if (size < EI_NIDENT || memcmp(b, ELFMAG, SELFMAG))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: not an ELF file (bad magic)", path);
  if (size < sizeof(Elf64_Ehdr))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: truncated: %zu bytes, shorter than an ELF header",
                    path, size);
  if (b[EI_CLASS] != ELFCLASS64)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: a 32-bit ELF file; Aquila loads 64-bit code objects", path);
  if (b[EI_DATA] != ELFDATA2LSB)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: big-endian ELF; this machine is little-endian", path);
  Elf64_Ehdr eh;
  memcpy(&eh, b, sizeof(eh));
  if (eh.e_machine != expected_machine)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "%s: built for %s (e_machine %u), this agent runs %s", path,
                    machine_name(eh.e_machine), eh.e_machine, machine_name(expected_machine));
  if (eh.e_type != ET_DYN)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: ELF type %u is not a shared object (build it with -shared -fPIC)", path,
                    eh.e_type);
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "%s: corrupt ELF header (no program headers)", path);
  if (eh.e_phoff > size || (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: truncated: program headers end past the file's %zu bytes", path, size);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, b + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type == PT_LOAD && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
      return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                      "%s: truncated: segment %u needs bytes up to %llu, the file has %zu", path, i,
                      (unsigned long long)(ph.p_offset + ph.p_filesz), size);
  }
  if (eh.e_shnum && (eh.e_shoff > size || (uint64_t)eh.e_shnum * eh.e_shentsize > size - eh.e_shoff))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: truncated: section headers end past the file's %zu bytes", path, size);
  return AQ_OK;
}
