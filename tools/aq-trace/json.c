/* Recursive descent with a depth limit; strings unescaped (\uXXXX kept as
 * '?', which the tools never need). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64 };

typedef struct parser {
  const char *s;
  size_t n, i;
  char *err;
  size_t err_size;
  int failed;
} parser_t;

static void fail(parser_t *p, const char *what) {
  if (p->failed) return;
  p->failed = 1;
  snprintf(p->err, p->err_size, "%s at byte %zu", what, p->i);
}

static void ws(parser_t *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t')) p->i++;
}

static jval_t *node(parser_t *p, jtype_t t) {
  jval_t *v = calloc(1, sizeof(*v));
  if (!v) fail(p, "out of memory");
  else v->type = t;
  return v;
}

static char *string(parser_t *p) {
  if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a string"), NULL;
  p->i++;
  size_t cap = 16, len = 0;
  char *out = malloc(cap);
  while (out && p->i < p->n && p->s[p->i] != '"') {
    char c = p->s[p->i++];
    if ((unsigned char)c < 0x20) {
      free(out);
      return fail(p, "control character in a string"), NULL;
    }
    if (c == '\\') {
      if (p->i >= p->n) break;
      char e = p->s[p->i++];
      if (e == 'u') {
        if (p->n - p->i < 4) break;
        p->i += 4;
        c = '?';
      } else {
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, e);
        if (!k || !e) {
          free(out);
          return fail(p, "bad escape in a string"), NULL;
        }
        c = to[k - from];
      }
    }
    if (len + 2 > cap) {
      char *n = realloc(out, cap *= 2);
      if (!n) break;
      out = n;
    }
    out[len++] = c;
  }
  if (!out || p->i >= p->n) {
    free(out);
    return fail(p, "unterminated string"), NULL;
  }
  p->i++;
  out[len] = '\0';
  return out;
}

static jval_t *value(parser_t *p, int depth);

static jval_t *container(parser_t *p, int depth, int object) {
  jval_t *v = node(p, object ? J_OBJ : J_ARR), **tail = v ? &v->child : NULL;
  if (!v) return NULL;
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
      key = string(p);
      ws(p);
      if (!p->failed && (p->i >= p->n || p->s[p->i] != ':')) fail(p, "expected ':'");
      p->i++;
    }
    jval_t *c = p->failed ? NULL : value(p, depth + 1);
    if (!c) {
      free(key);
      break;
    }
    c->key = key;
    *tail = c;
    tail = &c->next;
    ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
      p->i++;
      return v;
    }
    fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  json_free(v);
  return NULL;
}

static jval_t *value(parser_t *p, int depth) {
  if (depth > MAX_DEPTH) return fail(p, "nested too deeply"), NULL;
  ws(p);
  if (p->i >= p->n) return fail(p, "unexpected end of input"), NULL;
  char c = p->s[p->i];
  if (c == '{' || c == '[') return container(p, depth, c == '{');
  if (c == '"') {
    jval_t *v = node(p, J_STR);
    if (v && !(v->str = string(p))) {
      free(v);
      return NULL;
    }
    return v;
  }
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
  if (c == '-' || (c >= '0' && c <= '9')) {
    char buf[64];
    size_t l = 0;
    while (p->i < p->n && l < sizeof(buf) - 1 && strchr("+-0123456789.eE", p->s[p->i])) buf[l++] = p->s[p->i++];
    buf[l] = '\0';
    char *end;
    double d = strtod(buf, &end);
    if (*end || l == sizeof(buf) - 1) return fail(p, "malformed number"), NULL;
    jval_t *v = node(p, J_NUM);
    if (v) v->num = d;
    return v;
  }
  return fail(p, "unexpected character"), NULL;
}

jval_t *json_parse(const char *text, size_t len, char *err, size_t err_size) {
  parser_t p = {text, len, 0, err, err_size, 0};
  jval_t *v = value(&p, 0);
  ws(&p);
  if (v && p.i != p.n) {
    fail(&p, "trailing data after the JSON value");
    json_free(v);
    return NULL;
  }
  return v;
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
