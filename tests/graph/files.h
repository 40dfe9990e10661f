/* What the graph suites share to look at the files an exec writes: a file
 * read back whole, a string counted in it, an exec's DOT. */
#ifndef AQ_TESTS_GRAPH_FILES_H_
#define AQ_TESTS_GRAPH_FILES_H_

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/common.h"

/* path's contents (at most 256 KB, in a buffer the next call reuses); the
 * file is removed. */
static inline char *slurp(const char *path) {
  static char buf[1 << 18];
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot read %s", path);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(path);
  return buf;
}

/* How many times what occurs in s (not overlapping). */
static inline size_t count(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) ++n;
  return n;
}

/* The exec's DOT into dot (size bytes), through a temporary file. */
static inline void read_dot(aq_exec_t *e, char *dot, size_t size) {
  char path[] = "/tmp/aq-dot-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0, "cannot make a temporary file");
  close(fd);
  AQ_ASSERT_OK(aq_exec_write_dot(e, path));
  snprintf(dot, size, "%s", slurp(path));
}

#endif
