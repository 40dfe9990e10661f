/* Reading trace files: JSON first, then the events, checking each field. */
#include "trace_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static int num(const jval_t *v, double *out) {
  if (!v || v->type != J_NUM || v->num != v->num) return 0;
  *out = v->num;
  return 1;
}

int tfile_parse(const char *text, size_t len, tfile_t *out, char *err, size_t err_size) {
  memset(out, 0, sizeof(*out));
  jval_t *root = json_parse(text, len, err, err_size);
  if (!root) return -1;
  const jval_t *events = root->type == J_ARR ? root : json_get(root, "traceEvents");
  if (!events || events->type != J_ARR) {
    snprintf(err, err_size, "not a Chrome trace: no traceEvents array");
    json_free(root);
    return -1;
  }
  size_t n = 0;
  for (const jval_t *e = events->child; e; e = e->next) n++;
  out->events = calloc(n ? n : 1, sizeof(tevent_t));
  if (!out->events) {
    snprintf(err, err_size, "no memory for %zu events", n);
    json_free(root);
    return -1;
  }
  size_t index = 0;
  for (const jval_t *e = events->child; e; e = e->next, ++index) {
    if (e->type != J_OBJ) {
      snprintf(err, err_size, "event %zu is not an object", index);
      json_free(root);
      tfile_free(out);
      return -1;
    }
    const jval_t *ph = json_get(e, "ph"), *name = json_get(e, "name");
    double pid = 0, tid = 0;
    num(json_get(e, "pid"), &pid);
    num(json_get(e, "tid"), &tid);
    if (ph && ph->type == J_STR && !strcmp(ph->str, "M") && name && name->type == J_STR &&
        !strcmp(name->str, "aquila_edges")) {
      const jval_t *args = json_get(e, "args"), *list = json_get(args, "edges");
      double ex = -1;
      num(json_get(args, "exec"), &ex);
      size_t n = 0;
      for (const jval_t *x = list && list->type == J_ARR ? list->child : NULL; x; x = x->next) n++;
      tedge_t *grown = n ? realloc(out->edges, (out->nedges + n) * sizeof(tedge_t)) : out->edges;
      if (n && !grown) continue;
      out->edges = grown;
      for (const jval_t *x = list && list->type == J_ARR ? list->child : NULL; x; x = x->next) {
        double a, b;
        if (x->type != J_ARR || !num(x->child, &a) || !x->child->next || !num(x->child->next, &b)) continue;
        out->edges[out->nedges++] = (tedge_t){(long)ex, (long)a, (long)b};
      }
      continue;
    }
    if (ph && ph->type == J_STR && !strcmp(ph->str, "M") && name && name->type == J_STR &&
        !strcmp(name->str, "process_name") && pid >= 0 && pid < 64) {
      const jval_t *a = json_get(json_get(e, "args"), "name");
      if (a && a->type == J_STR) snprintf(out->pid_names[(int)pid], 64, "%s", a->str);
      continue;
    }
    if (!ph || ph->type != J_STR || strcmp(ph->str, "X")) continue; /* only complete events */
    tevent_t *t = &out->events[out->count];
    if (!num(json_get(e, "ts"), &t->ts) || !num(json_get(e, "dur"), &t->dur) || t->dur < 0 || t->dur > 1e15 ||
        t->ts < -1e15 || t->ts > 1e15) {
      snprintf(err, err_size, "event %zu: missing or impossible ts/dur", index);
      json_free(root);
      tfile_free(out);
      return -1;
    }
    if (pid < 0 || pid > 1e6 || tid < 0 || tid > 1e9) {
      snprintf(err, err_size, "event %zu: impossible pid/tid", index);
      json_free(root);
      tfile_free(out);
      return -1;
    }
    t->pid = (int)pid, t->tid = (int)tid;
    snprintf(t->name, sizeof(t->name), "%s", name && name->type == J_STR ? name->str : "?");
    const jval_t *args = json_get(e, "args");
    double ex = -1, task = -1, run = -1;
    num(json_get(args, "exec"), &ex), num(json_get(args, "task"), &task), num(json_get(args, "run"), &run);
    t->exec = (long)ex, t->task = (long)task, t->run = (long)run;
    const jval_t *cat = json_get(e, "cat");
    snprintf(t->cat, sizeof(t->cat), "%s", cat && cat->type == J_STR ? cat->str : "");
    out->count++;
  }
  json_free(root);
  return 0;
}

int tfile_load(const char *path, tfile_t *out, char *err, size_t err_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "%s: %s", path, strerror(errno));
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (n < 0 || n > (1L << 32)) {
    fclose(f);
    snprintf(err, err_size, "%s: not a regular file of a readable size", path);
    return -1;
  }
  char *text = malloc((size_t)n + 1);
  if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
    free(text);
    fclose(f);
    snprintf(err, err_size, "%s: read failed", path);
    return -1;
  }
  fclose(f);
  char inner[256];
  int rc = tfile_parse(text, (size_t)n, out, inner, sizeof(inner));
  if (rc) snprintf(err, err_size, "%s: %s", path, inner);
  free(text);
  return rc;
}

void tfile_free(tfile_t *t) {
  free(t->events);
  free(t->edges);
  memset(t, 0, sizeof(*t));
}
