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
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    const int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    /* as the library's messages: one line (control characters as \xNN), a long value cut in its middle */
    mp_set_error(MP_EINVAL, "%s", msg ? msg : "out of memory for the message");
    free(msg);
    fprintf(stderr, "mixprec%s%s: %s (see 'mixprec %s%s--help')\n", cmd ? " " : "", cmd ? cmd : "", mp_last_error(),
            cmd ? cmd : "", cmd ? " " : "");
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

int cli_given_before(int argc, char **argv, int i) {
    (void)argc;
    for (int k = 1; k < i; k++) {
        if (strcmp(argv[k], argv[i]) != 0) continue;
        const char *prev = argv[k - 1]; /* argv[k] is an option unless it is the value of the option before it */
        const int is_value =
            k > 1 && strncmp(prev, "--", 2) == 0 &&
            (mp_run_option_takes_value(prev + 2) == 1 || !strcmp(prev, "--precisions") || !strcmp(prev, "--out"));
        if (!is_value) return 1;
    }
    return 0;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* The "loss scaling" part of the run options' help: its option lines, the
 * indented lines after the heading (*n bytes; NULL when there is none). */
static const char *scaler_lines(size_t *n) {
    static const char heading[] = "\nloss scaling\n"; /* a line of its own */
    const char *h = strstr(mp_run_options_help(), heading);
    *n = 0;
    if (!h) return NULL;
    h += sizeof heading - 1;
    while (h[*n] == ' ') *n += strcspn(h + *n, "\n") + 1;
    return h;
}

int cli_scaler_option(const char *cmd, int argc, char **argv, int *i, mp_scaler_config *c) {
    size_t n;
    const char *lines = scaler_lines(&n), *name = argv[*i] + 2;
    char opt[64];
    snprintf(opt, sizeof opt, "  %.40s ", argv[*i]); /* an option line of the section starts so */
    const char *at = lines && strncmp(argv[*i], "--", 2) == 0 ? strstr(lines, opt) : NULL;
    if (!at || at >= lines + n) return 0;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return CLI_USAGE;
    mp_run_spec s;
    mp_run_defaults(&s);
    s.scaler = *c;
    if (mp_run_option(&s, name, v) != MP_OK) return cli_usage_error(cmd, "%s", mp_last_error());
    *c = s.scaler;
    return 1;
}

void cli_scaler_help(FILE *f) {
    size_t n;
    const char *lines = scaler_lines(&n);
    if (lines) fwrite(lines, 1, n, f);
}
