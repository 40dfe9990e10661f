/* aq-trace svg: a timeline a browser opens. One lane per queue (process /
 * thread), a colour per kind of work (matmul, conv, elementwise, copy,
 * collective, barrier, host, runtime span, other kernel: Okabe and Ito's
 * colour-blind-safe palette) with a legend of every kind shown and its
 * time, a time axis, a tooltip on every slice naming it, the critical path
 * outlined. A window (--from/--to, or one run) draws part of the trace.
 * Slices narrower than a pixel that would land on one already drawn are
 * merged into it, so a long trace stays a picture of bounded size. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

enum { LANES_DRAWN_MAX = 512 };

/* Text for XML: escaped, control characters and invalid UTF-8 (which the
 * reader never lets through, but this writer does not rely on it) shown
 * as '?'. */
static void xml_text(FILE *f, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  while (*u) {
    unsigned char c = *u;
    if (c == '<') fputs("&lt;", f);
    else if (c == '>') fputs("&gt;", f);
    else if (c == '&') fputs("&amp;", f);
    else if (c == '\'') fputs("&#39;", f);
    else if (c == '"') fputs("&quot;", f);
    else if (c < 0x20 || c == 0x7f) fputc('?', f);
    else if (c < 0x80) fputc(c, f);
    else {
      size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      size_t k = 1;
      while (len && k < len && (u[k] & 0xc0) == 0x80) k++;
      if (!len || k < len) {
        fputc('?', f);
        u++;
        continue;
      }
      fwrite(u, 1, len, f);
      u += len;
      continue;
    }
    u++;
  }
}

/* Kinds of work, each with its colour. */
typedef enum kind { K_MATMUL, K_CONV, K_ELEMENTWISE, K_COPY, K_COLLECTIVE, K_BARRIER, K_HOST, K_SPAN, K_OTHER, KINDS } kind_t;
static const struct {
  const char *name, *fill, *ink; /* ink: a label's colour on the fill */
} kinds[KINDS] = {
    {"matmul", "#0072B2", "white"},      {"conv", "#E69F00", "black"},       {"elementwise", "#009E73", "white"},
    {"copy", "#D55E00", "white"},        {"collective", "#CC79A7", "black"}, {"barrier", "#333333", "white"},
    {"host", "#56B4E9", "black"},        {"runtime span", "#BBBBBB", "black"}, {"other kernel", "#999933", "black"},
};

/* A slice wide enough for words gets its name (without "aq_"), cut to fit. */
static void label(FILE *f, const tevent_t *e, kind_t kind, double x, double y, double w) {
  const char *name = strncmp(e->name, "aq_", 3) ? e->name : e->name + 3;
  size_t fit = (size_t)((w - 6) / 6.2), n = strlen(name);
  if (w < 40 || fit < 3) return;
  fprintf(f, "<text x='%.1f' y='%.0f' font-size='10' fill='%s' pointer-events='none'>", x + 3, y + 13, kinds[kind].ink);
  char cut[TNAME];
  snprintf(cut, sizeof(cut), "%.*s%s", (int)(n > fit ? fit - 1 : n), name, n > fit ? "." : "");
  xml_text(f, cut);
  fputs("</text>\n", f);
}

static int has(const char *name, const char *what) { return strcasestr(name, what) != NULL; }

static kind_t kind_of(const tevent_t *e) {
  if (tevent_is_span(e)) return K_SPAN;
  if (!strcmp(e->cat, "barrier") || has(e->name, "barrier")) return K_BARRIER;
  if (has(e->name, "allreduce") || has(e->name, "all_reduce") || has(e->name, "allgather") ||
      has(e->name, "all_gather") || has(e->name, "broadcast") || has(e->name, "reduce_scatter") || has(e->name, "nccl"))
    return K_COLLECTIVE;
  if (tevent_is_copy(e) || has(e->name, "prefetch")) return K_COPY;
  if (!strcmp(e->cat, "host") || !strncmp(e->name, "host", 4)) return K_HOST;
  if (has(e->name, "matmul") || has(e->name, "gemm")) return K_MATMUL;
  if (has(e->name, "conv")) return K_CONV;
  static const char *pointwise[] = {"relu", "gelu", "tanh", "sigmoid", "dropout", "sgd", "adam", "softmax", "xent",
                                    "sum_rows", "norm", "pool", "axpby", "scale", "bias", "add", "mul", "cast",
                                    "increment", "fill", "mean", "reduce"};
  for (size_t i = 0; i < sizeof(pointwise) / sizeof(pointwise[0]); ++i)
    if (has(e->name, pointwise[i])) return K_ELEMENTWISE;
  return K_OTHER;
}

