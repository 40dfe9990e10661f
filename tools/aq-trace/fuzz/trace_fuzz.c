/* libFuzzer target: aq-trace's reader and summary on arbitrary bytes. Any
 * input must end in a clean parse or a clean error (ASan watches). */
#include <stddef.h>
#include <stdint.h>

#include "../trace_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tfile_t t;
  char err[256];
  if (tfile_parse((const char *)data, size, &t, err, sizeof(err)) == 0) tfile_free(&t);
  return 0;
}
