/* A small JSON reader for trace files: bounded depth, every error with its
 * byte offset, nothing trusted about the input. */
#ifndef AQ_TRACE_JSON_H_
#define AQ_TRACE_JSON_H_

#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jval {
  jtype_t type;
  double num;
  char *str;            /* J_STR: the string */
  char *key;            /* an object member's key */
  struct jval *child;   /* first element / member */
  struct jval *next;    /* next sibling */
} jval_t;

/* Parses text[0..len); returns the root, or NULL with a message in err. */
jval_t *json_parse(const char *text, size_t len, char *err, size_t err_size);
void json_free(jval_t *v);
const jval_t *json_get(const jval_t *obj, const char *key);

#endif
