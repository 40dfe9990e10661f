/* The Fashion-MNIST loader: the real files load; missing, truncated and
 * malformed ones are refused with a message naming the file and the fault. */
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "scheduler/train/fashion_data.h"

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/aq-fashion-%d", getpid());
  mkdir(dir, 0755);
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

static void write_gz(const char *name, const void *bytes, size_t n) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  gzFile f = gzopen(path, "wb");
  cr_assert(f);
  gzwrite(f, bytes, (unsigned)n);
  gzclose(f);
}

static void idx(uint8_t *h, uint32_t magic, uint32_t n, uint32_t r, uint32_t c) {
  uint32_t v[4] = {magic, n, r, c};
  for (int i = 0; i < 4; ++i)
    for (int b = 0; b < 4; ++b) h[4 * i + b] = (uint8_t)(v[i] >> (24 - 8 * b));
}

static void write_set(uint32_t images, uint32_t labels, uint32_t data_images, uint8_t max_label) {
  size_t isz = 16 + (size_t)data_images * 4, lsz = 8 + labels;
  size_t lcap = lsz < 16 ? 16 : lsz; /* idx() writes a 16-byte header */
  uint8_t *ib = calloc(1, isz), *lb = calloc(1, lcap);
  idx(ib, 0x803, images, 2, 2);
  idx(lb, 0x801, labels, 0, 0);
  for (uint32_t i = 0; i < labels; ++i) lb[8 + i] = (uint8_t)(i % (max_label + 1));
  write_gz("train-images-idx3-ubyte.gz", ib, isz);
  write_gz("train-labels-idx1-ubyte.gz", lb, lsz);
  free(ib), free(lb);
}

static void expect_error(const char *phrase) {
  aq_fashion_set_t s;
  char err[512] = "";
  cr_assert_eq(aq_fashion_load(dir, "train", &s, err, sizeof(err)), -1);
  cr_assert(strstr(err, phrase), "message '%s' lacks '%s'", err, phrase);
}

Test(fashion_data, the_real_dataset_loads) {
  aq_fashion_set_t train, test;
  char err[512];
  /* Debian's dataset-fashion-mnist, which the build installs; a machine that
   * keeps the files elsewhere says where in AQ_FASHION_DATA. */
  const char *where = getenv("AQ_FASHION_DATA") ? getenv("AQ_FASHION_DATA") : AQ_FASHION_DEFAULT_DIR;
  cr_assert_eq(aq_fashion_load(where, "train", &train, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(aq_fashion_load(where, "t10k", &test, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(train.count, 60000);
  cr_assert_eq(test.count, 10000);
  cr_assert(train.rows == 28 && train.cols == 28);
  uint32_t per_class[AQ_FASHION_CLASSES] = {0};
  for (uint32_t i = 0; i < test.count; ++i) per_class[test.labels[i]]++;
  for (int c = 0; c < AQ_FASHION_CLASSES; ++c) cr_assert_eq(per_class[c], 1000, "class %d", c);
  aq_fashion_free(&train);
  aq_fashion_free(&test);
}

Test(fashion_data, missing_files, .init = make_dir, .fini = remove_dir) {
  expect_error("No such file");
  expect_error("dataset-fashion-mnist");
}

Test(fashion_data, truncated_file, .init = make_dir, .fini = remove_dir) {
  write_set(10, 10, 7, 9);
  expect_error("truncated");
}

Test(fashion_data, trailing_data, .init = make_dir, .fini = remove_dir) {
  write_set(10, 10, 11, 9);
  expect_error("continues past");
}

Test(fashion_data, counts_that_disagree, .init = make_dir, .fini = remove_dir) {
  write_set(10, 9, 10, 9);
  expect_error("10 images but 9 labels");
}

Test(fashion_data, a_label_that_is_not_a_class, .init = make_dir, .fini = remove_dir) {
  write_set(12, 12, 12, 11);
  expect_error("is not a class");
}

Test(fashion_data, wrong_magic_and_not_gzip, .init = make_dir, .fini = remove_dir) {
  write_set(4, 4, 4, 9);
  uint8_t bad[16];
  idx(bad, 0x801, 4, 2, 2); /* a label header on the image file */
  write_gz("train-images-idx3-ubyte.gz", bad, sizeof(bad));
  expect_error("magic");
  char path[512];
  snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
  FILE *f = fopen(path, "wb");
  fputs("hi", f); /* two bytes: not even a header */
  fclose(f);
  expect_error("truncated header");
}
