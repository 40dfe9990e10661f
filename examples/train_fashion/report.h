/* What a person sees of a training run: a progress bar per epoch, a metrics
 * CSV, and an SVG plot of loss and accuracy that opens in a browser. */
#ifndef AQ_EXAMPLES_REPORT_H_
#define AQ_EXAMPLES_REPORT_H_

#include <stdint.h>
#include <stdio.h>

typedef struct report_epoch {
  int epoch;
  double train_loss;   /* mean over the epoch's steps */
  double test_acc;     /* 0..1 */
  double us_per_step;
  double seconds;
} report_epoch_t;

/* Redraws the bar on stderr (only when it is a terminal, else every 10%). */
void report_progress(int epoch, int epochs, uint32_t step, uint32_t steps, double steps_per_s,
                     double loss);
void report_progress_done(void);

/* Writes the CSV (header + one line per epoch). Returns 0 or -1. */
int report_write_csv(const char *path, const report_epoch_t *e, int n);
/* Writes an SVG with two panels: loss per epoch, test accuracy per epoch. */
int report_write_svg(const char *path, const char *title, const report_epoch_t *e, int n);

#endif
