/* paths.c - files by identity, for the checks every command makes before it
 * works: whether an output would replace an input or another output, and
 * whether it can be written at all (internal.h, mp_output_check in io.h). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "mixprec/io.h"

void mp_file_identify(mp_file_id *f, const char *option, const char *path) {
    memset(f, 0, sizeof *f);
    f->option = option, f->path = path;
    struct stat st;
    if (stat(path, &st) == 0) {
        f->exists = 1, f->is_dir = S_ISDIR(st.st_mode), f->dev = st.st_dev, f->ino = st.st_ino;
        return;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    char *real = realpath(dir, NULL);
    snprintf(f->where, sizeof f->where, "%.3000s/%.1000s", real ? real : dir, slash ? slash + 1 : path);
    free(real);
}

int mp_file_same(const mp_file_id *a, const mp_file_id *b) {
    if (a->exists != b->exists) return 0;
    return a->exists ? a->dev == b->dev && a->ino == b->ino : strcmp(a->where, b->where) == 0;
}

int mp_file_inside(const mp_file_id *out, const mp_file_id *d) {
    if (!d->exists || !d->is_dir) return 0;
    const char *slash = strrchr(out->path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out->path) + (slash == out->path) : 1,
             slash ? out->path : ".");
    struct stat st;
    return stat(dir, &st) == 0 && st.st_dev == d->dev && st.st_ino == d->ino;
}

/* The longest name mixprec writes beside an output PATH: PATH.tmp.PID.XXXXXX
 * (mp_write_file_atomic's temporary, a pid of up to 7 digits); the others
 * are shorter (PATH.partial.PID, PATH.rejected, PATH.lock). */
#define BESIDE_MAX (sizeof ".tmp.1234567.XXXXXX" - 1)

mp_status mp_file_writable(const mp_file_id *f, const char *pending) {
    struct stat st;
    if (f->exists && stat(f->path, &st) == 0 && !S_ISREG(st.st_mode))
        return mp_error(MP_EIO, "%s %s is %s, not a regular file: it would be replaced", f->option, f->path,
                        S_ISDIR(st.st_mode)    ? "a directory"
                        : S_ISFIFO(st.st_mode) ? "a FIFO"
                                               : "a device");
    const char *slash = strrchr(f->path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f->path) + (slash == f->path) : 1, slash ? f->path : ".");
    if (pending && strcmp(dir, pending) == 0) return MP_OK;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mp_error(MP_EIO, "%s %s: the directory %s does not exist", f->option, f->path, dir);
    /* the files written beside it fit the file system's limits: checked now, not when they are created */
    const size_t base = strlen(slash ? slash + 1 : f->path);
    const long name_max = pathconf(dir, _PC_NAME_MAX);
    if (name_max > 0 && base + BESIDE_MAX > (size_t)name_max)
        return mp_error(MP_EINVAL,
                        "%s %s: a name of %zu bytes is too long for the files written beside it "
                        "(%zu bytes more, at most %ld in %s)",
                        f->option, f->path, base, BESIDE_MAX, name_max, dir);
    if (strlen(f->path) + BESIDE_MAX >= PATH_MAX)
        return mp_error(MP_EINVAL, "%s %s: the path is too long for the files written beside it (at most %zu bytes)",
                        f->option, f->path, (size_t)PATH_MAX - 1 - BESIDE_MAX);
    if (access(dir, W_OK | X_OK) != 0)
        return mp_error(MP_EIO, "%s %s: the directory %s is not writable (%s)", f->option, f->path, dir,
                        strerror(errno));
    return MP_OK;
}

mp_status mp_output_check(const char *out_option, const char *out, const char *in_option, const char *in) {
    if (!out_option || !out || (in && !in_option)) return mp_error(MP_EINVAL, "mp_output_check: NULL argument");
    if (!*out) return mp_error(MP_EINVAL, "%s is empty: give a file name", out_option);
    mp_file_id o, i;
    mp_file_identify(&o, out_option, out);
    if (in) {
        mp_file_identify(&i, in_option, in);
        if (mp_file_same(&o, &i))
            return mp_error(MP_EINVAL, "%s %s is the file %s reads: an output never replaces an input", out_option, out,
                            in_option);
    }
    return mp_file_writable(&o, NULL);
}
