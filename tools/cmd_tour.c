/* cmd_tour.c - `mixprec tour`: the whole story of mixed precision, every number
 * computed by mixprec as it runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gradients.h"

static const char usage[] = "usage: mixprec tour [--step N]\n\n"
                            "Six short steps, with numbers computed live by mixprec's own code:\n"
                            "  1 the formats         2 what small gradients become in fp16\n"
                            "  3 a realistic gradient distribution meets fp16, and loss scaling\n"
                            "  4 too large a scale overflows: dynamic scaling, the real scaler running\n"
                            "  5 accumulation in fp16 loses small updates: fp32 master weights\n"
                            "  6 bf16 has fp32's range and needs no scaling\n"
                            "  --step N   show only step N\n";

static float h16(float x) { return mp_f16_to_f32(mp_f32_to_f16(x)); }

static void step3(void) {
    grad_set g;
    grads_lognormal(&g, -17.5, 1.6, 200000, 0);
    const double scales[5] = {1, 256, 4096, 65536, 1048576};
    mp_underflow u;
    if (mp_underflow_analyze(g.g, MP_F32, g.n, MP_F16, scales, 5, &u) != MP_OK) {
        fprintf(stderr, "mixprec tour: %s\n", mp_last_error());
        grads_free(&g);
        return;
    }
    const double n = (double)u.n;
    printf("3. A realistic gradient distribution meets fp16 (200000 magnitudes, ln|g| ~ N(-17.5, 1.6)):\n");
    printf("   median %.3e, 5th percentile %.3e; %.1f%% become EXACTLY ZERO when stored in fp16:\n", u.median, u.p5,
           100 * (double)u.zero_count / n);
    printf("   those weights will not update at all. Loss scaling: multiply the loss by S, so every\n"
           "   gradient is S times larger, and divide by S (in fp32) before the update:\n");
    for (int k = 0; k < 5; k++) {
        const mp_scale_counts *c = &u.scales[k];
        printf("     scale %8.0f: %6.2f%% survive, %6.2f%% subnormal, %.2f%% overflow\n", c->scale,
               100 * (double)c->survive / n, 100 * (double)c->subnormal / n, 100 * (double)c->overflow / n);
    }
    const float x = h16(0.000123f);
    const float up = h16(x * 1024.0f), back = up / 1024.0f;
    printf("   A power of two only changes the exponent, so it is exact: 0.000123 in fp16 is %.9g;\n"
           "   times 1024 stored in fp16 is %.9g; divided by 1024 again: %.9g (%s).\n\n",
           (double)x, (double)up, (double)back, back == x ? "the same bits" : "DIFFERENT");
    grads_free(&g);
}

static void step4(void) {
    grad_set g;
    grads_lognormal(&g, -17.5, 1.6, 200000, 0);
    printf("4. Too large a scale overflows: the same gradients at bigger scales in fp16:\n");
    for (int k = 24; k <= 32; k += 4) {
        const mp_scale_counts c = mp_underflow_count(g.g, g.n, MP_F16, ldexp(1.0, k));
        printf("     scale 2^%d: %.4f%% overflow to inf\n", k, 100.0 * (double)c.overflow / (double)g.n);
    }
    grads_free(&g);
    printf("   One inf ruins a step, and gradients drift during training, so the scale is DYNAMIC: start at\n"
           "   2^16, on inf/NaN skip the step and halve, after N clean steps double. mixprec's scaler on a\n"
           "   stream whose typical magnitude drifts from 1e-2 down to 1e-8 (4096 values a step, N = 50):\n");
    mp_scaler_config cfg = mp_scaler_defaults();
    cfg.growth_interval = 50;
    mp_scaler s;
    mp_scaler_init(&s, &cfg);
    uint64_t lost_scaled = 0, lost_plain = 0, total = 0;
    const int steps = 400;
    for (int t = 0; t < steps; t++) {
        grad_set b;
        const double mu = log(1e-2) + (log(1e-8) - log(1e-2)) * t / (steps - 1);
        grads_lognormal(&b, mu, 1.6, 4096, (uint64_t)t + 1);
        const float S = mp_scaler_get_scale(&s);
        const mp_scale_counts c = mp_underflow_count(b.g, b.n, MP_F16, S), p = mp_underflow_count(b.g, b.n, MP_F16, 1);
        lost_scaled += c.zero, lost_plain += p.zero, total += b.n;
        const int inf = c.overflow > 0;
        static int shown_skips = 0;
        if (t % 80 == 0 || (inf && shown_skips++ < 4))
            printf("     step %3d: scale %8g, %s\n", t, (double)S,
                   inf ? "inf in the gradients: step skipped, scale halved" : "clean");
        mp_scaler_update(&s, inf);
        grads_free(&b);
    }
    printf("   after %d steps: %llu skipped, %llu growths, final scale %g; gradients lost to zero: %.3f%% with\n"
           "   the scaler, %.3f%% at scale 1.\n\n",
           steps, (unsigned long long)s.skipped, (unsigned long long)s.growths, (double)s.scale,
           100.0 * (double)lost_scaled / (double)total, 100.0 * (double)lost_plain / (double)total);
}

static void step5(void) {
    float acc16 = h16(1024.0f), acc32 = 1024.0f;
    const float small = h16(0.4f);
    for (int i = 0; i < 64; i++) acc16 = h16(acc16 + small), acc32 += 0.4f;
    printf("5. The second failure is accumulation. 1024 + 0.4, sixty-four times:\n"
           "     in fp16: %.4f   in fp32: %.4f   (exact: %.1f)\n",
           (double)acc16, (double)acc32, 1024 + 64 * 0.4);
    printf("   Near 1024 fp16 values are %g apart, so each + 0.4 rounds back. That is why the optimizer\n"
           "   updates fp32 MASTER weights and refreshes the fp16 copy from them (mixprec's optim module).\n\n",
           (double)(mp_f16_to_f32(mp_f32_to_f16(1024.0f) + 1) - 1024.0f));
}

static void step6(void) {
    grad_set g;
    grads_lognormal(&g, -17.5, 1.6, 200000, 0);
    const mp_scale_counts b = mp_underflow_count(g.g, g.n, MP_BF16, 1), h = mp_underflow_count(g.g, g.n, MP_F16, 1);
    const mp_format_info *bf = mp_format(MP_BF16), *f16 = mp_format(MP_F16);
    printf("6. bf16 spends its 16 bits differently: 8 exponent bits like fp32, 7 mantissa bits.\n"
           "     smallest subnormal: bf16 %.3g, fp16 %.3g; largest: bf16 %.3g, fp16 %g\n",
           bf->min_subnormal, f16->min_subnormal, bf->max, f16->max);
    printf("   The same 200000 gradients at scale 1: %.2f%% become zero in bf16 (%.2f%% in fp16).\n"
           "   bf16 needs no loss scaling; it pays with precision (eps %g against %g), which gradients\n"
           "   mostly tolerate.\n\n",
           100.0 * (double)b.zero / (double)g.n, 100.0 * (double)h.zero / (double)g.n, bf->eps, f16->eps);
    grads_free(&g);
}

static int run(int argc, char **argv) {
    long only = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_tour, argv[i])) return 0;
        if (!strcmp(argv[i], "--step")) {
            const char *v = cli_value("tour", argc, argv, &i);
            if (!v) return CLI_USAGE;
            if (cli_parse_long(v, 1, 6, &only)) return cli_usage_error("tour", "--step wants 1 .. 6, not '%s'", v);
        } else {
            return cli_usage_error("tour", "unknown option '%s'", argv[i]);
        }
    }
    if (!only || only == 1) {
        printf("1. The formats (the numbers numpy.finfo prints):\n");
        formats_table();
        printf("\n");
    }
    if (!only || only == 2) {
        printf("2. ");
        small_values_table();
        printf("\n");
    }
    if (!only || only == 3) step3();
    if (!only || only == 4) step4();
    if (!only || only == 5) step5();
    if (!only || only == 6) step6();
    return 0;
}

const cli_command cmd_tour = {"tour", "the story of mixed precision in six steps, numbers computed live", usage, run};
