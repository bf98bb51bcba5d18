/* cmd_cast.c - `mixprec cast`: what values become in a format, bit by bit;
 * in a block format (mxfp8-e4m3, mxfp8-e5m2, nvfp4), the values as one
 * tensor: each block's scale, each element, and block scaling against one
 * scale per tensor. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "cli.h"

static const char usage[] = "usage: mixprec cast [--to fp16|bf16|e4m3|e5m2|e8m0|e2m1|fp32] [--saturate] VALUE...\n"
                            "       mixprec cast --to mxfp8-e4m3|mxfp8-e5m2|nvfp4 [--mx-rule floor|rceil] VALUE...\n\n"
                            "Rounds each VALUE (a decimal or hex float, inf or nan, first read as fp32) to the\n"
                            "format, round to nearest even (e8m0: the nearest power of two, ties up), and\n"
                            "prints the bits in hex, the value they hold, the relative error and what\n"
                            "happened (e2m1: one code per byte, in the low 4 bits):\n"
                            "  exact      the value is representable\n"
                            "  rounded    rounded to a nearby normal value\n"
                            "  subnormal  landed in the subnormal range: fewer significant bits\n"
                            "  underflow  a nonzero value became 0\n"
                            "  overflow   a finite value became inf (or NaN in e4m3, which has no inf)\n"
                            "  saturated  clamped to +-448 (e4m3 with --saturate) or +-6 (e2m1, always)\n"
                            "  invalid    e8m0 has no zero and no negative numbers: NaN (0xff)\n"
                            "  nan        a NaN input (e2m1 has no NaN: +nan becomes 0x8, -0; -nan 0x0)\n\n"
                            "  --to FORMAT   destination format (default fp16)\n"
                            "  --saturate    e4m3 only: clamp overflow and inf to +-448 instead of NaN\n\n"
                            "A block format takes the VALUEs (finite) as one tensor in blocks of consecutive\n"
                            "values, the last padded with zeros: mxfp8-e4m3 and mxfp8-e5m2 (MX: 32 values\n"
                            "per E8M0 scale 2^k, the byte and 2^k printed), nvfp4 (16 E2M1 values per E4M3\n"
                            "scale, times amax/2688 from the fp32 global scale 2688/amax). Each value's\n"
                            "element code, the value it dequantizes to, the relative error and one of\n"
                            "  exact      the value is representable\n"
                            "  rounded    rounded to a nearby value of the block\n"
                            "  flushed    a nonzero value became 0\n"
                            "  saturated  rounded past the element's max (448, 57344, 6) and clamped to it\n"
                            "then block scaling against one scale per tensor in the element format, as\n"
                            "`mixprec underflow --format BLOCK` prints it.\n\n"
                            "  --mx-rule floor|rceil   MX block-scale rule (rceil, Transformer Engine's;\n"
                            "                          floor: OCP v1.0, torchao's)\n";

/* What value x of a block became: q its dequantized value; mult the factor
 * the quantizer multiplied it by before rounding to elem (mx.h: 2^(127 - s)
 * for MX, min(1 / (s * (1 / g)), FLT_MAX) for NVFP4). "saturated" is
 * mp_convert_count's overflow, as the quantizers' statistics count it. */
/* An input whose fp32 value is 0 though it is not: it underflowed on reading, before any cast. */
#define ZERO_IN_FP32 "underflow (0 in fp32 already: below 1.4e-45)"
static int zero_in_fp32(const char *text, float x) { return x == 0 && strtod(text, NULL) != 0; }

static const char *block_status(float x, float q, mp_dtype elem, float mult) {
    if (x == q) return "exact";
    if (q == 0) return "flushed";
    mp_convert_stats st = {0, 0, 0, 0, 0.0f};
    mp_convert_count(elem, &x, MP_F32, 1, mult, &st);
    return st.overflow ? "saturated" : "rounded";
}

/* The values as one tensor in block format bf: the blocks' scales, the
 * elements, then the comparison with one scale per tensor. */
