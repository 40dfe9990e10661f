/* The settings table (settings.h): reading, checking and the values in force. */
#include "runtime/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/status.h"

typedef struct setting_def {
  const char *name;
  aq_setting_type_t type;
  const char *fallback;
  uint64_t min, max;
  const char *values;
  const char *help;
} setting_def_t;

static const setting_def_t defs[AQ_SET_COUNT] = {
#define AQ_SETTING_DEF_(id, name, type, fallback, min, max, values, help) \
  {name, AQ_SETTING_##type, fallback, min, max, values, help},
    AQ_SETTINGS_LIST(AQ_SETTING_DEF_)
#undef AQ_SETTING_DEF_
};

enum { TEXT_MAX = 1024 };

typedef struct values {
  char text[AQ_SET_COUNT][TEXT_MAX];
  uint64_t num[AQ_SET_COUNT];
  const char *source[AQ_SET_COUNT];
  aq_kernel_settings_t kernel;
} values_t;

static values_t current = {.source = {0}};
static int loaded;

/* "2G", "512M", "4096": bytes, or 0 if it is no size. */
static uint64_t parse_size(const char *s, size_t len) {
  if (!len || len > 24 || s[0] < '0' || s[0] > '9') return 0;
  char buf[32];
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10, end++; break;
    case 'M': case 'm': shift = 20, end++; break;
    case 'G': case 'g': shift = 30, end++; break;
    case 'T': case 't': shift = 40, end++; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v == 0 || v > (UINT64_MAX >> shift)) return 0;
  return (uint64_t)v << shift;
}

/* The budget `list` gives agent `name` (0: none); with name NULL, whether
 * the whole list is well formed (1) or not (0). */
static uint64_t limit_in(const char *list, const char *name, int *well_formed) {
  uint64_t all = 0, mine = 0;
  *well_formed = 1;
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    uint64_t v = eq ? parse_size(eq + 1, len - (size_t)(eq + 1 - p)) : parse_size(p, len);
    if (!v || (eq && eq == p)) *well_formed = 0;
    else if (!eq) all = v;
    else if (name && strlen(name) == (size_t)(eq - p) && !memcmp(p, name, (size_t)(eq - p))) mine = v;
    p += len + (p[len] == ',');
  }
  return mine ? mine : all;
}

uint64_t aq_settings_memory_limit(const char *name) {
  int well_formed;
  return limit_in(current.text[AQ_SET_MEMORY_LIMIT], name, &well_formed);
}

/* A whole decimal number, digits only: no sign, space or wrap-around. */
static int parse_uint(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (!*s) return 0;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return 0;
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 1;
}

/* The index of `s` among "a|b|c", or -1. */
static int enum_index(const char *values, const char *s) {
  int i = 0;
  for (const char *p = values; *p; ++i) {
    size_t len = strcspn(p, "|");
    if (strlen(s) == len && !memcmp(p, s, len)) return i;
    p += len + (p[len] == '|');
  }
  return -1;
}

static int drivers_ok(const char *s) {
  if (!strcmp(s, "all")) return 1;
  for (const char *p = s;;) {
    size_t len = strcspn(p, ",");
    if (!((len == 3 && !memcmp(p, "cpu", 3)) || (len == 4 && !memcmp(p, "cuda", 4)) ||
          (len == 4 && !memcmp(p, "rocr", 4))))
      return 0;
    if (!p[len]) return 1;
    p += len + 1;
  }
}

static int cpu_agents_ok(const char *s) {
  uint64_t n;
  return !strcmp(s, "numa") || !strcmp(s, "package") || !strcmp(s, "machine") ||
         (parse_uint(s, &n) && n > 0 && n <= 4096);
}

static aq_status_t refuse(const setting_def_t *d, const char *v, const char *expected) {
  return aq_error(AQ_ERROR_INVALID_ARGUMENT, "%s='%s': expected %s (%s)", d->name, v, expected, d->help);
}

