/* The idx reader and the Fashion-MNIST loader. */
#include "scheduler/train/fashion_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const uint8_t b[4]) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

int aq_fashion_read_idx(const char *path, uint32_t expect_magic, uint32_t dims[3], uint8_t **data,
                     size_t *size, char *err, size_t err_size) {
  *data = NULL;
  FILE *probe = fopen(path, "rb");
  if (!probe) {
    snprintf(err, err_size, "%s: %s (install dataset-fashion-mnist, or pass --data DIR)", path, strerror(errno));
    return -1;
  }
  fclose(probe);
  gzFile f = gzopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "%s: cannot open", path);
    return -1;
  }
  uint8_t head[16];
  unsigned ndims = (expect_magic & 0xff);
  unsigned head_size = 4 + 4 * ndims;
  int got = gzread(f, head, head_size);
  if (got != (int)head_size) {
    snprintf(err, err_size, "%s: truncated header (%d of %u bytes)%s", path, got < 0 ? 0 : got, head_size,
             got < 0 ? ": not gzip data?" : "");
    gzclose(f);
    return -1;
  }
  uint32_t magic = be32(head);
  if (magic != expect_magic) {
    snprintf(err, err_size, "%s: magic 0x%08x, expected 0x%08x (an idx %s file)", path, magic, expect_magic,
             expect_magic == 0x803 ? "image" : "label");
    gzclose(f);
    return -1;
  }
  size_t n = 1;
  for (unsigned i = 0; i < 3; ++i) dims[i] = 1;
  for (unsigned i = 0; i < ndims; ++i) {
    dims[i] = be32(head + 4 + 4 * i);
    if (dims[i] == 0 || dims[i] > 10000000u || n > ((size_t)1 << 32) / dims[i]) {
      snprintf(err, err_size, "%s: implausible dimension %u = %u", path, i, dims[i]);
      gzclose(f);
      return -1;
    }
    n *= dims[i];
  }
  /* On 2 MB pages where the kernel allows: a shuffled batch touches 256
   * images scattered over 47 MB, and on 4 KB pages each costs a TLB miss. */
  size_t huge = (size_t)2 << 20;
  uint8_t *buf = n >= huge ? aligned_alloc(huge, (n + huge - 1) / huge * huge) : malloc(n);
  if (buf && n >= huge) madvise(buf, (n + huge - 1) / huge * huge, MADV_HUGEPAGE);
  if (!buf) {
    snprintf(err, err_size, "%s: no memory for %zu bytes", path, n);
    gzclose(f);
    return -1;
  }
  size_t have = 0;
  while (have < n) {
    int r = gzread(f, buf + have, (unsigned)((n - have) > (1u << 30) ? (1u << 30) : (n - have)));
    if (r <= 0) break;
    have += (size_t)r;
  }
  uint8_t extra;
  int trailing = gzread(f, &extra, 1);
  int zerr;
  const char *zmsg = gzerror(f, &zerr);
  gzclose(f);
  if (have != n) {
    snprintf(err, err_size, "%s: truncated: header promises %zu bytes of data, file holds %zu%s%s", path, n, have,
             zerr ? ": " : "", zerr ? zmsg : "");
    free(buf);
    return -1;
  }
  if (trailing > 0) {
    snprintf(err, err_size, "%s: malformed: data continues past the %zu bytes the header gives", path, n);
    free(buf);
    return -1;
  }
  *data = buf;
  *size = n;
  return 0;
}

int aq_fashion_load(const char *dir, const char *split, aq_fashion_set_t *out, char *err, size_t err_size) {
  char path[1024];
  uint32_t idims[3], ldims[3];
  size_t isize, lsize;
  memset(out, 0, sizeof(*out));
  snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, split);
  if (aq_fashion_read_idx(path, 0x803, idims, &out->images, &isize, err, err_size)) return -1;
  snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (aq_fashion_read_idx(path, 0x801, ldims, &out->labels, &lsize, err, err_size)) {
    aq_fashion_free(out);
    return -1;
  }
  if (idims[0] != ldims[0]) {
    snprintf(err, err_size, "%s/%s: %u images but %u labels", dir, split, idims[0], ldims[0]);
    aq_fashion_free(out);
    return -1;
  }
  for (uint32_t i = 0; i < ldims[0]; ++i)
    if (out->labels[i] >= AQ_FASHION_CLASSES) {
      snprintf(err, err_size, "%s: label %u of image %u is not a class (0-9)", path, out->labels[i], i);
      aq_fashion_free(out);
      return -1;
    }
  out->count = idims[0];
  out->rows = idims[1];
  out->cols = idims[2];
  return 0;
}

void aq_fashion_free(aq_fashion_set_t *set) {
  free(set->images);
  free(set->labels);
  memset(set, 0, sizeof(*set));
}
