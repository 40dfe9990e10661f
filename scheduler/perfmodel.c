/* Performance models: a process-wide table of (kernel, class, arch) ->
 * running statistics, loaded from and merged into a file. See perfmodel.h. */
#include "scheduler/perfmodel.h"

#include <errno.h>
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

typedef struct stats {
  double n, mean, m2, bytes; /* samples, mean ns, Welford's M2, mean bytes */
} stats_t;

typedef struct model {
  perf_key_t key;
  stats_t all;   /* what estimates use: the file's and this process's */
  stats_t fresh; /* this process's samples, not yet saved */
  stats_t aside; /* outliers in a row, set aside (perfmodel.h) */
  int replaced;  /* a run of outliers replaced the model: saving overwrites the file's */
} model_t;

#ifndef AQ_VERSION_STRING
#define AQ_VERSION_STRING "unknown"
#endif
/* The first line of a models file: its format and who wrote it. */
#define FILE_MAGIC "# aquila performance models"
#define FILE_HEADER FILE_MAGIC " v3 aquila=" AQ_VERSION_STRING

/* What read_file found: a file of ours, none, another version's, or not Aquila's at all. */
enum { FILE_OURS, FILE_NONE, FILE_STALE, FILE_FOREIGN };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static model_t *models;
static size_t nmodels, cap_models;
static int loaded;

void aq_perf_arch(const aq_agent_info_t *info, char *out, size_t size) {
  int n = snprintf(out, size, "%s/%s/%u/%s", info->driver, info->isa[0] ? info->isa : "any", info->compute_units,
                   info->device[0] ? info->device : "unknown");
  /* the file is whitespace-separated */
  for (int i = 0; i < n && (size_t)i < size; ++i)
    if (out[i] == ' ' || out[i] == '\t' || out[i] == '\n') out[i] = '_';
}

uint32_t aq_perf_shape_class(uint64_t work_items, uint64_t bytes) {
  uint32_t w = 0, b = 0;
  while (w < 63 && (1ull << w) < work_items) ++w;
  while (b < 63 && (1ull << b) < bytes) ++b;
  return w << 8 | b;
}

/* Chan et al.'s parallel merge of two running statistics. */
static void merge(stats_t *a, const stats_t *b) {
  double n = a->n + b->n;
  if (b->n <= 0) return;
  if (a->n <= 0) {
    *a = *b;
    return;
  }
  double d = b->mean - a->mean;
  a->m2 += b->m2 + d * d * a->n * b->n / n;
  a->mean += d * b->n / n;
  a->bytes += (b->bytes - a->bytes) * b->n / n;
  a->n = n;
}

static int same(const perf_key_t *a, const perf_key_t *b) {
  return a->shape_class == b->shape_class && !strcmp(a->kernel, b->kernel) && !strcmp(a->arch, b->arch);
}

/* Linear search: a process meets tens of models, not thousands; a hit on
 * the last one found is the common case (graphs repeat kernels). */
static model_t *find(const perf_key_t *k, int create) {
  static size_t last;
  if (last < nmodels && same(&models[last].key, k)) return &models[last];
  for (size_t i = 0; i < nmodels; ++i)
    if (same(&models[i].key, k)) return &models[last = i];
  if (!create) return NULL;
  if (nmodels == cap_models) {
    size_t cap = cap_models ? 2 * cap_models : 64;
    model_t *n = realloc(models, cap * sizeof(*n));
    if (!n) return NULL;
    models = n, cap_models = cap;
  }
  model_t *m = &models[nmodels];
  memset(m, 0, sizeof(*m));
  m->key = *k;
  last = nmodels++;
  return m;
}

const char *aq_perf_path(char *buf, size_t size) {
  const char *dir = aq_setting_text(AQ_SET_PERF_DIR), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (dir && *dir) snprintf(buf, size, "%s/models.tsv", dir);
  else if (xdg && *xdg) snprintf(buf, size, "%s/aquila/models.tsv", xdg);
  else if (home && *home) snprintf(buf, size, "%s/.cache/aquila/models.tsv", home);
  else if (size) buf[0] = 0;
  return buf;
}

/* Reads the file into `into` (all of each line's statistics); a malformed
 * line is skipped: the file is a cache, never a reason to fail. Returns
 * FILE_*; a file of another version or not Aquila's is not read, and is
 * named on stderr once per process. */