static int cast_block(mp_block_format bf, mp_mx_rule rule, const float *values, const char *const *texts, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return cli_usage_error("cast", "%s takes finite values, not '%s'", mp_block_format_name(bf), texts[i]);
    mp_block_compare c;
    if (mp_block_compare_values(values, (size_t)n, bf, rule, &c) != MP_OK) {
        fprintf(stderr, "mixprec cast: %s\n", mp_last_error());
        return 1;
    }
    const size_t bs = c.block, np = ((size_t)n + bs - 1) / bs * bs;
    float x[256 + 32] = {0}, q[256 + 32];
    uint8_t codes[256 + 32], scales[(256 + 32) / 16];
    memcpy(x, values, (size_t)n * sizeof *x);
    const int mx = bf != MP_BLOCK_NVFP4;
    mp_status st;
    if (mx) {
        st = mp_mx_quantize(codes, scales, x, np, c.elem, rule, NULL);
        if (st == MP_OK) st = mp_mx_dequantize(q, codes, scales, np, c.elem);
    } else {
        st = mp_nvfp4_quantize(codes, scales, x, 1, np, MP_NVFP4_1X16, c.amax, NULL, NULL);
        if (st == MP_OK) st = mp_nvfp4_dequantize(q, codes, scales, 1, np, MP_NVFP4_1X16, c.amax);
    }
    if (st != MP_OK) {
        fprintf(stderr, "mixprec cast: %s\n", mp_last_error());
        return 1;
    }
    const size_t nb = np / bs;
    const float g = mp_nvfp4_global_scale(c.amax);
    printf("%s%s%s: %d value%s as one tensor, %zu block%s of %zu (%zu zeros of padding)", mp_block_format_name(bf),
           mx ? ", rule " : "", mx ? (rule == MP_MX_RCEIL ? "rceil" : "floor") : "", n, n == 1 ? "" : "s", nb,
           nb == 1 ? "" : "s", bs, np - (size_t)n);
    if (!mx) printf("; amax %.9g, global scale 2688/amax = %.9g", (double)c.amax, (double)g);
    printf("\n%-16s %-16s %-6s %-16s %-10s %s\n", "input", "as fp32", "code", mp_block_format_name(bf), "rel.error",
           "status");
    for (size_t b = 0; b < nb; b++) {
        const uint8_t s = scales[b];
        float mult;
        if (mx) {
            mult = ldexpf(1.0f, 127 - (int)s);
            printf("block %zu: scale 0x%02x = 2^%d\n", b, s, (int)s - 127);
        } else {
            mult = fminf(1.0f / (mp_e4m3_to_f32(s) * (1.0f / g)), FLT_MAX);
            const float sv = mp_e4m3_to_f32(s), unit = (sv * c.amax) * (1.0f / 2688.0f); /* the dequantizer's factor */
            printf("block %zu: scale 0x%02x = %.9g (e4m3); value = e2m1 x %.9g x amax/2688 = e2m1 x %.9g\n", b, s,
                   (double)sv, (double)sv, (double)unit);
        }
        for (size_t i = b * bs; i < (b + 1) * bs && i < (size_t)n; i++) {
            const unsigned code = mx ? codes[i] : (codes[i / 2] >> (i % 2 * 4)) & 0xfu;
            char err[32];
            if (x[i] == 0) snprintf(err, sizeof err, "-");
            else snprintf(err, sizeof err, "%.3g", fabs(((double)q[i] - (double)x[i]) / (double)x[i]));
            char hex[8];
            snprintf(hex, sizeof hex, "0x%02x", code);
            printf("%-16s %-16.9g %-6s %-16.9g %-10s %s\n", texts[i], (double)x[i], hex, (double)q[i], err,
                   zero_in_fp32(texts[i], x[i]) ? ZERO_IN_FP32 : block_status(x[i], q[i], c.elem, mult));
        }
    }
    printf("\n");
    block_compare_print(&c);
    return 0;
}

static int run(int argc, char **argv) {
    mp_dtype to = MP_F16;
    mp_block_format bf = MP_BLOCK_MXFP8_E4M3;
    mp_mx_rule rule = MP_MX_RCEIL;
    int sat = 0, nvalues = 0, block = 0, rule_set = 0;
    float values[256];
    const char *texts[256];
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_cast, argv[i])) return 0;
        if (strcmp(argv[i], "--to") == 0) {
            const char *v = cli_value("cast", argc, argv, &i);
            if (!v) return CLI_USAGE;
            block = mp_block_format_parse(v, &bf) == MP_OK;
            if (!block && mp_dtype_parse(v, &to) != MP_OK)
                return cli_usage_error("cast", "%s; or a block format: mxfp8-e4m3, mxfp8-e5m2, nvfp4", mp_last_error());
        } else if (strcmp(argv[i], "--mx-rule") == 0) {
            const char *v = cli_value("cast", argc, argv, &i);
            if (!v) return CLI_USAGE;
            if (mp_mx_rule_parse(v, &rule) != MP_OK)
                return cli_usage_error("cast", "--mx-rule is floor or rceil, not '%s'", v);
            rule_set = 1;
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
    if (rule_set && !(block && bf != MP_BLOCK_NVFP4))
        return cli_usage_error("cast", "--mx-rule applies to --to mxfp8-e4m3 and mxfp8-e5m2 only%s",
                               block ? " (nvfp4's block scales are e4m3, rounded to nearest)" : "");
    if (block && sat) return cli_usage_error("cast", "--saturate applies to e4m3 only (block formats always saturate)");
    if (block) return cast_block(bf, rule, values, texts, nvalues);
    if (sat && to != MP_E4M3)
        return cli_usage_error("cast", "--saturate applies to e4m3 only%s",
                               to == MP_E2M1 ? " (e2m1 always saturates)" : "");
    const mp_format_info *f = mp_format(to);
    const int hexw = (int)f->size * 2;
    printf("%-16s %-16s %-*s %-16s %-10s %s\n", "input", "as fp32", hexw + 2 > 6 ? hexw + 2 : 6, "bits", f->name,
           "rel.error", "status");
    for (int i = 0; i < nvalues; i++) {
        const float x = values[i];
        const cast_result r = cast_one(x, to, sat);
        char err[32];
        if (isnan(x) || isnan(r.value) || isinf(x) || isinf(r.value) || x == 0) snprintf(err, sizeof err, "-");
        else snprintf(err, sizeof err, "%.3g", fabs(((double)r.value - (double)x) / (double)x));
        char bits[16];
        snprintf(bits, sizeof bits, "0x%0*x", hexw, r.bits);
        printf("%-16s %-16.9g %-*s %-16.9g %-10s %s\n", texts[i], (double)x, hexw + 2 > 6 ? hexw + 2 : 6, bits,
               (double)r.value, err, zero_in_fp32(texts[i], x) ? ZERO_IN_FP32 : r.status);
    }
    return 0;
}

const cli_command cmd_cast = {"cast", "round values to a format: bits, value, error, what happened", usage, run};
