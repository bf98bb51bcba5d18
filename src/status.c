/* status.c - result codes and the per-thread last error message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[512];

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

/* The message, one line: control characters (a value a user gave may hold a
 * newline or an escape sequence) written as \xNN. */
static mp_status verror(mp_status s, const char *fmt, va_list ap) {
    char raw[sizeof last_error];
    vsnprintf(raw, sizeof raw, fmt, ap);
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && k + 5 < sizeof last_error; p++)
        if (*p < 0x20 || *p == 0x7f) k += (size_t)snprintf(last_error + k, sizeof last_error - k, "\\x%02x", *p);
        else last_error[k++] = (char)*p;
    last_error[k] = '\0';
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
