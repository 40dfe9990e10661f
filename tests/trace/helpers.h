/* What the trace tests share: a temporary path, a file's text, running
 * aq-trace, and a check that an SVG file is well-formed XML. */
#ifndef AQ_TESTS_TRACE_HELPERS_H_
#define AQ_TESTS_TRACE_HELPERS_H_

#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline void temp_path(char *out, size_t size, const char *what) {
  snprintf(out, size, "/tmp/aq-trace-test-%d-%s", (int)getpid(), what);
}

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The whole file, NUL-terminated (the caller frees), or NULL. */
static inline char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
  fclose(f);
  if (s) s[n] = '\0';
  if (len) *len = s ? (size_t)n : 0;
  return s;
}

static inline int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = strlen(text);
  int bad = fwrite(text, 1, n, f) != n;
  return fclose(f) || bad ? -1 : 0;
}

/* build/bin/aq-trace, found beside this test program (build/tests/trace). */
static inline void aq_trace_tool(char *out, size_t size) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  cr_assert_gt(n, 0);
  self[n] = '\0';
  snprintf(out, size, "%s/bin/aq-trace", dirname(dirname(self))); /* build/tests/trace -> build */
}

/* Runs aq-trace with args (a shell fragment), stdout and stderr to files;
 * returns its exit status. */
static inline int run_tool(const char *args, const char *out, const char *err) {
  char tool[PATH_MAX], cmd[3 * PATH_MAX];
  aq_trace_tool(tool, sizeof(tool));
  snprintf(cmd, sizeof(cmd), "'%s' %s >'%s' 2>'%s'", tool, args, out, err);
  int st = system(cmd);
  cr_assert(WIFEXITED(st), "aq-trace did not exit normally (a crash?): %s", cmd);
  return WEXITSTATUS(st);
}

/* Well-formed XML, as far as an SVG needs: one root, every tag closed in
 * order, attributes quoted, entities known, no control characters, valid
 * UTF-8. Returns NULL, or what is wrong. */
static inline const char *xml_problem(const char *s) {
  static char why[128];
  const char *stack[256];
  size_t lens[256], depth = 0, roots = 0;
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; u[i];) {
    unsigned char c = u[i];
    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return snprintf(why, sizeof(why), "control byte at %zu", i), why;
    if (c >= 0x80) {
      size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      if (!len) return snprintf(why, sizeof(why), "bad UTF-8 at %zu", i), why;
      for (size_t k = 1; k < len; ++k)
        if ((u[i + k] & 0xc0) != 0x80) return snprintf(why, sizeof(why), "bad UTF-8 at %zu", i), why;
      i += len;
      continue;
    }
    if (c == '&') {
      const char *ok[] = {"&lt;", "&gt;", "&amp;", "&quot;", "&#39;"};
      size_t k = 0;
      while (k < 5 && strncmp(s + i, ok[k], strlen(ok[k]))) k++;
      if (k == 5) return snprintf(why, sizeof(why), "unknown entity at %zu", i), why;
      i += strlen(ok[k]);
      continue;
    }
    if (c != '<') {
      if (c == '>') return snprintf(why, sizeof(why), "stray '>' at %zu", i), why;
      if (!depth && c != ' ' && c != '\n') return snprintf(why, sizeof(why), "text outside the root at %zu", i), why;
      i++;
      continue;
    }
    if (!strncmp(s + i, "<?", 2)) {
      const char *end = strstr(s + i, "?>");
      if (!end) return "unterminated <?";
      i = (size_t)(end - s) + 2;
      continue;
    }
    int closing = s[i + 1] == '/';
    size_t name = i + 1 + (size_t)closing, k = name;
    while (s[k] && (s[k] == '-' || s[k] == ':' || (s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
                    (s[k] >= '0' && s[k] <= '9')))
      k++;
    if (k == name) return snprintf(why, sizeof(why), "a tag without a name at %zu", i), why;
    size_t nlen = k - name;
    /* Attributes: name='value' or name="value", no '<' or raw '&' inside. */
    while (s[k] && s[k] != '>' && !(s[k] == '/' && s[k + 1] == '>')) {
      if (s[k] == ' ' || s[k] == '\n') {
        k++;
        continue;
      }
      while (s[k] && s[k] != '=' && s[k] != ' ' && s[k] != '>') k++;
      if (s[k] != '=' || (s[k + 1] != '\'' && s[k + 1] != '"'))
        return snprintf(why, sizeof(why), "an unquoted attribute at %zu", k), why;
      char q = s[k + 1];
      k += 2;
      while (s[k] && s[k] != q) {
        if (s[k] == '<') return snprintf(why, sizeof(why), "'<' in an attribute at %zu", k), why;
        k++;
      }
      if (!s[k]) return "unterminated attribute";
      k++;
    }
    if (!s[k]) return "unterminated tag";
    int self_closing = s[k] == '/';
    i = k + (self_closing ? 2 : 1);
    if (closing) {
      if (!depth || lens[depth - 1] != nlen || strncmp(stack[depth - 1], s + name, nlen))
        return snprintf(why, sizeof(why), "</%.*s> closes the wrong tag", (int)nlen, s + name), why;
      depth--;
    } else if (!self_closing) {
      if (!depth) roots++;
      if (depth == 256) return "nested too deeply";
      stack[depth] = s + name, lens[depth++] = nlen;
    } else if (!depth) {
      roots++;
    }
  }
  if (depth) return "unclosed tags at the end";
  if (roots != 1) return "not exactly one root element";
  return NULL;
}

#endif
