/* Code objects: the search path, reading the file, choosing the driver whose
 * format it is, and the public lookup API. */
#include "runtime/code_object.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/driver.h"
#include "runtime/handle.h"
#include "runtime/status.h"

typedef struct code_object {
  uint64_t handle;
  const aq_driver_t *driver;
  void *module;
  aq_code_object_info_t info;
} code_object_t;

static aq_handle_table_t objects;

void aq_code_object_module_init(void) { aq_handle_table_init(&objects, "code object"); }

static void unload_one(void *object, void *user) {
  (void)user;
  code_object_t *co = object;
  co->driver->co_unload(co->module);
  free(co);
}

void aq_code_object_module_deinit(void) {
  aq_handle_for_each(&objects, unload_one, NULL);
  aq_handle_table_deinit(&objects);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Aquila's own kernels sit in lib/aquila beside libaquila.so, or beside the
 * executable's ../lib, or, for a program linked with libaquila.a outside
 * the install tree, where `make install` put them. */
static int default_dirs(char dirs[3][1024]) {
  int n = 0;
  Dl_info di;
  if (dladdr((void *)aq_code_object_module_init, &di) && di.dli_fname) {
    char tmp[1000];
    snprintf(tmp, sizeof(tmp), "%s", di.dli_fname);
    snprintf(dirs[n++], 1024, "%s/aquila", dirname(tmp));
  }
  char exe[1000];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len > 0) {
    exe[len] = '\0';
    snprintf(dirs[n++], 1024, "%s/../lib/aquila", dirname(exe));
  }
  snprintf(dirs[n++], 1024, "%s", aq_install_code_object_dir);
  return n;
}

static aq_status_t find_file(const char *name, char *out, size_t size) {
  if (strchr(name, '/')) {
    if (!is_file(name)) return aq_error(AQ_ERROR_NOT_FOUND, "code object %s: %s", name, strerror(errno ? errno : ENOENT));
    snprintf(out, size, "%s", name);
    return AQ_OK;
  }
  char searched[1024] = "";
  const char *env = getenv("AQ_CODE_OBJECT_PATH");
  if (env) {
    char *copy = strdup(env), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      snprintf(out, size, "%s/%s", d, name);
      if (is_file(out)) {
        free(copy);
        return AQ_OK;
      }
      strncat(searched, d, sizeof(searched) - strlen(searched) - 2);
      strcat(searched, ":");
    }
    free(copy);
  }
  char dirs[3][1024];
  int n = default_dirs(dirs);
  for (int i = 0; i < n; ++i) {
    snprintf(out, size, "%s/%s", dirs[i], name);
    if (is_file(out)) return AQ_OK;
    strncat(searched, dirs[i], sizeof(searched) - strlen(searched) - 2);
    strcat(searched, ":");
  }
  return aq_error(AQ_ERROR_NOT_FOUND, "code object '%s' not found (searched AQ_CODE_OBJECT_PATH and %s)",
                  name, searched);
}

static aq_status_t read_file(const char *path, void **out, size_t *out_size) {
  FILE *f = fopen(path, "rb");
  if (!f) return aq_error(AQ_ERROR_IO, "code object %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || st.st_size < 0) {
    fclose(f);
    return aq_error(AQ_ERROR_IO, "code object %s: cannot stat", path);
  }
  size_t n = (size_t)st.st_size;
  void *b = malloc(n ? n : 1);
  if (!b || fread(b, 1, n, f) != n) {
    free(b);
    fclose(f);
    return aq_error(AQ_ERROR_IO, "code object %s: read failed", path);
  }
  fclose(f);
  *out = b;
  *out_size = n;
  return AQ_OK;
}

static const aq_driver_t *driver_for(const void *bytes, size_t size) {
  for (unsigned i = 0; i < aq_driver_count; ++i)
    if (aq_drivers[i]->co_recognizes && aq_drivers[i]->co_recognizes(bytes, size)) return aq_drivers[i];
  return NULL;
}

