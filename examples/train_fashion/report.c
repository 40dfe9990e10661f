/* Progress bar, metrics CSV, SVG plot. */
#include "report.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static int last_decile = -1;

void report_progress(int epoch, int epochs, uint32_t step, uint32_t steps, double steps_per_s,
                     double loss) {
  int tty = isatty(STDERR_FILENO);
  int decile = (int)(10.0 * step / (steps ? steps : 1));
  if (!tty && decile == last_decile && step != steps) return;
  last_decile = decile;
  enum { WIDTH = 30 };
  int filled = (int)((double)WIDTH * step / (steps ? steps : 1));
  char bar[WIDTH + 1];
  for (int i = 0; i < WIDTH; ++i) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(stderr, "%sepoch %d/%d [%s] %u/%u  %.0f steps/s  loss %.4f%s", tty ? "\r" : "", epoch, epochs, bar,
          step, steps, steps_per_s, loss, tty ? "" : "\n");
  fflush(stderr);
}

void report_progress_done(void) {
  if (isatty(STDERR_FILENO)) fputc('\n', stderr);
  last_decile = -1;
}

int report_write_csv(const char *path, const report_epoch_t *e, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "epoch,train_loss,test_acc,us_per_step,seconds\n");
  for (int i = 0; i < n; ++i)
    fprintf(f, "%d,%.6f,%.4f,%.1f,%.3f\n", e[i].epoch, e[i].train_loss, e[i].test_acc, e[i].us_per_step,
            e[i].seconds);
  return fclose(f) ? -1 : 0;
}

/* One panel: a polyline of ys over epochs, with axes and labels. */
static void panel(FILE *f, double x0, double y0, double w, double h, const char *name, const char *colour,
                  const report_epoch_t *e, int n, double (*get)(const report_epoch_t *)) {
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; ++i) {
    double v = get(&e[i]);
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (!(hi > lo)) hi = lo + 1e-6, lo -= 1e-6;
  double pad = 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  fprintf(f, "<rect x='%g' y='%g' width='%g' height='%g' fill='white' stroke='#888'/>\n", x0, y0, w, h);
  fprintf(f, "<text x='%g' y='%g' font-size='14' font-family='sans-serif'>%s</text>\n", x0, y0 - 8, name);
  for (int t = 0; t <= 4; ++t) {
    double v = lo + (hi - lo) * t / 4, y = y0 + h - h * t / 4;
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#eee'/>", x0, y, x0 + w, y);
    fprintf(f, "<text x='%g' y='%g' font-size='10' text-anchor='end' font-family='sans-serif'>%.4g</text>\n",
            x0 - 4, y + 3, v);
  }
  fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", colour);
  for (int i = 0; i < n; ++i) {
    double x = x0 + (n > 1 ? w * i / (n - 1) : w / 2), y = y0 + h - h * (get(&e[i]) - lo) / (hi - lo);
    fprintf(f, "%g,%g ", x, y);
  }
  fprintf(f, "'/>\n");
  for (int i = 0; i < n; ++i) {
    double x = x0 + (n > 1 ? w * i / (n - 1) : w / 2), y = y0 + h - h * (get(&e[i]) - lo) / (hi - lo);
    fprintf(f, "<circle cx='%g' cy='%g' r='3' fill='%s'><title>epoch %d: %.4f</title></circle>", x, y, colour,
            e[i].epoch, get(&e[i]));
    fprintf(f, "<text x='%g' y='%g' font-size='10' text-anchor='middle' font-family='sans-serif'>%d</text>\n", x,
            y0 + h + 14, e[i].epoch);
  }
}

static double loss_of(const report_epoch_t *e) { return e->train_loss; }
static double acc_of(const report_epoch_t *e) { return e->test_acc * 100.0; }

int report_write_svg(const char *path, const char *title, const report_epoch_t *e, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='820' height='360' viewBox='0 0 820 360'>\n");
  fprintf(f, "<rect width='820' height='360' fill='#fafafa'/>\n");
  fprintf(f, "<text x='20' y='24' font-size='16' font-family='sans-serif' font-weight='bold'>");
  for (const char *c = title; *c; ++c) {
    if (*c == '<') fputs("&lt;", f);
    else if (*c == '&') fputs("&amp;", f);
    else fputc(*c, f);
  }
  fprintf(f, "</text>\n");
  panel(f, 60, 60, 320, 250, "training loss (mean per epoch)", "#d62728", e, n, loss_of);
  panel(f, 470, 60, 320, 250, "test accuracy (%)", "#1f77b4", e, n, acc_of);
  fprintf(f, "<text x='400' y='350' font-size='11' text-anchor='middle' font-family='sans-serif'>epoch</text>\n");
  fprintf(f, "</svg>\n");
  return fclose(f) ? -1 : 0;
}
