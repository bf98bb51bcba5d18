/* status.c - result codes and the per-thread last error message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *mp_status_str(mp_status s) {
    switch (s) {
    case MP_OK: return "ok";
    case MP_EINVAL: return "invalid argument";
    case MP_ENOMEM: return "out of memory";
    case MP_EIO: return "i/o error";
    case MP_ECORRUPT: return "corrupt data";
    case MP_ESTATE: return "wrong state";
    case MP_EUNSUPPORTED: return "unsupported";
    case MP_EOVERFLOW: return "overflow at minimum loss scale";
    }
    return "unknown status";
}

const char *mp_last_error(void) { return last_error; }

/* A UTF-8 continuation byte: no cut lands just before one. */
static int continuation(char c) { return ((unsigned char)c & 0xc0) == 0x80; }

/* s (len bytes) made to fit in cap bytes: the longest run without a space (a
 * value the message echoes: a path, a model string) cut in its middle, its
 * first and last 32 bytes kept around "[... N bytes ...]", again until the
 * message fits; the words around it, the reason, stay whole. A message of
 * short words alone is cut at its end. */
static void fit(char *s, size_t len, size_t cap) {
    while (len >= cap) {
        size_t at = 0, run = 0;
        for (size_t i = 0; i < len;) {
            size_t j = i;
            while (j < len && s[j] != ' ') j++;
            if (j - i > run) at = i, run = j - i;
            i = j + 1;
        }
        size_t head = at + 32, tail = at + run - 32;
        while (head > at && continuation(s[head])) head--;
        while (tail < at + run && continuation(s[tail])) tail++;
        char mark[48];
        const int ml = snprintf(mark, sizeof mark, "[... %zu bytes ...]", tail - head);
        if (run < 64 + (size_t)ml + 16) break;
        memmove(s + head + (size_t)ml, s + tail, len - tail + 1);
        memcpy(s + head, mark, (size_t)ml);
        len -= tail - head - (size_t)ml;
    }
    if (len >= cap) s[cap - 1] = '\0';
}

/* The message, one line: control characters (a value a user gave may hold a
 * newline or an escape sequence) written as \xNN; too long, fitted (fit). */
static mp_status verror(mp_status s, const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    char small[2048];
    const int n = vsnprintf(small, sizeof small, fmt, aq);
    va_end(aq);
    char *raw = n >= (int)sizeof small ? malloc((size_t)n + 1) : small;
    if (raw != small && raw) vsnprintf(raw, (size_t)n + 1, fmt, ap);
    if (!raw) raw = small; /* no memory for all of it: what fits in small */
    const size_t rl = strlen(raw);
    char *esc = malloc(4 * rl + 1), *out = esc ? esc : last_error;
    const size_t cap = esc ? 4 * rl + 1 : sizeof last_error;
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && k + 5 < cap; p++)
        if (*p < 0x20 || *p == 0x7f) k += (size_t)snprintf(out + k, cap - k, "\\x%02x", *p);
        else out[k++] = (char)*p;
    out[k] = '\0';
    if (esc) {
        fit(esc, k, sizeof last_error);
        memcpy(last_error, esc, strlen(esc) + 1);
        free(esc);
    }
    if (raw != small) free(raw);
    return s;
}

mp_status mp_error(mp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(s, fmt, ap);
    va_end(ap);
    return s;
}

/* The public name of mp_error (internal.h), for callers' own models and loaders. */
mp_status mp_set_error(mp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *mp_version(void) { return MP_VERSION_STRING; }
