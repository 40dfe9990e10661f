/* libFuzzer over the CPU code-object reader: the ELF header checks and the
 * dynamic-section, symbol and kernel-table walk that run before dlopen
 * (make fuzz-code-object). Nothing is loaded: the reader alone must refuse
 * every malformed file without reading outside it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <elf.h>

#include "runtime/code_object.h"
#include "runtime/drivers/cpu_elf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size copy: ASan sees any read past the file's end. */
  uint8_t *b = malloc(size ? size : 1);
  if (!b) return 0;
  memcpy(b, data, size);
  if (aq_elf_check("fuzz.so", b, size, EM_X86_64) == AQ_OK) (void)aq_cpu_elf_check("fuzz.so", b, size);
  free(b);
  return 0;
}
