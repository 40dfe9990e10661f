/* Checkpoints: an exec's trained state to a file and back (graph.h gives
 * the format). Saving streams each tensor through aq_exec_read (device
 * memory too) into a temporary file beside the target, synced, renamed over
 * it, and the directory synced: a crash leaves the old checkpoint or the
 * new one. Loading reads and checks the whole file into memory first, so
 * that a refusal changes nothing, then writes each tensor through
 * aq_exec_write. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scheduler/exec_internal.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints are little-endian: this host would need byte swapping here"
#endif

#define CKPT_MAGIC "AQCKPT\n\032" /* the newline and ^Z catch text-mode copies */
enum { CKPT_VERSION = 1, CRC_BYTES = 4, NAME_MAX_BYTES = sizeof(((tensor_t *)0)->name) - 1 };

typedef struct header {
  char magic[8];
  uint32_t version, tensors;
  uint64_t runs, user_bytes, file_bytes;
} header_t;
_Static_assert(sizeof(header_t) == 40, "the header is 40 bytes on disk");

/* ---- CRC-32 (IEEE 802.3, zlib's crc32), eight bytes a step -------------- */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int t = 1; t < 8; ++t) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = data;
  crc = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4), memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
          crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
          crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
  }
  while (n--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

/* ---- what a checkpoint holds --------------------------------------------- */
static int kept(const tensor_t *t) { return t->role == AQ_ROLE_PARAMETER || t->role == AQ_ROLE_STATE; }

static uint64_t record_bytes(const tensor_t *t) {
  return 4 + strlen(t->name) + 12 + 8ull * t->rank + 8 + t->bytes;
}

static const char *dtype_name(uint32_t d) { return d == AQ_DTYPE_F32 ? "f32" : d == AQ_DTYPE_I32 ? "i32" : "?"; }

/* "f32 [784, 64]" */
static void describe(char *out, size_t size, uint32_t dtype, uint32_t rank, const int64_t *dims) {
  int n = snprintf(out, size, "%s [", dtype_name(dtype));
  for (uint32_t i = 0; i < rank && n > 0 && (size_t)n < size; ++i)
    n += snprintf(out + n, size - (size_t)n, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, "]");
}

/* ---- save ---------------------------------------------------------------- */
typedef struct writer {
  FILE *f;
  uint32_t crc;
  int bad;
} writer_t;

static void put(writer_t *w, const void *p, size_t n) {
  w->crc = crc32_update(w->crc, p, n);
  if (fwrite(p, 1, n, w->f) != n) w->bad = 1;
}

static aq_status_t put_tensor(aq_exec_t *e, writer_t *w, uint32_t id, void *scratch) {
  const tensor_t *t = &e->source->tensors[id];
  uint32_t len = (uint32_t)strlen(t->name), fields[3] = {t->dtype, t->role, t->rank};
  uint64_t bytes = t->bytes;
  AQ_RETURN_IF_ERROR(aq_exec_read(e, (aq_tensor_t){id}, scratch, t->bytes));
  put(w, &len, 4), put(w, t->name, len), put(w, fields, sizeof(fields));
  put(w, t->dims, 8 * (size_t)t->rank), put(w, &bytes, 8), put(w, scratch, t->bytes);
  return AQ_OK;
}

static aq_status_t put_all(aq_exec_t *e, writer_t *w, const header_t *h, const void *user) {
  const aq_graph_t *g = e->source;
  size_t most = 0;
  for (uint32_t x = 1; x < g->ntensors; ++x)
    if (kept(&g->tensors[x]) && g->tensors[x].bytes > most) most = g->tensors[x].bytes;
  void *scratch = malloc(most ? most : 1);
  if (!scratch) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory for a %zu-byte tensor to save", most);
  put(w, h, sizeof(*h));
  aq_status_t s = AQ_OK;
  for (uint32_t x = 1; s == AQ_OK && x < g->ntensors; ++x)
    if (kept(&g->tensors[x])) s = put_tensor(e, w, x, scratch);
  free(scratch);
  if (s == AQ_OK && h->user_bytes) put(w, user, h->user_bytes);
  uint32_t crc = w->crc;
  if (s == AQ_OK && fwrite(&crc, 1, CRC_BYTES, w->f) != CRC_BYTES) w->bad = 1;
  return s;
}

/* The directory that holds path's name ("." or "/" where nothing else does); returns the name. */
static const char *split_path(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, size, ".");
  else snprintf(dir, size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  return slash ? slash + 1 : path;
}

/* The rename is durable once the directory that holds the name is synced. */
static aq_status_t sync_dir(const char *path) {
  char dir[PATH_MAX];
  split_path(path, dir, sizeof(dir));
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return aq_error(AQ_ERROR_IO, "checkpoint %s: cannot open its directory %s: %s", path, dir, strerror(errno));
  int bad = fsync(fd) && errno != EINVAL; /* some file systems cannot sync a directory */
  close(fd);
  return bad ? aq_error(AQ_ERROR_IO, "checkpoint %s: cannot sync its directory %s", path, dir) : AQ_OK;
}

/* PATH.tmp.PID files of savers killed mid-write (their process is gone):
 * removed, so a run killed again and again does not fill its disk. */
static void remove_stale_temps(const char *path) {
  char dir[PATH_MAX], prefix[NAME_MAX + 8];
  int n = snprintf(prefix, sizeof(prefix), "%s.tmp.", split_path(path, dir, sizeof(dir)));
  DIR *d = opendir(dir);
  if (!d || n <= 0 || (size_t)n >= sizeof(prefix)) {
    if (d) closedir(d);
    return;
  }
  for (struct dirent *de; (de = readdir(d));) {
    char *end;
    if (strncmp(de->d_name, prefix, (size_t)n)) continue;
    long pid = strtol(de->d_name + n, &end, 10);
    if (*end || pid <= 0 || pid == getpid() || !(kill((pid_t)pid, 0) && errno == ESRCH)) continue;
    char stale[PATH_MAX];
    if (snprintf(stale, sizeof(stale), "%s/%s", dir, de->d_name) < (int)sizeof(stale)) unlink(stale);
  }
  closedir(d);
}

AQ_API aq_status_t aq_exec_save_with(aq_exec_t *e, const char *path, const void *user, size_t user_size) {
  if (!e || !path || !*path) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_save: exec and path are required");
  if (user_size && !user) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_save: user data of %zu bytes is NULL", user_size);
  if (!aq_exec_finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_save: a run is in flight; wait for it first");
  header_t h = {.magic = CKPT_MAGIC, .version = CKPT_VERSION, .runs = e->runs, .user_bytes = user_size};
  h.file_bytes = sizeof(h) + user_size + CRC_BYTES;
  for (uint32_t x = 1; x < e->source->ntensors; ++x)
    if (kept(&e->source->tensors[x])) h.tensors++, h.file_bytes += record_bytes(&e->source->tensors[x]);
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_save: path %s is too long", path);
  remove_stale_temps(path);
  writer_t w = {.f = fopen(tmp, "wb")};
  if (!w.f) return aq_error(AQ_ERROR_IO, "cannot write checkpoint %s: %s", tmp, strerror(errno));
  aq_status_t s = put_all(e, &w, &h, user);
  int bad = w.bad || fflush(w.f) != 0 || fsync(fileno(w.f)) != 0;
  int err = errno;
  if (fclose(w.f) || bad) {
    if (s == AQ_OK) s = aq_error(AQ_ERROR_IO, "writing checkpoint %s failed: %s", tmp, strerror(err));
  } else if (s == AQ_OK && rename(tmp, path)) {
    s = aq_error(AQ_ERROR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  }
  if (s != AQ_OK) {
    unlink(tmp);
    return s;
  }
  return sync_dir(path);
}

AQ_API aq_status_t aq_exec_save(aq_exec_t *e, const char *path) { return aq_exec_save_with(e, path, NULL, 0); }

/* ---- load: the file whole, checked, then matched to the exec ------------- */
static aq_status_t read_whole(const char *path, uint8_t **out, size_t *out_size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return errno == ENOENT ? aq_error(AQ_ERROR_NOT_FOUND, "checkpoint %s does not exist", path)
                           : aq_error(AQ_ERROR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return aq_error(AQ_ERROR_IO, "checkpoint %s is not a regular file", path);
  }
  size_t size = (size_t)st.st_size, got = 0;
  uint8_t *buf = malloc(size ? size : 1);
  while (buf && got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (!buf) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to read checkpoint %s (%zu bytes)", path, size);
  if (got != size) {
    free(buf);
    return aq_error(AQ_ERROR_IO, "cannot read checkpoint %s: %zu of %zu bytes read", path, got, size);
  }
  *out = buf, *out_size = size;
  return AQ_OK;
}

/* The file's own consistency: ours, this version, whole, unchanged. */
static aq_status_t check_file(const char *path, const uint8_t *buf, size_t size, header_t *h) {
  if (size < 8 || memcmp(buf, CKPT_MAGIC, 8))
    return aq_error(AQ_ERROR_IO, "%s is not an Aquila checkpoint (its first bytes are not the magic \"AQCKPT\")", path);
  if (size < sizeof(*h) + CRC_BYTES)
    return aq_error(AQ_ERROR_IO, "checkpoint %s is truncated: %zu bytes, less than its header", path, size);
  memcpy(h, buf, sizeof(*h));
  if (h->version != CKPT_VERSION)
    return aq_error(AQ_ERROR_INCOMPATIBLE, "checkpoint %s is format version %u; this Aquila reads version %d", path,
                    h->version, CKPT_VERSION);
  if (h->file_bytes != size)
    return aq_error(AQ_ERROR_IO, "checkpoint %s is %s: %zu bytes, its header says %llu", path,
                    size < h->file_bytes ? "truncated" : "longer than written", size,
                    (unsigned long long)h->file_bytes);
  uint32_t stored, computed = crc32_update(0, buf, size - CRC_BYTES);
  memcpy(&stored, buf + size - CRC_BYTES, CRC_BYTES);
  if (stored != computed)
    return aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: CRC-32 %08x, the file says %08x", path, computed, stored);
  if (h->user_bytes > size - sizeof(*h) - CRC_BYTES)
    return aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: %llu bytes of user data in a %zu-byte file", path,
                    (unsigned long long)h->user_bytes, size);
  return AQ_OK;
}

typedef struct record {
  char name[NAME_MAX_BYTES + 1];
  uint32_t dtype, role, rank, id;
  int64_t dims[AQ_MAX_RANK];
  uint64_t bytes;
  const uint8_t *data;
} record_t;

typedef struct cursor {
  const uint8_t *p, *end;
} cursor_t;

static int take(cursor_t *c, void *dst, size_t n) {
  if ((size_t)(c->end - c->p) < n) return 0;
  if (dst) memcpy(dst, c->p, n);
  c->p += n;
  return 1;
}

static aq_status_t parse_record(const char *path, cursor_t *c, uint32_t k, record_t *r) {
  uint32_t len = 0, fields[3];
  int ok = take(c, &len, 4) && len > 0 && len <= NAME_MAX_BYTES && take(c, r->name, len);
  r->name[ok ? len : 0] = '\0';
  ok = ok && take(c, fields, sizeof(fields)) && fields[2] <= AQ_MAX_RANK;
  if (ok) r->dtype = fields[0], r->role = fields[1], r->rank = fields[2];
  ok = ok && take(c, r->dims, 8 * (size_t)r->rank) && take(c, &r->bytes, 8);
  r->data = c->p;
  ok = ok && take(c, NULL, r->bytes);
  return ok ? AQ_OK : aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: tensor record %u is malformed", path, k);
}

/* A graph tensor the checkpoint restores: by name, among the kept ones. */
static aq_status_t match_record(aq_exec_t *e, const char *path, record_t *r, uint8_t *seen) {
  const aq_graph_t *g = e->source;
  uint32_t id = 1;
  while (id < g->ntensors && strcmp(g->tensors[id].name, r->name)) ++id;
  if (id == g->ntensors || !kept(&g->tensors[id]))
    return aq_error(AQ_ERROR_INCOMPATIBLE, "checkpoint %s holds tensor '%s', which is not a %s of the exec's graph",
                    path, r->name, id == g->ntensors ? "tensor" : "parameter or state tensor");
  const tensor_t *t = &g->tensors[id];
  int same = r->dtype == (uint32_t)t->dtype && r->rank == t->rank && r->bytes == t->bytes;
  for (uint32_t i = 0; same && i < r->rank; ++i) same = r->dims[i] == t->dims[i];
  if (!same) {
    char want[96], got[96];
    describe(want, sizeof(want), t->dtype, t->rank, t->dims);
    describe(got, sizeof(got), r->dtype, r->rank, r->dims);
    return aq_error(AQ_ERROR_INCOMPATIBLE, "checkpoint %s holds tensor '%s' as %s; the exec's graph has %s", path,
                    r->name, got, want);
  }
  if (seen[id]++) return aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: tensor '%s' appears twice", path, r->name);
  r->id = id;
  return AQ_OK;
}

static aq_status_t match_all(aq_exec_t *e, const char *path, const uint8_t *buf, const header_t *h, record_t *recs) {
  const aq_graph_t *g = e->source;
  uint8_t *seen = calloc(g->ntensors, 1);
  if (!seen) return aq_error(AQ_ERROR_OUT_OF_MEMORY, "no memory to check checkpoint %s", path);
  cursor_t c = {buf + sizeof(*h), buf + h->file_bytes - CRC_BYTES - h->user_bytes};
  aq_status_t s = AQ_OK;
  for (uint32_t k = 0; s == AQ_OK && k < h->tensors; ++k) {
    s = parse_record(path, &c, k, &recs[k]);
    if (s == AQ_OK) s = match_record(e, path, &recs[k], seen);
  }
  if (s == AQ_OK && c.p != c.end)
    s = aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: %zu bytes between its tensors and its user data", path,
                 (size_t)(c.end - c.p));
  for (uint32_t x = 1; s == AQ_OK && x < g->ntensors; ++x)
    if (kept(&g->tensors[x]) && !seen[x])
      s = aq_error(AQ_ERROR_INCOMPATIBLE, "checkpoint %s lacks tensor '%s' of the exec's graph", path,
                   g->tensors[x].name);
  free(seen);
  return s;
}

static aq_status_t read_checked(const char *path, uint8_t **buf, header_t *h) {
  size_t size = 0;
  AQ_RETURN_IF_ERROR(read_whole(path, buf, &size));
  aq_status_t s = check_file(path, *buf, size, h);
  if (s != AQ_OK) free(*buf);
  return s;
}

AQ_API aq_status_t aq_exec_load(aq_exec_t *e, const char *path) {
  if (!e || !path) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_exec_load: exec and path are required");
  if (!aq_exec_finished(e)) return aq_error(AQ_ERROR_BUSY, "aq_exec_load: a run is in flight; wait for it first");
  uint8_t *buf;
  header_t h;
  AQ_RETURN_IF_ERROR(read_checked(path, &buf, &h));
  /* Every record is at least 25 bytes: the count cannot ask for more records than the file holds. */
  record_t *recs = h.tensors <= h.file_bytes / 25 ? calloc(h.tensors ? h.tensors : 1, sizeof(*recs)) : NULL;
  aq_status_t s = recs ? match_all(e, path, buf, &h, recs)
                       : aq_error(AQ_ERROR_IO, "checkpoint %s is corrupt: %u tensors in %llu bytes", path, h.tensors,
                                  (unsigned long long)h.file_bytes);
  /* Everything checked: only a failing copy into device memory can stop it now. */
  for (uint32_t k = 0; s == AQ_OK && k < h.tensors; ++k)
    s = aq_exec_write(e, (aq_tensor_t){recs[k].id}, recs[k].data, recs[k].bytes);
  if (s == AQ_OK) e->runs = h.runs;
  free(recs), free(buf);
  return s;
}

AQ_API aq_status_t aq_checkpoint_user_data(const char *path, void *dst, size_t room, size_t *out_size) {
  if (!path) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_checkpoint_user_data: path is required");
  uint8_t *buf;
  header_t h;
  AQ_RETURN_IF_ERROR(read_checked(path, &buf, &h));
  aq_status_t s = AQ_OK;
  if (dst && room < h.user_bytes)
    s = aq_error(AQ_ERROR_INVALID_ARGUMENT, "checkpoint %s holds %llu bytes of user data; room for %zu given", path,
                 (unsigned long long)h.user_bytes, room);
  else if (dst)
    memcpy(dst, buf + h.file_bytes - CRC_BYTES - h.user_bytes, h.user_bytes);
  if (s == AQ_OK && out_size) *out_size = h.user_bytes;
  free(buf);
  return s;
}
