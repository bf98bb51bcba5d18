/* fuzz_options.c - the command line's option values on any bytes. The bytes
 * up to the first NUL are one value, given to each parser of a single value:
 * cli_parse_float and cli_parse_long (tools/cli.c), mp_precision_parse,
 * mp_mlp_parse, mp_gpt_parse and mp_dtype_parse; all the NUL-separated pieces
 * are then the arguments of `mixprec train` (run_parse, tools/run.c, over
 * mp_run_option and mp_run_check). What a parser accepts is in range, and
 * what it returns prints back to a string that parses to the same value. */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>

#include "fuzz.h"
#include "internal.h"
#include "run.h"

enum { MAXARGS = 64 };

static void single(const char *v) {
    float f, g;
    if (cli_parse_float(v, &f) == 0) {
        char s[64];
        snprintf(s, sizeof s, "%.9g", (double)f);
        FUZZ_CHECK(cli_parse_float(s, &g) == 0 && (isnan(f) ? isnan(g) : mp_f32_bits(f) == mp_f32_bits(g)));
        FUZZ_CHECK(isfinite(f) || isnan(f) || strcasestr(v, "inf")); /* overflow is refused */
    }
    static const long ranges[][2] = {{1, 1L << 30}, {0, 2147483647L}, {LONG_MIN, LONG_MAX}};
    for (int r = 0; r < 3; r++) {
        long x, y;
        if (cli_parse_long(v, ranges[r][0], ranges[r][1], &x) != 0) continue;
        char s[32];
        snprintf(s, sizeof s, "%ld", x);
        FUZZ_CHECK(x >= ranges[r][0] && x <= ranges[r][1]);
        FUZZ_CHECK(cli_parse_long(s, ranges[r][0], ranges[r][1], &y) == 0 && x == y);
    }

    mp_precision p, q;
    if (mp_precision_parse(v, &p) == MP_OK) {
        const float scale = p.static_scale;
        FUZZ_CHECK(p.name && memchr(p.label, 0, sizeof p.label) && p.label[0]);
        FUZZ_CHECK((scale == 0) != (p.scaling == MP_SCALING_STATIC && strchr(p.label, ':')));
        FUZZ_CHECK(scale == 0 || (isfinite(scale) && scale > 0));
        FUZZ_CHECK(mp_precision_parse(p.label, &q) == MP_OK && q.static_scale == scale);
        FUZZ_CHECK(!strcmp(p.name, q.name) && !strcmp(p.label, q.label) && p.compute == q.compute &&
                   p.master_weights == q.master_weights && p.reductions == q.reductions && p.rounding == q.rounding &&
                   p.scaling == q.scaling);
    }

    mp_mlp_config m, m2;
    if (mp_mlp_parse(v, &m) == MP_OK) {
        FUZZ_CHECK(m.nlayers >= 1 && m.nlayers <= MP_MLP_MAX_LAYERS);
        char s[256];
        size_t k = (size_t)snprintf(s, sizeof s, "mlp:");
        for (int i = 0; i <= m.nlayers; i++) {
            FUZZ_CHECK(m.widths[i] >= 1 && m.widths[i] <= 65536);
            k += (size_t)snprintf(s + k, sizeof s - k, "%s%d", i ? "-" : "", m.widths[i]);
        }
        FUZZ_CHECK(mp_mlp_parse(s, &m2) == MP_OK && memcmp(&m, &m2, sizeof m) == 0);
    }

    mp_gpt_config c, c2;
    if (mp_gpt_parse(v, &c) == MP_OK) {
        FUZZ_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_embd % c.n_head == 0 && c.block_size >= 1);
        char s[96];
        snprintf(s, sizeof s, "gpt:%d-%d-%d-%d", c.n_layer, c.n_head, c.n_embd, c.block_size);
        FUZZ_CHECK(mp_gpt_parse(s, &c2) == MP_OK && memcmp(&c, &c2, sizeof c) == 0);
    }

    mp_dtype t, t2;
    if (mp_dtype_parse(v, &t) == MP_OK)
        FUZZ_CHECK(mp_format(t) && mp_dtype_parse(mp_format(t)->name, &t2) == MP_OK && t == t2);
}

/* What run_parse promises of the options it accepts (run_spec.c's ranges;
 * -1 and 0 where the run resolves a default). */
static void check_spec(const mp_run_spec *o) {
    mp_precision p;
    FUZZ_CHECK(o->model && o->precision && mp_run_check(o, &p) == MP_OK && p.name &&
               memchr(p.label, 0, sizeof p.label));
    FUZZ_CHECK(o->lr >= 0 && o->lr <= 1e6 && (o->min_lr >= 0 || o->min_lr == -1) && o->momentum >= 0);
    FUZZ_CHECK(o->weight_decay >= 0 || o->weight_decay == -1);
    FUZZ_CHECK(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1);
    FUZZ_CHECK(o->clip == 0 || (o->clip >= 1e-30 && o->clip <= 1e30));
    FUZZ_CHECK(o->batch >= 0 && o->batch <= 60000 && o->accum >= 1 && o->accum <= 60000);
    FUZZ_CHECK(o->epochs >= 0 && o->steps >= 0 && !(o->epochs && o->steps) && o->warmup >= 0 && o->seed >= 0);
    FUZZ_CHECK(!(o->init && o->resume));
    mp_scaler s;
    mp_scaler_config sc = o->scaler;
    sc.dynamic = p.scaling == MP_SCALING_DYNAMIC;
    FUZZ_CHECK(p.scaling == MP_SCALING_NONE || strchr(p.label, ':') || mp_scaler_init(&s, &sc) == MP_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    FUZZ_CHECK(buf);
    memcpy(buf, data, size);
    buf[size] = 0;
    single(buf);

    char *argv[MAXARGS + 1] = {"train"};
    int argc = 1;
    for (char *p = buf; p < buf + size && argc < MAXARGS; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    mp_run_spec o;
    const int rc = run_parse("train", argc, argv, &o);
    FUZZ_CHECK(rc == 0 || rc == CLI_USAGE);
    if (rc == 0) check_spec(&o);
    free(buf);
    return 0;
}
