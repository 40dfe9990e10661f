/* aq-trace svg: a timeline a browser opens. One lane per queue (process /
 * thread), a colour per kernel name with a legend of the largest, a time
 * axis, a tooltip on every slice, the critical path outlined. Slices
 * narrower than a pixel that would land on one already drawn are merged
 * into it, so a long trace stays a picture of bounded size. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

enum { LANES_DRAWN_MAX = 512, LEGEND_MAX = 12 };

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

static unsigned hash(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* A colour per name: hue from its hash, kept mid-light so labels read. */
static void colour(const char *name, char *out, size_t size) {
  unsigned h = hash(name);
  snprintf(out, size, "hsl(%u,%u%%,%u%%)", h % 360, 45 + (h >> 9) % 30, 48 + (h >> 17) % 16);
}

static void time_label(double us, char *out, size_t size) {
  double a = fabs(us);
  if (a >= 1e6) snprintf(out, size, "%g s", us / 1e6);
  else if (a >= 1e3) snprintf(out, size, "%g ms", us / 1e3);
  else snprintf(out, size, "%g us", us);
}

int tsvg(FILE *f, const char *title, const tanalysis_t *a, double width) {
  const tfile_t *t = a->t;
  const double W = width >= 400 && width <= 20000 ? width : 1400, left = 220, right = 20, top = 56, lane_h = 20;
  double t0 = INFINITY, t1 = -INFINITY;
  for (size_t i = 0; i < t->count; ++i) {
    if (t->events[i].ts < t0) t0 = t->events[i].ts;
    if (t->events[i].ts + t->events[i].dur > t1) t1 = t->events[i].ts + t->events[i].dur;
  }
  if (!t->count) t0 = 0, t1 = 1;
  if (t1 <= t0) t1 = t0 + 1;
  double scale = (W - left - right) / (t1 - t0);
  size_t lanes = a->nlanes < LANES_DRAWN_MAX ? a->nlanes : LANES_DRAWN_MAX;
  size_t nk = 0;
  tkstat_t *k = tkernel_stats(t, &nk);
  size_t legend = nk < LEGEND_MAX ? nk : LEGEND_MAX;
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
  fprintf(f, "</text>\n<text x='10' y='36' fill='#444'>%zu slices over %s, %zu lanes", t->count, wall, a->nlanes);
  if (a->nlanes > lanes) fprintf(f, " (the first %zu drawn)", lanes);
  if (have_path) fprintf(f, "; critical path outlined in black (%zu slices, %.1f us of work)", p.n, p.work);
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
    const tlane_t *l = &a->lanes[li];
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
      double x = left + (e->ts - t0) * scale, w = e->dur * scale;
      if (w < 1 && x + w <= drawn_to && !on_path[i]) continue; /* lands on what is drawn already */
      if (w < 1) w = 1;
      if (x + w > drawn_to) drawn_to = x + w;
      char fill[40];
      colour(e->name, fill, sizeof(fill));
      fprintf(f, "<rect x='%.2f' y='%.0f' width='%.2f' height='%.0f' fill='%s'%s><title>", x, y + 2, w, lane_h - 4, fill,
              on_path[i] ? " stroke='black' stroke-width='1.5'" : "");
      xml_text(f, e->name);
      fprintf(f, ": %.2f us at %.2f us", e->dur, e->ts - t0);
      if (e->task >= 0) fprintf(f, ", task %ld of run %ld", e->task, e->run);
      if (e->bytes > 0) fprintf(f, ", %.0f bytes", e->bytes);
      fputs("</title></rect>\n", f);
    }
  }

  for (size_t i = 0; i < legend; ++i) {
    double x = 10 + (double)(i % 4) * ((W - 20) / 4), y = legend_y + (double)(i / 4) * 18;
    char fill[40];
    colour(k[i].name, fill, sizeof(fill));
    fprintf(f, "<rect x='%.0f' y='%.0f' width='12' height='12' fill='%s'/><text x='%.0f' y='%.0f'>", x, y, fill, x + 16,
            y + 10);
    xml_text(f, k[i].name);
    fprintf(f, " (%.1f us)</text>\n", k[i].total);
  }
  fprintf(f, "</svg>\n");
  if (have_path) tpath_free(&p);
  free(on_path);
  free(k);
  return ferror(f) ? -1 : 0;
}
