/* main.c - the mixprec command: dispatch to subcommands. */
#define _GNU_SOURCE /* fopencookie */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dist.h"

static const cli_command *const commands[] = {&cmd_demo,       &cmd_compare, &cmd_train,     &cmd_modes, &cmd_sample,
                                              &cmd_formats,    &cmd_cast,    &cmd_underflow, &cmd_tour,  &cmd_explore,
                                              &cmd_scaler_sim, &cmd_bench,   &cmd_advise};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void help(FILE *f) {
    fprintf(f,
            "mixprec %s - mixed-precision training: formats, loss scaling, fp32 master weights\n\n"
            "usage: mixprec COMMAND [options]\n       mixprec COMMAND --help\n       mixprec --version\n\n"
            "commands:\n",
            mp_version());
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-11s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f,
            "\nenvironment: MIXPREC_ISA=scalar|avx2|avx512|avx512bf16|amx caps the CPU path (now: %s),\n"
            "             MIXPREC_THREADS=N sets the number of threads (now: %d)\n",
            mp_isa_name(mp_cpu_isa()), mp_get_threads());
}

static int dispatch(int argc, char **argv) {
    if (mp_cpu_env_check() != MP_OK) return cli_usage_error(NULL, "%s", mp_last_error());
    if (argc < 2) { /* a usage error: the usage on standard error */
        help(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        help(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        char mpi[96], feats[256];
        printf("mixprec %s (cpu path: %s, %s; cpu features: %s)\n", mp_version(), mp_isa_name(mp_cpu_isa()),
               dist_describe(mpi, sizeof mpi), mp_cpu_describe(feats, sizeof feats));
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i]->name) != 0) continue;
        /* the threads the kernels will start, before OpenMP's runtime could end the process for want of them
         * (libgomp's two lines): one line of mixprec's (train and compare check again for their --threads) */
        if (mp_threads_check() != MP_OK) return fprintf(stderr, "mixprec %s: %s\n", argv[1], mp_last_error()), 1;
        return commands[i]->run(argc - 1, argv + 1);
    }
    return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}

/* Standard output as a stream of the command's own over descriptor 1, which
 * keeps the error of the first write that failed: stdio forgets it, and by
 * the time the stream is checked errno says nothing (a progress line that hit
 * a full disk mid-run, say). */
static int out_errno;

static ssize_t out_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    for (size_t done = 0; done < n;) {
        const ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!out_errno) out_errno = w < 0 ? errno : EIO;
            return -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

/* What the command wrote to standard output, flushed and checked: a write
 * that failed (a closed descriptor, a full disk, an I/O error) ends the
 * command with status 1 and one line on standard error naming the error, as
 * strerror says it; a reader that went away (EPIPE) ends it quietly, with
 * status 1. */
static int stdout_checked(const char *cmd, int rc) {
    if (fflush(stdout) == 0 && !ferror(stdout) && !out_errno) return rc;
    const int err = out_errno ? out_errno : errno ? errno : EIO;
    if (err != EPIPE)
        fprintf(stderr, "mixprec%s%s: standard output: %s\n", cmd ? " " : "", cmd ? cmd : "", strerror(err));
    return rc ? rc : 1;
}

int main(int argc, char **argv) {
    /* off a terminal, the short commands' standard output in one buffer large enough for their whole output, so
     * that the write that fails is the checked one at the end and says why (the training commands keep stdio's
     * buffer: their progress reaches a file or a pipe as it goes) */
    static char outbuf[1 << 16];
    const int progress = argc > 1 && (!strcmp(argv[1], "train") || !strcmp(argv[1], "compare") ||
                                      !strcmp(argv[1], "demo") || !strcmp(argv[1], "sample"));
    FILE *out = fopencookie(NULL, "w", (cookie_io_functions_t){.write = out_write});
    if (out) stdout = out; /* else stdio's own, whose errors say less */
    const int tty = isatty(STDOUT_FILENO);
    if (!progress && !tty) setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    else if (tty) setvbuf(stdout, NULL, _IOLBF, 0);
    /* a file past ulimit -f: the write fails with EFBIG and the command says so, rather than a silent signal */
    signal(SIGXFSZ, SIG_IGN);
    const int rc = dist_init(argc, argv); /* under mpirun: MPI (dist.h); else nothing */
    const int ret = rc ? rc : dispatch(argc, argv);
    return dist_finalize(stdout_checked(argc > 1 ? argv[1] : NULL, ret));
}
