/* The op library's code objects, loaded once a runtime (not once an exec:
 * loading maps and checks the file, and on a GPU loads a module, which
 * cost a small graph's instantiation more than its planning). They stay
 * loaded until aq_shut_down, which unloads what is left. */
#include <pthread.h>
#include <stdio.h>

#include "runtime/runtime.h"
#include "scheduler/exec_internal.h"

static const char *const files[2] = {"kernels-cpu.so", "kernels-cuda.fatbin"};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t epoch; /* aq_runtime_epoch's when loaded; 0: never */
  aq_status_t status;
  aq_code_object_t co;
  char why[256]; /* the load's error, said again to each exec that asks */
} cache[2];

aq_status_t aq_op_library(aq_op_library_t which, aq_code_object_t *out) {
  uint64_t now = aq_runtime_epoch();
  pthread_mutex_lock(&lock);
  if (cache[which].epoch != now) {
    cache[which].co.handle = 0;
    cache[which].status = aq_code_object_load(files[which], &cache[which].co);
    snprintf(cache[which].why, sizeof(cache[which].why), "%s", cache[which].status ? aq_last_error() : "");
    cache[which].epoch = now;
  }
  aq_status_t s = cache[which].status;
  char why[sizeof(cache[which].why)];
  snprintf(why, sizeof(why), "%s", cache[which].why);
  *out = cache[which].co;
  pthread_mutex_unlock(&lock);
  return s == AQ_OK ? AQ_OK : aq_error(s, "%s", why);
}
