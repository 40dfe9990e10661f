/* Command lines of Aquila's tools and examples: one table of options,
 * parsed with getopt_long, so every program answers alike.
 *
 *   --help            the usage and every option, on stdout; exit status 0
 *   --name VALUE      or --name=VALUE; a value is checked against its kind
 *   a wrong line      an unknown option, a missing value, a bad value or a
 *                     missing or extra operand: one line on stderr naming
 *                     it, exit status 2, before the program does anything
 *
 * Values are read back by option name; a name not in the table is the
 * program's own bug and aborts. */
#ifndef AQ_TOOLS_CLI_H_
#define AQ_TOOLS_CLI_H_

#include <stddef.h>
#include <stdio.h>

typedef enum cli_kind {
  CLI_FLAG,   /* no value */
  CLI_TEXT,   /* any value */
  CLI_INT,    /* an integer, within [min, max] when min < max */
  CLI_REAL,   /* a number, within [min, max] when min < max */
  CLI_CHOICE, /* one of the words of `value`, separated by '|' */
} cli_kind_t;

typedef struct cli_option {
  const char *name; /* --name */
  char letter;      /* -l as well; 0: none */
  cli_kind_t kind;
  const char *value; /* what the value is, for --help (N, FILE); CLI_CHOICE: "a|b|c" */
  const char *help;
  double min, max;
} cli_option_t;

enum { CLI_MAX_OPTIONS = 40 };

typedef struct cli {
  const char *program;  /* "aq-bench queue": how messages start */
  const char *operands; /* what follows the options in the usage line ("FILE"), or NULL */
  const char *about;    /* one or more lines under the usage, or NULL */
  const cli_option_t *options;
  size_t count;
  int min_operands, max_operands;
  int subcommand; /* options end at the first operand: the rest is a subcommand's (aq-bench SUITE ...) */
  /* Filled by cli_parse: */
  const char *values[CLI_MAX_OPTIONS]; /* NULL: not given; a flag given: "" */
  char **operand;
  int noperands;
} cli_t;

/* Parses argv[1..argc-1] (argv[0] is the program or the subcommand); returns
 * only if the command line is good. */
void cli_parse(cli_t *c, int argc, char **argv);
/* Prints the usage line and the options to f. */
void cli_usage(const cli_t *c, FILE *f);

const char *cli_text(const cli_t *c, const char *name, const char *fallback);
long cli_int(const cli_t *c, const char *name, long fallback);
double cli_real(const cli_t *c, const char *name, double fallback);
int cli_flag(const cli_t *c, const char *name);
/* Refuses the command line (exit status 2) with a message in the same form
 * as cli_parse's: for checks only the program can make. */
void cli_refuse(const cli_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#endif
