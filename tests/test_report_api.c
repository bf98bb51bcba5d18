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
    mp_report_run run = {.name = "fp16", .format = "fp16", .color = "#d62728", .nsteps = S, .loss = loss,
                         .scale = scale, .skipped = skipped, .nlayers = L, .layer_names = names,
                         .layer_underflow = under, .eval = 0.5, .last_loss = 1.2, .underflow = 0.04};
    mp_report r = {.title = "t", .command = "c", .reading = "r", .fp16_min_subnormal = 0x1p-24,
                   .fp16_min_normal = 0x1p-14, .fp16_max = 65504, .eval_name = "test accuracy", .eval_percent = 1,
                   .baseline = -1, .runs = &run, .nruns = 1};
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

int main(void) {
    check_heat_one_value();
    return check_report("test_report_api");
}
