/* input.c - every file mixprec reads is opened here: a regular file or
 * nothing (a FIFO, a device, a directory or a socket is refused before
 * anything could block on it), and a file that changes while it is read is
 * an error, not a shorter input (internal.h, mp_read_file in io.h). */
#define _POSIX_C_SOURCE 200809L /* st_mtim */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

void (*mp_input_test_hook)(int fd, uint64_t done);

/* "WHAT PATH" or "PATH" (what: the option that gave the path, or NULL). */
#define WHO(in) (in)->what ? (in)->what : "", (in)->what ? " " : "", (in)->path

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)                 ? "a directory"
           : S_ISFIFO(m)              ? "a FIFO"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device"
           : S_ISSOCK(m)              ? "a socket"
           : S_ISLNK(m)               ? "a symbolic link"
                                      : "not a plain file";
}

static void keep_stat(mp_input *in, const struct stat *sb) {
    in->size = (uint64_t)sb->st_size;
    in->mtime_s = (int64_t)sb->st_mtim.tv_sec, in->mtime_ns = (int64_t)sb->st_mtim.tv_nsec;
    in->ino = (uint64_t)sb->st_ino;
}

mp_status mp_input_open(mp_input *in, const char *what, const char *path) {
    memset(in, 0, sizeof *in);
    in->fd = -1, in->what = what, in->path = path ? path : "";
    if (!path || !*path)
        return mp_error(MP_EINVAL, "%s%sno file named (an empty path)", what ? what : "", what ? ": " : "");
    struct stat sb;
    /* a look first, so that a device is not even opened (some act on open) */
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return mp_error(MP_EIO, "%s%s%s is %s, not a regular file", WHO(in), kind_of(sb.st_mode));
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC |
                                  O_NOCTTY); /* O_NONBLOCK: a FIFO put there meanwhile opens at once */
    if (fd < 0) {
        const int e = errno;
        if (e == ENXIO && stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
            return mp_error(MP_EIO, "%s%s%s is a socket, not a regular file", WHO(in));
        return mp_error(MP_EIO, "%s%s%s: cannot open (%s)", WHO(in), strerror(e));
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        const int e = errno;
        const mp_status st = S_ISREG(sb.st_mode)
                                 ? mp_error(MP_EIO, "%s%s%s: cannot stat (%s)", WHO(in), strerror(e))
                                 : mp_error(MP_EIO, "%s%s%s is %s, not a regular file", WHO(in), kind_of(sb.st_mode));
        close(fd);
        return st;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(fd);
        return mp_error(MP_EIO, "%s%s%s: cannot read (%s)", WHO(in), strerror(e));
    }
    in->fd = fd;
    keep_stat(in, &sb);
    return MP_OK;
}

mp_status mp_input_kind(const char *what, const char *path, int dir_ok) {
    struct stat sb;
    const mp_input in = {.fd = -1, .what = what, .path = path ? path : ""};
    if (!path || stat(path, &sb) != 0 || S_ISREG(sb.st_mode) || (dir_ok && S_ISDIR(sb.st_mode))) return MP_OK;
    return mp_error(MP_EIO, "%s%s%s is %s, not a regular file%s", WHO(&in), kind_of(sb.st_mode),
                    dir_ok ? " or a directory" : "");
}

mp_status mp_input_read(mp_input *in, void *buf, size_t n) {
    uint8_t *p = buf;
    size_t left = n;
    while (left) {
        const size_t want = left < ((size_t)1 << 20) ? left : (size_t)1 << 20; /* 1 MiB a call: the hook sees pieces */
        const ssize_t got = read(in->fd, p, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return mp_error(MP_EIO, "%s%s%s: read error (%s)", WHO(in), strerror(errno));
        if (got == 0)
            return mp_error(MP_EIO, "%s%s%s: changed while read: it ended after %llu of its %llu bytes", WHO(in),
                            (unsigned long long)in->done, (unsigned long long)in->size);
        p += got, left -= (size_t)got, in->done += (uint64_t)got;
        if (mp_input_test_hook) mp_input_test_hook(in->fd, in->done);
    }
    return MP_OK;
}

mp_status mp_input_check(const mp_input *in) {
    if (mp_input_test_hook) mp_input_test_hook(in->fd, in->done);
    struct stat sb;
    if (fstat(in->fd, &sb) != 0) return mp_error(MP_EIO, "%s%s%s: cannot stat (%s)", WHO(in), strerror(errno));
    if ((uint64_t)sb.st_size != in->size)
        return mp_error(MP_EIO, "%s%s%s: changed while read: %llu bytes at the start, %llu at the end", WHO(in),
                        (unsigned long long)in->size, (unsigned long long)sb.st_size);
    if ((int64_t)sb.st_mtim.tv_sec != in->mtime_s || (int64_t)sb.st_mtim.tv_nsec != in->mtime_ns)
        return mp_error(MP_EIO, "%s%s%s: changed while read (modified meanwhile: its size is the same)", WHO(in));
    return MP_OK;
}

void mp_input_close(mp_input *in) {
    if (in->fd >= 0) close(in->fd);
    in->fd = -1;
}

mp_status mp_read_file(const char *what, const char *path, size_t max, uint8_t **data, size_t *size) {
    if (!data || !size) return mp_error(MP_EINVAL, "mp_read_file: NULL argument");
    *data = NULL, *size = 0;
    mp_input in;
    mp_status st = mp_input_open(&in, what, path);
    if (st != MP_OK) return st;
    if (in.size > max || in.size > SIZE_MAX - 1)
        st = mp_error(MP_EINVAL, "%s%s%s: %llu bytes, more than the %zu read", WHO(&in), (unsigned long long)in.size,
                      max);
    uint8_t *b = st == MP_OK ? malloc((size_t)in.size + 1) : NULL;
    if (st == MP_OK && !b)
        st = mp_error(MP_ENOMEM, "%s%s%s: out of memory for %llu bytes", WHO(&in), (unsigned long long)in.size);
    if (st == MP_OK) st = mp_input_read(&in, b, (size_t)in.size);
    if (st == MP_OK) { /* no byte past the size it had at the start */
        uint8_t extra;
        ssize_t got;
        while ((got = read(in.fd, &extra, 1)) < 0 && errno == EINTR) {}
        if (got > 0)
            st = mp_error(MP_EIO, "%s%s%s: changed while read: it grew past its %llu bytes", WHO(&in),
                          (unsigned long long)in.size);
    }
    if (st == MP_OK) st = mp_input_check(&in);
    mp_input_close(&in);
    if (st != MP_OK) return free(b), st;
    b[in.size] = 0;
    *data = b, *size = (size_t)in.size;
    return MP_OK;
}
