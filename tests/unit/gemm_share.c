/* The packed B that a product's parts share (kernels/cpu/gemm_share.c):
 * chunks packed once by whichever part comes first, a chunk another part is
 * still packing passed over and packed privately, the setup refused where
 * B is too large, and the buffer given back by the last part. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/kernel.h"
#include "kernels/cpu/gemm_share.h"

enum { K = 600, N = 200, KC = 512, NC = 128, CHUNK = 48, NR = 16 };

typedef struct packer {
  int packs[4][8]; /* by slice and chunk */
  gemm_share_t *share;
  float *other_private;
  const float *other_out[8];
  int nested;
} packer_t;

/* Chunks of the whole width, in order: three a block of NC columns. */
static int chunk_of(int64_t j0) { return (int)(j0 / NC * ((NC + CHUNK - 1) / CHUNK) + j0 % NC / CHUNK); }

/* Writes a value naming the column and depth into every float of the
 * chunk's panels, and counts the pack. */
static void pack(const void *ctx, int64_t j0, int64_t cols, int64_t l0, int64_t kc, float *dst) {
  packer_t *p = (packer_t *)ctx;
  p->packs[l0 / KC][chunk_of(j0)]++;
  int64_t panels = (cols + NR - 1) / NR;
  for (int64_t i = 0; i < panels * NR * kc; ++i) dst[i] = (float)(j0 * 1000 + l0 + i % 7);
  /* Another part comes while this chunk (the first of the first block) is
   * being packed. */
  if (p->nested-- == 1)
    gemm_share_block(p->share, 0, NC, 0, KC, pack, p, p->other_private, p->other_out);
}

static const gemm_share_shape_t shape = {.k = K, .n = N, .kc = KC, .nc = NC, .chunk = CHUNK, .nr = NR};

Test(gemm_share, every_part_opens_the_same_share_and_packs_each_chunk_once) {
  _Alignas(64) unsigned char shared[AQ_DISPATCH_SHARED_BYTES] = {0};
  gemm_share_t *s = gemm_share_open(shared, 3, &shape);
  cr_assert(s);
  cr_assert_eq(gemm_share_open(shared, 3, &shape), s);
  cr_assert_eq(gemm_share_open(shared, 3, &shape), s);
  packer_t pk = {.share = s};
  float *mine = malloc((size_t)KC * NC * 4);
  const float *first[8], *again[8];
  for (int64_t jc0 = 0; jc0 < N; jc0 += NC)
    for (int64_t l0 = 0; l0 < K; l0 += KC) {
      int64_t ncc = N - jc0 < NC ? N - jc0 : NC, kc = K - l0 < KC ? K - l0 : KC, chunks = (ncc + CHUNK - 1) / CHUNK;
      gemm_share_block(s, jc0, ncc, l0, kc, pack, &pk, mine, first);
      gemm_share_block(s, jc0, ncc, l0, kc, pack, &pk, mine, again);
      for (int64_t i = 0; i < chunks; ++i) {
        cr_assert_eq(pk.packs[l0 / KC][chunk_of(jc0 + i * CHUNK)], 1, "slice %lld, chunk %lld of block %lld",
                     (long long)l0, (long long)i, (long long)jc0);
        cr_assert_eq(first[i], again[i], "the second part takes the first's panels");
        cr_assert(first[i] < mine || first[i] >= mine + KC * NC, "a shared chunk is not the private buffer");
        cr_assert_eq(first[i][0], (float)((jc0 + i * CHUNK) * 1000 + l0), "chunk %lld holds its own columns",
                     (long long)i);
        if (i) cr_assert_eq(first[i], first[i - 1] + CHUNK * kc, "chunks lie as one block's panels");
      }
    }
  for (int i = 0; i < 3; ++i) gemm_share_close(s); /* the last gives the buffer back (ASan: no leak) */
  free(mine);
}

