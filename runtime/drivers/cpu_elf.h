/* Checks of a CPU code object read from its file, before dlopen: the
 * dynamic section, the symbol table, and the kernel table (count, and that
 * every descriptor, name and function lies inside the object). */
#ifndef AQ_RUNTIME_DRIVERS_CPU_ELF_H_
#define AQ_RUNTIME_DRIVERS_CPU_ELF_H_

#include <stddef.h>

#include "aquila/status.h"

/* bytes: the whole file, its ELF header already checked (aq_elf_check). */
aq_status_t aq_cpu_elf_check(const char *path, const void *bytes, size_t size);

#endif