static int read_file(const char *path, void (*into)(const perf_key_t *, const stats_t *)) {
  static int warned;
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  if (!f) return FILE_NONE;
  char line[512];
  int state = !fgets(line, sizeof(line), f)                       ? FILE_NONE
              : strncmp(line, FILE_MAGIC, strlen(FILE_MAGIC))     ? FILE_FOREIGN
              : strncmp(line, FILE_HEADER "\n", sizeof(FILE_HEADER)) ? FILE_STALE
                                                                  : FILE_OURS;
  if ((state == FILE_FOREIGN || state == FILE_STALE) && !warned++)
    fprintf(stderr, "aquila: %s %s: ignored, the models are measured again%s\n", path,
            state == FILE_FOREIGN ? "is not an Aquila performance-model file" : "was written by another Aquila version",
            state == FILE_FOREIGN ? " (and kept in memory only: set AQ_PERF_DIR elsewhere)" : "");
  while (state == FILE_OURS && fgets(line, sizeof(line), f)) {
    if (line[0] == '#') continue;
    perf_key_t k;
    memset(&k, 0, sizeof(k));
    stats_t s = {0};
    char kernel[PERF_KERNEL_MAX], arch[PERF_ARCH_MAX];
    unsigned cls;
    if (sscanf(line, "%95s %x %127s %lf %lf %lf %lf", kernel, &cls, arch, &s.n, &s.mean, &s.m2, &s.bytes) != 7)
      continue;
    if (!(s.n >= 1 && s.mean >= 0 && s.m2 >= 0 && s.bytes >= 0 && s.n < 1e15 && s.mean < 1e15 && s.m2 < 1e300 &&
          s.bytes < 1e18))
      continue;
    snprintf(k.kernel, sizeof(k.kernel), "%s", kernel);
    snprintf(k.arch, sizeof(k.arch), "%s", arch);
    k.shape_class = cls;
    into(&k, &s);
  }
  fclose(f);
  return state;
}

static void load_one(const perf_key_t *k, const stats_t *s) {
  model_t *m = find(k, 1);
  if (m) merge(&m->all, s);
}

static void ensure_loaded(void) {
  if (loaded) return;
  loaded = 1;
  char path[1024];
  read_file(aq_perf_path(path, sizeof(path)), load_one);
}

double aq_perf_estimate(const perf_key_t *key, double bytes, double fallback_ns, uint32_t *samples) {
  pthread_mutex_lock(&lock);
  ensure_loaded();
  model_t *m = find(key, 0);
  double est = fallback_ns;
  uint32_t n = 0;
  if (m && m->all.n >= 1) {
    n = (uint32_t)m->all.n;
    if (n < PERF_MIN_SAMPLES && m->all.n * m->all.mean >= (double)PERF_SETTLED_NS) n = PERF_MIN_SAMPLES;
    /* Within a class work grows with the bytes; the bucket bounds the
     * ratio to about 2 either way. */
    double scale = m->all.bytes > 0 && bytes > 0 ? bytes / m->all.bytes : 1.0;
    if (scale < 0.25) scale = 0.25;
    if (scale > 4) scale = 4;
    est = m->all.mean * scale;
  }
  pthread_mutex_unlock(&lock);
  if (samples) *samples = n;
  return est;
}

/* Whether ns is more than PERF_OUTLIER times off mean, either way. */
static int far_from(double mean, double ns) {
  if (mean < 1) mean = 1;
  return ns > mean * PERF_OUTLIER || ns * PERF_OUTLIER < mean;
}

int aq_perf_record(const perf_key_t *key, double bytes, double ns) {
  if (!(ns >= 0) || !isfinite(ns)) return 0;
  stats_t one = {1, ns, 0, bytes};
  pthread_mutex_lock(&lock);
  ensure_loaded();
  model_t *m = find(key, 1);
  int kept = m != NULL;
  if (m && m->all.n >= PERF_MIN_SAMPLES && far_from(m->all.mean, ns)) {
    /* A run of them, alike, is the agent's new normal: they replace it. */
    if (m->aside.n > 0 && far_from(m->aside.mean, ns)) memset(&m->aside, 0, sizeof(m->aside));
    merge(&m->aside, &one);
    kept = 0;
    if (m->aside.n >= PERF_OUTLIER_RUN) {
      m->all = m->fresh = m->aside, m->replaced = 1;
      memset(&m->aside, 0, sizeof(m->aside));
    }
  } else if (m) {
    memset(&m->aside, 0, sizeof(m->aside));
    merge(&m->all, &one), merge(&m->fresh, &one);
  }
  pthread_mutex_unlock(&lock);
  return kept;
}

