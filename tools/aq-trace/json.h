/* A small JSON reader for trace files, trusting nothing about its input:
 * depth and value counts are bounded, numbers follow JSON's grammar
 * strictly, strings come out as valid UTF-8 (invalid bytes, lone surrogates
 * and \u0000 become U+FFFD), and every error names its byte offset, line
 * and column. */
#ifndef AQ_TRACE_JSON_H_
#define AQ_TRACE_JSON_H_

#include <stddef.h>

enum {
  JSON_MAX_DEPTH = 64,          /* nesting of arrays and objects */
  JSON_MAX_VALUES = 1 << 25,    /* values in one document (about 1.6 GiB of nodes) */
  JSON_MAX_NUMBER = 64,         /* characters in one number */
};

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jval {
  jtype_t type;
  double num;           /* J_NUM (finite), J_BOOL (0 or 1) */
  char *str;            /* J_STR: NUL-terminated UTF-8 */
  char *key;            /* an object member's key */
  struct jval *child;   /* first element / member */
  struct jval *next;    /* next sibling */
} jval_t;

/* Parses text[0..len); returns the root, or NULL with a message in err. */
jval_t *json_parse(const char *text, size_t len, char *err, size_t err_size);
/* The same, handing each element of the trace's event array (the root's
 * "traceEvents", or a root that is an array) to element as soon as it is
 * read, then freeing it: that array comes back empty. element returns 0 to
 * go on, or non-zero to stop with the message it wrote into err. offset is
 * the element's byte offset. */
typedef int (*json_element_fn)(void *ctx, const jval_t *element, size_t index, size_t offset);
jval_t *json_parse_events(const char *text, size_t len, json_element_fn element, void *ctx, char *err,
                          size_t err_size);
/* The same; *truncated says whether a failure was the text ending inside
 * a value (a file cut short, whose elements before the cut were handed
 * over) rather than a syntax error. */
jval_t *json_parse_events_cut(const char *text, size_t len, json_element_fn element, void *ctx, char *err,
                              size_t err_size, int *truncated);
void json_free(jval_t *v);
/* The first member named key of an object; NULL if obj is no object. */
const jval_t *json_get(const jval_t *obj, const char *key);

#endif