Test(gemm_share, a_chunk_another_part_is_packing_is_packed_privately_not_waited_for) {
  _Alignas(64) unsigned char shared[AQ_DISPATCH_SHARED_BYTES] = {0};
  gemm_share_t *s = gemm_share_open(shared, 2, &shape);
  cr_assert(s);
  float *mine = malloc((size_t)KC * NC * 4), *theirs = malloc((size_t)KC * NC * 4);
  packer_t pk = {.share = s, .other_private = theirs, .nested = 1};
  const float *out[8];
  gemm_share_block(s, 0, NC, 0, KC, pack, &pk, mine, out);
  /* The other part packed chunks 1 and 2 into the shared copy and chunk 0,
   * still being packed, privately; this part then found 1 and 2 packed. */
  cr_assert_eq(pk.packs[0][0], 2);
  cr_assert_eq(pk.packs[0][1], 1);
  cr_assert_eq(pk.packs[0][2], 1);
  cr_assert_eq(pk.other_out[0], theirs);
  for (int i = 0; i < 3; ++i) {
    if (i) cr_assert_eq(pk.other_out[i], out[i]);
    cr_assert_eq(out[i][0], (float)(i * CHUNK * 1000), "chunk %d", i);
    cr_assert_eq(pk.other_out[i][0], (float)(i * CHUNK * 1000), "chunk %d", i);
  }
  cr_assert_neq(out[0], theirs);
  gemm_share_close(s);
  gemm_share_close(s);
  free(mine), free(theirs);
}

Test(gemm_share, no_share_without_shared_bytes_parts_or_room) {
  _Alignas(64) unsigned char shared[AQ_DISPATCH_SHARED_BYTES] = {0};
  cr_assert_null(gemm_share_open(NULL, 4, &shape));
  cr_assert_null(gemm_share_open(shared, 1, &shape), "one part has nobody to share with");
  gemm_share_shape_t huge = shape;
  huge.k = 1 << 16, huge.n = 1 << 16; /* 16 GB packed */
  cr_assert(gemm_share_fits(&shape));
  cr_assert_not(gemm_share_fits(&huge), "a product splits so only where its B fits");
  cr_assert_null(gemm_share_open(shared, 4, &huge));
  cr_assert_null(gemm_share_open(shared, 4, &huge), "every part is told, not only the first");
}

/* Parts on threads of their own, side by side, over many products: every
 * chunk each part is handed holds its own columns and depth, whoever
 * packed it. */
typedef struct part_arg {
  unsigned char *shared;
  int bad;
} part_arg_t;

static void pack_plain(const void *ctx, int64_t j0, int64_t cols, int64_t l0, int64_t kc, float *dst) {
  (void)ctx;
  int64_t panels = (cols + NR - 1) / NR;
  for (int64_t i = 0; i < panels * NR * kc; ++i) dst[i] = (float)(j0 * 1000 + l0 + i % 5);
}

static void *part_main(void *arg) {
  part_arg_t *pa = arg;
  float *mine = malloc((size_t)KC * NC * 4);
  gemm_share_t *s = gemm_share_open(pa->shared, 4, &shape);
  if (!s) pa->bad++;
  for (int64_t jc0 = 0; s && jc0 < N; jc0 += NC)
    for (int64_t l0 = 0; l0 < K; l0 += KC) {
      int64_t ncc = N - jc0 < NC ? N - jc0 : NC, kc = K - l0 < KC ? K - l0 : KC;
      const float *out[8];
      gemm_share_block(s, jc0, ncc, l0, kc, pack_plain, NULL, mine, out);
      for (int64_t i = 0; i < (ncc + CHUNK - 1) / CHUNK; ++i) {
        int64_t j0 = jc0 + i * CHUNK, floats = (ncc - i * CHUNK < CHUNK ? (ncc - i * CHUNK + NR - 1) / NR * NR : CHUNK) * kc;
        for (int64_t e = 0; e < floats; ++e) pa->bad += out[i][e] != (float)(j0 * 1000 + l0 + e % 5);
      }
    }
  if (s) gemm_share_close(s);
  free(mine);
  return NULL;
}

Test(gemm_share, parts_side_by_side_see_whole_chunks) {
  for (int product = 0; product < 200; ++product) {
    _Alignas(64) unsigned char shared[AQ_DISPATCH_SHARED_BYTES] = {0};
    pthread_t t[4];
    part_arg_t args[4];
    for (int i = 0; i < 4; ++i) args[i] = (part_arg_t){shared, 0}, pthread_create(&t[i], NULL, part_main, &args[i]);
    for (int i = 0; i < 4; ++i) {
      pthread_join(t[i], NULL);
      cr_assert_eq(args[i].bad, 0, "product %d, part %d: %d floats not what their chunk holds", product, i,
                   args[i].bad);
    }
  }
}
