/* mixprec/io.h - safetensors files: weights and checkpoints.
 *
 * The format (huggingface/safetensors): 8 bytes little-endian header length N,
 * N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]}, ..., "__metadata__": {"key": "value"}}, then the tensor bytes
 * (little-endian). Readable by PyTorch (safetensors.torch.load_file) and numpy.
 */
#ifndef MIXPREC_IO_H
#define MIXPREC_IO_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_tensor {
    char name[128];
    mp_dtype dtype; /* F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, U8 (raw bytes); not MP_E2M1 (safetensors'
                       F4 packs two codes a byte, mixprec's buffers hold one) */
    int ndim;       /* 0 to 4 */
    size_t shape[4];
    size_t nbytes;
    const void *data; /* writing: the caller's; reading: inside the file's buffer */
} mp_tensor;

typedef struct mp_safetensors {
    mp_tensor *tensors;
    size_t count;
    char **meta;  /* key, value, key, value, ... */
    size_t nmeta; /* pairs */
    void *buffer; /* the whole file */
} mp_safetensors;

/* Writes tensors and metadata (meta: key, value, ..., NULL; may be NULL)
 * atomically with mp_write_file_atomic (below): an existing file at path stays
 * whole until the rename. MP_EINVAL for a bad tensor, MP_EIO as there.
 * Also MP_ENOMEM naming the file. Names and keys are not checked for
 * repeats: a file with one given twice is written, and mp_safetensors_read
 * refuses it. */
mp_status mp_safetensors_write(const char *path, const mp_tensor *tensors, size_t count, const char *const *meta);

/* One piece of a file for mp_write_file_atomic. */
typedef struct mp_chunk {
    const void *data;
    size_t size;
} mp_chunk;

/* Writes the n chunks, one after another, to path atomically: to a temporary
 * file PATH.tmp.PID.XXXXXX in the same directory, created exclusively
 * (mkstemp: never through a link, never onto a file already there; write,
 * fsync and close checked), renamed over path, then the directory synced.
 * While it writes it holds path's lock (mp_output_lock), unless this thread
 * holds it already. On MP_EIO (the path, what failed and why: "No space left
 * on device"; another process writing path) the temporary file is removed
 * and an existing file at path is untouched; a process killed during the
 * write leaves the old file whole and its temporary file behind, which the
 * next write of the same path removes once that process is gone. A path that
 * is a directory, a device or a FIFO is never replaced (MP_EIO before
 * anything is written). Every file mixprec writes in one piece (checkpoints,
 * summaries, reports, pages) goes through here; MP_EINVAL for a NULL or empty
 * path. */
mp_status mp_write_file_atomic(const char *path, const mp_chunk *chunks, size_t n);

/* Reads the whole of the regular file at path into *data (malloc'd: the
 * caller frees it; *size bytes and a zero byte after them). what names the
 * file in messages (an option, "--from"; NULL: the path alone). Every file
 * mixprec reads is opened this way (internally, mp_input_open), so all
 * readers refuse the same things, before anything could block: MP_EIO, one
 * line naming the file and what it is, for a FIFO, a device, a directory or
 * a socket; MP_EIO "changed while read" when the file's size or modification
 * time at the end of the read is not what it was at the open (a file that is
 * truncated, grows or is rewritten meanwhile); MP_EIO with errno's text when
 * it cannot be opened or read; MP_EINVAL when it holds more than max bytes;
 * MP_ENOMEM. On failure *data is NULL and *size 0. */
mp_status mp_read_file(const char *what, const char *path, size_t max, uint8_t **data, size_t *size);

/* One writer per output: takes an advisory lock (flock) on PATH.lock, which
 * it creates (never through a link; an existing regular file is used only
 * when it is empty or a lock mixprec wrote), and writes this process's id
 * into it; the lock is this thread's until mp_output_unlock(path) (or the
 * process ends: the kernel lets go of it, and the next lock of path takes the
 * file over). Taking a lock this thread holds is MP_OK; a child made by
 * fork() holds none of its parent's (it is refused like any other process). MP_EIO with a message
 * naming option (may be NULL) and path when another process holds the lock
 * ("another mixprec process (pid N) is writing it"), when PATH.lock is a link,
 * not a regular file or a file of someone else's, or cannot be created;
 * MP_EINVAL for a NULL, empty or too long path; MP_ENOMEM past 128 locks held
 * at once. mp_run and mp_compare lock their outputs for the whole run. */
mp_status mp_output_lock(const char *option, const char *path);

/* Lets go of path's lock and removes PATH.lock (while still holding it); a
 * path this thread does not hold is a no-op. */
void mp_output_unlock(const char *path);

/* Reads and validates a file: MP_EIO if unreadable or not a regular file,
 * or if it changes while read (as mp_read_file); MP_ECORRUPT, with the file
 * name and the problem, for a bad header length, malformed JSON (or bytes
 * other than spaces after it), an unknown dtype, a shape that does not match
 * its byte range, offsets out of range, fractional or overlapping, bytes not
 * covered by any tensor, or a tensor or metadata name given twice. Also
 * MP_ENOMEM naming the file. On failure *out is zeroed; on MP_OK it owns the
 * whole file (tensor data points into out->buffer): mp_safetensors_free. */
mp_status mp_safetensors_read(const char *path, mp_safetensors *out);
void mp_safetensors_free(mp_safetensors *s); /* NULL-safe */

const mp_tensor *mp_safetensors_find(const mp_safetensors *s, const char *name);
const char *mp_safetensors_meta(const mp_safetensors *s, const char *key);

/* Number of elements of a tensor (product of its shape). */
size_t mp_tensor_numel(const mp_tensor *t);

/* The check a command makes on an output path before it works: MP_EINVAL (a
 * usage error) when out is empty or names the file that in reads (the same
 * device and inode when both exist, else the same directory, by its real
 * path, and name: links and "./" spellings count), the message naming both
 * options; MP_EIO when out exists and is not a regular file (a directory, a
 * device, a FIFO) or its directory does not exist or is not writable. in may
 * be NULL (no input to compare with). Nothing is created. */
mp_status mp_output_check(const char *out_option, const char *out, const char *in_option, const char *in);

#ifdef __cplusplus
}
#endif
#endif
