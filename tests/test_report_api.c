/* test_report_api.c - mp_report_write on hand-made runs: the edge cases the
 * comparison runs of test_report.sh do not reach (under ASan in make test). */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* One run whose only nonzero underflow cell is a single value: the heat map
 * has one colour, the darkest (it used to index past the colour table). */
static void check_heat_one_value(void) {
    enum { S = 3, L = 2 };
    const float loss[S] = {2.0f, 1.5f, 1.2f}, scale[S] = {1, 1, 1};
    const uint8_t skipped[S] = {0};
    const char names[L][64] = {"fc0", "fc1"};
    const float under[S * L] = {0, 0, 0, 0.25f, 0, 0};
    mp_report_run run = {.name = "fp16",
                         .format = "fp16",
                         .color = "#d62728",
                         .nsteps = S,
                         .loss = loss,
                         .scale = scale,
                         .skipped = skipped,
                         .nlayers = L,
                         .layer_names = names,
                         .layer_underflow = under,
                         .eval = 0.5,
                         .last_loss = 1.2,
                         .underflow = 0.04};
    mp_report r = {.title = "t",
                   .command = "c",
                   .reading = "r",
                   .fp16_min_subnormal = 0x1p-24,
                   .fp16_min_normal = 0x1p-14,
                   .fp16_max = 65504,
                   .eval_name = "test accuracy",
                   .eval_percent = 1,
                   .baseline = -1,
                   .runs = &run,
                   .nruns = 1};
    char path[] = "/tmp/mp_report_api_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "temporary file");
    close(fd);
    CHECK(mp_report_write(path, &r) == MP_OK, "write: %s", mp_last_error());
    const char *html = slurp(path);
    const char *cell = html ? strstr(html, "fc1, step 2: 25%") : NULL;
    const char *fill = cell ? strstr(html, "fill=\"#bd0026\"><title>fc1, step 2: 25%") : NULL;
    CHECK(cell && fill, "the single nonzero cell is drawn in the darkest colour");
    remove(path);
}

/* The text of html between the first `from` and the `to` after it ("" when absent), in buf. */
static const char *between(const char *html, const char *from, const char *to, char *buf, size_t cap) {
    const char *a = html ? strstr(html, from) : NULL, *b = a ? strstr(a, to) : NULL;
    const size_t n = b ? (size_t)(b - a) : 0;
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), a ? a : "");
    return buf;
}

/* A recipe run next to a bf16 run: its formats in the summary table, the
 * saturated and flushed shares per step as one line (the bf16 run has none),
 * and its quantized tensors' table, names escaped. */
static void check_recipe_run(void) {
    enum { S = 3, Q = 2 };
    const float loss[S] = {2.0f, 1.5f, 1.2f}, scale[S] = {1, 1, 1}, under[S] = {0};
    const uint8_t skipped[S] = {0};
    const char names[1][64] = {"fc0"}, qnames[Q][64] = {"h.0.attn.c_attn.input", "h.0.<b>.grad"};
    const mp_quant_stats qs[Q] = {{.n = 1000, .saturated = 3, .flushed = 250, .amax = 2.5f},
                                  {.n = 1000, .nonfinite = 2, .amax = 0.001953125f}};
    const float qscale[Q] = {179.2f, 29360128.0f}, sat[S] = {0.01f, 0.02f, 0.04f}, flush[S] = {0.5f, 0.25f, 0.0f};
    const mp_report_quant quant = {Q, qnames, qs, qscale, sat, flush, 0, NULL, NULL};
    mp_report_run runs[2] = {{.name = "bf16",
                              .format = "bf16",
                              .color = "#2ca02c",
                              .nsteps = S,
                              .loss = loss,
                              .scale = scale,
                              .skipped = skipped,
                              .nlayers = 1,
                              .layer_names = names,
                              .layer_underflow = under,
                              .eval = 1.3},
                             {.name = "fp8-current",
                              .format = "bf16 + fp8 e4m3/e5m2",
                              .color = "#bcbd22",
                              .nsteps = S,
                              .loss = loss,
                              .scale = scale,
                              .skipped = skipped,
                              .nlayers = 1,
                              .layer_names = names,
                              .layer_underflow = under,
                              .eval = 1.3,
                              .quant = &quant}};
    mp_report r = {.title = "t",
                   .command = "c",
                   .reading = "r",
                   .fp16_min_subnormal = 0x1p-24,
                   .fp16_min_normal = 0x1p-14,
                   .fp16_max = 65504,
                   .eval_name = "validation loss",
                   .baseline = -1,
                   .runs = runs,
                   .nruns = 2};
    char path[] = "/tmp/mp_report_api_XXXXXX", sat_svg[4096], flush_svg[4096];
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "temporary file");
    close(fd);
    CHECK(mp_report_write(path, &r) == MP_OK, "write: %s", mp_last_error());
    const char *html = slurp(path);
    CHECK(html && strstr(html, "<td class=\"format\">bf16</td>") &&
              strstr(html, "<td class=\"format\">bf16 + fp8 e4m3/e5m2</td>"),
          "the format column");
    /* y = 30 + (1 - v / (1.1 vmax)) 170 at x = 60 + 880 step / 3: saturated 1, 2, 4 %, flushed 50, 25, 0 % */
    between(html, "id=\"quant_saturated\"", "</svg>", sat_svg, sizeof sat_svg);
    between(html, "id=\"quant_flushed\"", "</svg>", flush_svg, sizeof flush_svg);
    CHECK(strstr(sat_svg, "stroke=\"#bcbd22\" stroke-width=\"1.8\" points=\"353.3,161.4 646.7,122.7 940.0,45.5 \""),
          "the saturated share per step: %s", sat_svg);
    CHECK(strstr(flush_svg, "stroke=\"#bcbd22\" stroke-width=\"1.8\" points=\"353.3,45.5 646.7,122.7 940.0,200.0 \""),
          "the flushed share per step: %s", flush_svg);
    CHECK(!strstr(sat_svg, "#2ca02c") && !strstr(flush_svg, "#2ca02c") && strstr(sat_svg, ">fp8-current</text>"),
          "only the recipe run has a line and a legend entry");
    CHECK(html &&
              strstr(html, "<details class=\"quant\" data-mode=\"fp8-current\"><summary><b>fp8-current</b> (bf16 + "
                           "fp8 e4m3/e5m2): 0.1500% of the quantized values saturated, 12.5000% flushed to zero, "
                           "2 inf or NaN</summary>") &&
              !strstr(html, "data-mode=\"bf16\"><summary>"),
          "the recipe run's table, and none for bf16");
    CHECK(html && strstr(html, "<tr data-quant=\"h.0.attn.c_attn.input\"><td>h.0.attn.c_attn.input</td><td>2.5</td>"
                               "<td>179.2</td><td>0.3000%</td><td>25.0000%</td><td>0</td></tr>"),
          "a quantized tensor's row");
    CHECK(html &&
              strstr(html, "<tr data-quant=\"h.0.&lt;b&gt;.grad\" class=\"bad\"><td>h.0.&lt;b&gt;.grad</td>"
                           "<td>0.00195312</td><td>2.93601e+07</td><td>0.0000%</td><td>0.0000%</td><td>2</td></tr>") &&
              !strstr(html, "<b>.grad"),
          "a tensor with inf/NaN inputs is highlighted, its name escaped");
    remove(path);
    /* without recipe runs: no chart, no table */
    r.nruns = 1;
    CHECK(mp_report_write(path, &r) == MP_OK, "write: %s", mp_last_error());
    html = slurp(path);
    CHECK(html && !strstr(html, "quant_saturated") && !strstr(html, "Quantized tensors"), "no recipe: no quantization");
    remove(path);
}

