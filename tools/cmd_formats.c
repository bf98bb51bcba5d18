/* cmd_formats.c - `mixprec formats`: the formats table and what small values become. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "classify.h"
#include "cli.h"

static const char usage[] = "usage: mixprec formats [--json]\n\n"
                            "The number formats mixprec knows: bytes, exponent and mantissa bits, largest\n"
                            "finite value, smallest normal, smallest subnormal and epsilon (numpy.finfo's\n"
                            "and ml_dtypes.finfo's numbers), with the MX formats e8m0 (block scales: powers\n"
                            "of two, no zero, no sign) and e2m1 (fp4). Then what the gradient-sized values\n"
                            "1e-4 .. 1e-8 become in fp16 and bf16: kept, rounded into the subnormal range\n"
                            "(precision lost) or gone (zero).\n\n"
                            "  --json   one JSON object instead of the tables\n";

static const double small_values[] = {1e-4, 1e-5, 1e-6, 1e-7, 1e-8};
#define NSMALL (sizeof small_values / sizeof small_values[0])

static double rel_err(float x, float r) { return x == 0 ? 0 : fabs(((double)r - (double)x) / (double)x); }

static void print_json(void) {
    printf("{\"formats\": [");
    for (int t = 0; t < MP_NUM_DTYPES; t++) {
        const mp_format_info *f = mp_format((mp_dtype)t);
        printf("%s\n  {\"name\": \"%s\", \"bytes\": %zu, \"exponent_bits\": %d, \"mantissa_bits\": %d, \"bias\": %d, "
               "\"has_inf\": %s, \"max\": %.17g, \"min_normal\": %.17g, \"min_subnormal\": %.17g, \"eps\": %.17g}",
               t ? "," : "", f->name, f->size, f->exponent_bits, f->mantissa_bits, f->bias,
               f->has_inf ? "true" : "false", f->max, f->min_normal, f->min_subnormal, f->eps);
    }
    printf("\n], \"small_values\": [");
    for (size_t i = 0; i < NSMALL; i++) {
        const float x = (float)small_values[i];
        printf("%s\n  {\"value\": %.17g", i ? "," : "", (double)x);
        const mp_dtype ts[2] = {MP_F16, MP_BF16};
        for (int k = 0; k < 2; k++) {
            const cast_result r = cast_one(x, ts[k], 0);
            printf(", \"%s\": {\"bits\": \"0x%04x\", \"value\": %.17g, \"rel_error\": %.6g, \"status\": \"%s\"}",
                   mp_format(ts[k])->name, r.bits, (double)r.value, rel_err(x, r.value), r.status);
        }
        printf("}");
    }
    printf("\n]}\n");
}

/* What the columns do not say: the formats without inf, zero, sign or NaN. */
static const char *note(mp_dtype t) {
    switch (t) {
    case MP_E4M3: return "no inf";
    case MP_E8M0: return "no inf, zero or sign; no subnormals";
    case MP_E2M1: return "no inf or NaN; saturates";
    default: return "";
    }
}

void formats_table(void) {
    printf("%-6s %5s %4s %4s %13s %16s %19s %12s\n", "format", "bytes", "exp", "man", "largest", "smallest normal",
           "smallest subnormal", "epsilon");
    for (int t = 0; t < MP_NUM_DTYPES; t++) {
        const mp_format_info *f = mp_format((mp_dtype)t);
        const char *n = note((mp_dtype)t);
        printf("%-6s %5zu %4d %4d %13.6g %16.6g %19.6g %12.6g%s%s%s\n", f->name, f->size, f->exponent_bits,
               f->mantissa_bits, f->max, f->min_normal, f->min_subnormal, f->eps, *n ? "  (" : "", n, *n ? ")" : "");
    }
}

void small_values_table(void) {
    printf("What small values (typical gradients) become:\n");
    printf("%-8s  %-36s  %-36s\n", "value", "fp16", "bf16");
    int gone16 = 0;
    for (size_t i = 0; i < NSMALL; i++) {
        const float x = (float)small_values[i];
        printf("%-8.0e", (double)x);
        const mp_dtype ts[2] = {MP_F16, MP_BF16};
        for (int k = 0; k < 2; k++) {
            const cast_result r = cast_one(x, ts[k], 0);
            char cell[64];
            if (strcmp(r.status, "underflow") == 0) {
                snprintf(cell, sizeof cell, "0  GONE (underflow)");
                gone16 += k == 0;
            } else {
                snprintf(cell, sizeof cell, "%-12.6g %s, err %.2g%%", (double)r.value, r.status,
                         100 * rel_err(x, r.value));
            }
            printf("  %-36s", cell);
        }
        printf("\n");
    }
    const mp_format_info *h = mp_format(MP_F16);
    printf("\nfp16 keeps full precision only down to %.3g (smallest normal); below that\n"
           "values lose bits until, under %.3g (half the smallest subnormal), they become 0:\n"
           "%d of these %zu values are gone in fp16, none in bf16 (same range as fp32).\n",
           h->min_normal, h->min_subnormal / 2, gone16, NSMALL);
}

static int run(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_formats, argv[i])) return 0;
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return cli_usage_error("formats", "unknown option '%s'", argv[i]);
    }
    if (json) {
        print_json();
    } else {
        formats_table();
        printf("\n");
        small_values_table();
    }
    return 0;
}

const cli_command cmd_formats = {"formats", "the formats table and what 1e-4 .. 1e-8 become in fp16/bf16", usage, run};