static void time_label(double us, char *out, size_t size) {
  double a = fabs(us);
  if (a >= 1e6) snprintf(out, size, "%.3g s", us / 1e6);
  else if (a >= 1e3) snprintf(out, size, "%.3g ms", us / 1e3);
  else snprintf(out, size, "%.3g us", us);
}

/* The run the window shows: the exec that ran most often, its run n; the
 * span of that run's slices in [*from, *to). 0, or -1 if there is none. */
static int run_window(const tfile_t *t, long n, double *from, double *to) {
  long exec = -1, most = -1;
  for (size_t i = 0; i < t->count; ++i)
    if (t->events[i].exec >= 0 && t->events[i].run > most) most = t->events[i].run, exec = t->events[i].exec;
  *from = INFINITY, *to = -INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    const tevent_t *e = &t->events[i];
    if (e->exec != exec || e->run != n || exec < 0) continue;
    if (e->ts < *from) *from = e->ts;
    if (e->ts + e->dur > *to) *to = e->ts + e->dur;
  }
  return *from < *to ? 0 : -1;
}

int tsvg(FILE *f, const char *title, const tanalysis_t *a, double width) {
  tsvg_options_t o = {.width = width, .from_ms = NAN, .to_ms = NAN, .run = -1};
  return tsvg_window(f, title, a, &o);
}

