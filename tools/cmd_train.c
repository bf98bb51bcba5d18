/* cmd_train.c - `mixprec train`: an MLP on Fashion-MNIST or a GPT on text, in
 * any precision mode (the run itself is mp_run: mixprec/run.h). */
#include <stdio.h>
#include <string.h>

#include "run.h"

static const char usage_head[] = "usage: mixprec train [options]\n\n"
                                 "Trains an MLP on Fashion-MNIST (Debian's dataset-fashion-mnist, or --data DIR) or a\n"
                                 "GPT on text (--model gpt:L-H-C-T; bytes are tokens) and reports the evaluation loss\n"
                                 "(test accuracy for the MLP, validation loss in nats and bits per byte for the GPT),\n"
                                 "skipped steps, the loss scale, gradient and activation stores lost to underflow or\n"
                                 "overflow per tensor, time per step and peak memory.\n\n";

static int run(int argc, char **argv);

const cli_command cmd_train = {"train", "train an MLP on Fashion-MNIST or a GPT on text in any precision mode", NULL,
                               run};

static int run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_head, stdout);
            fputs(mp_run_options_help(), stdout);
            return 0;
        }
    mp_run_spec spec;
    const int rc = run_parse("train", argc, argv, &spec);
    if (rc) return rc;
    const mp_run_io io = run_io("train", stdout);
    mp_run_result r;
    const int ret = run_exit(mp_run(&spec, &io, &r), &r);
    mp_run_result_free(&r);
    return ret;
}
