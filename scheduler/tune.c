/* Auto-tuning's table of choices and its file (tune.h). */
#include "scheduler/tune.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/settings.h"
#include "runtime/status.h"

#ifndef AQ_VERSION_STRING
#define AQ_VERSION_STRING "unknown"
#endif
/* Builds and their speeds change between versions: another version's
 * choices are timed again. */
#define FILE_MAGIC "# aquila tuned builds"
#define FILE_HEADER FILE_MAGIC " v1 aquila=" AQ_VERSION_STRING

typedef struct slot {
  tune_entry_t e;
  int fresh; /* this process's, not yet saved */
} slot_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t *table;
static size_t ntable, cap_table;
static int loaded, warned;

static _Thread_local const char *const *forced;
static _Thread_local uint32_t nforced;

const char *aq_tune_path(char *buf, size_t size) {
  aq_perf_path(buf, size);
  char *slash = strrchr(buf, '/');
  if (!slash || (size_t)(slash - buf) + sizeof("/tuned.tsv") > size) {
    if (size) buf[0] = 0;
    return buf;
  }
  memcpy(slash, "/tuned.tsv", sizeof("/tuned.tsv"));
  return buf;
}

/* "build:ns,build:ns" into b's candidates; 0 if malformed. */
static int parse_candidates(char *text, aq_tuned_build_t *b) {
  char *save = NULL;
  b->candidates = 0;
  for (char *tok = strtok_r(text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *colon = strrchr(tok, ':'), *end;
    if (!colon || colon == tok || b->candidates == AQ_TUNED_CANDIDATES_MAX) return 0;
    *colon = 0;
    double ns = strtod(colon + 1, &end);
    if (*end || !(ns >= 0) || !isfinite(ns) || strlen(tok) >= sizeof(b->candidate[0])) return 0;
    snprintf(b->candidate[b->candidates], sizeof(b->candidate[0]), "%s", tok);
    b->candidate_ns[b->candidates++] = ns;
  }
  return aq_tune_timed(b, b->build); /* the build kept must be one of those timed */
}

int aq_tune_timed(const aq_tuned_build_t *b, const char *build) {
  for (uint32_t i = 0; i < b->candidates; ++i)
    if (!strcmp(b->candidate[i], build)) return 1;
  return 0;
}

/* A line's fields into e; 0 if malformed. */
static int parse_line(const char *line, tune_entry_t *e) {
  char arch[PERF_ARCH_MAX], kernel[64], key[192], build[64], cands[1024], extra[2];
  memset(e, 0, sizeof(*e));
  if (sscanf(line, "%127s %63s %191s %63s %1023s %1s", arch, kernel, key, build, cands, extra) != 5) return 0;
  snprintf(e->arch, sizeof(e->arch), "%s", arch);
  snprintf(e->b.kernel, sizeof(e->b.kernel), "%s", kernel);
  snprintf(e->b.shape, sizeof(e->b.shape), "%s", key);
  snprintf(e->b.build, sizeof(e->b.build), "%s", build);
  return parse_candidates(cands, &e->b);
}

int aq_tune_read(const char *path, void (*into)(const tune_entry_t *, void *), void *user, char *why, size_t size) {
  if (size) why[0] = 0;
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  if (!f) return TUNE_FILE_NONE;
  char line[2048];
  int state = !fgets(line, sizeof(line), f)                        ? TUNE_FILE_FOREIGN /* empty: not ours */
              : strncmp(line, FILE_MAGIC, strlen(FILE_MAGIC))       ? TUNE_FILE_FOREIGN
              : strncmp(line, FILE_HEADER "\n", sizeof(FILE_HEADER)) ? TUNE_FILE_STALE
                                                                   : TUNE_FILE_OURS;
  if (state == TUNE_FILE_FOREIGN)
    snprintf(why, size, "%s is not an Aquila tuned-builds file: ignored, and rewritten once a build is tuned", path);
  else if (state == TUNE_FILE_STALE)
    snprintf(why, size, "%s was written by another Aquila version or format: ignored, its builds are timed again",
             path);
  unsigned lineno = 1, bad = 0, first_bad = 0;
  while (state == TUNE_FILE_OURS && fgets(line, sizeof(line), f)) {
    ++lineno;
    if (line[0] == '#') continue;
    tune_entry_t e;
    if (!strchr(line, '\n') && !feof(f)) { /* a line too long to be ours: skip its rest */
      int c;
      while ((c = fgetc(f)) != EOF && c != '\n') {}
      bad++, first_bad = first_bad ? first_bad : lineno;
      continue;
    }
    if (parse_line(line, &e)) into(&e, user);
    else bad++, first_bad = first_bad ? first_bad : lineno;
  }
  fclose(f);
  if (bad) {
    snprintf(why, size, "%s is corrupt (%u malformed line%s, the first line %u): those ignored, the file rewritten",
             path, bad, bad > 1 ? "s" : "", first_bad);
    state = TUNE_FILE_CORRUPT;
  }
  return state;
}

aq_status_t aq_tune_write(const char *path, const tune_entry_t *entries, size_t n) {
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return aq_error(AQ_ERROR_IO, "cannot write tuned builds to %s (set AQ_PERF_DIR)", tmp);
  fprintf(f, "%s\n# arch kernel shape build candidate:median_ns,...\n", FILE_HEADER);
  for (size_t i = 0; i < n; ++i) {
    const aq_tuned_build_t *b = &entries[i].b;
    fprintf(f, "%s %s %s %s ", entries[i].arch, b->kernel, b->shape, b->build);
    for (uint32_t c = 0; c < b->candidates; ++c) fprintf(f, "%s%s:%.0f", c ? "," : "", b->candidate[c], b->candidate_ns[c]);
    fputc('\n', f);
  }
  int bad = fflush(f) || fsync(fileno(f));
  if (fclose(f) || bad || rename(tmp, path)) {
    unlink(tmp);
    return aq_error(AQ_ERROR_IO, "cannot write tuned builds to %s", path);
  }
  return AQ_OK;
}

static int same(const tune_entry_t *a, const tune_entry_t *b) {
  return !strcmp(a->arch, b->arch) && !strcmp(a->b.kernel, b->b.kernel) && !strcmp(a->b.shape, b->b.shape);
}

/* The slot like e, made (not fresh) if absent; NULL without memory. */
static slot_t *slot_for(slot_t **t, size_t *n, size_t *cap, const tune_entry_t *e) {
  for (size_t i = 0; i < *n; ++i)
    if (same(&(*t)[i].e, e)) return &(*t)[i];
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 32;
    slot_t *m = realloc(*t, c * sizeof(*m));
    if (!m) return NULL;
    *t = m, *cap = c;
  }
  slot_t *s = &(*t)[(*n)++];
  memset(s, 0, sizeof(*s));
  s->e = *e;
  return s;
}

