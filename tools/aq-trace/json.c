/* Recursive descent, depth-limited; strings decoded to UTF-8 as they are
 * read. Frees what it built on every error path. */
#include "json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
  const unsigned char *s;
  size_t n, i;
  size_t values;
  char *err;
  size_t err_size;
  int failed;
  json_element_fn element; /* where the streamed array's elements go */
  void *ctx;
  int stream_next;         /* the next value read is the array to stream */
  int truncated;           /* the error is the text's end, inside a value */
} parser_t;

static void fail_at(parser_t *p, size_t at, const char *what) {
  if (p->failed) return;
  p->failed = 1;
  p->truncated = at >= p->n;
  size_t line = 1, col = 1;
  for (size_t k = 0; k < at && k < p->n; ++k) {
    if (p->s[k] == '\n') line++, col = 1;
    else col++;
  }
  snprintf(p->err, p->err_size, "%s at byte %zu (line %zu, column %zu)", what, at, line, col);
}

static void fail(parser_t *p, const char *what) { fail_at(p, p->i, what); }

static void ws(parser_t *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t')) p->i++;
}

static jval_t *node(parser_t *p, jtype_t t) {
  if (++p->values > JSON_MAX_VALUES) return fail(p, "too many values (more than 33554432)"), NULL;
  jval_t *v = calloc(1, sizeof(*v));
  if (!v) fail(p, "out of memory");
  else v->type = t;
  return v;
}

/* ---- strings ------------------------------------------------------------ */

typedef struct buf {
  char *b;
  size_t len, cap;
} buf_t;

static int put(buf_t *b, const char *bytes, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 16;
    while (b->len + n + 1 > cap) cap *= 2;
    char *g = realloc(b->b, cap);
    if (!g) return -1;
    b->b = g, b->cap = cap;
  }
  memcpy(b->b + b->len, bytes, n);
  b->len += n;
  return 0;
}

static int put_code(buf_t *b, uint32_t c) {
  char u[4];
  if (c == 0 || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff) c = 0xfffd;
  if (c < 0x80) return u[0] = (char)c, put(b, u, 1);
  if (c < 0x800) return u[0] = (char)(0xc0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3f)), put(b, u, 2);
  if (c < 0x10000)
    return u[0] = (char)(0xe0 | c >> 12), u[1] = (char)(0x80 | ((c >> 6) & 0x3f)), u[2] = (char)(0x80 | (c & 0x3f)),
           put(b, u, 3);
  u[0] = (char)(0xf0 | c >> 18), u[1] = (char)(0x80 | ((c >> 12) & 0x3f)), u[2] = (char)(0x80 | ((c >> 6) & 0x3f));
  u[3] = (char)(0x80 | (c & 0x3f));
  return put(b, u, 4);
}

