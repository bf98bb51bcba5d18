/* cmd_cast.c - `mixprec cast`: what values become in a format, bit by bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "classify.h"
#include "cli.h"

static const char usage[] =
    "usage: mixprec cast [--to fp16|bf16|e4m3|e5m2|fp32] [--saturate] VALUE...\n\n"
    "Rounds each VALUE (a decimal or hex float, inf or nan, first read as fp32) to the\n"
    "format, round to nearest even, and prints the bits in hex, the value they hold,\n"
    "the relative error and what happened:\n"
    "  exact      the value is representable\n"
    "  rounded    rounded to a nearby normal value\n"
    "  subnormal  landed in the subnormal range: fewer significant bits\n"
    "  underflow  a nonzero value became 0\n"
    "  overflow   a finite value became inf (or NaN in e4m3, which has no inf)\n"
    "  saturated  clamped to +-448 (e4m3 with --saturate)\n\n"
    "  --to FORMAT   destination format (default fp16)\n"
    "  --saturate    e4m3 only: clamp overflow and inf to +-448 instead of NaN\n";

static int run(int argc, char **argv) {
    mp_dtype to = MP_F16;
    int sat = 0, nvalues = 0;
    float values[256];
    const char *texts[256];
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_cast, argv[i])) return 0;
        if (strcmp(argv[i], "--to") == 0) {
            const char *v = cli_value("cast", argc, argv, &i);
            if (!v) return CLI_USAGE;
            if (mp_dtype_parse(v, &to) != MP_OK) return cli_usage_error("cast", "%s", mp_last_error());
        } else if (strcmp(argv[i], "--saturate") == 0) {
            sat = 1;
        } else {
            if (nvalues == 256) return cli_usage_error("cast", "at most 256 values");
            if (cli_parse_float(argv[i], &values[nvalues]) != 0)
                return cli_usage_error("cast", "'%s' is not a number (or is beyond fp32's range)", argv[i]);
            texts[nvalues++] = argv[i];
        }
    }
    if (nvalues == 0) return cli_usage_error("cast", "no VALUE given");
    if (sat && to != MP_E4M3) return cli_usage_error("cast", "--saturate applies to e4m3 only");
    const mp_format_info *f = mp_format(to);
    const int hexw = (int)f->size * 2;
    printf("%-16s %-16s %-*s %-16s %-10s %s\n", "input", "as fp32", hexw + 2 > 6 ? hexw + 2 : 6, "bits",
           f->name, "rel.error", "status");
    for (int i = 0; i < nvalues; i++) {
        const float x = values[i];
        const cast_result r = cast_one(x, to, sat);
        char err[32];
        if (isnan(x) || isnan(r.value) || isinf(x) || isinf(r.value) || x == 0) snprintf(err, sizeof err, "-");
        else snprintf(err, sizeof err, "%.3g", fabs(((double)r.value - (double)x) / (double)x));
        char bits[16];
        snprintf(bits, sizeof bits, "0x%0*x", hexw, r.bits);
        printf("%-16s %-16.9g %-*s %-16.9g %-10s %s\n", texts[i], (double)x, hexw + 2 > 6 ? hexw + 2 : 6, bits,
               (double)r.value, err, r.status);
    }
    return 0;
}

const cli_command cmd_cast = {"cast", "round values to a format: bits, value, error, what happened", usage, run};
