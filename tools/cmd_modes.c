/* cmd_modes.c - `mixprec modes`: the precision modes of the library's table
 * (mp_precisions) and what each sets, as text or as docs/TRAINING.md's table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] = "usage: mixprec modes [--markdown]\n\n"
                            "The precision modes of --precision (train) and --precisions (compare): for each,\n"
                            "its formats (compute, and a recipe's GEMM operands), where the weights live,\n"
                            "how the optimizer state is kept, where the reductions run, the loss scale and\n"
                            "a line on what it is. The switches +master-weights=fp32|none|kahan|sr,\n"
                            "+optim-state=fp32|bf16|fp8|8bit|4bit, +reductions=fp32|half and (mxfp8)\n"
                            "+mx-rule=floor|rceil apply to any of them that can take them. Then per-layer\n"
                            "assignments +RECIPE=PATTERN put the Linear layers whose names match PATTERN\n"
                            "in another recipe or in bf16 (nvfp4+bf16=transformer.h.3.*; docs/TRAINING.md).\n"
                            "  --markdown   as a Markdown table (docs/TRAINING.md's)\n";

static const char *weights(const mp_precision *p) {
    switch (p->master_weights) {
    case MP_MASTER_NONE: return p->compute == MP_F16 ? "fp16 only" : "bf16 only";
    case MP_MASTER_PURE_BF16: return "bf16 only, stochastic rounding";
    case MP_MASTER_KAHAN: return p->compute == MP_F16 ? "fp16 + fp16 compensation" : "bf16 + bf16 compensation";
    default:
        return p->compute == MP_F32   ? "fp32"
               : p->compute == MP_F16 ? "fp32 masters, fp16 copies"
                                      : "fp32 masters, bf16 copies";
    }
}

static const char *scaling(const mp_precision *p) {
    return p->scaling == MP_SCALING_DYNAMIC ? "dynamic" : p->scaling == MP_SCALING_STATIC ? "static S (65536)" : "none";
}

static int run(int argc, char **argv) {
    int md = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_modes, argv[i])) return 0;
        if (strcmp(argv[i], "--markdown") == 0) md = 1;
        else return cli_usage_error("modes", "unknown option '%s'", argv[i]);
    }
    size_t n;
    const mp_precision *m = mp_precisions(&n);
    if (md)
        printf("| mode | formats | weights | optimizer state | reductions | loss scale | what it is |\n"
               "|---|---|---|---|---|---|---|\n");
    else
        printf("%-16s %-21s %-31s %-6s %-10s %-17s %s\n", "mode", "formats", "weights", "state", "reductions",
               "loss scale", "what it is");
    for (size_t i = 0; i < n; i++) {
        const mp_precision *p = &m[i];
        const char *name = p->scaling == MP_SCALING_STATIC ? "fp16-static[:S]" : p->name;
        char formats[48];
        mp_precision_formats(p, formats, sizeof formats);
        const char *red = p->reductions == MP_REDUCE_HALF ? mp_format(p->compute)->name : "fp32";
        const char *state = mp_state_format_name(mp_precision_state_format(p));
        if (md)
            printf("| %s | %s | %s | %s | %s | %s | %s |\n", name, formats, weights(p), state, red, scaling(p),
                   p->help);
        else
            printf("%-16s %-21s %-31s %-6s %-10s %-17s %s\n", name, formats, weights(p), state, red, scaling(p),
                   p->help);
    }
    return 0; /* main checks what reached standard output */
}

const cli_command cmd_modes = {"modes", "the precision modes and what each sets", usage, run};