AQ_API aq_status_t aq_code_object_load(const char *path, aq_code_object_t *out) {
  if (!path || !*path || !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_load: path and out are required");
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  char full[1100];
  AQ_RETURN_IF_ERROR(find_file(path, full, sizeof(full)));
  void *bytes = NULL;
  size_t size = 0;
  AQ_RETURN_IF_ERROR(read_file(full, &bytes, &size));
  const aq_driver_t *d = driver_for(bytes, size);
  if (!d) {
    free(bytes);
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: %zu bytes in no known code-object format (CPU ELF, CUDA cubin/fatbin, AMD hsaco)",
                    full, size);
  }
  code_object_t *co = calloc(1, sizeof(*co));
  if (!co) {
    free(bytes);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a code object");
  }
  co->driver = d;
  snprintf(co->info.path, sizeof(co->info.path), "%s", full);
  aq_status_t s = d->co_load(full, bytes, size, &co->module, &co->info);
  free(bytes);
  if (s == AQ_OK) s = aq_handle_alloc(&objects, co, &co->handle);
  if (s != AQ_OK) {
    if (co->module) d->co_unload(co->module);
    free(co);
    return s;
  }
  out->handle = co->handle;
  return AQ_OK;
}

static aq_status_t resolve(aq_code_object_t c, code_object_t **out) {
  if (!aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  return aq_handle_resolve(&objects, c.handle, (void **)out);
}

AQ_API aq_status_t aq_code_object_unload(aq_code_object_t c) {
  code_object_t *co;
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  AQ_RETURN_IF_ERROR(aq_handle_release(&objects, c.handle));
  co->driver->co_unload(co->module);
  free(co);
  return AQ_OK;
}

AQ_API aq_status_t aq_code_object_get_info(aq_code_object_t c, aq_code_object_info_t *info) {
  code_object_t *co;
  if (!info) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_get_info: info is NULL");
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  *info = co->info;
  return AQ_OK;
}

static aq_status_t kernel_at(code_object_t *co, uint32_t index, aq_agent_t agent,
                             aq_agent_impl_t **out_agent, aq_kernel_info_t *out) {
  aq_agent_impl_t *a;
  AQ_RETURN_IF_ERROR(aq_agent_resolve(agent, &a));
  if (a->driver != co->driver)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "code object %s (%s) has no code for agent %s (%s driver)",
                    co->info.path, co->info.format, a->info.name, a->driver->name);
  if (index >= co->info.kernel_count)
    return aq_error(AQ_ERROR_NOT_FOUND, "code object %s has %u kernels, not %u", co->info.path,
                    co->info.kernel_count, index + 1);
  *out_agent = a;
  return co->driver->co_kernel_at(co->module, index, a, out);
}

AQ_API aq_status_t aq_code_object_kernel_at(aq_code_object_t c, uint32_t index, aq_agent_t agent,
                                            aq_kernel_info_t *out) {
  code_object_t *co;
  aq_agent_impl_t *a;
  if (!out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_kernel_at: out is NULL");
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  return kernel_at(co, index, agent, &a, out);
}

AQ_API aq_status_t aq_code_object_find_kernel(aq_code_object_t c, const char *name,
                                              aq_agent_t agent, aq_kernel_info_t *out) {
  code_object_t *co;
  aq_agent_impl_t *a;
  if (!name || !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_find_kernel: name and out are required");
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  for (uint32_t i = 0; i < co->info.kernel_count; ++i) {
    aq_kernel_info_t k;
    AQ_RETURN_IF_ERROR(kernel_at(co, i, agent, &a, &k));
    if (!strcmp(k.name, name)) {
      *out = k;
      return AQ_OK;
    }
  }
  return aq_error(AQ_ERROR_NOT_FOUND, "no kernel '%s' in code object %s (%u kernels)", name,
                  co->info.path, co->info.kernel_count);
}
