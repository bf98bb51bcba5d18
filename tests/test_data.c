/* test_data.c - IDX files (plain, gzip, and every way they can be broken),
 * Fashion-MNIST from Debian's package, and safetensors files (round trip,
 * atomic replacement, and malformed headers). */
#include <math.h>
#include <zlib.h>

#include "check.h"
#include "internal.h"

static const char *dir = "test_data_files";

static void write_file(const char *name, const void *data, size_t n, int gz) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static const char *p(const char *name) {
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* an IDX u8 file: 3 images of 2 x 2, or 3 labels */
static size_t idx(uint8_t *buf, int images, int n, int extra) {
    size_t k = 0;
    buf[k++] = 0, buf[k++] = 0, buf[k++] = 0x08, buf[k++] = images ? 3 : 1;
    const uint32_t dims[3] = {(uint32_t)n, 2, 2};
    for (int d = 0; d < (images ? 3 : 1); d++)
        for (int s = 24; s >= 0; s -= 8) buf[k++] = (uint8_t)(dims[d] >> s);
    const size_t body = (size_t)n * (images ? 4 : 1);
    for (size_t i = 0; i < body; i++) buf[k++] = (uint8_t)(images ? i * 20 : i % 3);
    for (int i = 0; i < extra; i++) buf[k++] = 7;
    return k;
}

static void check_idx(void) {
    uint8_t img[256], lab[256], bad[256];
    const size_t ni = idx(img, 1, 3, 0), nl = idx(lab, 0, 3, 0);
    write_file("img", img, ni, 0), write_file("lab", lab, nl, 0);
    write_file("img.gz", img, ni, 1), write_file("lab.gz", lab, nl, 1);
    for (int gz = 0; gz < 2; gz++) {
        mp_dataset d;
        CHECK(mp_dataset_load(&d, p(gz ? "img.gz" : "img"), p(gz ? "lab.gz" : "lab")) == MP_OK, "load %d: %s", gz,
              mp_last_error());
        CHECK(d.n == 3 && d.rows == 2 && d.cols == 2 && d.pixels[5] == 100 && d.labels[2] == 2 && d.num_classes == 3,
              "contents");
        float x[8];
        int32_t y[2];
        const uint32_t which[2] = {2, 0};
        mp_dataset_batch(&d, which, 2, x, y);
        CHECK(x[0] == 160.0f / 255.0f && y[0] == 2 && y[1] == 0 && x[4] == 0.0f, "batch: pixel / 255");
        mp_dataset_free(&d);
    }
    struct {
        const char *what;
        size_t len;
        int mutate;
    } cases[] = {
        {"not an IDX file", ni, 0}, {"element type", ni, 2},        {"dimensions", ni, 3},
        {"truncated", ni - 3, -1},  {"trailing bytes", ni + 2, -2}, {"truncated header", 6, -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = idx(bad, 1, 3, cases[c].mutate == -2 ? 2 : 0);
        if (cases[c].mutate == -1) len = cases[c].len;
        if (cases[c].mutate == 0) bad[0] = 0x1f;
        if (cases[c].mutate == 2) bad[2] = 0x0d;
        if (cases[c].mutate == 3) bad[3] = 9;
        write_file("bad", bad, len, (int)(c % 2));
        uint8_t *data;
        uint32_t dims[4];
        int nd;
        const mp_status st = mp_idx_read(p("bad"), &data, dims, &nd);
        CHECK(st == MP_ECORRUPT && strstr(mp_last_error(), cases[c].what) &&
                  strstr(mp_last_error(), "test_data_files/bad"),
              "%s: got %d '%s'", cases[c].what, (int)st, mp_last_error());
    }
    /* a damaged gzip stream */
    write_file("big.gz", img, ni, 1);
    {
        FILE *f = fopen(p("big.gz"), "r+b");
        fseek(f, 12, SEEK_SET);
        fputc(0xff, f), fputc(0x00, f), fputc(0xff, f);
        fclose(f);
        uint8_t *data;
        uint32_t dims[4];
        int nd;
        CHECK(mp_idx_read(p("big.gz"), &data, dims, &nd) == MP_ECORRUPT, "corrupt gzip: %s", mp_last_error());
    }
    uint8_t *data;
    uint32_t dims[4];
    int nd;
    CHECK(mp_idx_read(p("missing"), &data, dims, &nd) == MP_EIO && strstr(mp_last_error(), "missing"), "missing file");
    /* labels that do not match the images */
    uint8_t lab4[64];
    write_file("lab4", lab4, idx(lab4, 0, 4, 0), 0);
    mp_dataset d;
    CHECK(mp_dataset_load(&d, p("img"), p("lab4")) == MP_ECORRUPT && strstr(mp_last_error(), "4 labels"),
          "mismatch: %s", mp_last_error());
}

static void check_fashion_mnist(void) {
    mp_dataset train, test;
    const mp_status st = mp_fashion_mnist_load(&train, &test, NULL);
    CHECK(st == MP_OK, "Fashion-MNIST from %s (scripts/deps.sh installs dataset-fashion-mnist): %s",
          MP_FASHION_MNIST_DIR, mp_last_error());
    if (st != MP_OK) return;
    long sum_l = 0, sum_p = 0;
    for (size_t i = 0; i < train.n; i++) sum_l += train.labels[i];
    for (size_t i = 0; i < 784; i++) sum_p += train.pixels[i];
    CHECK(train.n == 60000 && test.n == 10000 && train.rows == 28 && train.cols == 28 && train.num_classes == 10,
          "shapes");
    /* 6000 of each class; the first image is an ankle boot (9) whose pixels sum to 76247 */
    CHECK(sum_l == 270000 && train.labels[0] == 9 && test.labels[0] == 9 && test.labels[1] == 2 && sum_p == 76247,
          "contents: %ld %ld", sum_l, sum_p);
    mp_dataset_free(&train), mp_dataset_free(&test);
    CHECK(mp_fashion_mnist_load(&train, &test, dir) == MP_EIO && strstr(mp_last_error(), "train-images"),
          "missing dir");
}

static void check_safetensors(void) {
    const float a[6] = {1, 2, 3, 4, 5, -0.5f};
    const uint16_t h[3] = {0x3c00, 0x4000, 0xc000};
    mp_tensor ts[2] = {{"w", MP_F32, 2, {2, 3}, 24, a}, {"b", MP_F16, 1, {3}, 6, h}};
    const char *meta[] = {"step", "42", "rng", "1234", NULL};
    const char *path = p("m.safetensors");
    CHECK(mp_safetensors_write(path, ts, 2, meta) == MP_OK, "write: %s", mp_last_error());
    mp_safetensors s;
    CHECK(mp_safetensors_read(path, &s) == MP_OK, "read: %s", mp_last_error());
    const mp_tensor *w = mp_safetensors_find(&s, "w"), *b = mp_safetensors_find(&s, "b");
    CHECK(w && b && w->shape[1] == 3 && memcmp(w->data, a, 24) == 0 && memcmp(b->data, h, 6) == 0 && b->dtype == MP_F16,
          "tensors round-trip");
    CHECK(mp_safetensors_meta(&s, "step") && strcmp(mp_safetensors_meta(&s, "step"), "42") == 0, "metadata");
    mp_safetensors_free(&s);
    /* the header is padded to 8 bytes, data starts aligned */
    FILE *f = fopen(path, "rb");
    uint8_t len8[8];
    CHECK(fread(len8, 1, 8, f) == 8 && mp_get_u64(len8) % 8 == 0, "header padded");
    fclose(f);

    /* a failed write leaves the old file whole */
    CHECK(mp_safetensors_write(p("no/such/dir/x.safetensors"), ts, 2, NULL) == MP_EIO, "unwritable path");
    ts[0].nbytes = 20;
    CHECK(mp_safetensors_write(path, ts, 2, NULL) == MP_EINVAL, "size/shape mismatch refused");
    CHECK(mp_safetensors_read(path, &s) == MP_OK && s.count == 2, "old file intact");
    mp_safetensors_free(&s);

    /* E8M0 is safetensors' F8_E8M0; E2M1 is refused both ways (F4 packs two codes a byte, mixprec holds one) */
    const uint8_t e8[4] = {0x00, 0x7f, 0xfe, 0xff}, e2[4] = {0x1, 0x7, 0x8, 0xf};
    mp_tensor mx[2] = {{"s", MP_E8M0, 1, {4}, 4, e8}, {"q", MP_E2M1, 1, {4}, 4, e2}};
    CHECK(mp_safetensors_write(p("mx.safetensors"), mx, 1, NULL) == MP_OK, "e8m0 write: %s", mp_last_error());
    CHECK(mp_safetensors_read(p("mx.safetensors"), &s) == MP_OK && s.count == 1 && s.tensors[0].dtype == MP_E8M0 &&
              memcmp(s.tensors[0].data, e8, 4) == 0,
          "e8m0 round-trip");
    mp_safetensors_free(&s);
    f = fopen(p("mx.safetensors"), "rb");
    char hdr[128] = {0};
    CHECK(f && fread(hdr, 1, sizeof hdr - 1, f) > 8 && strstr(hdr + 8, "\"F8_E8M0\""), "written as F8_E8M0");
    if (f) fclose(f);
    CHECK(mp_safetensors_write(p("mx.safetensors"), mx, 2, NULL) == MP_EINVAL && strstr(mp_last_error(), "e2m1") &&
              strstr(mp_last_error(), "F4"),
          "e2m1 refused: %s", mp_last_error());

    struct {
        const char *json;
        const char *what;
    } bad[] = {
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]", "not a JSON object"},
        {"[1, 2]", "not a JSON object"},
        {"{\"w\": {\"dtype\": \"F99\", \"shape\": [2], \"data_offsets\": [0, 8]}}", "dtype F99"},
        {"{\"w\": {\"dtype\": \"F4\", \"shape\": [16], \"data_offsets\": [0, 8]}}", "F4 packs two fp4 codes a byte"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", "8 bytes for a shape of 3"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 800]}}", "out of range"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "after the last tensor"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"v\": {\"dtype\": \"F32\", "
         "\"shape\": [1], "
         "\"data_offsets\": [4, 8]}}",
         "overlaps"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", "bad shape"},
        {"{\"w\": {\"shape\": [2]}}", "needs dtype"},
        {"{\"__metadata__\": {\"a\": \"b\", \"c\": \"d\"}, \"__metadata__\": {\"e\": \"f\"}, \"w\": {\"dtype\": "
         "\"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
         "names '__metadata__' twice"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}",
         "impossibly large shape"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t buf[512];
        const size_t n = strlen(bad[i].json);
        mp_put_u64(buf, n);
        memcpy(buf + 8, bad[i].json, n);
        memset(buf + 8 + n, 0, 8);
        write_file("bad.safetensors", buf, 8 + n + 8, 0);
        CHECK(mp_safetensors_read(p("bad.safetensors"), &s) == MP_ECORRUPT && strstr(mp_last_error(), bad[i].what) &&
                  strstr(mp_last_error(), "bad.safetensors"),
              "case %zu (%s): %s", i, bad[i].what, mp_last_error());
    }
    uint8_t huge[16];
    mp_put_u64(huge, 1u << 20);
    write_file("huge.safetensors", huge, 16, 0);
    CHECK(mp_safetensors_read(p("huge.safetensors"), &s) == MP_ECORRUPT && strstr(mp_last_error(), "header length"),
          "header length beyond the file");
    write_file("short.safetensors", huge, 5, 0);
    CHECK(mp_safetensors_read(p("short.safetensors"), &s) == MP_ECORRUPT, "5-byte file");
    CHECK(mp_safetensors_read(p("nothing.safetensors"), &s) == MP_EIO, "missing file");
}

int main(void) {

    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    check_idx();
    check_fashion_mnist();
    check_safetensors();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return check_report("test_data");
}
