/* Drivers reach their vendor runtimes (libcuda, libhsa-runtime64) through
 * tables of entry points filled at run time from a dlopened library, so one
 * binary runs whether or not the library is there. */
#ifndef AQ_RUNTIME_SYMBOLS_H_
#define AQ_RUNTIME_SYMBOLS_H_

#include <stddef.h>

/* One entry of a table: where it goes and the library's name for it. */
typedef struct aq_symbol {
  size_t offset;
  const char *name;
} aq_symbol_t;

/* Fills table from lib, entry by entry: NULL, or the name of the first
 * entry lib lacks (the caller says what that means for its driver). */
const char *aq_symbols_resolve(void *lib, const aq_symbol_t *syms, size_t n, void *table);

#endif