static void load_one(const tune_entry_t *e, void *user) {
  (void)user;
  slot_t *s = slot_for(&table, &ntable, &cap_table, e);
  if (s && !s->fresh) s->e = *e;
}

static void warn(const char *why) {
  if (why[0] && !warned++) fprintf(stderr, "aquila: %s\n", why);
}

static void ensure_loaded(void) {
  if (loaded) return;
  loaded = 1;
  char path[1024], why[1400];
  aq_tune_read(aq_tune_path(path, sizeof(path)), load_one, NULL, why, sizeof(why));
  warn(why);
}

int aq_tune_find(const char *arch, const char *kernel, const char *key, tune_entry_t *out) {
  tune_entry_t like;
  memset(&like, 0, sizeof(like));
  snprintf(like.arch, sizeof(like.arch), "%s", arch);
  snprintf(like.b.kernel, sizeof(like.b.kernel), "%s", kernel);
  snprintf(like.b.shape, sizeof(like.b.shape), "%s", key);
  int found = 0;
  pthread_mutex_lock(&lock);
  ensure_loaded();
  for (size_t i = 0; i < ntable && !found; ++i)
    if (same(&table[i].e, &like)) {
      found = 1;
      if (out) *out = table[i].e;
    }
  pthread_mutex_unlock(&lock);
  return found;
}

void aq_tune_put(const tune_entry_t *e) {
  pthread_mutex_lock(&lock);
  ensure_loaded();
  slot_t *s = slot_for(&table, &ntable, &cap_table, e);
  if (s) s->e = *e, s->fresh = e->b.candidates > 0; /* a failure's: this process's alone */
  pthread_mutex_unlock(&lock);
}

