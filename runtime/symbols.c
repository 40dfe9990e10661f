/* Entry-point tables from dlopened libraries (symbols.h). */
#include "runtime/symbols.h"

#include <dlfcn.h>

const char *aq_symbols_resolve(void *lib, const aq_symbol_t *syms, size_t n, void *table) {
  for (size_t i = 0; i < n; ++i) {
    void *f = dlsym(lib, syms[i].name);
    if (!f) return syms[i].name;
    *(void **)((char *)table + syms[i].offset) = f;
  }
  return NULL;
}
