/* run.c - the training options on the command line (run.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "run.h"

int run_parse(const char *cmd, int argc, char **argv, mp_run_spec *s) {
    mp_run_defaults(s);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *name = strncmp(a, "--", 2) == 0 ? a + 2 : "";
        const int takes = mp_run_option_takes_value(name);
        if (takes < 0) return cli_usage_error(cmd, "unknown option '%s'", a);
        if (cli_given_before(argc, argv, i)) return cli_usage_error(cmd, "%s is given twice", a);
        const char *v = takes ? cli_value(cmd, argc, argv, &i) : NULL;
        if (takes && !v) return CLI_USAGE;
        if (mp_run_option(s, name, v) != MP_OK) return cli_usage_error(cmd, "%s", mp_last_error());
    }
    run_ranks(s);
    const mp_status st = mp_run_check(s, NULL);
    /* rank 0 alone checks where the outputs go: every rank stops with it (the ranks' first failure's code) */
    int first, rc = st == MP_OK ? 0 : st == MP_EINVAL ? CLI_USAGE : 1;
    if (s->ranks && s->ranks->size > 1) rc = s->ranks->agree(s->ranks->ctx, rc, &first);
    if (st == MP_EINVAL) return cli_usage_error(cmd, "%s", mp_last_error());
    if (st != MP_OK && !cli_quiet) /* an output that cannot be written: a file error, before anything is read */
        fprintf(stderr, "mixprec %s: %s\n", cmd, mp_last_error());
    return rc;
}

void run_ranks(mp_run_spec *s) {
    s->ranks = dist_ranks();
    if (dist_fault_read()) /* this rank's data cannot be read */
        s->data = strncmp(s->model, "gpt:", 4) == 0 ? "text:/nonexistent/mixprec-fault-injected"
                                                    : "/nonexistent/mixprec-fault-injected";
}

mp_run_io run_io(const char *cmd, FILE *out) {
    static char prefix[64];
    snprintf(prefix, sizeof prefix, "mixprec %s", cmd);
    return (mp_run_io){.out = out,
                       .err = stderr,
                       .prefix = prefix,
                       .bar = dist_rank() == 0 && out == stdout && isatty(2) ? stderr : NULL};
}

int run_exit(mp_status st, const mp_run_result *r) { return st == MP_OK ? 0 : r->invalid ? CLI_USAGE : 1; }
