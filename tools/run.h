/* run.h - the training options of `mixprec train` and `mixprec compare`:
 * their command line into a run's spec (mixprec/run.h), with the
 * data-parallel ranks of dist.h. */
#ifndef MIXPREC_TOOLS_RUN_H
#define MIXPREC_TOOLS_RUN_H

#include <stdio.h>

#include "cli.h"

/* The run's defaults, then the options of argv[1..argc) (argv[0] is the
 * command name), then run_ranks; the spec checked whole (mp_run_check).
 * Returns 0, CLI_USAGE after a message, or 1 after one for an output that
 * cannot be written. */
int run_parse(const char *cmd, int argc, char **argv, mp_run_spec *s);

/* This process's ranks (dist.h) into s, and the data fault of the tests
 * (MIXPREC_FAULT_DIST_READ: this rank's data cannot be read). */
void run_ranks(mp_run_spec *s);

/* Where a run of cmd prints: out, failures on stderr as "mixprec CMD: ...",
 * and on a terminal (rank 0) a progress bar on stderr instead of step lines
 * when out is stdout. */
mp_run_io run_io(const char *cmd, FILE *out);

/* The exit status of a run: 0 done, CLI_USAGE for a spec that cannot work,
 * 1 otherwise. */
int run_exit(mp_status st, const mp_run_result *r);

#endif