int aq_perf_mkdirs(char *path) {
  for (char *p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    int bad = mkdir(path, 0755) && errno != EEXIST;
    *p = '/';
    if (bad) return -1;
  }
  return 0;
}

/* The file as it is now, plus this process's fresh samples. */
static model_t *disk;
static size_t ndisk, cap_disk;
static void load_disk(const perf_key_t *k, const stats_t *s) {
  for (size_t i = 0; i < ndisk; ++i)
    if (same(&disk[i].key, k)) {
      merge(&disk[i].all, s);
      return;
    }
  if (ndisk == cap_disk) {
    size_t cap = cap_disk ? 2 * cap_disk : 64;
    model_t *n = realloc(disk, cap * sizeof(*n));
    if (!n) return;
    disk = n, cap_disk = cap;
  }
  memset(&disk[ndisk], 0, sizeof(disk[ndisk]));
  disk[ndisk].key = *k;
  disk[ndisk++].all = *s;
}

/* This process's fresh samples into the file's models (disk). */
static void merge_fresh(void) {
  for (size_t i = 0; i < nmodels; ++i) {
    if (models[i].fresh.n <= 0) continue;
    if (models[i].replaced)
      for (size_t j = 0; j < ndisk; ++j)
        if (same(&disk[j].key, &models[i].key)) memset(&disk[j].all, 0, sizeof(disk[j].all));
    load_disk(&models[i].key, &models[i].fresh);
  }
}

static aq_status_t write_models(const char *path) {
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return aq_error(AQ_ERROR_IO, "cannot write performance models to %s (set AQ_PERF_DIR)", tmp);
  fprintf(f, "%s\n# kernel class arch samples mean_ns m2 mean_bytes\n", FILE_HEADER);
  for (size_t i = 0; i < ndisk; ++i)
    if (disk[i].all.n >= 1)
      fprintf(f, "%s %x %s %.0f %.1f %.1f %.0f\n", disk[i].key.kernel, disk[i].key.shape_class, disk[i].key.arch,
              disk[i].all.n, disk[i].all.mean, disk[i].all.m2, disk[i].all.bytes);
  /* On disk before the rename: a crash leaves the old file or the new one. */
  int bad = fflush(f) || fsync(fileno(f));
  if (fclose(f) || bad || rename(tmp, path)) {
    unlink(tmp);
    return aq_error(AQ_ERROR_IO, "cannot write performance models to %s", path);
  }
  return AQ_OK;
}

aq_status_t aq_perf_save(void) {
  char path[1024], lockpath[1100];
  pthread_mutex_lock(&lock);
  aq_perf_path(path, sizeof(path));
  int fresh = 0;
  for (size_t i = 0; i < nmodels; ++i) fresh |= models[i].fresh.n > 0;
  if (!path[0] || !fresh) {
    pthread_mutex_unlock(&lock);
    return AQ_OK;
  }
  snprintf(lockpath, sizeof(lockpath), "%s.lock", path);
  int fd = aq_perf_mkdirs(lockpath) == 0 ? open(lockpath, O_CREAT | O_RDWR | O_CLOEXEC, 0644) : -1;
  aq_status_t s = fd < 0 ? aq_error(AQ_ERROR_IO, "cannot write performance models to %s (set AQ_PERF_DIR)", path)
                         : AQ_OK;
  /* Another process's save in between: merged, not lost. */
  if (s == AQ_OK && flock(fd, LOCK_EX)) s = aq_error(AQ_ERROR_IO, "cannot lock %s", lockpath);
  ndisk = 0;
  int state = s == AQ_OK ? read_file(path, load_disk) : FILE_NONE;
  if (state == FILE_FOREIGN)
    s = aq_error(AQ_ERROR_IO, "%s is not an Aquila performance-model file: not overwritten", path);
  else if (state == FILE_STALE)
    ndisk = 0; /* another version's models: replaced, not merged */
  if (s == AQ_OK) merge_fresh();
  if (s == AQ_OK) s = write_models(path);
  if (fd >= 0) close(fd); /* and the lock with it */
  if (s == AQ_OK)
    for (size_t i = 0; i < nmodels; ++i) memset(&models[i].fresh, 0, sizeof(models[i].fresh)), models[i].replaced = 0;
  pthread_mutex_unlock(&lock);
  return s;
}

void aq_perf_reset(void) {
  pthread_mutex_lock(&lock);
  free(models), free(disk);
  models = disk = NULL;
  nmodels = cap_models = ndisk = cap_disk = 0;
  loaded = 0;
  pthread_mutex_unlock(&lock);
}
