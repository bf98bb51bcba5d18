/* cli.c - argument helpers shared by the subcommands. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mixprec%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'mixprec %s%s--help')\n", cmd ? cmd : "", cmd ? " " : "");
    return CLI_USAGE;
}

int cli_is_help(const cli_command *c, const char *arg) {
    if (strcmp(arg, "--help") != 0 && strcmp(arg, "-h") != 0) return 0;
    fputs(c->usage, stdout);
    return 1;
}

int cli_parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    const float v = strtof(s, &end);
    if (end == s || *end != '\0') return -1;
    /* strtof reports ERANGE for overflow (and for underflow, which is fine:
     * the nearest float, possibly subnormal or zero, is what the user typed) */
    if (errno == ERANGE && isinf(v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
