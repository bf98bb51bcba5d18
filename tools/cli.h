/* cli.h - what the subcommands of the mixprec command share. */
#ifndef MIXPREC_CLI_H
#define MIXPREC_CLI_H

#include "mixprec/mixprec.h"

/* Exit status for bad usage (unknown command or option, bad value). */
#define CLI_USAGE 2

typedef struct cli_command {
    const char *name;
    const char *summary;               /* one line for `mixprec --help` */
    const char *usage;                 /* full text for `mixprec NAME --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cli_command;

extern const cli_command cmd_formats, cmd_cast, cmd_bench, cmd_scaler_sim, cmd_train, cmd_compare, cmd_demo,
    cmd_underflow, cmd_explore, cmd_tour, cmd_sample, cmd_modes, cmd_advise;

/* The tables of `mixprec formats` (also shown by `mixprec tour`). */
void formats_table(void);
void small_values_table(void);

/* The block-scaling rows and sentence of `mixprec underflow --format BLOCK`
 * (also shown by `mixprec cast --to BLOCK`). */
void block_compare_print(const mp_block_compare *c);

/* Prints "mixprec NAME: MESSAGE" to stderr and returns CLI_USAGE; prints
 * nothing while cli_quiet is set (ranks other than 0 of an mpirun job:
 * dist.h). */
extern int cli_quiet;
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 if argv[i] is --help or -h (then the usage was printed to stdout). */
int cli_is_help(const cli_command *c, const char *arg);

/* Strict number parsing: the whole string must be a number in range. 0 = ok. */
int cli_parse_float(const char *s, float *out);
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* 1 if option argv[i] ("--name") is among argv[1..i) as an option (not as
 * the value of one that takes a value): a duplicated option. */
int cli_given_before(int argc, char **argv, int i);

/* The value that follows option argv[*i], or NULL (after an error message) if none. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* The loss-scaler options of the library's run options (mixprec/run.h):
 * --init-scale --growth-interval --growth-factor --backoff-factor --hysteresis
 * --min-scale --max-scale. Returns 1 if argv[*i] was one (value consumed),
 * 0 if it is not, CLI_USAGE (after a message) on a bad value. */
int cli_scaler_option(const char *cmd, int argc, char **argv, int *i, mp_scaler_config *c);

/* Their help, as mixprec train --help prints it (the "loss scaling" part). */
void cli_scaler_help(FILE *f);

#endif
