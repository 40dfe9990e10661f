/* Loading the HSA runtime at run time. */
#include "runtime/drivers/rocr_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "runtime/symbols.h"

rocr_api_t aq_rocr;
static void *lib;

int aq_rocr_api_load(char *why, size_t size) {
  if (lib) return 0;
  /* Never dlclosed: ROCr keeps threads and atexit handlers of its own. */
  void *h = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, size, "no HSA runtime: %s", dlerror());
    return -1;
  }
  static const aq_symbol_t syms[] = {
#define ROCR_SYM(f) {offsetof(rocr_api_t, f), #f},
      ROCR_API(ROCR_SYM)
#undef ROCR_SYM
  };
  const char *missing = aq_symbols_resolve(h, syms, sizeof(syms) / sizeof(syms[0]), &aq_rocr);
  if (missing) {
    snprintf(why, size, "libhsa-runtime64.so.1 lacks %s (ROCm 5.3 or newer needed)", missing);
    dlclose(h);
    return -1;
  }
  lib = h;
  return 0;
}

/* ROCr's strings run long ("NAME: sentence. More sentences."): the name,
 * the code and the first sentence fit a driver's one-line status. */
const char *aq_rocr_error(hsa_status_t s) {
  static _Thread_local char buf[200];
  const char *text = NULL;
  if (aq_rocr.hsa_status_string) aq_rocr.hsa_status_string(s, &text);
  if (!text) text = "unknown HSA status";
  const char *colon = strstr(text, ": "), *stop = colon ? strstr(colon, ". ") : NULL;
  int name = colon ? (int)(colon - text) : (int)strlen(text);
  int rest = stop ? (int)(stop - colon) + 1 : colon ? (int)strlen(colon) : 0;
  snprintf(buf, sizeof(buf), "%.*s (0x%x)%.*s", name, text, (unsigned)s, rest, colon ? colon : "");
  return buf;
}
