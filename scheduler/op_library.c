/* The op library's code objects and its description, loaded and indexed
 * once a runtime (not once an exec: loading maps and checks the file, and
 * on a GPU loads a module, which cost a small graph's instantiation more
 * than its planning). They stay loaded until aq_shut_down, which unloads
 * what is left. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"
#include "scheduler/exec_internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t epoch; /* aq_runtime_epoch's when loaded; 0: never */
  aq_status_t status;
  aq_code_object_t co;
  char why[256]; /* the load's error, said again to each exec that asks */
} cache[2];
static oplib_t description; /* the CPU object's, indexed when it loads */

/* Loads `which` for this runtime if it is not yet; under the lock. The
 * GPU build is the one the CPU library's description names. */
static void load(aq_op_library_t which, uint64_t now) {
  if (cache[which].epoch == now) return;
  if (which == AQ_OP_LIBRARY_GPU) load(AQ_OP_LIBRARY_CPU, now);
  const char *file = which == AQ_OP_LIBRARY_CPU ? OPLIB_CODE_OBJECT : aq_oplib_build(&description, AQ_AGENT_KIND_GPU);
  cache[which].co.handle = 0;
  cache[which].status = !file ? aq_error(AQ_ERROR_NOT_FOUND, "the op library names no build for GPU agents")
                              : aq_code_object_load(file, &cache[which].co);
  if (which == AQ_OP_LIBRARY_CPU) {
    memset(&description, 0, sizeof(description));
    if (cache[which].status == AQ_OK) cache[which].status = aq_oplib_index(&description, cache[which].co);
  }
  snprintf(cache[which].why, sizeof(cache[which].why), "%s", cache[which].status ? aq_last_error() : "");
  cache[which].epoch = now;
}

aq_status_t aq_op_library(aq_op_library_t which, aq_code_object_t *out) {
  pthread_mutex_lock(&lock);
  load(which, aq_runtime_epoch());
  aq_status_t s = cache[which].status;
  char why[sizeof(cache[which].why)];
  snprintf(why, sizeof(why), "%s", cache[which].why);
  *out = cache[which].co;
  pthread_mutex_unlock(&lock);
  return s == AQ_OK ? AQ_OK : aq_error(s, "%s", why);
}

aq_status_t aq_op_library_ops(const oplib_t **out) {
  aq_code_object_t co;
  AQ_RETURN_IF_ERROR(aq_op_library(AQ_OP_LIBRARY_CPU, &co));
  *out = &description; /* indexed under the lock, before the load was said done */
  return AQ_OK;
}
