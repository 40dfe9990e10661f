/* Fashion-MNIST as Debian's dataset-fashion-mnist ships it: four gzipped idx
 * files. The loader checks every header field and every byte count, so a
 * missing, truncated or malformed file is reported by name and reason. */
#ifndef AQ_SCHEDULER_TRAIN_FASHION_DATA_H_
#define AQ_SCHEDULER_TRAIN_FASHION_DATA_H_

#include <stddef.h>
#include <stdint.h>

#define AQ_FASHION_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define AQ_FASHION_CLASSES 10

typedef struct aq_fashion_set {
  uint32_t count;       /* images */
  uint32_t rows, cols;  /* 28 x 28 */
  uint8_t *images;      /* count * rows * cols, row-major */
  uint8_t *labels;      /* count, each < AQ_FASHION_CLASSES */
} aq_fashion_set_t;

/* Loads "<dir>/<split>-images-idx3-ubyte.gz" and the matching labels file
 * (split is "train" or "t10k"). Returns 0, or -1 with a message in err. */
int aq_fashion_load(const char *dir, const char *split, aq_fashion_set_t *out, char *err, size_t err_size);
void aq_fashion_free(aq_fashion_set_t *set);

/* Reads one idx file: expect_magic 0x803 (images) or 0x801 (labels). Exposed
 * for the tests. */
int aq_fashion_read_idx(const char *path, uint32_t expect_magic, uint32_t dims[3], uint8_t **data,
                     size_t *size, char *err, size_t err_size);

#endif