int tsvg_window(FILE *f, const char *title, const tanalysis_t *a, const tsvg_options_t *o) {
  const tfile_t *t = a->t;
  const double W = o->width >= 400 && o->width <= 20000 ? o->width : 1400, left = 220, right = 20, top = 56,
               lane_h = 20;
  double t0 = INFINITY, t1 = -INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    if (t->events[i].ts < t0) t0 = t->events[i].ts;
    if (t->events[i].ts + t->events[i].dur > t1) t1 = t->events[i].ts + t->events[i].dur;
  }
  if (!t->count) t0 = 0, t1 = 1;
  const double start = t0; /* --from and --to count from the trace's first slice */
  char window[96] = "";
  if (o->run >= 0) {
    if (run_window(t, o->run, &t0, &t1)) return TSVG_NO_SUCH_RUN;
    snprintf(window, sizeof(window), "run %ld, ", o->run);
  } else {
    if (o->from_ms == o->from_ms) t0 = start + o->from_ms * 1e3;
    if (o->to_ms == o->to_ms) t1 = start + o->to_ms * 1e3;
    if (o->from_ms == o->from_ms || o->to_ms == o->to_ms)
      snprintf(window, sizeof(window), "%.3f to %.3f ms of the trace, ", (t0 - start) / 1e3, (t1 - start) / 1e3);
  }
  if (t1 <= t0) t1 = t0 + 1;
  double scale = (W - left - right) / (t1 - t0);
  /* Time per kind within the window: the legend lists every kind drawn.
   * Within a window (a run, --from/--to) only the lanes with a slice in it
   * are drawn: one step of a 16-worker machine used two lanes of 16. */
  double kind_us[KINDS] = {0};
  size_t shown = 0, in_window = 0, lanes = 0, *drawn = malloc((a->nlanes + 1) * sizeof(size_t));
  int windowed = window[0] != 0;
  if (!drawn) return -1;
  for (size_t li = 0; li < a->nlanes && lanes < LANES_DRAWN_MAX; ++li) {
    size_t here = 0;
    for (size_t i = a->lanes[li].first; i < a->lanes[li].first + a->lanes[li].count; ++i) {
      const tevent_t *e = &t->events[i];
      double lo = e->ts > t0 ? e->ts : t0, hi = e->ts + e->dur < t1 ? e->ts + e->dur : t1;
      if (e->ts + e->dur < t0 || e->ts > t1) continue;
      kind_us[kind_of(e)] += hi > lo ? hi - lo : 0;
      here++;
    }
    in_window += here;
    if (here || !windowed) drawn[lanes++] = li;
  }
  for (int k = 0; k < KINDS; ++k) shown += kind_us[k] > 0;
  size_t legend = shown;
  double axis_y = top + (double)lanes * lane_h + 6, legend_y = axis_y + 34;
  double H = legend_y + (double)((legend + 3) / 4) * 18 + 12;
  /* The critical path, to outline. */
  uint8_t *on_path = calloc(t->count + 1, 1);
  tpath_t p;
  int have_path = on_path && a->deps_from && !tcritical_path(a, &p);
  if (have_path) {
    for (size_t i = 0; i < p.n; ++i) on_path[p.ev[i]] = 1;
  }

  fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n");
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' "
             "font-family='sans-serif' font-size='11'>\n", W, H, W, H);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<text x='10' y='18' font-size='14'>");
  xml_text(f, title);
  char wall[32];
  time_label(t1 - t0, wall, sizeof(wall));
  fprintf(f, "</text>\n<text x='10' y='36' fill='#444'>%s%zu slices over %s, %zu lanes", window, in_window, wall,
          a->nlanes);
  if (a->nlanes > lanes) fprintf(f, windowed ? " (the %zu busy in it drawn)" : " (the first %zu drawn)", lanes);
  if (have_path) fprintf(f, "; the trace's critical path outlined in black (%zu slices, %.1f us of work)", p.n, p.work);
  fprintf(f, "</text>\n");

  /* Time axis: 1-2-5 steps, about eight of them, and grid lines. */
  double raw = (t1 - t0) / 8, mag = pow(10, floor(log10(raw))), step = mag;
  if (raw / mag > 5) step = 10 * mag;
  else if (raw / mag > 2) step = 5 * mag;
  else if (raw / mag > 1) step = 2 * mag;
  fprintf(f, "<g stroke='#ddd'>\n");
  for (double x = 0; x <= t1 - t0 + 1e-9 && step > 0; x += step)
    fprintf(f, "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f'/>\n", left + x * scale, top - 4, left + x * scale, axis_y);
  fprintf(f, "</g>\n<g fill='#444' text-anchor='middle'>\n");
  for (double x = 0; x <= t1 - t0 + 1e-9 && step > 0; x += step) {
    char label[32];
    time_label(x, label, sizeof(label));
    fprintf(f, "<text x='%.1f' y='%.0f'>%s</text>\n", left + x * scale, axis_y + 16, label);
  }
  fprintf(f, "</g>\n");

  for (size_t li = 0; li < lanes; ++li) {
    const tlane_t *l = &a->lanes[drawn[li]];
    double y = top + (double)li * lane_h;
    if (li % 2) fprintf(f, "<rect x='0' y='%.0f' width='%.0f' height='%.0f' fill='#f4f4f4'/>\n", y, W, lane_h);
    const char *proc = tfile_process_name(t, l->pid), *th = tfile_thread_name(t, l->pid, l->tid);
    fprintf(f, "<text x='6' y='%.0f'>", y + 14);
    char buf[48];
    if (proc) xml_text(f, proc);
    else fprintf(f, "pid %ld", l->pid);
    fputs(" / ", f);
    if (th) xml_text(f, th);
    else snprintf(buf, sizeof(buf), "tid %ld", l->tid), fputs(buf, f);
    fputs("</text>\n", f);
    double drawn_to = -INFINITY;
    for (size_t i = l->first; i < l->first + l->count; ++i) {
      const tevent_t *e = &t->events[i];
      if (e->ts + e->dur < t0 || e->ts > t1) continue;
      double from = e->ts > t0 ? e->ts : t0, to = e->ts + e->dur < t1 ? e->ts + e->dur : t1;
      double x = left + (from - t0) * scale, w = (to - from) * scale;
      if (w < 1 && x + w <= drawn_to && !on_path[i]) continue; /* lands on what is drawn already */
      if (w < 1) w = 1;
      if (x + w > drawn_to) drawn_to = x + w;
      kind_t kind = kind_of(e);
      double h = kind == K_SPAN ? lane_h / 2 - 2 : lane_h - 4; /* a span is thin: it encloses work */
      /* a white edge keeps neighbours of one colour apart */
      fprintf(f, "<rect x='%.2f' y='%.0f' width='%.2f' height='%.0f' fill='%s'%s><title>", x, y + 2, w, h,
              kinds[kind].fill,
              on_path[i] ? " stroke='black' stroke-width='1.5'" : w >= 3 ? " stroke='white' stroke-width='0.6'" : "");
      xml_text(f, e->name);
      fprintf(f, ": %.2f us at %.2f us", e->dur, e->ts - t0);
      if (e->task >= 0) fprintf(f, ", task %ld of run %ld", e->task, e->run);
      if (e->bytes > 0) fprintf(f, ", %.0f bytes", e->bytes);
      fputs("</title></rect>\n", f);
      if (kind != K_SPAN) label(f, e, kind, x, y, w);
    }
  }

  for (int k = 0, i = 0; k < KINDS; ++k) {
    if (kind_us[k] <= 0) continue;
    double x = 10 + (double)(i % 4) * ((W - 20) / 4), y = legend_y + (double)(i / 4) * 18;
    char total[32];
    time_label(kind_us[k], total, sizeof(total));
    fprintf(f, "<rect x='%.0f' y='%.0f' width='12' height='12' fill='%s'/><text x='%.0f' y='%.0f'>%s (%s)</text>\n", x,
            y, kinds[k].fill, x + 16, y + 10, kinds[k].name, total);
    ++i;
  }
  fprintf(f, "</svg>\n");
  if (have_path) tpath_free(&p);
  free(on_path), free(drawn);
  return ferror(f) ? -1 : 0;
}
