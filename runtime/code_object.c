/* Code objects: the search path, reading the file, choosing the driver whose
 * format it is, and the public lookup API. */
#include "runtime/code_object.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/driver.h"
#include "runtime/handle.h"
#include "runtime/settings.h"
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
  aq_handle_release_all(&objects, unload_one, NULL);
  aq_handle_table_deinit(&objects);
}

/* What a path is, when it is not a regular file: code objects are read
 * from regular files only (a FIFO would block, /dev/zero never ends). */
static const char *not_regular(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* A code object is executable code: one that anybody may rewrite, or that
 * sits in a directory where anybody may replace it (world-writable without
 * the sticky bit /tmp has), is refused. */
static aq_status_t check_trusted(const char *path, const struct stat *st) {
  if (st->st_mode & S_IWOTH)
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "code object %s is world-writable (mode %o): refused",
                    path, (unsigned)(st->st_mode & 07777));
  char dir[1100];
  snprintf(dir, sizeof(dir), "%s", path);
  struct stat ds;
  if (stat(dirname(dir), &ds) == 0 && (ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "code object %s is in a world-writable directory without the sticky bit: refused", path);
  return AQ_OK;
}

/* The path names a regular, trusted file: else why not, by name. */
static aq_status_t check_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) return aq_error(AQ_ERROR_NOT_FOUND, "code object %s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "code object %s is %s, not a file", path,
                    not_regular(st.st_mode));
  return check_trusted(path, &st);
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

/* Appends "dir:" to the list of searched places; a list that is full ends
 * in "..." (it only goes into an error message). */
static void note_searched(char *list, size_t size, const char *dir) {
  size_t used = strlen(list);
  if (used + 4 >= size) return;
  int n = snprintf(list + used, size - used, "%s:", dir);
  if (n < 0 || (size_t)n >= size - used) memcpy(list + size - 4, "...", 4);
}

/* A relative AQ_CODE_OBJECT_PATH entry is resolved against the working
 * directory, which whoever starts the process chooses: it is searched, but
 * said once on stderr. */
static void warn_relative(const char *dir) {
  static _Atomic int warned;
  if (atomic_exchange(&warned, 1)) return;
  fprintf(stderr, "aquila: AQ_CODE_OBJECT_PATH entry '%s' is relative: code objects are loaded from the "
                  "working directory's %s (use absolute paths)\n", dir, dir);
}

/* dir/name into out, if it fits and is a trusted regular file. 1 if found;
 * a file that is there but refused stops the search with its error. */
static int try_dir(const char *dir, const char *name, char *out, size_t size, aq_status_t *refused) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= size) return 0; /* too long to be a path we load */
  struct stat st;
  if (stat(out, &st) || !S_ISREG(st.st_mode)) return 0;
  *refused = check_trusted(out, &st);
  return 1;
}

static aq_status_t find_file(const char *name, char *out, size_t size) {
  if (strchr(name, '/')) {
    if (strlen(name) >= size)
      return aq_error(AQ_ERROR_INVALID_ARGUMENT, "code object path of %zu characters (at most %zu)",
                      strlen(name), size - 1);
    AQ_RETURN_IF_ERROR(check_path(name));
    snprintf(out, size, "%s", name);
    return AQ_OK;
  }
  char searched[1024] = "";
  aq_status_t refused = AQ_OK;
  const char *env = aq_setting_text(AQ_SET_CODE_OBJECT_PATH);
  if (*env) {
    char *copy = strdup(env), *save = NULL;
    if (!copy) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for AQ_CODE_OBJECT_PATH");
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      if (d[0] != '/') warn_relative(d);
      if (try_dir(d, name, out, size, &refused)) {
        free(copy);
        return refused;
      }
      note_searched(searched, sizeof(searched), d);
    }
    free(copy);
  }
  char dirs[3][1024];
  int n = default_dirs(dirs);
  for (int i = 0; i < n; ++i) {
    if (try_dir(dirs[i], name, out, size, &refused)) return refused;
    note_searched(searched, sizeof(searched), dirs[i]);
  }
  return aq_error(AQ_ERROR_NOT_FOUND, "code object '%s' not found (searched AQ_CODE_OBJECT_PATH and %s)",
                  name, searched);
}