/* A run with measured per-layer series (the PyTorch monitor without its fp32 recomputation): one bar per
 * series in each layer's group at its mean over steps, one line each over time, a legend entry each, under the
 * caller's title; every value 0: one sentence in place of both charts. */
static void check_layer_series(void) {
    enum { S = 2, L = 2 };
    const float loss[S] = {2.0f, 1.5f}, scale[S] = {1024, 1024}, under[S * L] = {0};
    const uint8_t skipped[S] = {0};
    const char names[L][64] = {"fc0", "fc1"};
    const float zero16[S * L] = {0.5f, 0, 0.25f, 0}, sub16[S * L] = {0, 0.125f, 0, 0.375f}, none[S * L] = {0};
    const mp_report_layer_series ser[3] = {
        {"fp16: 0", "#1f77b4", zero16}, {"fp16: subnormal", "#aec7e8", sub16}, {"bf16: 0", "#ff7f0e", none}};
    mp_report_run run = {.name = "pytorch-fp16",
                         .format = "fp16",
                         .color = "#1f77b4",
                         .nsteps = S,
                         .loss = loss,
                         .scale = scale,
                         .skipped = skipped,
                         .nlayers = L,
                         .layer_names = names,
                         .layer_underflow = under,
                         .layer_series = ser,
                         .nlayer_series = 3,
                         .layer_title = "Values that would become 0 or subnormal"};
    mp_report r = {.title = "t",
                   .command = "c",
                   .reading = "r",
                   .fp16_min_subnormal = 0x1p-24,
                   .fp16_min_normal = 0x1p-14,
                   .fp16_max = 65504,
                   .eval_name = "loss",
                   .baseline = -1,
                   .runs = &run,
                   .nruns = 1};
    char path[] = "/tmp/mp_report_api_XXXXXX", svg[8192];
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "temporary file");
    close(fd);
    CHECK(mp_report_write(path, &r) == MP_OK, "write: %s", mp_last_error());
    const char *html = slurp(path);
    CHECK(html && strstr(html, "<figcaption>Values that would become 0 or subnormal, by layer (mean over steps)") &&
              strstr(html, "<figcaption>Values that would become 0 or subnormal, over time (mean over layers)"),
          "the caller's title on both charts");
    between(html, "id=\"layers\"", "</svg>", svg, sizeof svg);
    CHECK(strstr(svg, "<title>fp16: 0 fc0: 37.5%</title>") && strstr(svg, "<title>fp16: 0 fc1: 0%</title>") &&
              strstr(svg, "<title>fp16: subnormal fc1: 25%</title>") && strstr(svg, "<title>bf16: 0 fc0: 0%</title>") &&
              strstr(svg, "class=\"legend\">fp16: subnormal</text>"),
          "a bar per series and layer at its mean, a legend entry per series: %s", svg);
    between(html, "id=\"underflow\"", "</svg>", svg, sizeof svg);
    CHECK(strstr(svg, "stroke=\"#1f77b4\"") && strstr(svg, "stroke=\"#aec7e8\"") && strstr(svg, "stroke=\"#ff7f0e\""),
          "a line per series over time: %s", svg);
    remove(path);
    run.layer_series = &ser[2], run.nlayer_series = 1; /* every value 0 */
    CHECK(mp_report_write(path, &r) == MP_OK, "write: %s", mp_last_error());
    html = slurp(path);
    CHECK(html && !strstr(html, "id=\"layers\"") && !strstr(html, "id=\"underflow\"") &&
              strstr(html, "<p class=\"note\">Values that would become 0 or subnormal: none, in any layer on any "
                           "step.</p>"),
          "a sentence, not two empty charts");
    remove(path);
}

int main(void) {
    check_heat_one_value();
    check_layer_series();
    check_recipe_run();
    return check_report("test_report_api");
}
