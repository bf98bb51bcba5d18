/* fuzz_scaler.c - the loss scaler's state blob (mp_scaler_load). Byte 0 is
 * the harness's: bit 0 set makes it write a correct CRC-32 into the blob
 * (data[1..105)) first, so that the fuzzer gets past the checksum to the
 * fields; its other bits are the inf/NaN flags of the steps run afterwards.
 * A refused blob leaves the scaler untouched; an accepted one holds a state
 * the state machine can reach (the invariants below, which mp_scaler_update
 * keeps), saves back to the same fields, and keeps its invariants over the
 * following steps. */
#define _GNU_SOURCE
#include <math.h>

#include "fuzz.h"
#include "internal.h"

/* What every state reachable from mp_scaler_init by mp_scaler_update holds. */
static void reachable(const mp_scaler *s) {
    const mp_scaler_config *c = &s->cfg;
    mp_scaler fresh;
    FUZZ_CHECK(mp_scaler_init(&fresh, c) == MP_OK);
    FUZZ_CHECK(s->growth_tracker >= 0 && s->growth_tracker < c->growth_interval);
    FUZZ_CHECK(s->hysteresis_left >= 0 && s->hysteresis_left <= c->hysteresis);
    FUZZ_CHECK(s->skipped <= s->steps && s->growths <= s->steps - s->skipped && s->backoffs <= s->skipped);
    FUZZ_CHECK(s->skipped ? s->last_overflow_step >= 0 && (uint64_t)s->last_overflow_step < s->steps
                          : s->last_overflow_step == -1);
    FUZZ_CHECK(isfinite(s->scale) && s->scale >= c->min_scale && (c->max_scale == 0 || s->scale <= c->max_scale));
    if (!c->dynamic)
        FUZZ_CHECK(s->scale == c->init_scale && s->growth_tracker == 0 && s->hysteresis_left == c->hysteresis &&
                   s->growths == 0 && s->backoffs == 0);
}

static int same(const mp_scaler *a, const mp_scaler *b) {
    return !memcmp(&a->cfg, &b->cfg, sizeof a->cfg) && !memcmp(&a->scale, &b->scale, sizeof a->scale) &&
           a->growth_tracker == b->growth_tracker && a->hysteresis_left == b->hysteresis_left && a->steps == b->steps &&
           a->skipped == b->skipped && a->growths == b->growths && a->backoffs == b->backoffs &&
           a->last_overflow_step == b->last_overflow_step;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t blob[MP_SCALER_BLOB_SIZE];
    const uint8_t *b = data + 1;
    const size_t n = size - 1;
    if ((data[0] & 1) && n == MP_SCALER_BLOB_SIZE) {
        memcpy(blob, b, n);
        mp_put_u32(blob + 100, mp_crc32(0, blob, 100));
        b = blob;
    }
    mp_scaler s, keep;
    memset(&s, 0xa5, sizeof s);
    keep = s;
    if (mp_scaler_load(&s, b, n) != MP_OK) {
        FUZZ_CHECK(memcmp(&s, &keep, sizeof s) == 0 && mp_last_error()[0]);
        return 0;
    }
    FUZZ_CHECK(n == MP_SCALER_BLOB_SIZE);
    reachable(&s);
    uint8_t again[MP_SCALER_BLOB_SIZE];
    mp_scaler back;
    FUZZ_CHECK(mp_scaler_save(&s, again) == MP_OK && memcmp(again, b, 96) == 0);
    FUZZ_CHECK(mp_scaler_load(&back, again, sizeof again) == MP_OK && same(&s, &back));
    if (s.steps > (uint64_t)INT64_MAX - 64) return 0; /* no run is that long: the counters would wrap */
    for (int i = 0; i < 28; i++) {
        const mp_status st = mp_scaler_update(&s, data[0] >> (1 + i % 7) & 1);
        FUZZ_CHECK(st == MP_OK || st == MP_EOVERFLOW);
        reachable(&s);
    }
    return 0;
}