/* Maps the file rather than reading it: recognising its format touches its
 * first page, not all of a 3 GiB file. The descriptor is opened without
 * blocking and checked again (the path may have changed since the search). */
static aq_status_t map_file(const char *path, void **out, size_t *out_size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return aq_error(AQ_ERROR_IO, "code object %s: %s", path, strerror(errno));
  struct stat st;
  aq_status_t s = AQ_OK;
  if (fstat(fd, &st)) s = aq_error(AQ_ERROR_IO, "code object %s: cannot stat: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "code object %s is %s, not a file", path, not_regular(st.st_mode));
  else if (st.st_size == 0) s = aq_error(AQ_ERROR_INVALID_CODE_OBJECT, "code object %s is empty", path);
  else s = check_trusted(path, &st);
  void *b = MAP_FAILED;
  if (s == AQ_OK && (b = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
    s = aq_error(AQ_ERROR_IO, "code object %s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                 strerror(errno));
  close(fd);
  if (s != AQ_OK) return s;
  *out = b;
  *out_size = (size_t)st.st_size;
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
  AQ_RETURN_IF_ERROR(map_file(full, &bytes, &size));
  const aq_driver_t *d = driver_for(bytes, size);
  if (!d) {
    munmap(bytes, size);
    return aq_error(AQ_ERROR_INVALID_CODE_OBJECT,
                    "%s: %zu bytes in no known code-object format (CPU ELF, CUDA cubin/fatbin, AMD hsaco)",
                    full, size);
  }
  code_object_t *co = calloc(1, sizeof(*co));
  if (!co) {
    munmap(bytes, size);
    return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a code object");
  }
  co->driver = d;
  snprintf(co->info.path, sizeof(co->info.path), "%s", full);
  aq_status_t s = d->co_load(full, bytes, size, &co->module, &co->info);
  munmap(bytes, size);
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
  const char *running = co->driver->co_busy ? co->driver->co_busy(co->module) : NULL;
  if (running)
    return aq_error(AQ_ERROR_BUSY, "code object %s: kernel '%s' is running; unload it once its dispatches complete",
                    co->info.path, running);
  /* A dispatch that starts after the check holds its kernel: the driver's
   * unload waits for it rather than unmap running code. */
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

AQ_API aq_status_t aq_code_object_op_table(aq_code_object_t c, const aq_op_table_t **out) {
  code_object_t *co;
  if (!out) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_op_table: out is NULL");
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  *out = co->driver->co_op_table ? co->driver->co_op_table(co->module) : NULL;
  return *out ? AQ_OK : aq_error(AQ_ERROR_NOT_FOUND, "code object %s ships no op table", co->info.path);
}

/* The kernel named `name` into *out, *found 1; *found 0 if the object has
 * none (no error recorded: eligibility asks it of every task). */
static aq_status_t lookup(code_object_t *co, const char *name, aq_agent_t agent, aq_kernel_info_t *out, int *found) {
  aq_agent_impl_t *a;
  *found = 0;
  for (uint32_t i = 0; i < co->info.kernel_count && !*found; ++i) {
    aq_kernel_info_t k;
    AQ_RETURN_IF_ERROR(kernel_at(co, i, agent, &a, &k));
    if (!strcmp(k.name, name)) *out = k, *found = 1;
  }
  return AQ_OK;
}

AQ_API aq_status_t aq_code_object_find_kernel(aq_code_object_t c, const char *name,
                                              aq_agent_t agent, aq_kernel_info_t *out) {
  code_object_t *co;
  int found;
  if (!name || !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_code_object_find_kernel: name and out are required");
  AQ_RETURN_IF_ERROR(resolve(c, &co));
  AQ_RETURN_IF_ERROR(lookup(co, name, agent, out, &found));
  return found ? AQ_OK
               : aq_error(AQ_ERROR_NOT_FOUND, "no kernel '%s' in code object %s (%u kernels)", name, co->info.path,
                          co->info.kernel_count);
}

int aq_code_object_has_kernel(aq_code_object_t c, const char *name, aq_agent_t agent, aq_kernel_info_t *out) {
  code_object_t *co;
  int found = 0;
  return name && out && aq_handle_resolve(&objects, c.handle, (void **)&co) == AQ_OK &&
         lookup(co, name, agent, out, &found) == AQ_OK && found;
}