/* Checks `v` against setting i's type and stores it in `into`. */
static aq_status_t check(int i, const char *v, values_t *into) {
  const setting_def_t *d = &defs[i];
  char expected[160];
  uint64_t n = 0;
  int well_formed, k;
  switch (d->type) {
    case AQ_SETTING_BOOL:
      if (strcmp(v, "0") && strcmp(v, "1")) return refuse(d, v, "0 or 1");
      n = v[0] == '1';
      break;
    case AQ_SETTING_UINT:
      if (!parse_uint(v, &n) || n < d->min || n > d->max) {
        snprintf(expected, sizeof(expected), "a whole number in [%llu, %llu]", (unsigned long long)d->min,
                 (unsigned long long)d->max);
        return refuse(d, v, expected);
      }
      break;
    case AQ_SETTING_SIZE:
      limit_in(v, NULL, &well_formed);
      if (!well_formed) return refuse(d, v, "a size (2G, 512M, 4096) or agent=size,... such as cpu0=2G,cuda0=40G");
      break;
    case AQ_SETTING_ENUM:
      if ((k = enum_index(d->values, v)) < 0) {
        snprintf(expected, sizeof(expected), "one of %s", d->values);
        return refuse(d, v, expected);
      }
      n = (uint64_t)k;
      break;
    case AQ_SETTING_TEXT:
      if (d->values && !strcmp(d->values, "agents") && !drivers_ok(v))
        return refuse(d, v, "all or a comma-separated list of cpu, cuda, rocr");
      if (d->values && !strcmp(d->values, "cpu-agents") && !cpu_agents_ok(v))
        return refuse(d, v, "numa, package, machine or a count");
      break;
    case AQ_SETTING_PATH:
      break;
  }
  if (strlen(v) >= TEXT_MAX) return refuse(d, "...", "at most 1023 characters");
  snprintf(into->text[i], TEXT_MAX, "%s", v);
  into->num[i] = n;
  return AQ_OK;
}

/* The value an aq_init option gives setting i, or NULL if none. */
static const char *option_of(const aq_init_options_t *o, int i, char *buf, size_t size) {
  uint64_t n = 0;
  switch (i) {
    case AQ_SET_AGENTS: return o->drivers;
    case AQ_SET_CPU_AGENTS: return o->cpu_agents;
    case AQ_SET_MEMORY_LIMIT: return o->memory_limit;
    case AQ_SET_CPU_WORKERS: n = o->cpu_workers; break;
    case AQ_SET_SPIN_US: n = o->spin_us; break;
    case AQ_SET_GPU_SPIN_US: n = o->gpu_spin_us; break;
    case AQ_SET_MAX_SIGNALS: n = o->max_signals; break;
    case AQ_SET_SHUTDOWN_TIMEOUT_MS: n = o->shutdown_timeout_ms; break;
    default: return NULL;
  }
  if (!n) return NULL; /* zero means the default */
  snprintf(buf, size, "%llu", (unsigned long long)n);
  return buf;
}

aq_status_t aq_settings_load(const aq_init_options_t *o) {
  static values_t next; /* under aq_init's lock */
  aq_init_options_t none = {0};
  if (!o) o = &none;
  for (int i = 0; i < AQ_SET_COUNT; ++i) {
    char buf[32];
    const char *opt = option_of(o, i, buf, sizeof(buf)), *env = getenv(defs[i].name);
    const char *v = opt ? opt : env && *env ? env : defs[i].fallback;
    next.source[i] = opt ? "options" : env && *env ? "environment" : "default";
    aq_status_t s = check(i, v, &next);
    if (s != AQ_OK) return s;
  }
  next.kernel = (aq_kernel_settings_t){.cpu_isa = (uint32_t)next.num[AQ_SET_CPU_ISA],
                                       .conv_algo = (uint32_t)next.num[AQ_SET_CONV_ALGO],
                                       .gemm_skip_zeros = (uint32_t)next.num[AQ_SET_GEMM_SKIP_ZEROS]};
  current = next;
  loaded = 1;
  return AQ_OK;
}

uint64_t aq_setting_u64(aq_setting_id_t id) { return current.num[id]; }
const char *aq_setting_text(aq_setting_id_t id) { return current.text[id]; }
const char *aq_setting_name(aq_setting_id_t id) { return defs[id].name; }
const aq_kernel_settings_t *aq_kernel_settings(void) { return &current.kernel; }

AQ_API aq_status_t aq_settings(aq_setting_t *out, size_t capacity, size_t *count) {
  if (!count) return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_settings: count is NULL");
  if (capacity && !out)
    return aq_error(AQ_ERROR_INVALID_ARGUMENT, "aq_settings: settings is NULL with capacity %zu", capacity);
  if (!loaded || !aq_runtime_ready()) return aq_error(AQ_ERROR_NOT_INITIALIZED, "aq_init has not been called");
  for (size_t i = 0; i < AQ_SET_COUNT && i < capacity; ++i) {
    out[i] = (aq_setting_t){.name = defs[i].name, .source = current.source[i], .help = defs[i].help};
    snprintf(out[i].value, sizeof(out[i].value), "%s", current.text[i][0] ? current.text[i] : "(none)");
  }
  *count = AQ_SET_COUNT;
  return AQ_OK;
}
