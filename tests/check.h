/* check.h - the tests' assertions: count failures, print the first few, and
 * return non-zero from main when any failed. */
#ifndef MIXPREC_TEST_CHECK_H
#define MIXPREC_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec/mixprec.h"

static long check_failures;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            if (check_failures++ < 20) {                                                 \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                            \
                fputc('\n', stderr);                                                     \
            }                                                                            \
        }                                                                                \
    } while (0)

/* A line saying what passed, printed only when no check failed since mark
 * (check_failures at the start of the part it sums up). */
#define CHECK_SAY(mark, ...)                               \
    do {                                                   \
        if (check_failures == (mark)) printf(__VA_ARGS__); \
    } while (0)

/* Quick mode (sanitizer builds): a fixed sample instead of all 2^32 inputs. */
static inline int test_quick(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--quick") == 0) return 1;
    const char *e = getenv("MP_TEST_QUICK");
    return e && *e && strcmp(e, "0") != 0;
}

static inline int check_report(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %ld check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

static inline uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Field by field (amax to the bit): the struct's tail padding is no result. */
static inline int convert_stats_eq(const mp_convert_stats *a, const mp_convert_stats *b) {
    return a->underflow == b->underflow && a->subnormal == b->subnormal && a->overflow == b->overflow &&
           a->nan == b->nan && f2u(a->amax) == f2u(b->amax);
}

/* Element i of a buffer of any format, as fp32 (exact). */
static inline float elem_f32(const void *p, mp_dtype t, size_t i) {
    switch (t) {
    case MP_F32: return ((const float *)p)[i];
    case MP_F16: return mp_f16_to_f32(((const uint16_t *)p)[i]);
    case MP_BF16: return mp_bf16_to_f32(((const uint16_t *)p)[i]);
    case MP_E4M3: return mp_e4m3_to_f32(((const uint8_t *)p)[i]);
    case MP_E5M2: return mp_e5m2_to_f32(((const uint8_t *)p)[i]);
    case MP_E8M0: return mp_e8m0_to_f32(((const uint8_t *)p)[i]);
    case MP_E2M1: return mp_e2m1_to_f32(((const uint8_t *)p)[i]);
    case MP_U8: break; /* no number */
    }
    return 0.0f / 0.0f;
}

/* The inputs of the quick sample: every 251st bit pattern, plus every pattern
 * whose low 12 bits are zero (which holds all fp16 and bf16 rounding ties). */
#define QUICK_STRIDE 251u
static inline uint64_t quick_count(void) { return ((1ull << 32) + QUICK_STRIDE - 1) / QUICK_STRIDE + (1ull << 20); }
static inline uint32_t quick_input(uint64_t i) {
    const uint64_t a = ((1ull << 32) + QUICK_STRIDE - 1) / QUICK_STRIDE;
    return i < a ? (uint32_t)(i * QUICK_STRIDE) : (uint32_t)((i - a) << 12);
}

/* The inputs of make test's slice (the plain build; make test-long takes all
 * 2^32): every 64th bit pattern with varying low 6 bits (2^26), then every
 * pattern whose low 12 bits are zero (2^20, holding every fp16, bf16 and fp8
 * rounding tie). */
enum { ALL, SLICE, QUICK }; /* all 2^32 inputs; the slice; the quick sample */
static inline uint64_t slice_count(void) { return (1ull << 26) + (1ull << 20); }
static inline uint32_t slice_input(uint64_t i) {
    return i < (1ull << 26) ? (uint32_t)(i * 64 + ((i >> 3) & 63)) : (uint32_t)((i - (1ull << 26)) << 12);
}
/* The inputs of a mode: count, and input i. */
static inline uint64_t mode_count(int mode) {
    return mode == QUICK ? quick_count() : mode == SLICE ? slice_count() : (1ull << 32);
}
static inline uint32_t mode_input(int mode, uint64_t i) {
    return mode == QUICK ? quick_input(i) : mode == SLICE ? slice_input(i) : (uint32_t)i;
}
/* --quick (the sanitizer build): QUICK; --long (make test-long): ALL; else SLICE. */
static inline int test_mode(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--long") == 0) return ALL;
    return test_quick(argc, argv) ? QUICK : SLICE;
}

#endif
