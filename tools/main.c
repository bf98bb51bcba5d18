/* main.c - the mixprec command: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dist.h"

static const cli_command *const commands[] = {&cmd_demo, &cmd_compare, &cmd_train, &cmd_modes, &cmd_sample, &cmd_formats, &cmd_cast, &cmd_underflow,
                                                  &cmd_tour, &cmd_explore, &cmd_scaler_sim, &cmd_bench};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void help(void) {
    printf("mixprec %s - mixed-precision training: formats, loss scaling, fp32 master weights\n\n"
           "usage: mixprec COMMAND [options]\n       mixprec COMMAND --help\n       mixprec --version\n\n"
           "commands:\n",
           mp_version());
    for (size_t i = 0; i < NCOMMANDS; i++) printf("  %-11s %s\n", commands[i]->name, commands[i]->summary);
    printf("\nenvironment: MIXPREC_ISA=scalar|avx2|avx512|avx512bf16|amx caps the CPU path (now: %s),\n"
           "             MIXPREC_THREADS=N sets the number of threads (now: %d)\n",
           mp_isa_name(mp_cpu_isa()), mp_get_threads());
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        help();
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        help();
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        char mpi[96], feats[256];
        printf("mixprec %s (cpu path: %s, %s; cpu features: %s)\n", mp_version(), mp_isa_name(mp_cpu_isa()),
               dist_describe(mpi, sizeof mpi), mp_cpu_describe(feats, sizeof feats));
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], commands[i]->name) == 0) return commands[i]->run(argc - 1, argv + 1);
    return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}

int main(int argc, char **argv) {
    const int rc = dist_init(argc, argv); /* under mpirun: MPI (dist.h); else nothing */
    return dist_finalize(rc ? rc : dispatch(argc, argv));
}
