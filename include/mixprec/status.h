/* mixprec/status.h - result codes and the last error message.
 *
 * Every function that can fail returns an mp_status; MP_OK (0) means success.
 * On failure a one-line description of what went wrong is kept per thread and
 * can be read with mp_last_error() until the next failing call on that thread.
 */
#ifndef MIXPREC_STATUS_H
#define MIXPREC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_status {
    MP_OK = 0,       /* success */
    MP_EINVAL,       /* an argument is invalid (bad dtype, NULL buffer, bad config) */
    MP_ENOMEM,       /* an allocation failed */
    MP_EIO,          /* reading or writing a file failed */
    MP_ECORRUPT,     /* a file or blob is malformed, truncated or fails its checksum */
    MP_ESTATE,       /* the call is not allowed in the object's current state */
    MP_EUNSUPPORTED, /* the operation is not available on this CPU or build */
    MP_EOVERFLOW     /* gradients overflow with the loss scale already at its floor */
} mp_status;

/* A short constant string naming the status ("invalid argument", ...). */
const char *mp_status_str(mp_status s);

/* The message of the last error set on this thread ("" if none). */
const char *mp_last_error(void);

/* Sets this thread's message (printf format) and returns s: for code of
 * the caller's that the library calls (a model behind model.h, a loader),
 * so that its failures read as the library's: return mp_set_error(MP_EIO,
 * "%s: cannot open", path). */
mp_status mp_set_error(mp_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
