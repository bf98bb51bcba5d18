/* cli.c - argument helpers shared by the subcommands. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_quiet = 0;

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    if (cli_quiet) return CLI_USAGE;
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

int cli_scaler_option(const char *cmd, int argc, char **argv, int *i, mp_scaler_config *c) {
    static const char *const floats[] = {"--init-scale", "--growth-factor", "--backoff-factor", "--min-scale",
                                         "--max-scale"};
    float *const fdst[] = {&c->init_scale, &c->growth_factor, &c->backoff_factor, &c->min_scale, &c->max_scale};
    for (int k = 0; k < 5; k++)
        if (strcmp(argv[*i], floats[k]) == 0) {
            const char *v = cli_value(cmd, argc, argv, i);
            if (!v) return CLI_USAGE;
            if (cli_parse_float(v, fdst[k]) != 0) return cli_usage_error(cmd, "%s wants a number, not '%s'", floats[k], v);
            return 1;
        }
    static const char *const ints[] = {"--growth-interval", "--hysteresis"};
    int *const idst[] = {&c->growth_interval, &c->hysteresis};
    for (int k = 0; k < 2; k++)
        if (strcmp(argv[*i], ints[k]) == 0) {
            const char *v = cli_value(cmd, argc, argv, i);
            long x;
            if (!v) return CLI_USAGE;
            if (cli_parse_long(v, 1, 1L << 30, &x) != 0)
                return cli_usage_error(cmd, "%s wants a whole number >= 1, not '%s'", ints[k], v);
            *idst[k] = (int)x;
            return 1;
        }
    return 0;
}
