/* libFuzzer target: aq-trace's reader, analysis, summary, SVG and diff on
 * arbitrary bytes, and the input as two ranks of one run merged (ranks.h).
 * Every input must end in a clean parse or a clean error (a non-empty
 * message); ASan and UBSan (no recovery) watch the rest. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../analysis.h"
#include "../ranks.h"

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
  /* The same file as rank 0 and rank 1: merged, or refused with a message. */
  tfile_t two[2], m;
  if (tfile_parse((const char *)data, size, &two[0], err, sizeof(err))) return 0;
  if (tfile_parse((const char *)data, size, &two[1], err, sizeof(err))) return tfile_free(&two[0]), 0;
  const char *paths[2] = {"rank-0", "rank-1"};
  err[0] = 0;
  if (tfile_merge_ranks(two, paths, 2, &m, NULL, err, sizeof(err))) {
    if (!err[0]) __builtin_trap();
  } else {
    if (!tanalyze(&m, &a, err, sizeof(err))) tsummary(sink, "fuzz", &a, 10), tanalysis_free(&a);
    tfile_free(&m);
  }
  tfile_free(&two[0]), tfile_free(&two[1]);
  return 0;
}