static int hex4(const unsigned char *s, uint32_t *out) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    unsigned char c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp, min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (n < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((s[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[k] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

static char *string(parser_t *p) {
  if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a string"), NULL;
  size_t opened = p->i++;
  buf_t b = {0};
  int oom = 0;
  while (!oom && p->i < p->n && p->s[p->i] != '"') {
    unsigned char c = p->s[p->i];
    if (c < 0x20) {
      free(b.b);
      return fail(p, "control character in a string (escape it)"), NULL;
    }
    if (c != '\\') {
      size_t l = utf8_len(p->s + p->i, p->n - p->i);
      if (l) oom = put(&b, (const char *)p->s + p->i, l), p->i += l;
      else oom = put_code(&b, 0xfffd), p->i++; /* not UTF-8: replaced */
      continue;
    }
    if (p->i + 1 >= p->n) break;
    unsigned char e = p->s[p->i + 1];
    if (e == 'u') {
      uint32_t cp, lo;
      if (p->n - p->i < 6 || hex4(p->s + p->i + 2, &cp)) {
        free(b.b);
        return fail(p, "bad \\u escape (four hex digits expected)"), NULL;
      }
      p->i += 6;
      if (cp >= 0xd800 && cp <= 0xdbff && p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' &&
          !hex4(p->s + p->i + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p->i += 6;
      }
      oom = put_code(&b, cp);
      continue;
    }
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = e ? strchr(from, e) : NULL;
    if (!k) {
      p->i++;
      free(b.b);
      return fail(p, "bad escape in a string"), NULL;
    }
    oom = put(&b, to + (k - from), 1);
    p->i += 2;
  }
  if (oom || (!b.b && put(&b, "", 0))) {
    free(b.b);
    return fail(p, "out of memory"), NULL;
  }
  if (p->i >= p->n) {
    free(b.b);
    return fail_at(p, opened, "unterminated string (opened here)"), NULL;
  }
  p->i++;
  b.b[b.len] = '\0';
  return b.b;
}

/* ---- numbers: JSON's grammar, nothing more -------------------------------- */

static int digits(parser_t *p) {
  size_t from = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  return p->i > from;
}

static jval_t *number(parser_t *p) {
  size_t from = p->i;
  if (p->s[p->i] == '-') p->i++;
  if (p->i < p->n && p->s[p->i] == '0') p->i++;
  else if (!digits(p)) return fail_at(p, from, "malformed number"), NULL;
  if (p->i < p->n && p->s[p->i] == '.') {
    p->i++;
    if (!digits(p)) return fail_at(p, from, "malformed number (digits expected after '.')"), NULL;
  }
  if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
    p->i++;
    if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
    if (!digits(p)) return fail_at(p, from, "malformed number (exponent expected)"), NULL;
  }
  size_t len = p->i - from;
  if (len >= JSON_MAX_NUMBER) return fail_at(p, from, "number too long (64 characters at most)"), NULL;
  char text[JSON_MAX_NUMBER];
  memcpy(text, p->s + from, len);
  text[len] = '\0';
  double d = strtod(text, NULL);
  if (!isfinite(d)) return fail_at(p, from, "number out of range"), NULL;
  jval_t *v = node(p, J_NUM);
  if (v) v->num = d;
  return v;
}

/* ---- values --------------------------------------------------------------- */

static jval_t *value(parser_t *p, int depth);

static jval_t *container(parser_t *p, int depth, int object, int stream) {
  jval_t *v = node(p, object ? J_OBJ : J_ARR), **tail = v ? &v->child : NULL;
  size_t index = 0, values = p->values;
  if (!v) return NULL;
  stream = stream && !object && p->element;
  p->i++;
  ws(p);
  if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
    p->i++;
    return v;
  }
  while (!p->failed) {
    char *key = NULL;
    if (object) {
      ws(p);
      if (!(key = string(p))) break;
      ws(p);
      if (p->i >= p->n || p->s[p->i] != ':') {
        free(key);
        fail(p, p->i >= p->n ? "unexpected end of input (':' expected)" : "expected ':'");
        break;
      }
      p->i++;
      p->stream_next = depth == 0 && !strcmp(key, "traceEvents");
    }
    size_t at = p->i;
    jval_t *c = value(p, depth + 1);
    if (!c) {
      free(key);
      break;
    }
    c->key = key;
    if (stream) {
      /* Handed over and freed at once: a file of millions of events never
       * holds more than one of them as a tree. */
      int rc = p->element(p->ctx, c, index++, at);
      json_free(c);
      p->values = values;
      if (rc) {
        p->failed = 1; /* the callback wrote the message */
        break;
      }
    } else {
      *tail = c;
      tail = &c->next;
    }
    ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
      p->i++;
      return v;
    }
    if (p->i >= p->n) fail(p, object ? "unexpected end of input (',' or '}' expected)"
                                     : "unexpected end of input (',' or ']' expected)");
    else fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  json_free(v);
  return NULL;
}

static jval_t *value(parser_t *p, int depth) {
  int stream = p->stream_next;
  p->stream_next = 0;
  if (depth > JSON_MAX_DEPTH) return fail(p, "nested too deeply (more than 64 levels)"), NULL;
  ws(p);
  if (p->i >= p->n) return fail(p, "unexpected end of input"), NULL;
  unsigned char c = p->s[p->i];
  if (c == '{' || c == '[') return container(p, depth, c == '{', stream);
  if (c == '"') {
    char *s = string(p);
    jval_t *v = s ? node(p, J_STR) : NULL;
    if (!v) free(s);
    else v->str = s;
    return v;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return number(p);
  static const struct { const char *word; jtype_t t; double num; } words[] = {
      {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
  for (int k = 0; k < 3; ++k) {
    size_t l = strlen(words[k].word);
    if (p->n - p->i >= l && !memcmp(p->s + p->i, words[k].word, l)) {
      p->i += l;
      jval_t *v = node(p, words[k].t);
      if (v) v->num = words[k].num;
      return v;
    }
  }
  return fail(p, "unexpected character (not a JSON value)"), NULL;
}

jval_t *json_parse_events(const char *text, size_t len, json_element_fn element, void *ctx, char *err,
                          size_t err_size) {
  return json_parse_events_cut(text, len, element, ctx, err, err_size, NULL);
}

jval_t *json_parse_events_cut(const char *text, size_t len, json_element_fn element, void *ctx, char *err,
                              size_t err_size, int *truncated) {
  parser_t p = {(const unsigned char *)text, len, 0, 0, err, err_size, 0, element, ctx, 0, 0};
  if (err_size) err[0] = '\0';
  if (truncated) *truncated = 0;
  if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) p.i = 3; /* a UTF-8 byte-order mark */
  ws(&p);
  p.stream_next = p.i < p.n && p.s[p.i] == '['; /* a bare array of events */
  jval_t *v = value(&p, 0);
  if (!v) {
    if (truncated) *truncated = p.truncated;
    return NULL;
  }
  ws(&p);
  if (p.i != p.n) {
    fail(&p, "trailing data after the JSON value");
    json_free(v);
    return NULL;
  }
  return v;
}

/* Iterative over siblings, recursive over children: depth is bounded. */
jval_t *json_parse(const char *text, size_t len, char *err, size_t err_size) {
  return json_parse_events(text, len, NULL, NULL, err, err_size);
}

void json_free(jval_t *v) {
  while (v) {
    jval_t *next = v->next;
    json_free(v->child);
    free(v->str);
    free(v->key);
    free(v);
    v = next;
  }
}

const jval_t *json_get(const jval_t *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  for (const jval_t *c = obj->child; c; c = c->next)
    if (c->key && !strcmp(c->key, key)) return c;
  return NULL;
}
