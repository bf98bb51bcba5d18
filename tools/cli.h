/* cli.h - what the subcommands of the mixprec command share. */
#ifndef MIXPREC_CLI_H
#define MIXPREC_CLI_H

#include "mixprec/mixprec.h"

/* Exit status for bad usage (unknown command or option, bad value). */
#define CLI_USAGE 2

typedef struct cli_command {
    const char *name;
    const char *summary;                /* one line for `mixprec --help` */
    const char *usage;                  /* full text for `mixprec NAME --help` */
    int (*run)(int argc, char **argv);  /* argv[0] is the command name */
} cli_command;

extern const cli_command cmd_formats, cmd_cast, cmd_bench;

/* Prints "mixprec NAME: MESSAGE" to stderr and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 if argv[i] is --help or -h (then the usage was printed to stdout). */
int cli_is_help(const cli_command *c, const char *arg);

/* Strict number parsing: the whole string must be a number in range. 0 = ok. */
int cli_parse_float(const char *s, float *out);
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* The value that follows option argv[*i], or NULL (after an error message) if none. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

#endif
