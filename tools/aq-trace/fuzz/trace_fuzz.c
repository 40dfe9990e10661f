/* libFuzzer target: aq-trace's reader, analysis, summary, SVG and diff on
 * arbitrary bytes. Every input must end in a clean parse or a clean error
 * (a non-empty message); ASan and UBSan (no recovery) watch the rest. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../analysis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink && !(sink = fopen("/dev/null", "w"))) return 0;
  tfile_t t;
  char err[256] = "";
  if (tfile_parse((const char *)data, size, &t, err, sizeof(err))) {
    if (!err[0]) __builtin_trap(); /* an error without a message */
    return 0;
  }
  tanalysis_t a;
  if (!tanalyze(&t, &a, err, sizeof(err))) {
    tsummary(sink, "fuzz", &a, 10);
    tsvg(sink, "fuzz", &a, 800);
    tanalysis_free(&a);
  }
  tdiff(sink, "a", &t, "b", &t);
  tfile_free(&t);
  return 0;
}