size_t aq_tune_list(const char *arch, aq_tuned_build_t *out, size_t cap) {
  size_t n = 0;
  pthread_mutex_lock(&lock);
  ensure_loaded();
  for (size_t i = 0; i < ntable; ++i)
    if (!strcmp(table[i].e.arch, arch) && table[i].e.b.candidates) {
      if (n < cap) out[n] = table[i].e.b;
      n++;
    }
  pthread_mutex_unlock(&lock);
  return n;
}

/* The file's choices, then this process's over them. */
typedef struct disk {
  slot_t *t;
  size_t n, cap;
} disk_t;
static void load_disk(const tune_entry_t *e, void *user) {
  disk_t *d = user;
  slot_t *s = slot_for(&d->t, &d->n, &d->cap, e);
  if (s) s->e = *e;
}

aq_status_t aq_tune_save(void) {
  char path[1024], lockpath[1100], why[1400];
  pthread_mutex_lock(&lock);
  aq_tune_path(path, sizeof(path));
  int fresh = 0;
  for (size_t i = 0; i < ntable; ++i) fresh |= table[i].fresh;
  if (!path[0] || !fresh) {
    pthread_mutex_unlock(&lock);
    return AQ_OK;
  }
  snprintf(lockpath, sizeof(lockpath), "%s.lock", path);
  int fd = aq_perf_mkdirs(lockpath) == 0 ? open(lockpath, O_CREAT | O_RDWR | O_CLOEXEC, 0644) : -1;
  aq_status_t s = fd < 0 ? aq_error(AQ_ERROR_IO, "cannot write tuned builds to %s (set AQ_PERF_DIR)", path) : AQ_OK;
  if (s == AQ_OK && flock(fd, LOCK_EX)) s = aq_error(AQ_ERROR_IO, "cannot lock %s", lockpath);
  disk_t d = {0};
  if (s == AQ_OK) aq_tune_read(path, load_disk, &d, why, sizeof(why)); /* a bad file's good lines stay */
  for (size_t i = 0; s == AQ_OK && i < ntable; ++i) {
    slot_t *o = table[i].fresh ? slot_for(&d.t, &d.n, &d.cap, &table[i].e) : NULL;
    if (o) o->e = table[i].e;
  }
  tune_entry_t *all = s == AQ_OK ? malloc((d.n ? d.n : 1) * sizeof(*all)) : NULL;
  if (s == AQ_OK && !all) s = aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to save tuned builds");
  for (size_t i = 0; all && i < d.n; ++i) all[i] = d.t[i].e;
  if (s == AQ_OK) s = aq_tune_write(path, all, d.n);
  free(all), free(d.t);
  if (fd >= 0) close(fd); /* and the lock with it */
  if (s == AQ_OK)
    for (size_t i = 0; i < ntable; ++i) table[i].fresh = 0;
  pthread_mutex_unlock(&lock);
  return s;
}

void aq_tune_reset(void) {
  pthread_mutex_lock(&lock);
  free(table);
  table = NULL;
  ntable = cap_table = 0;
  loaded = warned = 0;
  pthread_mutex_unlock(&lock);
}

int aq_tune_on(void) { return aq_setting_u64(AQ_SET_TUNE) != 0; }

void aq_tune_force(const char *const *builds, uint32_t n) { forced = builds, nforced = builds ? n : 0; }
int aq_tune_forcing(void) { return forced != NULL; }

const char *aq_tune_lookup(const oplib_t *lib, const char *arch, const char *kernel, const void *kernarg,
                           tune_entry_t *out) {
  const char *names[AQ_TUNED_CANDIDATES_MAX];
  uint32_t n = aq_oplib_builds(lib, AQ_AGENT_KIND_GPU, kernel, kernarg, names, AQ_TUNED_CANDIDATES_MAX);
  char key[192];
  if (n < 2 || !aq_oplib_tune_key(lib, AQ_AGENT_KIND_GPU, kernel, kernarg, key, sizeof(key)) ||
      !aq_tune_find(arch, kernel, key, out))
    return NULL;
  for (uint32_t i = 0; i < n; ++i)
    if (!strcmp(names[i], out->b.build)) return names[i];
  return NULL; /* a build the library no longer lists for this shape */
}

const char *aq_tune_choice(const oplib_t *lib, const char *arch, uint32_t t, const char *kernel, const void *kernarg) {
  if (forced) return t < nforced ? forced[t] : NULL;
  tune_entry_t e;
  return aq_tune_on() ? aq_tune_lookup(lib, arch, kernel, kernarg, &e) : NULL;
}
