/* A convolution's direct form, for the tests' references (the GPU suites'
 * and the host check of the GPU index maps): every output and every
 * product behind it, in the order of the loops, each handed to fn. */
#ifndef AQ_TESTS_CONV_TAPS_H_
#define AQ_TESTS_CONV_TAPS_H_

#include "aquila/ops.h"

/* fn(ctx, o, k, xi, wi): once for output o (of filter k) with xi = wi = -1
 * (its bias), then once for each product w[wi] x[xi] it sums (taps in the
 * padding left out). */
typedef void (*conv_tap_fn)(void *ctx, int64_t o, int64_t k, int64_t xi, int64_t wi);

static inline void conv_taps(const aq_conv2d_args_t *a, conv_tap_fn fn, void *ctx) {
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t k = 0; k < a->k; ++k)
      for (int64_t p = 0; p < a->p; ++p)
        for (int64_t q = 0; q < a->q; ++q) {
          const int64_t o = ((n * a->k + k) * a->p + p) * a->q + q;
          fn(ctx, o, k, -1, -1);
          for (int64_t c = 0; c < a->c; ++c)
            for (int64_t r = 0; r < a->r; ++r)
              for (int64_t s = 0; s < a->s; ++s) {
                const int64_t ih = p * a->stride_h - a->pad_h + r * a->dil_h, iw = q * a->stride_w - a->pad_w + s * a->dil_w;
                if (ih < 0 || ih >= a->h || iw < 0 || iw >= a->wd) continue;
                fn(ctx, o, k, ((n * a->c + c) * a->h + ih) * a->wd + iw, ((k * a->c + c) * a->r + r) * a->s + s);
              }
        }
}

#endif
