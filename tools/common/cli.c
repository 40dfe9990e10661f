/* The shared command-line parser: getopt_long over a table (cli.h). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HELP = 1000, LONG_BASE = 256 };

void cli_refuse(const cli_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", c->program);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (%s --help lists the options)\n", c->program);
  va_end(ap);
  exit(2);
}

static const char *value_name(const cli_option_t *o) {
  return o->value ? o->value : o->kind == CLI_INT || o->kind == CLI_REAL ? "N" : "VALUE";
}

void cli_usage(const cli_t *c, FILE *f) {
  fprintf(f, "usage: %s [options]%s%s\n", c->program, c->operands ? " " : "", c->operands ? c->operands : "");
  if (c->about) fprintf(f, "%s\n", c->about);
  fprintf(f, "options:\n");
  for (size_t i = 0; i < c->count; ++i) {
    const cli_option_t *o = &c->options[i];
    char left[96];
    int n = o->letter ? snprintf(left, sizeof(left), "-%c, --%s", o->letter, o->name)
                      : snprintf(left, sizeof(left), "--%s", o->name);
    if (o->kind != CLI_FLAG) snprintf(left + n, sizeof(left) - (size_t)n, " %s", value_name(o));
    if (strlen(left) > 28) fprintf(f, "  %s\n  %-28s %s\n", left, "", o->help ? o->help : "");
    else fprintf(f, "  %-28s %s\n", left, o->help ? o->help : "");
  }
  fprintf(f, "  %-28s %s\n", "-h, --help", "this text");
}

/* "a|b|c" as "a, b or c". */
static void say_choices(const char *choices, char *out, size_t size) {
  size_t len = 0, words = 1;
  for (const char *p = choices; *p; ++p) words += *p == '|';
  out[0] = '\0';
  for (size_t w = 0; w < words && len < size; ++w) {
    size_t n = strcspn(choices, "|");
    len += (size_t)snprintf(out + len, size - len, "%s%.*s", w == 0 ? "" : w + 1 == words ? " or " : ", ", (int)n,
                            choices);
    choices += n + (choices[n] == '|');
  }
}

static int is_choice(const char *choices, const char *v) {
  size_t vl = strlen(v);
  for (const char *p = choices; *p;) {
    size_t n = strcspn(p, "|");
    if (n == vl && !strncmp(p, v, n)) return 1;
    p += n + (p[n] == '|');
  }
  return 0;
}

static void check_value(const cli_t *c, const cli_option_t *o, const char *v) {
  char *end = NULL;
  errno = 0;
  double x = o->kind == CLI_INT ? (double)strtol(v, &end, 0) : o->kind == CLI_REAL ? strtod(v, &end) : 0;
  if (o->kind == CLI_CHOICE && !is_choice(o->value, v)) {
    char words[256];
    say_choices(o->value, words, sizeof(words));
    cli_refuse(c, "--%s %s: expected %s", o->name, v, words);
  }
  if (o->kind != CLI_INT && o->kind != CLI_REAL) return;
  if (end == v || *end || errno || !isfinite(x))
    cli_refuse(c, "--%s %s: expected %s", o->name, v, o->kind == CLI_INT ? "an integer" : "a number");
  if (o->min < o->max && (x < o->min || x > o->max))
    cli_refuse(c, "--%s %s: expected a value in [%.15g, %.15g]", o->name, v, o->min, o->max);
}

static const cli_option_t *by_val(const cli_t *c, int val) {
  if (val >= LONG_BASE && (size_t)(val - LONG_BASE) < c->count) return &c->options[val - LONG_BASE];
  for (size_t i = 0; i < c->count; ++i)
    if (c->options[i].letter && c->options[i].letter == val) return &c->options[i];
  return NULL;
}

void cli_parse(cli_t *c, int argc, char **argv) {
  struct option longs[CLI_MAX_OPTIONS + 2];
  char shorts[3 * CLI_MAX_OPTIONS + 4] = "+:h";
  size_t ns = 3;
  if (c->count > CLI_MAX_OPTIONS) abort();
  for (size_t i = 0; i < c->count; ++i) {
    const cli_option_t *o = &c->options[i];
    longs[i] = (struct option){o->name, o->kind == CLI_FLAG ? no_argument : required_argument, NULL, LONG_BASE + (int)i};
    if (o->letter) {
      shorts[ns++] = o->letter;
      if (o->kind != CLI_FLAG) shorts[ns++] = ':';
    }
    c->values[i] = NULL;
  }
  shorts[ns] = '\0';
  const char *optstring = c->subcommand ? shorts : shorts + 1;
  longs[c->count] = (struct option){"help", no_argument, NULL, HELP};
  longs[c->count + 1] = (struct option){0};
  opterr = 0;
  optind = 0; /* glibc: start over, as a second parse in one process needs */
  for (int ch; (ch = getopt_long(argc, argv, optstring, longs, NULL)) != -1;) {
    const cli_option_t *o = by_val(c, ch == '?' || ch == ':' ? optopt : ch);
    if (ch == 'h' || ch == HELP) {
      cli_usage(c, stdout);
      exit(fflush(stdout) ? 1 : 0);
    } else if (ch == ':') {
      if (o) cli_refuse(c, "--%s is missing its %s", o->name, value_name(o));
      cli_refuse(c, "-%c is missing its value", optopt);
    } else if (ch == '?') {
      if (o && optopt >= LONG_BASE) cli_refuse(c, "--%s takes no value", o->name);
      if (optopt) cli_refuse(c, "unknown option -%c", optopt);
      const char *bad = argv[optind - 1];
      cli_refuse(c, "unknown option %.*s", (int)strcspn(bad, "="), bad);
    } else {
      check_value(c, o, o->kind == CLI_FLAG ? "" : optarg);
      c->values[o - c->options] = o->kind == CLI_FLAG ? "" : optarg;
    }
  }
  c->operand = argv + optind;
  c->noperands = argc - optind;
  const char *want = c->operands ? c->operands : "an operand";
  if (c->noperands == 0 && c->min_operands > 0) cli_refuse(c, "%.*s is missing", (int)strcspn(want, " "), want);
  if (c->noperands < c->min_operands) cli_refuse(c, "expected %s, got %d operand(s)", want, c->noperands);
  if (c->noperands > c->max_operands) cli_refuse(c, "unexpected argument '%s'", c->operand[c->max_operands]);
}

static const char *lookup(const cli_t *c, const char *name) {
  for (size_t i = 0; i < c->count; ++i)
    if (!strcmp(c->options[i].name, name)) return c->values[i];
  fprintf(stderr, "%s: no option --%s in its own table\n", c->program, name);
  abort();
}

const char *cli_text(const cli_t *c, const char *name, const char *fallback) {
  const char *v = lookup(c, name);
  return v ? v : fallback;
}

long cli_int(const cli_t *c, const char *name, long fallback) {
  const char *v = lookup(c, name);
  return v ? strtol(v, NULL, 0) : fallback;
}

double cli_real(const cli_t *c, const char *name, double fallback) {
  const char *v = lookup(c, name);
  return v ? strtod(v, NULL) : fallback;
}

int cli_flag(const cli_t *c, const char *name) { return lookup(c, name) != NULL; }
