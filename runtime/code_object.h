/* Code objects: the format-independent part (finding files, reading them,
 * handing them to the driver whose format they are in). */
#ifndef AQ_RUNTIME_CODE_OBJECT_H_
#define AQ_RUNTIME_CODE_OBJECT_H_

#include <stddef.h>

#include "aquila/code_object.h"

void aq_code_object_module_init(void);
/* The installed copy's code-object directory (install_dir.c). */
extern const char aq_install_code_object_dir[];
void aq_code_object_module_deinit(void);

/* Checks an ELF image before it is mapped: class, byte order, machine,
 * type, and that every header it names lies inside the file. */
aq_status_t aq_elf_check(const char *path, const void *bytes, size_t size,
                         unsigned expected_machine);

#endif /* AQ_RUNTIME_CODE_OBJECT_H_ */
