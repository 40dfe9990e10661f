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

/* Whether the code object has kernel `name` for agent (into *out): as
 * aq_code_object_find_kernel, without recording an error for a miss. */
int aq_code_object_has_kernel(aq_code_object_t c, const char *name, aq_agent_t agent, aq_kernel_info_t *out);

/* Checks an ELF image before it is mapped: class, byte order, machine,
 * type, and that every header it names lies inside the file. */
aq_status_t aq_elf_check(const char *path, const void *bytes, size_t size,
                         unsigned expected_machine);

#endif /* AQ_RUNTIME_CODE_OBJECT_H_ */
